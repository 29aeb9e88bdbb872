"""hb.aot: an output that is not given, for pipelines scheduled in vectors and tiles.

A bounds query asks the pipeline which region of an output it needs. A pipeline that fixes its
output (from its inputs' bounds, or constants) answers with that region whatever is asked; one
that does not answers with the region asked for, grown to the vectors and tiles of its schedule:
asked about an empty region, a split or vectorized output answers with one tile. Allocating that
tile would return a few pixels of an image; the call allocates instead the largest region whose
required input regions lie within the inputs (aot_sizes.h; tests/test_aot_sizes.py has the rule
on generators as written), which for a tiled schedule over an input of whole tiles is the input's.
"""

import re

import halide as hl  # required test dependency: the test fails, not skips, without it
import numpy as np
import pytest

import halide_buffer as hb

from pipelines import OPENCL_TARGET, brighter_func, c_compiler, compile_and_load, crop2, output_bounds_follow, random_u8

pytestmark = pytest.mark.needs_halide


def tiled_func():
    """out(x, y) = in(x, y) + 1 (uint8), vectorized by 16 along x and split by 8 along y."""
    x, y, yi = hl.Var("x"), hl.Var("y"), hl.Var("yi")
    inp = hl.ImageParam(hl.UInt(8), 2, "inp")
    out = hl.Func("tiled")
    out[x, y] = inp[x, y] + hl.u8(1)
    out.vectorize(x, 16).split(y, y, yi, 8)
    return out, [inp]


def blur_func(fixed):
    """A 3x3 box blur of uint16 (values below 2**14), the input's edges repeated, scheduled as
    Halide's blur app is on a CPU: rows in strips of 32, vectors of 16, blur_x kept per strip.
    With `fixed`, the output covers exactly the input's coordinates."""
    x, y, yi = hl.Var("x"), hl.Var("y"), hl.Var("yi")
    inp = hl.ImageParam(hl.UInt(16), 2, "inp")
    edge = hl.BoundaryConditions.repeat_edge(inp)
    blur_x, blur_y = hl.Func("blur_x"), hl.Func("blur_y")
    blur_x[x, y] = (edge[x, y] + edge[x + 1, y] + edge[x + 2, y]) // 3
    blur_y[x, y] = (blur_x[x, y] + blur_x[x, y + 1] + blur_x[x, y + 2]) // 3
    blur_y.split(y, y, yi, 32).parallel(y).vectorize(x, 16)
    blur_x.store_at(blur_y, y).compute_at(blur_y, x).vectorize(x, 16)
    if fixed:
        output_bounds_follow(blur_y, inp)
    return blur_y, [inp]


def fixed_by_constants_func():
    """out(x, y) = in(x, y) * 2 over the constant region x in [4, 52), y in [3, 23)."""
    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(hl.UInt(8), 2, "inp")
    out = hl.Func("constant_region")
    out[x, y] = inp[x, y] * hl.u8(2)
    out.vectorize(x, 16)
    out.output_buffer().dim(0).set_bounds(4, 48)
    out.output_buffer().dim(1).set_bounds(3, 20)
    return out, [inp]


