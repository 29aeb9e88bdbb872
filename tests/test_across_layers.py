"""What users see where two layers meet: the residency state, the structs handed to foreign code,
DLPack, the pipeline call and the device backends, each met from the public API.

Each test states one behaviour across a seam. Values written on one side are read on the other
by a peer (pyopencl, Halide's own runtime, the CUDA stand-in's control API), never by the layer
under test alone.
"""

import ctypes
import gc
import threading

import halide as hl  # required test dependency: the test fails, not skips, without it
import numpy as np
import pytest

import halide_buffer as hb

import buffer_protocol
from common import at_mins_of, raw_buffer
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
    "rows at an unaligned offset": lambda b: b[1:9],  # an OpenCL sub-buffer starts aligned
    "columns": lambda b: b[:, 8:16],
    "reversed rows": lambda b: b[::-1],  # hb.aot stages it (see test 3): the copy comes home
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
    assert built["opencl"](at_mins_of(view, src), view) is view
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
    built["opencl"](at_mins_of(b[1:9], src), b[1:9])
    expected = new.copy()
    expected[1:9] = plus_ten(src)
    np.testing.assert_array_equal(device_values(b), expected)
    np.testing.assert_array_equal(b.numpy(), expected)


def test_parts_computed_by_runtimes_come_home_over_a_whole_computed_by_another(built):
    """Two calls through _get_raw_halide_buffer_t() (ctypes), with nothing of ours between them:
    one computes the whole storage, another a part, each runtime in memory of its own. The part
    comes home over the whole, which came home first."""
    rng = np.random.default_rng(9)
    b = hb.Buffer(SHAPE, "uint8")
    part = b[1:9]
    whole_src, part_src = random_u8(rng, SHAPE), random_u8(rng, part.shape)
    src_whole, src_part = hb.Buffer.from_host(whole_src), at_mins_of(part, part_src)
    structs = [(src_whole._get_raw_halide_buffer_t(), b._get_raw_halide_buffer_t()),
               (src_part._get_raw_halide_buffer_t(), part._get_raw_halide_buffer_t())]
    fn = built["raw opencl"].fn
    for inp, out in structs:  # the structs as they were handed out, called one after the other
        assert fn(inp, out) == 0, built["raw opencl"].errors
    expected = plus_ten(whole_src)
    expected[1:9] = plus_ten(part_src)
    np.testing.assert_array_equal(b.numpy(), expected)
    # The whole's memory is the runtime's now: the next pipeline reads it there.
    np.testing.assert_array_equal(built["opencl"](b, hb.Buffer(SHAPE, "uint8")).numpy(), plus_ten(expected))


def test_a_buffer_lent_to_concurrent_calls_is_given_back_whole(built):
    """One Buffer passed to calls running at once in two threads: each call gets a struct of its
    own, and each is given back when its call returns, so nothing of them outlives the calls (a
    small view of the storage, untouched again, is then called directly)."""
    b = hb.Buffer((2048, 2048), "uint8")  # 4 MiB: lent to each call, which takes milliseconds
    b.numpy(writable=True)[...] = random_u8(np.random.default_rng(10), b.shape)
    small = b[0:4, 0:16]
    calling = threading.Event()

    def first():
        for _ in range(3):
            calling.set()
            built["host"](b, hb.Buffer(b.shape, "uint8"))

    thread = threading.Thread(target=first)
    thread.start()
    calling.wait()
    while thread.is_alive():  # calls while the other thread's runs (it holds no lock meanwhile)
        built["host"](b, hb.Buffer(b.shape, "uint8"))
    thread.join()
    expected = plus_ten(b.numpy()[0:4, 0:16])
    del b
    gc.collect()
    before = hb._core._live_counts()["direct_calls"]
    got = built["host"](small, hb.Buffer.from_host(np.zeros((4, 16), np.uint8)))
    assert hb._core._live_counts()["direct_calls"] == before + 1, "a struct of a finished call was left behind"
    np.testing.assert_array_equal(got.numpy(), expected)


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


# ---------------------------------------------------------------------------------------------
# 4. halide_buffer_copy from a struct handed out before a host write copies the new values
# ---------------------------------------------------------------------------------------------

