"""OpenCL devices.

Nothing OpenCL is needed to build or import halide_buffer: the OpenCL ICD loader is opened on
first use. It is looked for in this order:

1. ``HALIDE_BUFFER_OPENCL_LIBRARY``: an explicit path; when set, it is the only one tried;
2. the loader bundled with pyopencl (so pyopencl and PoCL from pip suffice, and pyopencl's
   objects and ours come from the same loader). pyopencl is imported first: its loader finds
   the ICDs beside it (PoCL's ``pocl.icd`` names ``libpocl-<hash>.so`` by bare name) only
   through the library search path of pyopencl's extension, and reads ``PYOPENCL_HOME``,
   which pyopencl sets; opened on its own it finds no platform or crashes;
3. the system's ``libOpenCL.so.1``.

The loader is opened with ``RTLD_GLOBAL`` so that Halide's OpenCL runtime finds the same API:
``hb.aot`` opens it before an OpenCL AOT pipeline's first call; :func:`load_library` opens it for
Halide's JIT (``Func.realize`` and the like with an ``-opencl`` target).

One memory per device: importing this module loads ``halide_buffer._opencl_hooks`` with
``RTLD_GLOBAL``, whose ``halide_acquire_cl_context`` / ``halide_release_cl_context`` every Halide
OpenCL runtime opened afterwards calls instead of its own: it computes in the context and queue of
the call's device (the device its buffer arguments are on, else :func:`device`), in our memory.
"""

from __future__ import annotations

import atexit
import glob
import importlib.util
import os
import threading
import weakref
from typing import Any

from . import _core, _pocl_cpu
from ._core import Buffer, Device

_core._opencl_share_context(importlib.util.find_spec("halide_buffer._opencl_hooks").origin)

# Pipelines return with their kernels queued (Halide's runtime does not wait for them); an OpenCL
# driver still compiling or running one while the process exits can crash in its own teardown.
_devices: weakref.WeakSet[Device] = weakref.WeakSet()


@atexit.register
def _finish_queued_work() -> None:
    """At exit: waits for the work queued on every device still alive, then releases the memory
    their pools keep."""
    for d in list(_devices):
        try:
            d.synchronize()
            d.trim()
        except Exception:  # noqa: BLE001 (a lost queue has nothing left to finish)
            pass

__all__ = ["as_array", "device", "library_candidates", "load_library", "loaded_library", "wrap"]

ENV_LIBRARY = "HALIDE_BUFFER_OPENCL_LIBRARY"
ENV_ZERO_COPY = "HALIDE_BUFFER_OPENCL_ZERO_COPY"
_default: Device | None = None
_default_other_zero_copy: Device | None = None  # the default's context and queue, zero-copy the other way
_default_lock = threading.Lock()  # one default device even when threads race to the first call
_loader_lock = threading.Lock()  # the candidates are chosen once, whoever comes first


def library_candidates() -> list[str]:
    """The loader paths tried on first use, in order."""
    explicit = os.environ.get(ENV_LIBRARY)
    if explicit:
        return [explicit]
    return _bundled("libOpenCL*.so*") + ["libOpenCL.so.1"]


def _bundled(pattern: str) -> list[str]:
    """The libraries matching ``pattern`` that pyopencl's wheel (and PoCL's, beside it) put in
    ``pyopencl/.libs``."""
    found = []
    spec = importlib.util.find_spec("pyopencl")
    if spec is not None and spec.submodule_search_locations:
        for folder in spec.submodule_search_locations:
            found += sorted(glob.glob(os.path.join(folder, ".libs", pattern)))
    return found


def _prepare_loader(candidates: list[str]) -> None:
    """Before OpenCL's first use: gives pip's PoCL a CPU name its compiler knows (see
    halide_buffer._pocl_cpu), and lets pyopencl load its bundled loader first (see the module's
    docstring)."""
    _pocl_cpu.apply(_bundled("libpocl*.so*"))
    if candidates and ".libs" in candidates[0]:
        import pyopencl  # noqa: F401


def _choose_loader() -> None:
    """Gives the core the loaders to try, until one is open: a device's creation and an OpenCL
    AOT pipeline's first call (see halide_buffer.aot) open the first that loads."""
    with _loader_lock:
        if loaded_library() is None:
            candidates = library_candidates()
            _prepare_loader(candidates)
            _core._opencl_set_library_candidates(candidates)


