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

The loader is opened with ``RTLD_GLOBAL`` so that Halide's OpenCL runtime, inside an AOT
pipeline loaded later, finds the same API.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import threading
from typing import Any

from . import _core
from ._core import Device

__all__ = ["device", "library_candidates", "loaded_library"]

ENV_LIBRARY = "HALIDE_BUFFER_OPENCL_LIBRARY"
_default: Device | None = None
_default_lock = threading.Lock()  # one default device even when threads race to the first call


def library_candidates() -> list[str]:
    """The loader paths tried on first use, in order."""
    explicit = os.environ.get(ENV_LIBRARY)
    if explicit:
        return [explicit]
    found = []
    spec = importlib.util.find_spec("pyopencl")
    if spec is not None and spec.submodule_search_locations:
        for folder in spec.submodule_search_locations:
            found += sorted(glob.glob(os.path.join(folder, ".libs", "libOpenCL*.so*")))
    return found + ["libOpenCL.so.1"]


def _prepare_pyopencl_loader(candidates: list[str]) -> None:
    """Lets pyopencl load its bundled loader first (see the module's docstring)."""
    if candidates and ".libs" in candidates[0]:
        import pyopencl  # noqa: F401


def loaded_library() -> str:
    """The OpenCL loader in use, or '' before the first device was opened."""
    return _core._opencl_loaded_library()


def _handle(obj: Any, kind: str) -> int:
    """The cl_* address of a pyopencl object; anything else is refused (a stray int would crash
    the driver)."""
    if obj is None:
        return 0
    import pyopencl as cl

    expected = {"context": cl.Context, "queue": cl.CommandQueue}[kind]
    if not isinstance(obj, expected):
        raise TypeError(f"opencl.device(): {kind} must be a pyopencl.{expected.__name__}, not "
                        f"{type(obj).__name__}; pass None for the default device")
    return obj.int_ptr


def device(context: Any = None, queue: Any = None) -> Device:
    """An OpenCL device for buffers.

    With neither argument: the default device, the same object on every call: the first GPU of
    any platform, else the first device of the first platform that has one (PoCL's CPU device
    on a machine without a GPU). With a pyopencl ``Context`` and/or ``CommandQueue``: a device
    using exactly those (a missing queue is created on the context's first device; a missing
    context is the queue's). Raises ``halide_buffer.DeviceError`` when there is no OpenCL.
    """
    global _default
    with _default_lock:
        if loaded_library() == "":
            candidates = library_candidates()
            _prepare_pyopencl_loader(candidates)
            _core._opencl_set_library_candidates(candidates)
        if context is None and queue is None:
            if _default is None:
                _default = _core._opencl_default_device()
            return _default
    return _core._opencl_adopt(_handle(context, "context"), _handle(queue, "queue"))
