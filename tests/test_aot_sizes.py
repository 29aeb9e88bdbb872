"""hb.aot: the size of an output nobody gave, for generators as they are written.

A pipeline that does not fix its output's bounds computes whatever region it is asked for. A
call allocating such an output gives it the largest region whose required input regions (Halide's
bounds query) lie within the inputs: an elementwise pipeline gets its input's region, a
boundary-free 3 x 3 stencil 2 less in each axis at mins 1, a 2x upsampler twice the input, a blur
over repeated edges the input's region. Each result is compared element for element with NumPy
computing the same over the same coordinates; the answers are kept, so a call on shapes seen
before runs no bounds query (counted: hb._core._bounds_queries()).
"""

import re

import ml_dtypes
import numpy as np
import pytest

import halide_buffer as hb

from pipelines import (TARGET, compile_and_load_each, gather_func, random_bf16, unsized_add_func, unsized_blur_func,
                       upsample2_func)

pytestmark = pytest.mark.needs_halide


@pytest.fixture(scope="module")
def pipes(tmp_path_factory):
    directory = tmp_path_factory.mktemp("aot_sizes")
    made = {
        "add": unsized_add_func("sz_add"),
        "add_bf16": unsized_add_func("sz_add_bf16", "bfloat16"),
        "blur": unsized_blur_func("sz_blur"),
        "edge_blur": unsized_blur_func("sz_edge_blur", boundary=True),
        "upsample": upsample2_func("sz_upsample"),
        "gather": gather_func("sz_gather"),
    }
    return compile_and_load_each(directory, made, "hb_sz_", target=TARGET + "-strict_float")


def floats(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def box3(a):
    """The boundary-free 3 x 3 mean of `a` (float32 sums in Halide's order), over its interior."""
    h, w = a.shape
    total = np.zeros((h - 2, w - 2), np.float32)
    for dy in (0, 1, 2):
        for dx in (0, 1, 2):
            total = total + a[dy:dy + h - 2, dx:dx + w - 2]
    return total / np.float32(9)


def test_an_elementwise_output_gets_the_inputs_region(pipes):
    a = floats((7, 13), 1)
    out = pipes["add"](a, 2.5)
    assert (out.shape, out.mins) == ((7, 13), (0, 0))
    np.testing.assert_array_equal(np.asarray(out), a + np.float32(2.5))
    # An input placed elsewhere: the output takes its coordinates.
    b = hb.Buffer.from_host(a)
    b.set_min(-3, 40)
    out = pipes["add"](b, 1.0)
    assert (out.shape, out.mins) == ((7, 13), (-3, 40))
    np.testing.assert_array_equal(np.asarray(out), a + np.float32(1))


def test_a_bfloat16_output_gets_the_inputs_region(pipes):
    a = random_bf16(np.random.default_rng(2), (5, 17))
    out = pipes["add_bf16"](a, 1.0)
    assert (out.shape, out.mins, out.dtype.name) == ((5, 17), (0, 0), "bfloat16")
    expected = (a.astype(np.float32) + np.float32(1)).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(np.asarray(out).view(np.uint16), expected.view(np.uint16))


def test_a_boundary_free_stencil_gets_two_less_at_mins_one(pipes):
    a = floats((9, 12), 3)
    out = pipes["blur"](a)
    assert (out.shape, out.mins) == ((7, 10), (1, 1))
    np.testing.assert_allclose(np.asarray(out), box3(a), rtol=1e-6)
    assert pipes["blur"].output_regions({}, {"inp": ((0, 0), (9, 12))}) == {"sz_blur": ((1, 1), (7, 10))}


def test_a_boundary_condition_keeps_the_inputs_region(pipes):
    a = floats((6, 8), 4)
    out = pipes["edge_blur"](a)
    assert (out.shape, out.mins) == ((6, 8), (0, 0))
    padded = np.pad(a, 1, mode="edge")
    np.testing.assert_allclose(np.asarray(out), box3(padded), rtol=1e-6)


def test_an_upsampler_gets_twice_the_input(pipes):
    a = floats((3, 5), 5)
    out = pipes["upsample"](a)
    assert (out.shape, out.mins) == ((6, 10), (0, 0))
    np.testing.assert_array_equal(np.asarray(out), a.repeat(2, axis=0).repeat(2, axis=1))


def test_over_an_empty_input_the_axes_that_grow_with_it_are_empty(pipes):
    assert pipes["add"](np.zeros((0, 5), np.float32), 1.0).shape == (0, 5)
    empty = pipes["blur"](np.zeros((6, 0), np.float32))
    assert (empty.shape, empty.mins) == ((4, 0), (1, 1))
    assert pipes["upsample"](np.zeros((0, 3), np.float32)).shape == (0, 6)


def test_a_lookup_table_that_holds_every_index_sizes_by_the_indices(pipes):
    idx = np.random.default_rng(6).integers(0, 256, size=40, dtype=np.uint8)
    lut = floats((256,), 7)
    out = pipes["gather"](idx, lut)
    assert out.shape == (40,)
    np.testing.assert_array_equal(np.asarray(out), lut[idx])


def test_no_region_within_the_inputs_is_refused_naming_the_output_and_the_fix(pipes):
    idx = np.zeros(40, np.uint8)
    with pytest.raises(ValueError, match=re.escape(
            "hb_sz_gather(): output 'sz_gather': no region of it lies within the inputs (the pipeline does not "
            "fix its size, and even one element of it at (20,) needs input 'lut' over shape (256,) at mins (0,), "
            "beyond its shape (100,) at mins (0,)")) as e:
        pipes["gather"](idx, floats((100,), 8))
    assert str(e.value).endswith("; pass an output buffer")
    # A stencil over an input smaller than one element reads.
    with pytest.raises(ValueError, match=r"^hb_sz_blur\(\): output 'sz_blur': no region of it lies within the "
                                         r"inputs .* needs input 'inp' over shape \(3, 3\) at mins \(0, 0\), "
                                         r"beyond its shape \(2, 2\)"):
        pipes["blur"](np.zeros((2, 2), np.float32))


def test_the_regions_found_are_kept_per_shapes_and_scalars(pipes):
    p = pipes["blur"]
    a = floats((11, 14), 9)
    before = hb._core._bounds_queries()
    p(a)
    asked = hb._core._bounds_queries() - before
    assert 0 < asked <= 24, asked  # a few per axis and side
    before = hb._core._bounds_queries()
    for _ in range(3):
        p(a)
        p.output_regions({}, {"inp": ((0, 0), (11, 14))})
    assert hb._core._bounds_queries() == before  # kept: no query for shapes seen before
    p(floats((12, 14), 10))
    assert hb._core._bounds_queries() > before  # a new shape is asked about


def test_an_output_given_keeps_its_region(pipes):
    """A call given its output computes that region, whatever the rule would allocate."""
    a = floats((9, 12), 11)
    out = hb.Buffer((3, 4), "float32")
    out.set_min(2, 5)
    assert pipes["blur"](a, out) is out
    np.testing.assert_allclose(np.asarray(out), box3(a)[1:4, 4:8], rtol=1e-6)