def expected_blur(a):
    """The blur of `a` over its own region, its edges repeated."""
    h, w = a.shape
    p = np.pad(a.astype(np.int64), ((0, 2), (0, 2)), mode="edge")
    bx = (p[:, 0:w] + p[:, 1:w + 1] + p[:, 2:w + 2]) // 3
    return ((bx[0:h] + bx[1:h + 1] + bx[2:h + 2]) // 3).astype(np.uint16)


def random_u14(rng, shape):
    return rng.integers(0, 2**14, size=shape, dtype=np.uint16)


@pytest.fixture(scope="module")
def pipelines(tmp_path_factory):
    directory = tmp_path_factory.mktemp("aot_outputs")
    cc = c_compiler()
    built = {}
    for name, (func, args), target in [
        ("hb_out_tiled", tiled_func(), None),
        ("hb_out_blur", blur_func(False), None),
        ("hb_out_blur_fixed", blur_func(True), None),
        ("hb_out_constant", fixed_by_constants_func(), None),
        ("hb_out_gpu_tile", brighter_func(), OPENCL_TARGET),
    ]:
        options = {"target": target} if target else {}
        built[name] = (compile_and_load(directory, cc, func, args, name, **options), func.name())
    return built


@pytest.mark.parametrize("name, make_input, expected", [
    ("hb_out_tiled", lambda: random_u8(np.random.default_rng(30), (256, 320)),
     lambda a: (a + np.uint8(1)).astype(np.uint8)),
    ("hb_out_blur", lambda: random_u14(np.random.default_rng(31), (256, 320)), lambda a: expected_blur(a)),
], ids=["vectorized and split", "tiled stencil"])
def test_a_tiled_output_not_given_gets_the_inputs_region(pipelines, name, make_input, expected):
    """A vectorized+split output, and a blur tiled like Halide's blur app (its input's edges
    repeated): the bounds query answers an empty request with one tile, yet the call allocates
    the whole image, as a given output of its shape computes it."""
    p, _ = pipelines[name]
    a = make_input()
    got = p(a)
    assert (got.shape, got.mins) == (a.shape, (0, 0))
    np.testing.assert_array_equal(np.asarray(got), expected(a))
    out = hb.Buffer(a.shape, a.dtype)
    assert p(a, out) is out
    np.testing.assert_array_equal(np.asarray(out), expected(a))


def test_a_gpu_tiled_output_not_given_gets_the_inputs_region(pipelines):
    """The 8x8 gpu_tile pipeline of docs/aot.md, on OpenCL: asked about an empty region it answers
    with one tile before it (it used to read its input at -8 and fail inside Halide, then to be
    refused); its tiles guard their edges, so any region reads only itself: the input's region,
    whole tiles or not."""
    p, _ = pipelines["hb_out_gpu_tile"]
    src = random_u8(np.random.default_rng(32), (50, 64))
    inp = hb.Buffer.from_host(src[:48], copy=True)
    got = p(inp)
    assert (got.shape, got.mins) == ((48, 64), (0, 0))
    np.testing.assert_array_equal(np.asarray(got), (src[:48] + np.uint8(10)).astype(np.uint8))
    odd = p(hb.Buffer.from_host(src[:, :61], copy=True))
    assert (odd.shape, odd.mins) == ((50, 61), (0, 0))
    np.testing.assert_array_equal(np.asarray(odd), (src[:, :61] + np.uint8(10)).astype(np.uint8))
    out = p(inp, hb.Buffer((48, 64), "uint8"))
    np.testing.assert_array_equal(np.asarray(out), (src[:48] + np.uint8(10)).astype(np.uint8))


def test_a_stencil_that_fixes_its_output_allocates_it(pipelines):
    p, _ = pipelines["hb_out_blur_fixed"]
    rng = np.random.default_rng(33)
    a = random_u14(rng, (256, 320))
    got = p(a)
    assert got.shape == (256, 320) and got.mins == (0, 0) and got.dtype.name == "uint16"
    np.testing.assert_array_equal(np.asarray(got), expected_blur(a))
    # A crop: the output takes its coordinates, and its own edges are the ones repeated.
    crop = crop2(hb.Buffer.from_host(a), 40, 64, 24, 96)
    got = p(crop)
    assert got.shape == (64, 96) and got.mins == (40, 24)
    np.testing.assert_array_equal(np.asarray(got), expected_blur(a[40:104, 24:120]))


def test_an_output_fixed_by_constants_is_allocated_there(pipelines):
    p, _ = pipelines["hb_out_constant"]
    a = random_u8(np.random.default_rng(34), (40, 80))
    got = p(a)
    assert got.shape == (20, 48) and got.mins == (3, 4)
    np.testing.assert_array_equal(np.asarray(got), (a[3:23, 4:52] * np.uint8(2)).astype(np.uint8))
