"""halide_buffer/include/halide_buffer_cuda.c: the glue that makes a Halide CUDA pipeline use the
device's primary context and the legacy default stream.

One real pipeline (in + 10 in 8x8 GPU tiles, tests/pipelines.py's brighter_func) is compiled for an
explicit ``-cuda`` target (Halide compiles CUDA code without a GPU) and linked with the glue.
Without a CUDA driver the glue's hooks must fail cleanly: a Halide error code and message, an
``hb.PipelineError``, no abort. What the hooks do with a driver (the primary context of the
chosen ordinal, retained once, pushed by Halide's runtime itself) is checked on a machine with a
real driver only, by the last test, which runs the pipeline on the GPU.
"""

import ctypes
import os
import subprocess
import sys

import halide as hl  # required test dependency: the test fails, not skips, without it
import numpy as np
import pytest

import halide_buffer as hb

from common import raw_buffer
from pipelines import ERROR_HANDLER, TARGET, brighter_func, c_compiler, find_compiler, output_bounds_follow

pytestmark = pytest.mark.needs_halide

CUDA_TARGET = TARGET + "-cuda"
NAME = "hb_cuda_glue_brighter"
SYMBOL_NOT_FOUND = -21  # halide_error_code_symbol_not_found: no driver library
GPU_DEVICE_ERROR = -29  # halide_error_code_gpu_device_error: a driver call failed


def include_dir():
    get_include = getattr(hb, "get_include", None)
    path = os.path.join(os.path.dirname(hb.__file__), "include")
    if get_include is not None:
        assert os.path.samefile(get_include(), path)
    return path


GLUE = os.path.join(include_dir(), "halide_buffer_cuda.c")
HALIDE_INCLUDE = os.path.join(os.path.dirname(hl.__file__), "include")


def run(command):
    done = subprocess.run([str(c) for c in command], capture_output=True, text=True)
    assert done.returncode == 0, f"{command} failed:\n{done.stdout}{done.stderr}"
    return done


def driver_present():
    """Whether a real CUDA driver can be opened (a GPU machine)."""
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