HOST_WRITES = {
    "numpy(writable=True)": lambda b, new: b.numpy(writable=True).__setitem__(Ellipsis, new),
    "b[...] = values": lambda b, new: b.__setitem__(Ellipsis, new),
    "copy_from": lambda b, new: b.copy_from(hb.Buffer.from_host(new)),
    "a consumer of a DLPack capsule": lambda b, new: np.from_dlpack(b).__setitem__(Ellipsis, new),
    "a C consumer of the buffer protocol": lambda b, new: write_through_the_buffer_protocol(b, new),
}


def write_through_the_buffer_protocol(b, new):
    """A C consumer asking for writable memory (as Cython's typed memoryviews do) writes it."""
    view = buffer_protocol.request(b, buffer_protocol.PyBUF_WRITABLE | buffer_protocol.PyBUF_C_CONTIGUOUS)
    assert view.buf and not view.readonly and view.len == new.nbytes
    ctypes.memmove(view.buf, new.tobytes(), new.nbytes)
    buffer_protocol.release(view)


@pytest.mark.parametrize("to_device", [False, True], ids=["to the host", "to the device"])
@pytest.mark.parametrize("write", list(HOST_WRITES))
def test_halide_buffer_copy_from_a_struct_handed_out_before_a_host_write(built, write, to_device):
    rng = np.random.default_rng(7)
    old, new = random_u8(rng, SHAPE), random_u8(rng, SHAPE)
    src = in_sync(old)
    raw = src._get_raw_halide_buffer_t()  # handed out while the device copy is current
    HOST_WRITES[write](src, new)
    # To a device copy that is current: device to device, when the source's device copy is.
    dst = in_sync(np.zeros(SHAPE, np.uint8)) if to_device else hb.Buffer(SHAPE, "uint8")
    dst_raw = raw_buffer(dst)
    interface = dst_raw.device_interface if to_device else None
    assert built["buffer_copy"](None, raw, interface, ctypes.addressof(dst_raw)) == 0
    np.testing.assert_array_equal(dst.numpy(), new)
    np.testing.assert_array_equal(device_values(dst), new)
    np.testing.assert_array_equal(device_values(src), new)  # the source's own device copy too


def test_a_structs_device_handle_stays_while_its_allocation_does(built):
    """A halide_buffer_t held across operations keeps the device handle it was given (foreign
    code may keep it, as Halide's crops keep their parent's), until the allocation changes."""
    b = in_sync(random_u8(np.random.default_rng(11), SHAPE))
    part = b[2:6]
    raw = raw_buffer(part)
    handle = raw.device
    assert handle
    np.asarray(b)
    b.set_host_dirty(True)
    b.copy_to_device()
    assert raw.device == handle and raw_buffer(part).device == handle
    b.device_free()
    assert raw.device == 0


# ---------------------------------------------------------------------------------------------
# 5. A pipeline with two outputs, one of them empty, runs and fills the other
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["host", "opencl"])
@pytest.mark.parametrize("empty", [0, 1], ids=["first empty", "second empty"])
def test_a_call_with_one_empty_output_fills_the_other(built, where, empty):
    a = random_u8(np.random.default_rng(8), SHAPE)
    outs = [hb.Buffer(SHAPE, "uint8"), hb.Buffer(SHAPE, "float32")]
    outs[empty] = hb.Buffer((0, 24), outs[empty].dtype)
    got = built["two " + where](a, *outs)
    assert got[0] is outs[0] and got[1] is outs[1]
    full = outs[1 - empty].numpy()
    expected = [(a + np.uint8(1)).astype(np.uint8), a.astype(np.float32) * 0.5][1 - empty]
    np.testing.assert_array_equal(full, expected)
    assert outs[empty].shape == (0, 24)


# ---------------------------------------------------------------------------------------------
# 6. An export of a buffer on a CUDA device hands the device pointer (on the driver stand-in)
# ---------------------------------------------------------------------------------------------


