"""What users see where two layers meet: the residency state, the structs handed to foreign code,
DLPack, the pipeline call and the device backends, each met from the public API.

Each test states one behaviour across a seam. Values written on one side are read on the other
by a peer (pyopencl, Halide's own runtime, the CUDA stand-in's control API), never by the layer
under test alone.
"""

import ctypes
import gc

import halide as hl  # required test dependency: the test fails, not skips, without it
import numpy as np
import pytest

import halide_buffer as hb

from pipelines import OPENCL_TARGET, TARGET, build, c_compiler, compile_and_load, random_u8

pytestmark = pytest.mark.needs_halide

SHAPE = (16, 24)  # three 8x8 GPU tiles across, two down


def plus_ten_func(gpu):
    """out(x, y) = in(x, y) + 10 (uint8, wrapping), any stride on either side (negative ones
    too); on the GPU in 8x8 tiles, the last ones guarded."""
    x, y, xo, yo, xi, yi = (hl.Var(n) for n in ("x", "y", "xo", "yo", "xi", "yi"))
    inp = hl.ImageParam(hl.UInt(8), 2, "inp")
    inp.dim(0).set_stride(hl.Expr())
    out = hl.Func("plus_ten")
    out[x, y] = inp[x, y] + hl.u8(10)
    out.output_buffer().dim(0).set_stride(hl.Expr())
    if gpu:
        out.gpu_tile(x, y, xo, yo, xi, yi, 8, 8, hl.TailStrategy.GuardWithIf)
    return out, [inp]


def two_outputs_func(gpu):
    """hl.Pipeline([plus, half]) over the regions its outputs are given (any, empty ones too)."""
    x, y, xo, yo, xi, yi = (hl.Var(n) for n in ("x", "y", "xo", "yo", "xi", "yi"))
    inp = hl.ImageParam(hl.UInt(8), 2, "inp")
    plus, half = hl.Func("plus"), hl.Func("half")
    plus[x, y] = inp[x, y] + hl.u8(1)
    half[x, y] = hl.f32(inp[x, y]) * 0.5
    if gpu:
        for f in (plus, half):
            f.gpu_tile(x, y, xo, yo, xi, yi, 8, 8, hl.TailStrategy.GuardWithIf)
    return hl.Pipeline([plus, half]), [inp]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """plus_ten on OpenCL and on the host, each through hb.aot and through ctypes (the same
    library), the two-output pipeline on both, and the OpenCL runtime's halide_buffer_copy."""
    hb.opencl.device()  # opens the OpenCL loader process-wide, where a pipeline's runtime looks
    directory = tmp_path_factory.mktemp("across_layers")
    cc = c_compiler()
    got = {}
    for where, target in [("opencl", OPENCL_TARGET), ("host", TARGET)]:
        name = f"hb_layers_plus_ten_{where}"
        got[where] = compile_and_load(directory, cc, *plus_ten_func(where == "opencl"), name, target=target)
        got["raw " + where] = build(directory, cc, *plus_ten_func(where == "opencl"), name + "_raw", target=target)
        got["two " + where] = compile_and_load(directory, cc, *two_outputs_func(where == "opencl"),
                                               f"hb_layers_two_{where}", target=target)
    copy = got["raw opencl"].lib.halide_buffer_copy
    copy.argtypes = [ctypes.c_void_p] * 4
    copy.restype = ctypes.c_int
    got["buffer_copy"] = copy
    return got


def plus_ten(a):
    return (a + np.uint8(10)).astype(np.uint8)


def device_values(b):
    """What the buffer's OpenCL device copy holds, read by pyopencl (made current first)."""
    return hb.opencl.as_array(b, writable=False).get()


def in_sync(values):
    """An owned buffer holding `values`, uploaded: both copies current."""
    b = hb.Buffer.from_host(values, copy=True)
    b.copy_to_device()
    assert not b.host_dirty() and not b.device_dirty()
    return b


def device_newer(old, new):
    """An owned buffer whose host memory holds `old` and whose device copy, the newer one, holds
    `new` (written by a pyopencl kernel on the buffer's cl_mem)."""
    b = in_sync(old)
    a = hb.opencl.as_array(b)
    a.set(new)
    a.queue.finish()
    del a
    assert b.device_dirty()
    return b