no_driver = pytest.mark.skipif(driver_present() or hb.cuda.is_available(),
                               reason="a CUDA driver (or the test suite's driver stand-in) is loaded: the no-driver "
                                      "paths can't run in this process (test_cuda.py runs them in one without)")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The pipeline for the -cuda target: its object file, and lib<NAME>.so with the glue."""
    directory = tmp_path_factory.mktemp("cuda_glue")
    func, args = brighter_func()
    output_bounds_follow(func, args[0])
    obj = directory / f"{NAME}.o"
    func.compile_to_object(str(obj), args, NAME, hl.Target(CUDA_TARGET))
    lib = directory / f"lib{NAME}.so"
    run([c_compiler(), "-shared", "-fPIC", "-o", lib, obj, GLUE, "-lpthread", "-ldl", "-lm"])
    return {"object": obj, "library": lib, "directory": directory}


@pytest.fixture(scope="module")
def pipeline(built):
    return hb.aot.load(built["library"], NAME)


def defined(path, dynamic=True):
    """{name: nm type letter} of the symbols a shared library exports (or an object defines)."""
    nm = find_compiler(("nm",), "list the symbols")
    out = run([nm, *(["-D"] if dynamic else []), "--defined-only", path]).stdout
    return {line.split()[2]: line.split()[1] for line in out.splitlines() if len(line.split()) == 3}


HOOKS = ("halide_cuda_acquire_context", "halide_cuda_release_context", "halide_cuda_get_stream")


def test_the_glue_compiles_warning_free_as_c_and_cxx_and_matches_halides_header(tmp_path):
    cc = c_compiler()
    strict = ["-Wall", "-Wextra", "-Werror", "-pedantic", "-Wmissing-prototypes", "-Wstrict-prototypes"]
    run([cc, "-std=c99", *strict, "-fPIC", "-c", GLUE, "-o", tmp_path / "c99.o"])
    # With Halide's header: its declarations must agree with the glue's, its error codes too.
    run([cc, "-std=c99", "-Wall", "-Wextra", "-Werror", "-DHALIDE_BUFFER_CUDA_CHECK_HEADERS",
         "-I", HALIDE_INCLUDE, "-c", GLUE, "-o", tmp_path / "checked.o"])
    cxx = find_compiler(("g++", "c++", "clang++"), "compile the glue as C++")
    run([cxx, "-x", "c++", "-std=c++11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-c", GLUE,
         "-o", tmp_path / "cxx.o"])
    for obj in ("c99.o", "cxx.o"):  # C linkage either way: the names Halide's runtime calls
        symbols = defined(tmp_path / obj, dynamic=False)
        assert all(symbols.get(h) == "T" for h in HOOKS), symbols


def test_the_library_exports_the_glues_strong_hooks_over_the_runtimes_weak_ones(built, tmp_path):
    # Without the glue the runtime's own hooks are weak ("W"); with it they are strong ("T").
    bare = tmp_path / "libbare.so"
    run([c_compiler(), "-shared", "-o", bare, built["object"], "-lpthread", "-ldl", "-lm"])
    assert {h: defined(bare).get(h) for h in HOOKS} == dict.fromkeys(HOOKS, "W")
    assert {h: defined(built["library"]).get(h) for h in HOOKS} == dict.fromkeys(HOOKS, "T")


def test_the_pipeline_loads_and_is_a_cuda_pipeline(pipeline):
    assert "cuda" in pipeline.target.split("-") and pipeline.device_api == "cuda"
    assert [a["name"] for a in pipeline.arguments][0] == "inp"


def hooks(library_path):
    """ctypes views of the glue's hooks in an already loaded library (same handle as hb.aot's)."""
    lib = ctypes.CDLL(str(library_path))
    acquire = lib.halide_cuda_acquire_context
    acquire.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_bool]
    acquire.restype = ctypes.c_int
    release = lib.halide_cuda_release_context
    release.argtypes, release.restype = [ctypes.c_void_p], ctypes.c_int
    stream = lib.halide_cuda_get_stream
    stream.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
    stream.restype = ctypes.c_int
    return lib, acquire, release, stream


@no_driver
def test_without_a_driver_acquiring_a_context_is_a_halide_error_not_a_crash(pipeline, built):
    lib, acquire, release, get_stream = hooks(built["library"])
    messages = []
    handler = ERROR_HANDLER(lambda uc, m: messages.append(m.decode()))
    set_handler = lib.halide_set_error_handler
    set_handler.argtypes, set_handler.restype = [ctypes.c_void_p], ctypes.c_void_p
    previous = set_handler(ctypes.cast(handler, ctypes.c_void_p))  # hb.aot's handler
    try:
        ctx = ctypes.c_void_p(12345)
        assert acquire(None, ctypes.byref(ctx), True) == SYMBOL_NOT_FOUND
        assert ctx.value is None
        assert len(messages) == 1
        assert messages[0].startswith("halide_buffer_cuda.c: no CUDA driver: cannot load libcuda.so.1")
        # Asked not to create one (halide_device_release does): nothing to release, no error.
        ctx = ctypes.c_void_p(12345)
        assert acquire(None, ctypes.byref(ctx), False) == 0 and ctx.value is None
        assert release(None) == 0
        stream = ctypes.c_void_p(12345)
        assert get_stream(None, None, ctypes.byref(stream)) == 0 and stream.value is None  # stream 0
        assert len(messages) == 1
    finally:
        set_handler(previous)


@no_driver
def test_without_a_driver_the_pipeline_raises_and_leaves_its_input_alone(pipeline):
    src = np.random.default_rng(5).integers(0, 256, (16, 24), dtype=np.uint8)
    keep = src.copy()
    inp = hb.Buffer.from_host(src)
    flags = (inp.host_dirty(), inp.device_dirty(), inp.has_device_allocation())
    for _ in range(2):  # the failure is not cached into something worse
        # hb.aot places a CUDA pipeline's arguments on the default CUDA device first: no driver,
        # no device, and the pipeline never runs.
        with pytest.raises(hb.DeviceError, match=r"^cuda.device\(\): no CUDA driver found") as info:
            pipeline(inp, hb.Buffer((16, 24), "uint8"))
        assert info.value.name == "CUDA_ERROR_NO_DRIVER"
    np.testing.assert_array_equal(np.asarray(inp), keep)
    np.testing.assert_array_equal(src, keep)
    assert (inp.host_dirty(), inp.device_dirty(), inp.has_device_allocation()) == flags == (True, False, False)


HANDLERS_ANSWER = """
import ctypes, sys
import halide_buffer as hb
hb.aot.load(sys.argv[1], sys.argv[2])  # installs hb.aot's handlers in the library's runtime
lib = ctypes.CDLL(sys.argv[1])
acquire, get_stream = lib.halide_cuda_acquire_context, lib.halide_cuda_get_stream
acquire.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_bool]
get_stream.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
for create in (True, False):
    ctx = ctypes.c_void_p(12345)
    print(acquire(None, ctypes.byref(ctx), create), ctx.value)
