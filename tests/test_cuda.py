"""CUDA devices: halide_buffer.cuda, the CUDA array interface, DLPack on the GPU, CUDA pipelines.

Two halves. The first runs everywhere: without a CUDA driver, `hb.cuda.device()` raises a
`DeviceError` naming the missing driver, every CPU feature keeps working, and the argument
checks that need no driver (stream, ordinal, the CUDA array interface dict a consumer is given)
raise before it is looked for. The second needs an NVIDIA GPU (marked `needs_gpu`; on a machine
without one it is run by tests/gpu/run_checks.sh) and the peers it names (CuPy, PyTorch with
CUDA, JAX with a GPU backend), each skipped with the reason when missing: data crosses every way
in and out, checked bit for bit; every copy is counted exactly (`b.transfers`, `hb.transfers()`);
work queued on other streams is waited for; a Halide CUDA pipeline built ahead of time by
tests/gpu/prepare.py (`HALIDE_BUFFER_GPU_ARTIFACTS`) leaves its output on the GPU, where CuPy takes
it without a copy.

Device-side values are read back through the peers' own copies (`cupy.ndarray.get()`,
`torch.Tensor.cpu()`, `np.asarray(jax_array)`), never through the buffer under test. CuPy kernels
are used sparingly: each is compiled on first use, which costs seconds on a fresh machine.
"""

import contextlib
import ctypes
import gc
import importlib
import json
import os
import re
import subprocess
import sys
import textwrap
import warnings
import weakref
from pathlib import Path

import numpy as np
import pytest

import halide_buffer as hb

from common import Moves, NONE, bits_of, counts, down, filled, live_counts, ramp, random_bits, up

# JAX grabs 75% of the GPU's memory at start-up unless told not to; the other peers, and the
# out-of-memory tests, need it. Read when JAX starts its GPU backend, so set before any import.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

needs_gpu = pytest.mark.skipif(not hb.cuda.is_available(),
                               reason="no CUDA driver on this machine (libcuda.so.1): CUDA behaviour is "
                                      "checked on a GPU machine by tests/gpu/run_checks.sh")

NO_DRIVER = r"cuda.device\(\): no CUDA driver found \("

CUPY_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
               "float16", "float32", "float64", "complex64", "complex128"]
TORCH_DTYPES = CUPY_DTYPES + ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
                              "float8_e5m2fnuz", "float8_e8m0fnu"]
FLOAT8 = [t.name for t in hb.dtypes() if t.name.startswith("float8_")]
# JAX without jax_enable_x64 has no 64-bit types (asking for one warns and truncates).
JAX_DTYPES = ["bool", "int8", "int16", "int32", "uint8", "uint16", "uint32", "float16", "float32",
              "complex64", "bfloat16"] + FLOAT8

# ~0.5 s of torch.cuda._sleep on any current GPU (about 2 GHz): a copy not ordered after the
# sleeping stream would run long before the kernel queued behind the sleep.
SLEEP_CYCLES = 1 << 30


def process_moves():
    """Like common.Moves, for every copy of the process (hb.transfers())."""
    last = [hb.transfers()]

    def moves():
        now = hb.transfers()
        delta, last[0] = counts(now - last[0]), now
        return delta

    return moves


class Interface:
    """A thin producer: an object exposing nothing but a given __cuda_array_interface__."""

    def __init__(self, interface):
        self.__cuda_array_interface__ = interface


class CapsuleOnly:
    """A producer with only the capsule protocol (no DLPack C exchange API on its type)."""

    def __init__(self, t):
        self.t = t

    def __dlpack__(self, **kwargs):
        return self.t.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


def need(module):
    """Imports a peer, or skips saying which one is missing. Warnings a peer prints while it
    imports (CUDA path notices and the like) are its own, not this suite's."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 - any import failure means "peer unavailable"
        pytest.skip(f"{module} is not usable here ({type(e).__name__}: {e})")


# ---------------------------------------------------------------------------------------------
# Without a driver (and argument checks that never need one)
# ---------------------------------------------------------------------------------------------


@pytest.mark.skipif(hb.cuda.is_available(), reason="a CUDA driver is installed: the no-driver path can't run "
                                                   "in this process (test_a_missing_driver_library_... covers it)")
def test_without_a_driver_device_raises_a_device_error_naming_the_missing_driver():
    for _ in range(2):  # the failure is remembered, not turned into something else
        with pytest.raises(hb.DeviceError, match=NO_DRIVER + r".*\); CUDA needs an NVIDIA GPU and its driver\. "
                                                 r"Every CPU feature and OpenCL keep working\.$") as info:
            hb.cuda.device()
        assert info.value.name == "CUDA_ERROR_NO_DRIVER" and info.value.code == -1
        assert isinstance(info.value, RuntimeError)
    for call in (lambda: hb.cuda.device(1), lambda: hb.cuda.device(stream=7, trust_handle=True),
                 lambda: hb.cuda.wrap(Interface({"shape": (4,), "typestr": "<f4", "data": (1 << 40, False),
                                                 "version": 3, "strides": None, "stream": None}))):
        with pytest.raises(hb.DeviceError, match="no CUDA driver found") as info:
            call()
        assert info.value.name == "CUDA_ERROR_NO_DRIVER"
    assert hb.cuda.is_available() is False and hb.cuda.loaded_library() is None


@pytest.mark.skipif(hb.cuda.is_available(), reason="a CUDA driver is installed: a CUDA producer would be served")
def test_without_a_driver_a_cuda_producer_is_refused_before_it_is_asked():
    class CudaProducer:
        calls = 0

        def __dlpack_device__(self):
            return (2, 0)

        def __dlpack__(self, **kwargs):
            CudaProducer.calls += 1
            raise AssertionError("not to be called")

    with pytest.raises(hb.DeviceError, match="no CUDA driver found"):
        hb.from_dlpack(CudaProducer())
    assert CudaProducer.calls == 0


def test_a_missing_driver_library_is_a_device_error_and_the_rest_works():
    # A fresh interpreter pointed at a library that does not exist: the no-driver path, checked
    # on every machine (a GPU machine's own process has the real driver loaded).
    script = textwrap.dedent("""
        import numpy as np
        import halide_buffer as hb
        assert hb.cuda.is_available() is False
        try:
            hb.cuda.device()
        except hb.DeviceError as e:
            print(e.name, e.code)
            print(e)
        b = hb.Buffer((2, 3), "bfloat16")
        b.numpy(writable=True)[...] = 1.5
        assert float(np.asarray(b)[1, 2]) == 1.5 and b.__dlpack_device__() == (1, 0)
        assert not hasattr(b, "__cuda_array_interface__")
        print("ok")
    """)
    env = dict(os.environ, HALIDE_BUFFER_CUDA_LIBRARY="/nonexistent/libcuda.so.1")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                          cwd=Path(__file__).resolve().parent.parent)
    assert done.returncode == 0, done.stderr
    name_code, message, ok = done.stdout.splitlines()
    assert name_code == "CUDA_ERROR_NO_DRIVER -1" and ok == "ok"
    assert message.startswith("cuda.device(): no CUDA driver found (/nonexistent/libcuda.so.1: ")


@pytest.mark.skipif(not hb.cuda.is_available(), reason="no CUDA driver here: the no-driver tests run in this process")
def test_the_no_driver_tests_pass_in_a_process_without_a_driver():
    # This process has a driver (the suite's stand-in, or a GPU's): the tests of the no-driver
    # path run in a pytest of their own, pointed at a library that does not exist.
    env = dict(os.environ, HALIDE_BUFFER_CUDA_LIBRARY="/nonexistent/libcuda.so.1")
    here = Path(__file__).resolve().parent
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "without_a_driver",
                           str(here / "test_cuda.py"), str(here / "test_cuda_glue.py")],
                          capture_output=True, text=True, env=env)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    passed = int(summary.split(" passed")[0].split()[-1]) if " passed" in summary else 0
    assert passed >= 4 and "failed" not in summary and "error" not in summary, summary


def cuda_header():
    """The CUDA toolkit's cuda.h on this machine ($CUDA_HOME, else /usr/local/cuda*), or None."""
    homes = [os.environ.get("CUDA_HOME", "")] + sorted(str(p) for p in Path("/usr/local").glob("cuda*"))
    for home in homes:
        header = Path(home) / "include" / "cuda.h"
        if home and header.is_file():
            return header
    return None


