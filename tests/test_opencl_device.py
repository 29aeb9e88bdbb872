"""OpenCL devices on the real runtime the project installs (PoCL on a CPU-only machine)."""

import gc
import importlib.util
import os
import re
import subprocess
import sys

import pyopencl as cl
import pytest

import halide_buffer as hb
import opencl_interposer

FIND_SPEC = importlib.util.find_spec


def pyopencl_default():
    """What the default must be: the first GPU of any platform, else the first device."""
    platforms = cl.get_platforms()
    for kind in (cl.device_type.GPU, cl.device_type.ALL):
        for p in platforms:
            try:
                found = p.get_devices(device_type=kind)
            except cl.Error:
                found = []
            if found:
                return found[0]
    raise AssertionError("pyopencl sees no OpenCL device")


def test_default_device_is_the_first_gpu_else_the_first_device():
    d = hb.opencl.device()
    expected = pyopencl_default()
    assert d.kind == "opencl"
    assert d.name == expected.name and d.platform == expected.platform.name
    assert d.is_gpu == bool(expected.type & cl.device_type.GPU)
    assert d.max_allocation_size == expected.max_mem_alloc_size
    assert d.global_memory_size == expected.global_mem_size
    assert repr(d) == f"Device(opencl: {d.name} on {d.platform})"


def test_default_device_is_one_object():
    assert hb.opencl.device() is hb.opencl.device()


def test_the_loader_is_pyopencls_so_handles_are_shared():
    hb.opencl.device()
    assert hb.opencl.loaded_library() == hb.opencl.library_candidates()[0]
    # Under the suite's OpenCL interposer, the loader chosen is the one it forwards to.
    loader = opencl_interposer.loader() if opencl_interposer.active() else hb.opencl.loaded_library()
    assert "libOpenCL" in loader
    ctx = cl.Context.from_int_ptr(hb.opencl.device().context)
    assert ctx.devices[0].name == hb.opencl.device().name


def test_without_pyopencl_the_loader_is_the_systems(monkeypatch):
    """pyopencl is optional: without it, no bundled loader is looked for (none is there), and
    the system's libOpenCL.so.1 is the one candidate."""
    monkeypatch.delenv(hb.opencl.ENV_LIBRARY, raising=False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pyopencl" else FIND_SPEC(name, *a))
    assert hb.opencl.library_candidates() == ["libOpenCL.so.1"]


def test_pyopencl_context_and_queue_are_used_as_given():
    ctx = cl.Context([pyopencl_default()])
    queue = cl.CommandQueue(ctx)
    both = hb.opencl.device(ctx, queue)
    assert (both.context, both.queue) == (ctx.int_ptr, queue.int_ptr)
    only_queue = hb.opencl.device(queue=queue)
    assert (only_queue.context, only_queue.queue) == (ctx.int_ptr, queue.int_ptr)
    only_context = hb.opencl.device(ctx)
    assert only_context.context == ctx.int_ptr and only_context.queue not in (0, queue.int_ptr)
    assert cl.CommandQueue.from_int_ptr(only_context.queue).context.int_ptr == ctx.int_ptr


def test_device_keeps_adopted_objects_alive():
    ctx = cl.Context([pyopencl_default()])
    d = hb.opencl.device(queue=cl.CommandQueue(ctx))
    del ctx
    gc.collect()
    d.synchronize()  # the queue and context are retained by the device
    assert cl.CommandQueue.from_int_ptr(d.queue).device.name == d.name


def test_queue_of_another_context_is_refused():
    ctx_a, ctx_b = cl.Context([pyopencl_default()]), cl.Context([pyopencl_default()])
    with pytest.raises(ValueError, match=r"opencl.device\(\): the queue belongs to another context; "
                                         r"pass queue.context as the context, or no context"):
        hb.opencl.device(ctx_a, cl.CommandQueue(ctx_b))


@pytest.mark.parametrize("context, queue, message", [
    (5, None, r"context must be a pyopencl.Context, not int"),
    (None, "queue", r"queue must be a pyopencl.CommandQueue, not str"),
])
def test_only_pyopencl_objects_are_accepted(context, queue, message):
    # A stray integer handed to the driver as a cl_context would crash the process.
    with pytest.raises(TypeError, match=rf"opencl.device\(\): {message}; pass None for the default device"):
        hb.opencl.device(context, queue)


def run_isolated(code, **env):
    full = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full)