# ---------------------------------------------------------------------------------------------
# 1. A DLPack capsule dropped unconsumed does not cancel a host write's upload
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("when", ["after the write", "before the write"])
@pytest.mark.parametrize("kwargs", [{}, {"max_version": (1, 0)}, {"max_version": (1, 0), "copy": False}],
                         ids=["legacy", "versioned", "versioned no copy"])
def test_a_dlpack_capsule_dropped_unconsumed_keeps_a_host_writes_upload(built, when, kwargs):
    """A capsule is a write lease no consumer took: dropping it leaves the host copy the newer
    one, so the device sees the write."""
    rng = np.random.default_rng(1)
    old, new = random_u8(rng, SHAPE), random_u8(rng, SHAPE)
    b = in_sync(old)
    if when == "before the write":
        capsule = b.__dlpack__(**kwargs)
        b.numpy(writable=True)[...] = new
    else:
        b.numpy(writable=True)[...] = new
        capsule = b.__dlpack__(**kwargs)
    del capsule
    gc.collect()
    assert b.host_dirty()
    np.testing.assert_array_equal(device_values(b), new)
    out = hb.Buffer(SHAPE, "uint8")
    np.testing.assert_array_equal(np.asarray(built["opencl"](b, out)), plus_ten(new))


def test_a_capsule_of_a_part_dropped_unconsumed_keeps_a_writes_upload(built):
    rng = np.random.default_rng(2)
    old, new = random_u8(rng, SHAPE), random_u8(rng, (4, 24))
    b = in_sync(old)
    b[4:8].numpy(writable=True)[...] = new
    capsule = b[2:10].__dlpack__()
    del capsule
    gc.collect()
    expected = old.copy()
    expected[4:8] = new
    np.testing.assert_array_equal(built["opencl"](b, hb.Buffer(SHAPE, "uint8")).numpy(), plus_ten(expected))
    np.testing.assert_array_equal(device_values(b), expected)


# ---------------------------------------------------------------------------------------------
# 2. A part a pipeline's runtime computed in memory of its own comes home, and the device copy
#    it made stale is not used again
# ---------------------------------------------------------------------------------------------

PARTS = {  # parts the runtime cannot compute in our device copy: it allocates its own
    "reversed rows": lambda b: b[::-1],
    "reversed columns": lambda b: b[:, ::-1],
    "half of the rows reversed": lambda b: b[8:16][::-1],
}


def lease(values):
    """A buffer wrapping `values` that its owner may write at any time, uploaded."""
    b = hb.Buffer.from_host(values)
    b.copy_to_device()
    return b


@pytest.mark.parametrize("make", [in_sync, lease], ids=["owned", "lease"])
@pytest.mark.parametrize("part", list(PARTS))
def test_a_part_computed_by_the_runtime_reaches_the_next_device_use(built, make, part):
    """The part comes home onto the host copy; the storage's device copy no longer holds it, and
    the next device use (pyopencl, a pipeline, fill on the device) sees the new values."""
    rng = np.random.default_rng(3)
    old = random_u8(rng, SHAPE)
    b = make(old.copy())
    view = PARTS[part](b)
    src = random_u8(rng, view.shape)
    assert built["opencl"](src, view) is view
    expected = old.copy()
    PARTS[part](expected)[...] = plus_ten(src)
    np.testing.assert_array_equal(device_values(b), expected)
    np.testing.assert_array_equal(built["opencl"](b, hb.Buffer(SHAPE, "uint8")).numpy(), plus_ten(expected))
    b[4:12, 8:16].fill(7)
    expected[4:12, 8:16] = 7
    np.testing.assert_array_equal(device_values(b), expected)
    np.testing.assert_array_equal(b.numpy(), expected)