def test_every_driver_error_code_has_its_name_from_cuda_h():
    """Our names of the driver's codes (messages name them without a driver to ask), against the
    CUDA toolkit's own header, code by code."""
    header = cuda_header()
    if header is None:
        pytest.skip("no CUDA toolkit header (cuda.h) on this machine to compare the names with")
    codes = re.findall(r"^\s*(CUDA_SUCCESS|CUDA_ERROR_\w+)\s*=\s*(\d+)", header.read_text(errors="replace"), re.M)
    assert len(codes) > 80
    wrong = {int(value): (name, hb._core._cuda_error_name(int(value))) for name, value in codes
             if hb._core._cuda_error_name(int(value)) != name}
    assert not wrong, wrong


def test_every_cpu_feature_works_whatever_the_driver():
    # True exactly when a driver loaded and initialised: then it is the library in use.
    available = hb.cuda.is_available()
    assert available is (hb.cuda.loaded_library() is not None)
    if os.path.basename(os.environ.get("HALIDE_BUFFER_CUDA_LIBRARY", "")) == "libcuda_standin.so":
        assert available is True and hb.cuda.loaded_library() == os.environ["HALIDE_BUFFER_CUDA_LIBRARY"]
    assert issubclass(hb.CudaDevice, hb.Device) and hb.CudaDevice is hb.cuda.CudaDevice
    assert (Path(hb.get_include()) / "halide_buffer_cuda.c").is_file()
    b, src = filled((4, 6), "float8_e4m3fn")
    np.testing.assert_array_equal(bits_of(np.asarray(b)), bits_of(src))
    np.testing.assert_array_equal(bits_of(np.asarray(b[1:3, ::2])), bits_of(src[1:3, ::2]))
    f = ramp((3, 4))
    assert bytes(memoryview(f)) == np.arange(12, dtype=np.float32).tobytes()
    np.testing.assert_array_equal(np.from_dlpack(f), np.arange(12, dtype=np.float32).reshape(3, 4))
    back = hb.from_dlpack(np.arange(5, dtype=np.int16))
    assert back.dtype == "int16" and np.asarray(back).tolist() == [0, 1, 2, 3, 4]
    assert b.__dlpack_device__() == (1, 0) and b.device is None and not b.has_device_allocation()
    assert b.transfers.to_device == b.transfers.to_host == 0


def test_a_host_only_buffer_has_no_cuda_array_interface():
    b = ramp((4,))
    assert not hasattr(b, "__cuda_array_interface__")
    with pytest.raises(AttributeError, match=r"__cuda_array_interface__: the buffer is not on a CUDA device; call "
                                             r"copy_to_device\(halide_buffer.cuda.device\(\)\) first"):
        b.__cuda_array_interface__
    assert b.__dlpack_device__() == (1, 0)
    assert b.host_dirty() and b.transfers.to_device == 0  # asking changed nothing


@pytest.mark.parametrize("obj", [np.zeros(3), [1.0, 2.0], None, hb.Buffer((3,), "float32"),
                                 Interface([("shape", (3,))])],
                         ids=["ndarray", "list", "None", "host Buffer", "interface not a dict"])
def test_wrap_refuses_an_object_without_the_interface(obj):
    with pytest.raises(TypeError, match=rf"cuda.wrap\(\): {type(obj).__name__} has no __cuda_array_interface__; "
                                        r"pass a CuPy array, a PyTorch CUDA tensor or another CUDA array"):
        hb.cuda.wrap(obj)


def interface(**changes):
    d = {"shape": (4,), "typestr": "<f4", "data": (1 << 40, False), "version": 3, "strides": None,
         "stream": None}
    d.update(changes)
    return Interface(d)


@pytest.mark.parametrize("producer, message", [
    (interface(data=(1 << 40, True)), r"cuda.wrap\(\): the array is read-only"),
    (interface(mask=object()), r"cuda.wrap\(\): masked arrays are not supported"),
    (interface(typestr=">f4"), r"cuda.wrap\(\): big-endian data \('>f4'\) is not supported"),
    (interface(typestr="<V1"), r"cuda.wrap\(\): typestr '<V1' names no single dtype of the table \(matches: "
                               r"float8_e3m4, .*\); pass dtype="),
    (interface(typestr="<x9"), r"cuda.wrap\(\): typestr '<x9' names no single dtype of the table \(matches: none\)"),
], ids=["read-only", "mask", "big-endian", "ambiguous <V1", "unknown"])
def test_wrap_checks_the_interface_before_it_needs_a_driver(producer, message):
    with pytest.raises(BufferError, match=message):
        hb.cuda.wrap(producer)


@pytest.mark.parametrize("kwargs, message", [
    (dict(ordinal="0"), r"ordinal must be an int, not str"),
    (dict(ordinal=True), r"ordinal must be an int, not bool"),
    (dict(ordinal=0.0), r"ordinal must be an int, not float"),
    (dict(stream="0"), r"stream must be None, a CUstream handle \(int\), a cupy.cuda.Stream or a "
                       r"torch.cuda.Stream, not '0'"),
    (dict(stream=-1), r"stream must be None, .* not -1"),
    (dict(stream=True), r"stream must be None, .* not True"),
    (dict(stream=1.0), r"stream must be None, .* not 1.0"),
    (dict(stream=object()), r"stream must be None, .* not <object object"),
], ids=["ordinal str", "ordinal bool", "ordinal float", "stream str", "stream -1", "stream bool",
        "stream float", "stream object"])