NO_OPENCL = """
import halide_buffer as hb
try:
    hb.opencl.device()
except hb.DeviceError as e:
    print(type(e).__mro__[1].__name__, e.code, e.name)
    print(e)
b = hb.Buffer((2,), "bfloat16")  # every host feature still works, and no data is lost
b.numpy(writable=True)[:] = 1.5
try:
    b.copy_to_device()
except hb.DeviceError as e:
    print("copy_to_device:", e.name)
print(b.numpy().dtype, b.numpy().tolist(), b.host_dirty(), b.has_device_allocation())
"""


@pytest.mark.parametrize("library, reason", [
    ("/nonexistent/libOpenCL.so.1", "cannot open shared object file"),
    ("libm.so.6", "libm.so.6: not an OpenCL loader \\(missing entry points\\)"),
])
def test_no_opencl_at_all_is_a_device_error_naming_the_fix(library, reason):
    run = run_isolated(NO_OPENCL, HALIDE_BUFFER_OPENCL_LIBRARY=library)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == "RuntimeError -1001 CL_PLATFORM_NOT_FOUND_KHR"
    assert lines[1].startswith("opencl.device(): no OpenCL loader found; pip install "
                               "'halide_buffer[opencl]' for pyopencl and PoCL")
    assert re.search(reason, run.stdout)
    assert lines[-2:] == ["copy_to_device: CL_PLATFORM_NOT_FOUND_KHR", "bfloat16 [1.5, 1.5] True False"]


def test_loader_without_platforms_is_a_device_error():
    # pyopencl's bundled loader reading an empty vendors folder finds no platform at all.
    code = NO_OPENCL.replace("import halide_buffer as hb", "import os, halide_buffer as hb")
    run = run_isolated(code, OCL_ICD_VENDORS="/nonexistent-vendors", PYOPENCL_HOME="/nonexistent")
    assert run.returncode == 0, run.stderr
    first, message = run.stdout.splitlines()[:2]
    assert first == "RuntimeError -1001 CL_PLATFORM_NOT_FOUND_KHR"
    assert message.startswith("opencl.device(): clGetPlatformIDs failed with CL_PLATFORM_NOT_FOUND_KHR "
                              "(-1001); install an OpenCL driver, or pip install 'halide_buffer[opencl]'")


def test_error_names_follow_the_khronos_headers():
    assert hb._core._opencl_error_name(-4) == "CL_MEM_OBJECT_ALLOCATION_FAILURE"
    assert hb._core._opencl_error_name(-36) == "CL_INVALID_COMMAND_QUEUE"
    assert hb._core._opencl_error_name(-61) == "CL_INVALID_BUFFER_SIZE"
    assert hb._core._opencl_error_name(12345) == "unknown OpenCL error"
    assert issubclass(hb.DeviceError, RuntimeError)


def test_every_error_code_pyopencl_knows_has_its_khronos_name():
    """pyopencl's own table of the Khronos codes (cl.status_code), against ours, code by code."""
    codes = {name: value for name, value in vars(cl.status_code).items()
             if name.isupper() and type(value) is int}
    assert len(codes) > 50
    wrong = {value: (f"CL_{name}", hb._core._opencl_error_name(value)) for name, value in codes.items()
             if hb._core._opencl_error_name(value) != f"CL_{name}"}
    assert not wrong, wrong


RACE = """
import threading, halide_buffer as hb
seen, start = [], threading.Barrier(8)
def first_call():
    start.wait()
    seen.append(hb.opencl.device())
threads = [threading.Thread(target=first_call) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
print(len(seen), len({id(d) for d in seen}))
"""


def test_threads_racing_to_the_first_call_get_one_default_device():
    run = run_isolated(RACE)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["8", "1"]
