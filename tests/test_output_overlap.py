"""hb.aot: outputs whose memory is shared are refused before the pipeline runs.

Halide writes each element of an output once, in its schedule's order, and reads its inputs where
it pleases. An output whose elements share memory (an expanded tensor, an ``as_strided`` view with
overlapping rows) would have each result overwrite another; an output sharing memory with an
input it is not the very same view of would read values it has already overwritten; two outputs
over the same memory would overwrite each other. PyTorch refuses the same for its in-place and
``out=`` operations. Views that share no byte (interleaved channels, the two halves of an image)
are taken, and the very same view as input and output is a call in place: right for an elementwise
pipeline, not for a stencil, which reads neighbours already overwritten (docs/aot.md).
"""

import re

import halide as hl  # required test dependency: the test fails, not skips, without it
import numpy as np
import pytest
import torch

import halide_buffer as hb

from pipelines import c_compiler, compile_and_load, output_bounds_follow

pytestmark = pytest.mark.needs_halide
needs_torch = pytest.mark.needs_torch

NAME = "hb_overlap_add"


def any_stride(param):
    """Lets a buffer argument (an ImageParam, or an output's buffer) take any innermost stride."""
    param.dim(0).set_stride(hl.Expr())


def add_func():
    """out(x, y) = in(x, y) + 10 (float32), any strides: elementwise."""
    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(hl.Float(32), 2, "inp")
    out = hl.Func("overlap_out")
    out[x, y] = inp[x, y] + hl.f32(10)
    any_stride(inp)
    any_stride(out.output_buffer())
    output_bounds_follow(out, inp)
    return out, [inp]


def neighbours_func():
    """out(x, y) = in(x - 1, y) + in(x + 1, y) (float32, the input's edges repeated), serial:
    a stencil, whose output covers the input's region."""
    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(hl.Float(32), 2, "inp")
    edge = hl.BoundaryConditions.repeat_edge(inp)
    out = hl.Func("overlap_neighbours")
    out[x, y] = edge[x - 1, y] + edge[x + 1, y]
    output_bounds_follow(out, inp)
    return out, [inp]


def two_outputs_pipeline():
    """hl.Pipeline([in + 1, in * 2]) (float32), any strides."""
    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(hl.Float(32), 2, "inp")
    plus, twice = hl.Func("overlap_plus"), hl.Func("overlap_twice")
    plus[x, y] = inp[x, y] + hl.f32(1)
    twice[x, y] = inp[x, y] * hl.f32(2)
    any_stride(inp)
    for f in (plus, twice):
        any_stride(f.output_buffer())
        output_bounds_follow(f, inp)
    return hl.Pipeline([plus, twice]), [inp]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    directory = tmp_path_factory.mktemp("output_overlap")
    cc = c_compiler()
    return {
        "add": compile_and_load(directory, cc, *add_func(), NAME),
        "neighbours": compile_and_load(directory, cc, *neighbours_func(), "hb_overlap_neighbours"),
        "two": compile_and_load(directory, cc, *two_outputs_pipeline(), "hb_overlap_two"),
    }


@pytest.fixture
def add(built):
    return built["add"]


def shared_elements(name=NAME, out="overlap_out"):
    return (rf"^{name}\(\): argument '{out}': elements of the output share memory \(an expanded or overlapping "
            r"view\), so their results would overwrite each other; pass an output whose elements are distinct "
            r"\(x\.contiguous\(\), numpy\.empty_like\(x\)\), or leave the output out to have one allocated$")


def shared_with_input(inp="inp"):
    return (rf"^{NAME}\(\): argument 'overlap_out': the output shares memory with input '{inp}' without being "
            r"the very same view, so the pipeline could read elements it has already overwritten; pass an output "
            r"that shares no memory with the inputs \(numpy\.empty_like\(x\), x\.clone\(\)\), or the input itself "
            r"to compute in place$")


def image(shape):
    return np.arange(np.prod(shape), dtype=np.float32).reshape(shape)


# ---------------------------------------------------------------------------------------------
# Refused: an output whose elements share memory
# ---------------------------------------------------------------------------------------------


@needs_torch
def test_an_expanded_tensor_as_output_is_refused_and_left_unchanged(add):
    base = torch.zeros(1, 3)
    out = base.expand(4, 3)  # four rows over one
    with pytest.raises(ValueError, match=shared_elements()):
        add(image((4, 3)), out)
    assert torch.equal(base, torch.zeros(1, 3))


@needs_torch
def test_a_buffer_over_an_expanded_tensor_is_refused(add):
    base = torch.zeros(1, 3)
    out = hb.from_dlpack(base.expand(4, 3))
    assert out.strides == (0, 4)
    with pytest.raises(ValueError, match=shared_elements()):
        add(image((4, 3)), out)
    assert torch.equal(base, torch.zeros(1, 3))


def test_as_strided_rows_that_overlap_are_refused(add):
    base = np.zeros(8, np.float32)
    out = np.lib.stride_tricks.as_strided(base, (4, 3), (8, 4))  # row r starts at element 2r
    with pytest.raises(ValueError, match=shared_elements()):
        add(image((4, 3)), out)
    with pytest.raises(ValueError, match=shared_elements()):
        add(image((4, 3)), hb.Buffer.from_host(out))
    assert not base.any()


def test_an_output_whose_rows_only_touch_is_taken(add):
    base = np.zeros(12, np.float32)
    out = np.lib.stride_tricks.as_strided(base, (4, 3), (12, 4))  # dense, made by hand
    add(image((4, 3)), out)
    np.testing.assert_array_equal(base.reshape(4, 3), image((4, 3)) + 10)