def test_bad_device_arguments_are_type_errors_before_the_driver_is_touched(kwargs, message):
    with pytest.raises(TypeError, match=r"^cuda.device\(\): " + message):
        hb.cuda.device(**kwargs)


def test_dlpack_stream_and_device_checks_of_a_host_buffer():
    b = ramp((3,))
    with pytest.raises(BufferError, match=r"__dlpack__\(\): stream must be None for data on the CPU, not 1"):
        b.__dlpack__(stream=1)
    with pytest.raises(BufferError, match=r"__dlpack__\(\): dl_device \(2, 0\) is not where the data is \(1, 0\)"):
        b.__dlpack__(dl_device=(2, 0))


# ---------------------------------------------------------------------------------------------
# On a GPU: fixtures
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gpu():
    """The default CUDA device: ordinal 0, the legacy default stream."""
    return hb.cuda.device()


@pytest.fixture(scope="module")
def cupy():
    cp = need("cupy")
    try:
        cp.cuda.runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"CuPy {cp.__version__} finds no GPU ({type(e).__name__}: {e})")
    return cp


@pytest.fixture(scope="module")
def torch():
    t = need("torch")
    if not t.cuda.is_available():
        pytest.skip(f"PyTorch {t.__version__} has no CUDA (a CPU-only build, or no device)")
    return t


@pytest.fixture(scope="module")
def jax():
    j = need("jax")
    try:
        j.devices("gpu")
    except RuntimeError as e:
        pytest.skip(f"JAX {j.__version__} has no GPU backend ({e})")
    return j


def torch_dtype(torch, name):
    t = getattr(torch, name, None)
    if not isinstance(t, torch.dtype):
        pytest.skip(f"PyTorch {torch.__version__} has no torch.{name}")
    return t


def torch_bits(torch, t):
    """A tensor's raw bytes, read back by PyTorch, as uint8 shaped like it plus one axis of bytes."""
    t = t.cpu().contiguous()
    return t.view(torch.uint8).numpy().reshape(tuple(t.shape) + (t.element_size(),))


def torch_from_bits(torch, src, name):
    """A CUDA tensor holding exactly the bits of `src` (made on the host, copied up by PyTorch)."""
    host = torch.from_numpy(np.ascontiguousarray(src).view(np.uint8).reshape(-1))
    return host.view(torch_dtype(torch, name)).reshape(src.shape).cuda()


def primary_context(ordinal=0):
    """The primary context of a device, from the driver itself (retained and released again)."""
    cuda = ctypes.CDLL(hb.cuda.loaded_library())
    device, ctx = ctypes.c_int(), ctypes.c_void_p()
    assert cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(device), ordinal) == 0
    assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), device) == 0
    cuda.cuDevicePrimaryCtxRelease_v2(device)
    return ctx.value


def driver_properties(ordinal=0):
    """(name, (major, minor) compute capability, total memory in bytes) of a device, from the
    driver itself."""
    cuda = ctypes.CDLL(hb.cuda.loaded_library())
    device, name = ctypes.c_int(), ctypes.create_string_buffer(256)
    major, minor, memory = ctypes.c_int(), ctypes.c_int(), ctypes.c_size_t()
    assert cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(device), ordinal) == 0
    assert cuda.cuDeviceGetName(name, len(name), device) == 0
    assert cuda.cuDeviceGetAttribute(ctypes.byref(major), 75, device) == 0  # ..._COMPUTE_CAPABILITY_MAJOR
    assert cuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, device) == 0  # ..._COMPUTE_CAPABILITY_MINOR
    assert cuda.cuDeviceTotalMem_v2(ctypes.byref(memory), device) == 0
    return name.value.decode(), (major.value, minor.value), memory.value


def device_address(b):
    """Where a buffer's first element is on the device (through the interface: a device lease)."""
    return b.__cuda_array_interface__["data"][0]


# ---------------------------------------------------------------------------------------------
# On a GPU: the device and residency
# ---------------------------------------------------------------------------------------------


@needs_gpu
def test_the_default_device_is_the_primary_context_on_the_legacy_stream(gpu):
    assert hb.cuda.device() is gpu and hb.cuda.device(0) is gpu and hb.cuda.device(stream=0) is gpu
    assert isinstance(gpu, hb.CudaDevice) and isinstance(gpu, hb.Device)
    assert gpu.kind == "cuda" and gpu.ordinal == 0 and gpu.is_gpu is True
    name, capability, memory = driver_properties(0)
    assert gpu.name == name and name and gpu.name in repr(gpu)
    assert gpu.global_memory_size == memory and memory > 1 << 30
    assert gpu.compute_capability == capability and capability >= (3, 0)
    assert gpu.stream == 1  # the legacy default stream, as the CUDA array interface numbers it
    assert gpu.context == primary_context(0)
    assert gpu.synchronize() is None
    assert hb.cuda.is_available() is True and hb.cuda.loaded_library()
    with pytest.raises(ValueError, match=r"cuda.device\(\): there is no CUDA device 4096; pass an ordinal from 0 to "
                                         r"\d+ \(this machine has \d+\)"):
        hb.cuda.device(4096)


@needs_gpu
def test_copies_move_the_whole_storage_once_and_only_when_needed(gpu):
    b = ramp((64, 32))
    nbytes = 64 * 32 * 4
    moves = Moves(b)
    b.copy_to_device(gpu)
    assert moves() == up(nbytes) and b.device is gpu and b.has_device_allocation()
    assert not b.host_dirty() and not b.device_dirty() and b.__dlpack_device__() == (2, 0)
    b.copy_to_device(gpu)
    b.copy_to_device()
    assert moves() == NONE
    b.set_device_dirty()
    b.copy_to_host()
    assert moves() == down(nbytes)
    b.copy_to_host()
    np.testing.assert_array_equal(np.asarray(b), np.arange(64 * 32).reshape(64, 32))
    assert moves() == NONE
    b.device_sync()
    b.device_free()
    assert moves() == NONE and not b.has_device_allocation() and b.device is None
    assert b.__dlpack_device__() == (1, 0) and not hasattr(b, "__cuda_array_interface__")
    m = ramp((16,))
    moves = Moves(m)
    m.device_malloc(gpu)
    assert moves() == NONE and m.has_device_allocation() and m.host_dirty()
    m.copy_to_device()
    assert moves() == up(64)


@needs_gpu
def test_the_cuda_array_interface_is_version_3_on_our_stream(gpu):
    b = ramp((6, 8))
    b.copy_to_device(gpu)
    d = b.__cuda_array_interface__
    assert set(d) == {"shape", "typestr", "data", "strides", "version", "stream"}
    assert d["shape"] == (6, 8) and d["typestr"] == "<f4" and d["strides"] is None and d["version"] == 3
    assert d["stream"] == 1 and d["data"][1] is False and d["data"][0] != 0
    assert b.device_dirty()  # a device lease: the consumer may write
    view = b[1:5, 2:8:2]
    v = view.__cuda_array_interface__
    assert v["shape"] == (4, 3) and v["strides"] == (32, 8)
    assert v["data"][0] - d["data"][0] == (1 * 8 + 2) * 4
    for name, typestr in (("bfloat16", "<V2"), ("float8_e4m3fn", "<V1"), ("complex64", "<c8")):
        x = hb.Buffer((2,), name)
        x.copy_to_device(gpu)
        assert x.__cuda_array_interface__["typestr"] == typestr == hb.dtype(name).typestr