stream = ctypes.c_void_p(12345)
print(get_stream(None, None, ctypes.byref(stream)), stream.value)
"""


def test_hb_aots_handlers_give_a_runtime_acting_outside_any_call_no_device_before_the_first(built, tmp_path):
    """A pipeline's Halide CUDA runtime (a library without the glue) asks hb.aot's handlers for a
    context and a stream, through its own halide_cuda_acquire_context / _get_stream: inside a
    call, the call's device; for memory it allocated, later, the device of the call that made it
    (the GPU half of tests/test_cuda.py checks both). With no device at all (a fresh process, no
    driver), asking to create a context is Halide's GPU device error, not Halide's own handler
    (which would open the driver itself, and abort the process without one)."""
    bare = tmp_path / f"lib{NAME}_bare.so"
    run([c_compiler(), "-shared", "-o", bare, built["object"], "-lpthread", "-ldl", "-lm"])
    env = dict(os.environ, HALIDE_BUFFER_CUDA_LIBRARY="/nonexistent/libcuda.so.1")
    done = subprocess.run([sys.executable, "-c", HANDLERS_ANSWER, str(bare), NAME], capture_output=True,
                          text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"{GPU_DEVICE_ERROR} None", "0 None", "0 None"]


# ---------------------------------------------------------------------------------------------
# A real driver (only on a machine with an NVIDIA GPU)
# ---------------------------------------------------------------------------------------------


@pytest.mark.skipif(not driver_present(), reason="no CUDA driver (libcuda.so.1) on this machine")
def test_on_a_gpu_the_pipeline_runs_in_the_primary_context(pipeline, built):
    cuda = ctypes.CDLL("libcuda.so.1")
    assert cuda.cuInit(0) == 0
    device, primary = ctypes.c_int(), ctypes.c_void_p()
    assert cuda.cuDeviceGet(ctypes.byref(device), 0) == 0
    assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(primary), device) == 0
    try:
        _, acquire, _, _ = hooks(built["library"])
        ctx = ctypes.c_void_p()
        assert acquire(None, ctypes.byref(ctx), True) == 0
        assert ctx.value == primary.value
        src = np.random.default_rng(6).integers(0, 256, (16, 24), dtype=np.uint8)
        out = pipeline(hb.Buffer.from_host(src), hb.Buffer((16, 24), "uint8"))
        assert out.device_dirty()
        # The output's device memory belongs to the primary context: zero-copy for the frameworks.
        dev_ptr = raw_buffer(out).device
        owner = ctypes.c_void_p()
        CU_POINTER_ATTRIBUTE_CONTEXT = 1
        assert cuda.cuPointerGetAttribute(ctypes.byref(owner), CU_POINTER_ATTRIBUTE_CONTEXT,
                                          ctypes.c_uint64(dev_ptr)) == 0
        assert owner.value == primary.value
        np.testing.assert_array_equal(np.asarray(out), (src + np.uint8(10)).astype(np.uint8))
    finally:
        getattr(cuda, "cuDevicePrimaryCtxRelease_v2", cuda.cuDevicePrimaryCtxRelease)(device)