def dlpack_data(capsule):
    """(data address, device) of a DLPack capsule's tensor, legacy or versioned, read as a
    consumer reads it."""
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    name_of = ctypes.pythonapi.PyCapsule_GetName
    name_of.restype, name_of.argtypes = ctypes.c_char_p, [ctypes.py_object]
    name = name_of(capsule)
    # A versioned tensor's DLTensor comes after its version, manager_ctx, deleter and flags.
    tensor = get(capsule, name) + (32 if name == b"dltensor_versioned" else 0)
    data = ctypes.c_void_p.from_address(tensor).value
    device = tuple((ctypes.c_int32 * 2).from_address(tensor + 8))
    return data, device


CUDA_EXPORTS = {
    "__cuda_array_interface__": lambda v: (v.__cuda_array_interface__["data"][0], (2, 0)),
    "__dlpack__()": lambda v: dlpack_data(v.__dlpack__()),
    "__dlpack__(max_version=(1, 0))": lambda v: dlpack_data(v.__dlpack__(max_version=(1, 0))),
    "__dlpack__(stream=-1, dl_device=(2, 0))": lambda v: dlpack_data(v.__dlpack__(stream=-1, dl_device=(2, 0))),
}
CUDA_VIEWS = {"whole": lambda b: b, "rows": lambda b: b[2:6], "a column crop": lambda b: b[:, 3:9],
              "reversed rows": lambda b: b[::-1]}
CUDA_STATES = {  # how the buffer came to be on the device
    "uploaded": lambda b: b.copy_to_device(hb.cuda.device()),
    "written there": lambda b: (b.copy_to_device(hb.cuda.device()), b.set_device_dirty()),
    "host written since": lambda b: (b.copy_to_device(hb.cuda.device()), b.fill(3)),
}


@pytest.fixture
def standin():
    import cuda_standin

    if not cuda_standin.active():
        pytest.skip(cuda_standin.why_inactive())
    return cuda_standin


@pytest.mark.parametrize("state", list(CUDA_STATES))
@pytest.mark.parametrize("view", list(CUDA_VIEWS))
@pytest.mark.parametrize("export", list(CUDA_EXPORTS))
def test_a_cuda_export_hands_the_device_pointer_cuda_driver_standin(standin, export, view, state):
    """The address handed out is in the device allocation, at the view's first element; never the
    host copy's. The stand-in proves the bookkeeping only: what a consumer on a GPU reads there is
    tests/test_cuda.py's part (tests/gpu/run_checks.sh)."""
    b = hb.Buffer.from_host(np.arange(8 * 12, dtype=np.float32).reshape(8, 12), copy=True)
    CUDA_STATES[state](b)
    v = CUDA_VIEWS[view](b)
    address, device = CUDA_EXPORTS[export](v)
    assert device == (2, 0)
    allocation = standin.allocation_of(address)
    assert allocation is not None, "the address handed out is no device memory"
    base, size = allocation
    host_first, host_base = np.asarray(v).ctypes.data, np.asarray(b).ctypes.data
    assert address - base == host_first - host_base  # the same element of the storage
    assert size >= b.nbytes and address != host_first


@pytest.mark.parametrize("stream", [2**63, 2**64 - 1])
def test_a_stream_handle_in_the_upper_half_of_the_address_space_reaches_the_driver_cuda_driver_standin(
        standin, stream):
    """A consumer's stream is a pointer-sized handle: the values above 2**63 are handles too,
    handed to the driver (which says this one is no live stream), never refused as numbers."""
    b = hb.Buffer.from_host(np.zeros(8, np.float32), copy=True)
    b.copy_to_device(hb.cuda.device())
    with pytest.raises(hb.DeviceError, match=r"cuStreamWaitEvent failed with CUDA_ERROR_INVALID_HANDLE"):
        b.__dlpack__(stream=stream)
    misuse = standin.violations()  # the consumer's misuse, handed on as it was given
    standin.clear_violations()
    assert misuse and all("cuStreamWaitEvent" in m for m in misuse), misuse
    with pytest.raises(BufferError, match=r"__dlpack__\(\): stream 18446744073709551616 is no stream"):
        b.__dlpack__(stream=2**64)