@needs_gpu
def test_read_only_memory_is_exported_read_only_and_stays_host_current(gpu):
    src = np.arange(6, dtype=np.int32)
    src.flags.writeable = False
    b = hb.Buffer.from_host(src)
    moves = Moves(b)
    b.copy_to_device(gpu)
    d = b.__cuda_array_interface__
    assert d["data"][1] is True and not b.device_dirty() and moves() == up(24)
    with pytest.raises(BufferError, match=r"cuda.wrap\(\): the array is read-only"):
        hb.cuda.wrap(Interface(d))


@needs_gpu
@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float8_e5m2", "int16"])
def test_an_interface_round_trip_names_the_dtype_or_takes_it(gpu, name):
    b, src = filled((5, 7), name, seed=3)
    b.copy_to_device(gpu)
    d = b.__cuda_array_interface__
    if name in ("bfloat16", "float8_e5m2", "int16"):  # '<V2', '<f1', '<i2' name one dtype each
        w = hb.cuda.wrap(Interface(d))
    else:  # '<V1' is every 1-byte exotic type: the caller says which
        with pytest.raises(BufferError, match="names no single dtype"):
            hb.cuda.wrap(Interface(d))
        w = hb.cuda.wrap(Interface(d), dtype=name)
    assert w.dtype == name and w.device is gpu and w.device_dirty()
    assert device_address(w) == d["data"][0]  # the same device memory, no copy
    moves = Moves(w)
    np.testing.assert_array_equal(bits_of(np.asarray(w)), bits_of(src))
    assert moves() == down(src.nbytes)


# ---------------------------------------------------------------------------------------------
# On a GPU: CuPy
# ---------------------------------------------------------------------------------------------


@needs_gpu
@pytest.mark.parametrize("name", CUPY_DTYPES)
def test_cupy_takes_a_buffer_through_the_interface_without_a_copy(gpu, cupy, name):
    b, src = filled((6, 9), name, seed=11)
    b.copy_to_device(gpu)
    moves = Moves(b)
    c = cupy.asarray(b)
    assert moves() == NONE and b.device_dirty()
    assert c.dtype == np.dtype(name) and c.shape == (6, 9) and c.data.ptr == device_address(b)
    np.testing.assert_array_equal(bits_of(c.get()), bits_of(src))


@needs_gpu
@pytest.mark.parametrize("name", CUPY_DTYPES)
def test_a_cupy_array_is_wrapped_through_its_interface_and_read_back_once(gpu, cupy, name):
    src = random_bits((7, 5), name, seed=12)
    c = cupy.asarray(src)
    b = hb.cuda.wrap(c)
    assert b.dtype == name and b.shape == (7, 5) and b.device is gpu
    assert b.device_dirty() and device_address(b) == c.data.ptr
    moves = Moves(b)
    np.testing.assert_array_equal(bits_of(np.asarray(b)), bits_of(src))
    assert moves() == down(src.nbytes)
    np.asarray(b)
    assert moves() == NONE


@needs_gpu
@pytest.mark.parametrize("name", CUPY_DTYPES)
def test_cupy_dlpack_both_ways(gpu, cupy, name):
    b, src = filled((4, 10), name, seed=13)
    b.copy_to_device(gpu)
    moves = Moves(b)
    c = cupy.from_dlpack(b)
    assert moves() == NONE and c.dtype == np.dtype(name) and c.data.ptr == device_address(b)
    np.testing.assert_array_equal(bits_of(c.get()), bits_of(src))

    other = random_bits((3, 8), name, seed=14)
    c2 = cupy.asarray(other)
    back = hb.from_dlpack(c2)
    assert back.dtype == name and back.device is gpu and back.device_dirty()
    assert back.__dlpack_device__() == (2, 0) and device_address(back) == c2.data.ptr
    moves = Moves(back)
    np.testing.assert_array_equal(bits_of(np.asarray(back)), bits_of(other))
    assert moves() == down(other.nbytes)


@needs_gpu
def test_a_cupy_kernel_writes_the_buffer_and_one_download_brings_it_home(gpu, cupy):
    b = ramp((1024,))
    b.copy_to_device(gpu)
    moves = Moves(b)
    c = cupy.asarray(b)
    c *= 2  # a kernel on the legacy default stream, the buffer's stream
    assert b.device_dirty() and moves() == NONE
    np.testing.assert_array_equal(np.asarray(b), 2 * np.arange(1024, dtype=np.float32))
    assert moves() == down(4096)
    np.asarray(b)
    b.numpy()
    assert moves() == NONE


@needs_gpu
def test_exports_copy_lazily_upload_once_and_never_again(gpu, cupy):
    b = ramp((256,))
    moves = Moves(b)
    b.copy_to_device(gpu)
    assert moves() == up(1024)
    cupy.asarray(b)
    cupy.asarray(b)
    cupy.from_dlpack(b)
    assert moves() == NONE
    b.numpy(writable=True)[0] = -1  # a host write lease: the (leased) device copy comes home first
    assert moves() == down(1024) and b.host_dirty()
    c = cupy.asarray(b)  # uploads the newer host copy, once
    assert moves() == up(1024)
    c2 = cupy.from_dlpack(b)
    assert moves() == NONE and c2.data.ptr == c.data.ptr
    assert c.get()[0] == -1 and c.get()[1] == 1


@needs_gpu
def test_views_and_crops_of_a_device_buffer_share_its_memory(gpu, cupy):
    b = ramp((8, 16))
    ref = np.arange(128, dtype=np.float32).reshape(8, 16)
    b.copy_to_device(gpu)
    base = device_address(b)
    moves = Moves(b)
    v = cupy.asarray(b[2:6, 4:12])
    assert v.data.ptr == base + (2 * 16 + 4) * 4 and v.strides == (64, 4)
    np.testing.assert_array_equal(v.get(), ref[2:6, 4:12])
    crop = b.cropped(1, 4, 8)  # Halide coordinates: axis 1 from 4, extent 8
    assert crop.mins == (0, 4)
    c = cupy.from_dlpack(crop)
    assert c.data.ptr == base + 4 * 4 and c.shape == (8, 8)
    np.testing.assert_array_equal(c.get(), ref[:, 4:12])
    r = cupy.asarray(b[::-1, ::2])  # negative strides: the first element is the last row's
    assert r.data.ptr == base + 7 * 16 * 4 and r.strides == (-64, 8)
    np.testing.assert_array_equal(r.get(), ref[::-1, ::2])
    assert moves() == NONE
    v[...] = 0  # a write through one view is a write of the storage
    np.testing.assert_array_equal(np.asarray(b[0]), ref[0])
    assert moves() == down(512)  # the whole storage, once, for a read of one row
    ref[2:6, 4:12] = 0
    np.testing.assert_array_equal(np.asarray(b), ref)
    assert moves() == NONE