# ---------------------------------------------------------------------------------------------
# Refused: an output sharing memory with an input, not as the very same view
# ---------------------------------------------------------------------------------------------


def test_an_output_a_row_below_its_input_is_refused(add):
    img = image((6, 3))
    with pytest.raises(ValueError, match=shared_with_input()):
        add(img[0:4], img[1:5])
    with pytest.raises(ValueError, match=shared_with_input()):
        add(inp=hb.Buffer.from_host(img)[1:5], overlap_out=hb.Buffer.from_host(img)[0:4])
    np.testing.assert_array_equal(img, image((6, 3)))


@needs_torch
def test_a_tensor_output_overlapping_its_input_is_refused(add):
    t = torch.arange(18, dtype=torch.float32).reshape(6, 3)
    with pytest.raises(ValueError, match=shared_with_input()):
        add(t[0:4], t[2:6])
    with pytest.raises(ValueError, match=shared_with_input()):
        add(t[0:3], t[0:3].t())  # the same elements, transposed: not the same view
    assert torch.equal(t, torch.arange(18, dtype=torch.float32).reshape(6, 3))


def test_an_output_over_part_of_its_input_is_refused(add):
    img = image((4, 6))
    with pytest.raises(ValueError, match=shared_with_input()):
        add(img[:, 0:3], img[:, 2:5])  # one column in common
    with pytest.raises(ValueError, match=shared_with_input()):
        add(img[:, ::2], img[:, :3])  # every other column against the first three: columns 0 and 2
    np.testing.assert_array_equal(img, image((4, 6)))


# ---------------------------------------------------------------------------------------------
# Taken: views that share no byte, and the very same view (in place)
# ---------------------------------------------------------------------------------------------


def test_interleaved_channels_in_and_out_are_taken(add):
    img = np.zeros((4, 3, 2), np.float32)
    img[..., 0] = image((4, 3))
    add(img[..., 0], img[..., 1])
    np.testing.assert_array_equal(img[..., 0], image((4, 3)))
    np.testing.assert_array_equal(img[..., 1], image((4, 3)) + 10)


def test_left_half_in_right_half_out_is_taken(add):
    img = image((4, 6))
    add(img[:, :3], img[:, 3:])
    np.testing.assert_array_equal(img[:, :3], image((4, 6))[:, :3])
    np.testing.assert_array_equal(img[:, 3:], image((4, 6))[:, :3] + 10)


def test_the_very_same_view_computes_an_elementwise_pipeline_in_place(add):
    a = image((4, 3))
    assert add(a, a) is a
    np.testing.assert_array_equal(a, image((4, 3)) + 10)
    b = hb.Buffer.from_host(image((5, 4)))[1:4, ::-1]  # a reversed crop: the same view both times
    add(b, b)
    np.testing.assert_array_equal(np.asarray(b), image((5, 4))[1:4, ::-1] + 10)


@needs_torch
def test_the_very_same_tensor_computes_in_place(add):
    t = torch.arange(12, dtype=torch.float32).reshape(4, 3)
    add(t, t)
    assert torch.equal(t, torch.arange(12, dtype=torch.float32).reshape(4, 3) + 10)


def test_a_stencil_in_place_reads_neighbours_it_has_overwritten(built):
    """In place, a stencil is not the pipeline out of place: each row is computed from left to
    right, and the left neighbour it reads holds the result already."""
    p = built["neighbours"]
    a = image((3, 5))
    out_of_place = np.asarray(p(a.copy()))
    h, w = a.shape
    expected = a.copy()  # the schedule's order, emulated: x innermost, the edges repeated
    for y in range(h):
        for x in range(w):
            expected[y, x] = expected[y, max(x - 1, 0)] + expected[y, min(x + 1, w - 1)]
    in_place = a.copy()
    p(in_place, in_place)
    np.testing.assert_array_equal(in_place, expected)
    assert not np.array_equal(in_place, out_of_place)


# ---------------------------------------------------------------------------------------------
# Two outputs
# ---------------------------------------------------------------------------------------------


def two_outputs_shared():
    return (r"^hb_overlap_two\(\): outputs 'overlap_plus' and 'overlap_twice' share memory, so the results of one "
            r"would overwrite the other's; pass outputs that share no memory \(numpy\.empty_like\(x\)\), or leave "
            r"them out to have them allocated$")


def test_two_outputs_over_the_same_memory_are_refused(built):
    p = built["two"]
    a, out = image((4, 3)), np.zeros((4, 3), np.float32)
    with pytest.raises(ValueError, match=two_outputs_shared()):
        p(a, out, out)  # the very same view: still two results in one place
    big = np.zeros((5, 3), np.float32)
    with pytest.raises(ValueError, match=two_outputs_shared()):
        p(a, big[0:4], big[1:5])
    assert not out.any() and not big.any()


def test_two_outputs_side_by_side_are_taken(built):
    p = built["two"]
    both = np.zeros((4, 6), np.float32)
    p(image((4, 3)), both[:, :3], both[:, 3:])
    np.testing.assert_array_equal(both[:, :3], image((4, 3)) + 1)
    np.testing.assert_array_equal(both[:, 3:], image((4, 3)) * 2)


def test_an_output_that_is_the_input_and_another_output_is_refused(built):
    p = built["two"]
    a = image((4, 3))
    with pytest.raises(ValueError, match=re.escape("outputs 'overlap_plus' and 'overlap_twice' share memory")):
        p(a, a, a)