def test_a_part_computed_by_the_runtime_over_a_newer_device_copy_keeps_the_rest(built):
    """The device copy was the newer one: it comes home first, then the part over it."""
    rng = np.random.default_rng(4)
    old, new = random_u8(rng, SHAPE), random_u8(rng, SHAPE)
    b = device_newer(old, new)
    src = random_u8(rng, (8, 24))
    built["opencl"](src, b[8:16][::-1])
    expected = new.copy()
    expected[8:16] = plus_ten(src)[::-1]
    np.testing.assert_array_equal(device_values(b), expected)
    np.testing.assert_array_equal(b.numpy(), expected)


# ---------------------------------------------------------------------------------------------
# 3. Views with negative strides reach a pipeline as NumPy reads them
# ---------------------------------------------------------------------------------------------

REVERSED = {
    "rows": lambda x: x[::-1],
    "columns": lambda x: x[:, ::-1],
    "both": lambda x: x[::-1, ::-1],
    "every other row backwards": lambda x: x[::-2],
}
GUARD = 0xEE  # the bytes just outside the wrapped memory: a read past either end shows


def guarded(values):
    """A buffer over `values` inside a larger array whose bytes around it are GUARD."""
    n = values.size
    outer = np.full(n + 64, GUARD, np.uint8)
    inner = outer[32:32 + n].reshape(values.shape)
    inner[...] = values
    return hb.Buffer.from_host(inner, external_writes=False), outer


RESIDENCY = {  # where the storage's current copy is when the view is handed over
    "host only": lambda b, new: b,
    "both": lambda b, new: (b.copy_to_device(), b)[1],
    "device newer": lambda b, new: _device_write(b, new),
}


def _device_write(b, new):
    b.copy_to_device()
    a = hb.opencl.as_array(b)
    a.set(new)
    a.queue.finish()
    return b


# Halide's GPU runtimes allocate device memory only for non-negative strides and abort the
# process on any other: hb.aot hands a device pipeline a forward copy of such a view; a struct
# from _get_raw_halide_buffer_t() goes to the runtime as it is, so only host pipelines take it.
ROUTES = [("opencl", "hb.aot"), ("host", "hb.aot"), ("host", "_get_raw_halide_buffer_t")]


@pytest.mark.parametrize("residency", list(RESIDENCY))
@pytest.mark.parametrize("view", list(REVERSED))
@pytest.mark.parametrize("where, route", ROUTES)
def test_a_negative_stride_view_is_read_as_numpy_reads_it(built, where, route, view, residency):
    rng = np.random.default_rng(5)
    old, new = random_u8(rng, SHAPE), random_u8(rng, SHAPE)
    b, outer = guarded(old)
    b = RESIDENCY[residency](b, new)
    current = new if residency == "device newer" else old
    inp = REVERSED[view](b)
    out = hb.Buffer(inp.shape, "uint8")
    if route == "hb.aot":
        built[where](inp, out)
    else:
        inp.copy_to_host()  # a host pipeline's runtime refuses a struct whose device copy is newer
        built["raw " + where].run(inp, out)
    np.testing.assert_array_equal(out.numpy(), plus_ten(REVERSED[view](current)))
    np.testing.assert_array_equal(b.numpy(), current)  # the input is unchanged
    assert (outer[:32] == GUARD).all() and (outer[-32:] == GUARD).all()


@pytest.mark.parametrize("view", list(REVERSED))
@pytest.mark.parametrize("where, route", ROUTES)
def test_a_negative_stride_output_is_written_where_numpy_writes(built, where, route, view):
    rng = np.random.default_rng(6)
    old = random_u8(rng, SHAPE)
    b, outer = guarded(old)
    b.copy_to_device()
    out = REVERSED[view](b)
    src = random_u8(rng, out.shape)
    if route == "hb.aot":
        built[where](src, out)
    else:
        built["raw " + where].run(hb.Buffer.from_host(src), out)
        out.set_host_dirty()  # a host pipeline leaves the flags alone: its caller says it wrote (Halide's rule)
    expected = old.copy()
    REVERSED[view](expected)[...] = plus_ten(src)
    np.testing.assert_array_equal(b.numpy(), expected)
    np.testing.assert_array_equal(device_values(b), expected)
    assert (outer[:32] == GUARD).all() and (outer[-32:] == GUARD).all()