def load_library() -> str:
    """Opens the OpenCL loader now, if no device or pipeline has yet, and returns its path.

    Halide's JIT runtime (``Func.realize``, ``Callable`` with an ``-opencl`` target) looks the
    OpenCL API up in the process: call this first, so that it finds the loader
    :func:`library_candidates` chose (PoCL from pip included), the same one our devices use.
    Raises ``halide_buffer.DeviceError`` saying what to install when there is none.
    """
    _choose_loader()
    return _core._opencl_load_library()


def loaded_library() -> str | None:
    """The OpenCL loader in use, or None before one was opened (by a device or a pipeline)."""
    return _core._opencl_loaded_library() or None


def _import_pyopencl(entry: str) -> Any:
    """pyopencl with pyopencl.array, for ``entry``; without it, ModuleNotFoundError saying how to
    install it."""
    try:
        import pyopencl
        import pyopencl.array  # noqa: F401
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] != "pyopencl":
            raise  # pyopencl is there but broken: its own error says what is missing
        raise ModuleNotFoundError(f"{entry}(): pyopencl is not installed; pip install "
                                  f"'halide_buffer[opencl]' for pyopencl and PoCL", name="pyopencl") from e
    return pyopencl


def _handle(obj: Any, kind: str) -> int:
    """The cl_* address of a pyopencl object; anything else is refused (a stray int would crash
    the driver)."""
    if obj is None:
        return 0
    cl = _import_pyopencl("opencl.device")

    expected = {"context": cl.Context, "queue": cl.CommandQueue}[kind]
    if not isinstance(obj, expected):
        raise TypeError(f"opencl.device(): {kind} must be a pyopencl.{expected.__name__}, not "
                        f"{type(obj).__name__}; pass None for the default device")
    return obj.int_ptr


def device(context: Any = None, queue: Any = None, *, zero_copy: bool | None = None) -> Device:
    """An OpenCL device for buffers.

    With neither argument: the default device, the same object on every call: the first GPU of
    any platform, else the first device of the first platform that has one (PoCL's CPU device
    on a machine without a GPU). With a pyopencl ``Context`` and/or ``CommandQueue``: a device
    using exactly those (a missing queue is created on the context's first device; a missing
    context is the queue's). Raises ``halide_buffer.DeviceError`` when there is no OpenCL.

    ``zero_copy``: on a device whose memory is the host's (``host_unified_memory``: PoCL, integrated
    GPUs), the device copy of a buffer whose host memory is aligned for it is that host memory,
    and copies become maps (docs/devices.md). On by default; ``HALIDE_BUFFER_OPENCL_ZERO_COPY=0``
    turns it off for new devices, ``zero_copy=False`` for this one. ``device(zero_copy=...)``
    the other way from the default device is a device on its context and queue (memory moves
    between the two without the host), the same object on every call.
    """
    global _default, _default_other_zero_copy
    if zero_copy is not None and not isinstance(zero_copy, bool):
        raise TypeError(f"opencl.device(): zero_copy must be True, False or None, not "
                        f"{type(zero_copy).__name__}")
    with _default_lock:
        _choose_loader()
        if context is None and queue is None:
            if _default is None:
                _default = _core._opencl_default_device()
                _devices.add(_default)
            if zero_copy is None or zero_copy == _default.zero_copy or not _default.host_unified_memory:
                return _default
            if _default_other_zero_copy is None:
                _default_other_zero_copy = _core._opencl_adopt(_default.context, _default.queue, zero_copy)
                _devices.add(_default_other_zero_copy)
            return _default_other_zero_copy
    wanted = _core._opencl_zero_copy_wanted() if zero_copy is None else zero_copy
    adopted = _core._opencl_adopt(_handle(context, "context"), _handle(queue, "queue"), wanted)
    _devices.add(adopted)
    return adopted


# ---------------------------------------------------------------------------------------------
# Zero-copy interop with pyopencl
# ---------------------------------------------------------------------------------------------