@needs_gpu
def test_device_free_brings_a_newer_device_copy_home_first(gpu, cupy):
    b = ramp((4, 64))
    b.copy_to_device(gpu)
    values = np.full((4, 64), 7.5, np.float32)
    c = cupy.asarray(b)
    c.set(values)  # a device write (a CuPy copy, no kernel)
    del c  # nothing may use the device memory once it is freed
    moves = Moves(b)
    b.device_free()
    assert moves() == down(1024) and not b.has_device_allocation() and b.device is None
    np.testing.assert_array_equal(np.asarray(b), values)
    assert moves() == NONE


@needs_gpu
def test_a_wrapped_object_stays_alive_as_long_as_the_buffer(gpu, cupy):
    src = random_bits((1 << 16,), "float32", seed=15)
    b = hb.cuda.wrap(cupy.asarray(src))  # the only reference to the CuPy array is the buffer's
    gc.collect()
    others = [cupy.asarray(np.full(1 << 16, i, np.float32)) for i in range(4)]  # would reuse freed memory
    np.testing.assert_array_equal(bits_of(np.asarray(b)), bits_of(src))
    assert all(float(o.get()[0]) == i for i, o in enumerate(others))


@needs_gpu
def test_device_wrap_native_adopts_device_memory_at_an_offset(gpu, cupy):
    c = cupy.asarray(np.arange(64, dtype=np.float32))
    b = hb.Buffer((16,), "float32")
    b.device_wrap_native(c.data.ptr, device=gpu, offset=8 * 4)  # the buffer starts at element 8
    assert b.device is gpu and b.device_dirty() and device_address(b) == c.data.ptr + 32
    moves = Moves(b)
    np.testing.assert_array_equal(np.asarray(b), np.arange(8, 24))
    assert moves() == down(64)
    b.numpy(writable=True)[:] = -1
    b.copy_to_device()
    assert moves() == up(64)
    got = c.get()
    assert (got[8:24] == -1).all() and (got[:8] == np.arange(8)).all() and (got[24:] == np.arange(24, 64)).all()
    b.device_detach_native()
    assert not b.has_device_allocation() and b.device is None
    np.testing.assert_array_equal(np.asarray(b), np.full(16, -1, np.float32))
    assert moves() == NONE  # the host was current: nothing to bring home

    small = cupy.cuda.Memory(4096)  # a plain allocation: the driver knows its size
    big = hb.Buffer((1 << 22,), "float32")
    with pytest.raises(ValueError, match=r"device_wrap_native\(\): the device memory holds \d+ bytes, the buffer "
                                         r"needs 16777216 from offset 0; wrap a larger allocation"):
        big.device_wrap_native(small.ptr, device=gpu)
    assert not big.has_device_allocation() and big.host_dirty()


@needs_gpu
def test_a_device_on_a_cupy_stream_copies_on_it(gpu, cupy):
    stream = cupy.cuda.Stream(non_blocking=True)
    dev = hb.cuda.device(stream=stream)
    assert dev is not gpu and dev.stream == stream.ptr and dev.context == gpu.context
    b = ramp((1000,))
    b.copy_to_device(dev)
    assert b.device is dev and b.__cuda_array_interface__["stream"] == stream.ptr
    with stream:
        c = cupy.asarray(b)
        c *= 3
    np.testing.assert_array_equal(np.asarray(b), 3 * np.arange(1000, dtype=np.float32))
    # Another stream of the same GPU takes the memory over as it is: no copy, no free.
    address, moves = device_address(b), Moves(b)
    b.copy_to_device(gpu)
    assert b.device is gpu and device_address(b) == address and moves() == NONE
    assert b.__cuda_array_interface__["stream"] == 1


@needs_gpu
def test_memory_a_consumer_holds_outlives_device_free(gpu, cupy):
    """CUDA memory has no reference count: once lent, it is freed with the storage, not before."""
    b = ramp((1 << 16,))
    b.copy_to_device(gpu)
    c = cupy.asarray(b)  # holds the buffer, not the allocation
    b.device_free()
    others = [cupy.full(1 << 16, i, cupy.float32) for i in range(4)]  # would reuse freed memory
    np.testing.assert_array_equal(c.get(), np.arange(1 << 16, dtype=np.float32))
    assert all(float(o.get()[0]) == i for i, o in enumerate(others))
    before = live_counts()["device_allocations"]
    del c, b
    gc.collect()
    assert live_counts()["device_allocations"] == before - 1  # freed with the storage


@needs_gpu
def test_dlpack_arguments_of_a_device_buffer(gpu):
    b = ramp((4,))
    b.copy_to_device(gpu)
    with pytest.raises(BufferError, match=r"__dlpack__\(\): stream=0 is ambiguous and disallowed by DLPack"):
        b.__dlpack__(stream=0)
    with pytest.raises(BufferError, match=r"__dlpack__\(\): stream -2 is no stream"):
        b.__dlpack__(stream=-2)
    with pytest.raises(TypeError, match=r"__dlpack__\(\): stream must be an int or None, not '1'"):
        b.__dlpack__(stream="1")
    with pytest.raises(BufferError, match=r"__dlpack__\(\): copy=True of data on a CUDA device is not supported"):
        b.__dlpack__(copy=True)
    with pytest.raises(BufferError, match=r"__dlpack__\(\): dl_device \(2, 1\) is not where the data is \(2, 0\)"):
        b.__dlpack__(dl_device=(2, 1))
    for stream in (None, -1, 1, 2):
        b.__dlpack__(stream=stream, max_version=(1, 0), dl_device=(2, 0))
    # The host copy on request: a download first, then a host lease like any CPU export.
    b.set_device_dirty()
    moves = Moves(b)
    host = hb.from_dlpack(b.__dlpack__(dl_device=(1, 0), max_version=(1, 0)))
    assert moves() == down(16) and b.host_dirty() and host.__dlpack_device__() == (1, 0)
    np.testing.assert_array_equal(np.asarray(host), np.arange(4))
    copied = hb.from_dlpack(b.__dlpack__(dl_device=(1, 0), copy=True, max_version=(1, 0)))
    np.testing.assert_array_equal(np.asarray(copied), np.arange(4))


@needs_gpu
def test_a_copy_of_a_cupy_array_is_independent_of_it(gpu, cupy):
    src = np.arange(32, dtype=np.int32)
    c = cupy.asarray(src)
    b = hb.from_dlpack(c, copy=True)
    c.set(np.zeros(32, np.int32))
    np.testing.assert_array_equal(np.asarray(b), src)


# ---------------------------------------------------------------------------------------------
# On a GPU: device out of memory
# ---------------------------------------------------------------------------------------------