def as_array(buffer: Buffer, *, device: Device | None = None, writable: bool = True) -> Any:
    """The buffer's device data as a ``pyopencl.array.Array`` sharing its ``cl_mem``.

    A device lease (the residency rules of docs/devices.md): the device copy is made current
    first (allocated on ``device``, default: where it is, else :func:`device`), and, unless
    ``writable=False``, the buffer is marked ``device_dirty`` since the array may be written. A
    buffer over read-only memory is refused (``BufferError``) unless ``writable=False``. The
    array uses the device's in-order queue, so kernels enqueued on it run before the buffer's
    next copy; work on another queue needs ``queue.finish()`` first.
    """
    cl = _import_pyopencl("opencl.as_array")

    if not isinstance(buffer, Buffer):
        raise TypeError(f"opencl.as_array(): expected a halide_buffer.Buffer, not "
                        f"{type(buffer).__name__}; make one with halide_buffer.Buffer.from_host(obj)")
    if any(s < 0 for s in buffer.strides):
        raise BufferError("opencl.as_array(): pyopencl arrays cannot have negative strides; "
                          "pass buffer.copy() instead")
    held = buffer.device
    if held is not None and held.kind != "opencl":
        raise BufferError(f"opencl.as_array(): the buffer's device copy is on {held!r}; call "
                          f"device_free() first to move it to an OpenCL device")
    mem, offset, dev = buffer._device_view(device, writable, "opencl.as_array")
    if dev.kind != "opencl":  # moved there meanwhile; a CUDA lease takes no reference to give back
        raise BufferError(f"opencl.as_array(): the buffer's device copy is on {dev!r}; call "
                          f"device_free() first to move it to an OpenCL device")
    data = cl.MemoryObject.from_int_ptr(mem, retain=False)  # adopts the reference the lease took
    # The array (and every array made from it) keeps the buffer alive, and with it whatever a
    # wrapped cl_mem came from: a memory pool hands memory on when its owner dies, refcount or not.
    data._halide_buffer = buffer
    queue = cl.CommandQueue.from_int_ptr(dev.queue, retain=True)
    return cl.array.Array(queue, buffer.shape, buffer.dtype.numpy, strides=buffer.strides, data=data,
                     offset=offset)


def _device_of(context: Any, queue: Any) -> Device:
    """The device for memory of ``context`` used on ``queue``: the default device when it is
    that context (and queue), else one adopting them, so copies stay ordered after the user's
    kernels on that queue."""
    default = device()
    if default.context == context.int_ptr and (queue is None or default.queue == queue.int_ptr):
        return default
    return device(context, queue)


def wrap(obj: Any, *, shape: Any = None, dtype: Any = None) -> Buffer:
    """A Buffer whose device copy is ``obj``'s memory, without a copy: a ``pyopencl.array.Array``
    (shape and dtype from it; it must be C-contiguous) or a ``pyopencl.Buffer`` (pass ``shape``
    and ``dtype``). The device data is current (``device_dirty``); the host copy is allocated
    and filled on the first host read. ``obj`` is kept alive by the buffer.
    """
    cl = _import_pyopencl("opencl.wrap")

    if isinstance(obj, cl.array.Array):
        if shape is not None or dtype is not None:
            raise TypeError("opencl.wrap(): shape and dtype come from the pyopencl array; "
                            "pass neither")
        if not obj.flags.c_contiguous:
            raise ValueError("opencl.wrap(): the pyopencl array is not C-contiguous; pass "
                             "array.copy()")
        if obj.base_data is None:
            raise ValueError("opencl.wrap(): the pyopencl array has no device memory "
                             "(an empty array); wrap a non-empty one")
        out = Buffer(obj.shape, obj.dtype)
        out.device_wrap_native(obj.base_data, device=_device_of(obj.context, obj.queue),
                               offset=obj.offset)
        return out
    if isinstance(obj, cl.MemoryObject):
        if shape is None or dtype is None:
            raise TypeError("opencl.wrap(): a pyopencl.Buffer has no shape or dtype; pass both")
        out = Buffer(shape, dtype)
        out.device_wrap_native(obj, device=_device_of(obj.context, None))
        return out
    raise TypeError(f"opencl.wrap(): expected a pyopencl.array.Array or pyopencl.Buffer, not "
                    f"{type(obj).__name__}; for host data use halide_buffer.Buffer.from_host(obj)")