@needs_gpu
def test_an_allocation_larger_than_the_gpu_is_a_device_error_and_changes_nothing(gpu):
    # Rows of 1 MiB: a GPU's memory is far more elements than one Halide axis (int32) can hold.
    shape = (gpu.global_memory_size // (1 << 20) + 1, 1 << 20)
    try:
        b = hb.Buffer(shape, "uint8")  # zero pages from the kernel: only touched pages cost memory
    except MemoryError:
        pytest.skip(f"the host cannot reserve {shape[0]} MiB for the buffer's host copy (overcommit limits)")
    b.numpy(writable=True)[0, :8] = np.arange(1, 9)
    moves = Moves(b)
    for call in (lambda: b.device_malloc(gpu), lambda: b.copy_to_device(gpu)):
        with pytest.raises(hb.DeviceError, match=r"allocating device memory failed with CUDA_ERROR_OUT_OF_MEMORY "
                                                 r"\(2\)") as info:
            call()
        assert info.value.name == "CUDA_ERROR_OUT_OF_MEMORY" and info.value.code == 2
    assert moves() == NONE and not b.has_device_allocation() and b.host_dirty() and b.device is None
    assert np.asarray(b[0, :8]).tolist() == list(range(1, 9))
    del b
    small = ramp((8,))
    small.copy_to_device(gpu)  # the device is still usable
    small.set_device_dirty()
    np.testing.assert_array_equal(np.asarray(small), np.arange(8))


@needs_gpu
def test_out_of_device_memory_keeps_the_host_copy_and_a_later_upload_works(gpu, cupy):
    mib = 1 << 20
    free, _ = cupy.cuda.runtime.memGetInfo()
    hog, size = None, free - 64 * mib
    while hog is None and size > 0:  # take nearly all of it, whatever fragmentation allows
        try:
            hog = cupy.cuda.Memory(size)
        except Exception:  # noqa: BLE001 - CuPy's CUDARuntimeError (cudaErrorMemoryAllocation)
            size -= 256 * mib
    if hog is None:
        pytest.skip(f"could not take the GPU's free memory ({free} bytes) to make room scarce")
    try:
        left, _ = cupy.cuda.runtime.memGetInfo()
        rows = (left + 64 * mib) // mib  # rows of 1 MiB: more elements than one int32 axis holds
        n = rows * mib // 4
        victim = hb.Buffer((rows, mib // 4), "float32")
        victim.numpy(writable=True)[...] = np.arange(n, dtype=np.float32).reshape(rows, mib // 4)
        moves = Moves(victim)
        with pytest.raises(hb.DeviceError, match=r"copy_to_device\(\): allocating device memory failed with "
                                                 r"CUDA_ERROR_OUT_OF_MEMORY") as info:
            victim.copy_to_device(gpu)
        assert info.value.name == "CUDA_ERROR_OUT_OF_MEMORY"
        assert moves() == NONE and victim.host_dirty() and not victim.has_device_allocation()
    finally:
        del hog
    victim.copy_to_device(gpu)
    assert moves() == up(4 * n)
    victim.set_device_dirty()  # read back what the device holds
    np.testing.assert_array_equal(np.asarray(victim).reshape(-1), np.arange(n, dtype=np.float32))
    assert moves() == down(4 * n)


# ---------------------------------------------------------------------------------------------
# On a GPU: PyTorch
# ---------------------------------------------------------------------------------------------


@needs_gpu
@pytest.mark.needs_torch
@pytest.mark.parametrize("name", TORCH_DTYPES)
def test_torch_dlpack_both_ways_exactly(gpu, torch, name):
    dtype = torch_dtype(torch, name)
    b, src = filled((5, 6), name, seed=21)
    b.copy_to_device(gpu)
    moves = Moves(b)
    t = torch.from_dlpack(b)
    assert moves() == NONE and b.device_dirty()
    assert t.dtype == dtype and t.device.type == "cuda" and t.device.index == 0
    assert t.data_ptr() == device_address(b)
    np.testing.assert_array_equal(torch_bits(torch, t), bits_of(src))

    other = random_bits((4, 3), name, seed=22)
    t2 = torch_from_bits(torch, other, name)
    for producer in (t2, CapsuleOnly(t2)):  # PyTorch's exchange API (where it has one), then capsules
        back = hb.from_dlpack(producer)
        assert back.dtype == name and back.device is gpu and back.device_dirty()
        assert device_address(back) == t2.data_ptr()
        moves = Moves(back)
        np.testing.assert_array_equal(bits_of(np.asarray(back)), bits_of(other))
        assert moves() == down(other.nbytes)


@needs_gpu
@pytest.mark.needs_torch
def test_torch_views_carry_strides_and_offsets(gpu, torch):
    b = ramp((8, 16))
    ref = np.arange(128, dtype=np.float32).reshape(8, 16)
    b.copy_to_device(gpu)
    t = torch.from_dlpack(b[2:6, 1::2])
    assert t.shape == (4, 8) and t.stride() == (16, 2)
    assert t.data_ptr() == device_address(b) + (2 * 16 + 1) * 4
    np.testing.assert_array_equal(t.cpu().numpy(), ref[2:6, 1::2])
    w = hb.cuda.wrap(torch.arange(12, dtype=torch.float32, device="cuda").reshape(3, 4).t())  # the interface
    assert w.shape == (4, 3) and w.strides == (4, 16)
    np.testing.assert_array_equal(np.asarray(w), np.arange(12, dtype=np.float32).reshape(3, 4).T)


@needs_gpu
@pytest.mark.needs_torch
def test_copies_run_on_the_devices_stream_after_the_work_queued_there(torch):
    ours = torch.cuda.Stream()
    dev = hb.cuda.device(stream=ours)
    assert dev.stream == ours.cuda_stream
    b = hb.Buffer((1 << 22,), "float32")
    b.copy_to_device(dev)
    with torch.cuda.stream(ours):
        t = torch.from_dlpack(b)  # our own stream: nothing to order
        torch.cuda._sleep(SLEEP_CYCLES)
        t.fill_(4.0)  # runs after the sleep
    host = np.asarray(b)  # the download is queued on `ours`, behind the fill
    assert (host == 4).all()


@needs_gpu
@pytest.mark.needs_torch
def test_a_consumer_on_another_stream_waits_for_our_streams_work(torch):
    ours = torch.cuda.Stream()
    dev = hb.cuda.device(stream=ours)
    b = hb.Buffer((1 << 22,), "float32")
    b.copy_to_device(dev)
    with torch.cuda.stream(ours):
        t = torch.from_dlpack(b)
        torch.cuda._sleep(SLEEP_CYCLES)
        t.fill_(3.0)
    theirs = torch.cuda.Stream()
    with torch.cuda.stream(theirs):
        seen = torch.from_dlpack(b).clone()  # __dlpack__(stream=theirs): theirs waits for ours first
    theirs.synchronize()
    assert bool((seen == 3).all())


@needs_gpu
@pytest.mark.needs_torch
@pytest.mark.parametrize("route", ["exchange API", "capsule", "interface (CuPy, v3)"])
def test_an_import_waits_for_the_producers_stream(gpu, torch, route):
    t = torch.zeros(1 << 22, device="cuda")
    torch.cuda.synchronize()
    producer = torch.cuda.Stream()
    if route == "exchange API" and not hasattr(type(t), "__dlpack_c_exchange_api__"):
        pytest.skip(f"PyTorch {torch.__version__} has no DLPack C exchange API")
    with torch.cuda.stream(producer):
        torch.cuda._sleep(SLEEP_CYCLES)
        t.fill_(5.0)  # still queued when the import returns
        if route == "exchange API":
            b = hb.from_dlpack(t)
        elif route == "capsule":
            b = hb.from_dlpack(CapsuleOnly(t))
        else:
            cp = need("cupy")
            with cp.cuda.ExternalStream(producer.cuda_stream):
                b = hb.cuda.wrap(cp.asarray(t))  # CuPy's interface names the producer's stream
    host = np.asarray(b)  # our download, on the legacy stream, must come after the fill
    assert (host == 5).all()
    torch.cuda.synchronize()


# ---------------------------------------------------------------------------------------------
# On a GPU: JAX
# ---------------------------------------------------------------------------------------------


@needs_gpu
@pytest.mark.needs_jax
@pytest.mark.parametrize("name", JAX_DTYPES)
def test_jax_dlpack_both_ways_exactly(gpu, jax, name):
    import jax.numpy as jnp

    if name.startswith("float8_") and getattr(jnp, name, None) is None:  # the newer formats came later
        pytest.skip(f"JAX {jax.__version__} has no jnp.{name}")
    b, src = filled((6, 4), name, seed=31)
    b.copy_to_device(gpu)
    moves = Moves(b)
    j = jnp.from_dlpack(b)
    assert moves() == NONE
    assert j.dtype == src.dtype and next(iter(j.devices())).platform == "gpu"
    np.testing.assert_array_equal(bits_of(np.asarray(j)), bits_of(src))

    other = random_bits((3, 5), name, seed=32)
    j2 = jax.device_put(other, jax.devices("gpu")[0]).block_until_ready()
    back = hb.from_dlpack(j2)
    assert back.dtype == name and back.device is gpu and back.device_dirty()
    moves = Moves(back)
    np.testing.assert_array_equal(bits_of(np.asarray(back)), bits_of(other))
    assert moves() == down(other.nbytes)


# ---------------------------------------------------------------------------------------------
# On a GPU: a Halide CUDA pipeline built ahead of time (tests/gpu/prepare.py)
# ---------------------------------------------------------------------------------------------

ARTIFACTS = os.environ.get("HALIDE_BUFFER_GPU_ARTIFACTS")

FORMULAS = {
    "add10_u8": lambda a: a + np.uint8(10),  # wraps modulo 256, as the pipeline's uint8 sum
    "scale2_plus1_f32": lambda a: a * np.float32(2) + np.float32(1),  # exact either way: * 2 is
}


def artifacts_missing():
    """Why there is no prebuilt CUDA pipeline, or None."""
    if not ARTIFACTS:
        return ("HALIDE_BUFFER_GPU_ARTIFACTS is not set: no prebuilt CUDA pipeline (build them with "
                "python tests/gpu/prepare.py DIR on a machine with the halide wheel)")
    if not (Path(ARTIFACTS) / "manifest.json").is_file():
        return f"HALIDE_BUFFER_GPU_ARTIFACTS={ARTIFACTS} holds no manifest.json (run tests/gpu/prepare.py)"
    return None


def manifest_entries():
    return json.loads((Path(ARTIFACTS) / "manifest.json").read_text())["pipelines"]


def prebuilt():
    """One parameter per library of the manifest, or one that skips saying what is missing."""
    why = artifacts_missing()
    if why:
        return [pytest.param(None, id="no-artifacts", marks=pytest.mark.skip(reason=why))]
    return [pytest.param(e, id=e["library"]) for e in manifest_entries()]


def pipeline_input(entry, seed=41):
    rng = np.random.default_rng(seed)
    shape, dtype = tuple(entry["shape"]), entry["input_dtype"]
    if dtype == "uint8":
        return rng.integers(0, 256, shape, dtype=np.uint8)
    return rng.standard_normal(shape).astype(dtype)


def load(entry):
    p = hb.aot.load(Path(ARTIFACTS) / entry["library"], entry["function"])
    assert "cuda" in p.target.split("-") and [a["name"] for a in p.arguments][0] == entry["arguments"][0]
    return p


@pytest.mark.skipif(hb.cuda.is_available(), reason="a CUDA driver is installed: the pipeline would run")
@pytest.mark.parametrize("entry", prebuilt())
def test_without_a_driver_a_cuda_pipeline_loads_and_its_call_raises_cleanly(entry):
    p = load(entry)
    src = pipeline_input(entry)
    inp = hb.Buffer.from_host(src.copy())
    with pytest.raises((hb.DeviceError, hb.PipelineError), match="no CUDA driver"):
        p(inp, hb.Buffer(src.shape, entry["output_dtype"]))
    np.testing.assert_array_equal(np.asarray(inp), src)
    assert not inp.has_device_allocation() and inp.transfers.to_device == 0


@needs_gpu
@pytest.mark.parametrize("entry", prebuilt())
def test_a_cuda_pipeline_leaves_its_output_on_the_gpu_for_cupy(gpu, cupy, entry):
    p = load(entry)
    src = pipeline_input(entry)
    expected = FORMULAS[entry["formula"]](src)
    inp = hb.Buffer(src.shape, entry["input_dtype"])
    inp.numpy(writable=True)[...] = src
    out = hb.Buffer(src.shape, entry["output_dtype"])
    moves = process_moves()
    out = p(inp, out)
    assert moves() == up(src.nbytes)  # the input went up once; the output was only allocated
    assert out.device_dirty() and out.device is gpu and inp.device is gpu
    c = cupy.asarray(out)  # the pipeline's output, in place
    assert moves() == NONE and c.data.ptr == device_address(out)
    np.testing.assert_array_equal(c.get(), expected)

    again = p(out, hb.Buffer(src.shape, entry["output_dtype"]))  # device-resident input: nothing moves
    assert moves() == NONE
    np.testing.assert_array_equal(cupy.asarray(again).get(), FORMULAS[entry["formula"]](expected))
    np.testing.assert_array_equal(np.asarray(out), expected)
    assert moves() == down(src.nbytes)  # one read on the host, one download


@needs_gpu
@pytest.mark.parametrize("entry", prebuilt())
def test_a_cuda_pipeline_between_cupy_arrays_moves_nothing_through_the_host(gpu, cupy, entry):
    p = load(entry)
    src = pipeline_input(entry, seed=42)
    c_in = cupy.asarray(src)
    moves = process_moves()
    inp = hb.cuda.wrap(c_in)
    out = p(inp)  # the output is allocated from the bounds query, on the device
    c_out = cupy.asarray(out)
    assert moves() == NONE
    assert out.device is gpu and out.device_dirty() and c_out.shape == src.shape
    np.testing.assert_array_equal(c_out.get(), FORMULAS[entry["formula"]](src))
    assert moves() == NONE


@needs_gpu
def test_detaching_a_dlpack_import_hands_back_the_producer(gpu, cupy):
    c = cupy.arange(8, dtype=cupy.float32)
    b = hb.from_dlpack(c)
    assert b.device is gpu and b.device_dirty()
    np.testing.assert_array_equal(np.asarray(b), np.arange(8, dtype=np.float32))
    assert b.device_detach_native() is c
    assert not b.has_device_allocation()


class Wrapped:
    """Hands out a CUDA array's interfaces (not its own memory), and can carry attributes."""

    def __init__(self, values):
        self.values = values

    @property
    def __cuda_array_interface__(self):
        return self.values.__cuda_array_interface__

    def __dlpack__(self, **kwargs):
        return self.values.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.values.__dlpack_device__()


@needs_gpu
@pytest.mark.parametrize("route", ["cuda.wrap", "from_dlpack"])
def test_an_object_storing_the_buffer_over_its_cuda_memory_is_collected(gpu, cupy, route):
    """The buffer keeps the wrapped object alive from C++ and shows it to the garbage collector,
    so a cycle through it is collected (tests/test_gc.py has the host's)."""
    make = hb.cuda.wrap if route == "cuda.wrap" else hb.from_dlpack
    gc.collect()
    before = live_counts()["storages"]
    objects = []
    for i in range(50):
        w = Wrapped(cupy.full(16, i, cupy.float32))
        w.hb = make(w)
        objects.append(weakref.ref(w))
    np.testing.assert_array_equal(np.asarray(w.hb), np.full(16, 49, np.float32))
    del w
    gc.collect()
    assert all(r() is None for r in objects)
    assert live_counts()["storages"] == before


@needs_gpu
def test_a_stream_storing_the_device_made_with_it_is_collected(torch):
    """A device keeps its stream object alive and shows it to the garbage collector while nothing
    else uses the device."""
    streams = []
    for _ in range(20):
        s = torch.cuda.Stream()
        s.device_of_ours = hb.cuda.device(stream=s)
        streams.append(weakref.ref(s))
    del s
    gc.collect()
    assert all(r() is None for r in streams)


@needs_gpu
def test_a_consumer_of_wrapped_memory_keeps_it_after_device_free(gpu, cupy):
    """The wrapped array's owner is kept with the storage once a consumer was handed its memory."""
    n = 1 << 16
    c = cupy.arange(n, dtype=cupy.float32)
    w = hb.cuda.wrap(c)
    t = cupy.asarray(w)  # a consumer of the same memory, holding only the buffer
    w.device_free()
    del c
    gc.collect()
    others = [cupy.full(n, i, cupy.float32) for i in range(4)]  # would reuse freed memory
    np.testing.assert_array_equal(t.get(), np.arange(n, dtype=np.float32))
    assert all(float(o.get()[0]) == i for i, o in enumerate(others))


# ---------------------------------------------------------------------------------------------
# On a GPU: a pipeline runtime's own allocation, later, on the device of the call that made it
# ---------------------------------------------------------------------------------------------

ACQUIRE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_bool)
GET_STREAM = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p))


@contextlib.contextmanager
def runtime_answers(library):
    """Records what the handlers hb.aot.load installed in a pipeline library's Halide CUDA
    runtime answer the runtime itself: ("context", CUcontext) and ("stream", CUstream) pairs,
    appended to the list yielded, in order. halide_set_cuda_* hand back the handler they
    replace, which each recorder calls; the handlers are put back on leaving."""
    lib = ctypes.CDLL(str(library))  # the handle hb.aot.load opened
    set_acquire, set_stream = lib.halide_set_cuda_acquire_context, lib.halide_set_cuda_get_stream
    set_acquire.argtypes, set_acquire.restype = [ACQUIRE], ACQUIRE
    set_stream.argtypes, set_stream.restype = [GET_STREAM], GET_STREAM
    seen, installed = [], {}

    def acquire(user_context, context, create):
        rc = installed["acquire"](user_context, context, create)
        seen.append(("context", context[0]))
        return rc

    def stream(user_context, context, out):
        rc = installed["stream"](user_context, context, out)
        seen.append(("stream", out[0]))
        return rc

    recorders = ACQUIRE(acquire), GET_STREAM(stream)  # alive while installed
    installed["acquire"] = set_acquire(recorders[0])
    installed["stream"] = set_stream(recorders[1])
    try:
        yield seen
    finally:
        set_acquire(installed["acquire"])
        set_stream(installed["stream"])


@needs_gpu
@pytest.mark.parametrize("where", ["another stream", "another GPU"])
def test_a_runtimes_allocation_for_a_crop_comes_home_on_the_device_of_its_call(gpu, cupy, where):
    """A part of a storage is left to the pipeline's runtime, which allocates for it; that memory
    is copied home and freed at the storage's next operation, outside any call, through the same
    runtime's hooks. They must give it the context and stream of the call that made it, not those
    of the last call (here on the default device)."""
    if where == "another GPU":
        if cupy.cuda.runtime.getDeviceCount() < 2:
            pytest.skip("this machine has one GPU: the device of another GPU needs two")
        dev = hb.cuda.device(1)
    else:
        stream = cupy.cuda.Stream(non_blocking=True)  # not ordered with the legacy default stream
        dev = hb.cuda.device(stream=stream)
    why = artifacts_missing()
    if why:
        pytest.skip(why)
    entry = next(e for e in manifest_entries() if not e["linked_with_glue"])  # the glue has hooks of its own
    p = load(entry)
    src = pipeline_input(entry, seed=43)
    rows, cols = src.shape
    inp = hb.Buffer(src.shape, entry["input_dtype"])
    inp.numpy(writable=True)[...] = src
    inp.copy_to_device(dev)
    big = hb.Buffer((rows, cols + 8), entry["output_dtype"])
    p(inp, big[:, :cols])  # the call runs on dev, the device of its first argument
    # The next call, on the default device, is the last one when the crop's memory comes home.
    p(ramp(src.shape, entry["input_dtype"]), hb.Buffer(src.shape, entry["output_dtype"]))
    with runtime_answers(Path(ARTIFACTS) / entry["library"]) as seen:
        got = np.asarray(big)  # the storage's next operation: the runtime's copy and free
    assert ("context", dev.context) in seen and ("stream", dev.stream) in seen  # the copy asks for both
    assert set(seen) == {("context", dev.context), ("stream", dev.stream)}
    np.testing.assert_array_equal(got[:, :cols], FORMULAS[entry["formula"]](src))
    assert not got[:, cols:].any()
