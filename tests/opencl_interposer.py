"""Test support: every OpenCL call of the process counted, and faults injected on demand.

:func:`install` puts the interposer (tests/drivers/opencl_interposer.c) between the process and
the real OpenCL ICD loader, before any OpenCL library is opened:

* the real loader is the one ``halide_buffer.opencl`` would choose (pyopencl's bundled loader,
  pyopencl imported first, else ``libOpenCL.so.1``); the interposer opens it;
* ``HALIDE_BUFFER_OPENCL_LIBRARY`` names the interposer, so halide_buffer's core, which looks
  every entry point up on the library it opened, calls only through it;
* the interposer is loaded with ``RTLD_GLOBAL`` before pyopencl's extension and Halide's OpenCL
  runtime (AOT pipelines, JIT) bind their ``cl*`` calls by name in the process, so they find
  its entry points first, and the real loader (also global) for the ones it does not define;
* child processes inherit the environment: the interposer opens the real loader named in
  ``HALIDE_BUFFER_TEST_OPENCL_LOADER`` when it is loaded there, after the ICD libraries
  beside that loader (``HALIDE_BUFFER_TEST_OPENCL_PRELOAD``), which PoCL's ``pocl.icd`` names
  by a bare name that only pyopencl's extension's search path would find.

What does not pass through it: a pyopencl imported before :func:`install` (its calls are bound
to the real loader already), and entry points it does not define (they go straight to the real
loader: program builds, kernel arguments, events, images, SVM).
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
from collections.abc import Iterator
from pathlib import Path

import native_library

ENV_LIBRARY = "HALIDE_BUFFER_OPENCL_LIBRARY"
ENV_LOADER = "HALIDE_BUFFER_TEST_OPENCL_LOADER"
ENV_PRELOAD = "HALIDE_BUFFER_TEST_OPENCL_PRELOAD"
NAME = "opencl_interposer"
COUNT_KEYS = ("reads", "read_bytes", "writes", "write_bytes", "copies", "fills", "kernels",
              "finishes", "mem_created", "mem_released", "maps", "unmaps")

_lib: ctypes.CDLL | None = None
_reason = "install() was not called"


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    for name, res, args in (
            ("hb_interposer_open", ctypes.c_int, [ctypes.c_char_p]),
            ("hb_interposer_error", ctypes.c_char_p, []),
            ("hb_interposer_loader", ctypes.c_char_p, []),
            ("hb_interposer_entry_count", ctypes.c_int, []),
            ("hb_interposer_entry_name", ctypes.c_char_p, [ctypes.c_int]),
            ("hb_interposer_count_fields", ctypes.c_int, []),
            ("hb_interposer_count_name", ctypes.c_char_p, [ctypes.c_int]),
            ("hb_interposer_count", ctypes.c_longlong, [ctypes.c_int]),
            ("hb_interposer_injected", ctypes.c_longlong, []),
            ("hb_interposer_live_mem_objects", ctypes.c_longlong, []),
            ("hb_interposer_fail", ctypes.c_int,
             [ctypes.c_char_p, ctypes.c_int, ctypes.c_longlong, ctypes.c_int]),
            ("hb_interposer_clear_faults", None, []),
            ("hb_interposer_complete_event_after", ctypes.c_int, [ctypes.c_void_p, ctypes.c_long])):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    names = tuple(lib.hb_interposer_count_name(i).decode() for i in range(lib.hb_interposer_count_fields()))
    if names != COUNT_KEYS:
        raise RuntimeError(f"opencl_interposer: the library counts {names}, expected {COUNT_KEYS}")
    return lib


def _load(path: Path) -> ctypes.CDLL:
    # Global and now: it must come before any library that binds cl* by name.
    return _declare(ctypes.CDLL(str(path), mode=os.RTLD_GLOBAL | os.RTLD_NOW))


def _icd_libraries(loader: str) -> list[str]:
    """The ICD libraries named by the ``.icd`` files beside ``loader`` that lie beside it too."""
    folder = os.path.dirname(loader)
    found = []
    for icd in sorted(glob.glob(os.path.join(folder, "*.icd"))):
        name = Path(icd).read_text().strip()
        if name and "/" not in name and os.path.exists(os.path.join(folder, name)):
            found.append(os.path.join(folder, name))
    return found


def install() -> bool:
    """Puts the interposer between this process (and its children) and the OpenCL loader.

    Call it before anything opens OpenCL (halide_buffer's first device or OpenCL pipeline, a
    pyopencl import). True when OpenCL calls now go through it; False, with :func:`reason`,
    when they cannot (no C compiler, no OpenCL loader, one already open, or
    ``HALIDE_BUFFER_OPENCL_LIBRARY`` naming another library): nothing is changed then.
    """
    global _lib, _reason
    if _lib is not None:
        return True
    try:
        path = native_library.build(NAME)
    except native_library.BuildError as e:
        _reason = f"cannot build the interposer: {e}"
        return False
    if os.environ.get(ENV_LIBRARY):
        return _attach(path)
    import halide_buffer as hb

    if hb.opencl.loaded_library() is not None:
        _reason = f"an OpenCL loader is already open ({hb.opencl.loaded_library()})"
        return False
    lib = _load(path)
    candidates = hb.opencl.library_candidates()
    hb.opencl._prepare_loader(candidates)  # the same rule as halide_buffer's first use
    tried = []
    for candidate in candidates:
        if lib.hb_interposer_open(candidate.encode()) == 0:
            os.environ[ENV_LOADER] = candidate
            os.environ[ENV_PRELOAD] = ":".join(_icd_libraries(candidate))
            os.environ[ENV_LIBRARY] = str(path)
            _lib = lib
            return True
        tried.append(lib.hb_interposer_error().decode())
    _reason = "no OpenCL loader: " + "; ".join(tried)
    return False


def _attach(path: Path) -> bool:
    """In a process whose environment already names the interposer (a child of one that
    installed it): loads it, and it opens the loader the environment names."""
    global _lib, _reason
    explicit = os.environ[ENV_LIBRARY]
    if not os.path.exists(explicit) or not os.path.samefile(explicit, path):
        _reason = f"{ENV_LIBRARY} names another OpenCL library ({explicit})"
        return False
    import halide_buffer as hb

    hb.opencl._prepare_loader([explicit])  # the same rule as halide_buffer's first use
    lib = _load(path)
    if not lib.hb_interposer_loader():
        _reason = f"the interposer could not open the loader in {ENV_LOADER}: {lib.hb_interposer_error().decode()}"
        return False
    _lib = lib
    return True


def active() -> bool:
    """Whether this process's OpenCL calls go through the interposer (attaching to it when the
    environment names it)."""
    return _lib is not None or (bool(os.environ.get(ENV_LIBRARY)) and install())


def reason() -> str:
    """Why the interposer is not active."""
    return "" if active() else _reason


def _library(entry: str) -> ctypes.CDLL:
    if not active():
        raise RuntimeError(f"opencl_interposer.{entry}(): the interposer is not installed ({_reason}); "
                           f"call install() before OpenCL is first used")
    assert _lib is not None
    return _lib


def loader() -> str | None:
    """The real OpenCL loader the interposer forwards to, or None when it is not active."""
    return _library("loader").hb_interposer_loader().decode() if active() else None


def entries() -> list[str]:
    """The OpenCL entry points the interposer defines (the ones that can be counted or failed)."""
    lib = _library("entries")
    return [lib.hb_interposer_entry_name(i).decode() for i in range(lib.hb_interposer_entry_count())]


def counts() -> dict[str, int]:
    """The successful calls (and bytes) so far: reads, read_bytes, writes, write_bytes (the
    Read/Write Buffer and BufferRect calls), copies (device to device), fills, kernels
    (NDRange launches), finishes, mem_created (clCreateBuffer/SubBuffer), mem_released
    (the last release of one of those), maps and unmaps (clEnqueueMapBuffer /
    clEnqueueUnmapMemObject: no bytes counted)."""
    lib = _library("counts")
    return {k: lib.hb_interposer_count(i) for i, k in enumerate(COUNT_KEYS)}


def live_mem_objects() -> int:
    """Memory objects created through the interposer whose API reference count is not yet 0."""
    return _library("live_mem_objects").hb_interposer_live_mem_objects()


def injected() -> int:
    """How many calls failed by an injected fault so far."""
    return _library("injected").hb_interposer_injected()


def fail(entry: str, code: int, nth: int = 1, repeat: bool = False) -> None:
    """Fails the ``nth`` call from now of ``entry`` (e.g. ``"clCreateBuffer"``) with ``code``
    (e.g. -4, CL_MEM_OBJECT_ALLOCATION_FAILURE) without calling the driver; with ``repeat``,
    every later call too, until :func:`clear_faults`. One rule per entry point: a new one
    replaces it."""
    lib = _library("fail")
    if entry not in entries():
        raise ValueError(f"opencl_interposer.fail(): {entry!r} is not an entry point of the "
                         f"interposer; pass one of {entries()}")
    if code == 0 or nth < 1:
        raise ValueError(f"opencl_interposer.fail(): code must be an OpenCL error (not 0) and nth "
                         f">= 1, got code={code}, nth={nth}")
    if lib.hb_interposer_fail(entry.encode(), code, nth, int(bool(repeat))) != 0:
        raise RuntimeError(f"opencl_interposer.fail(): the interposer refused {entry}")


def clear_faults() -> None:
    """Removes every fault rule."""
    _library("clear_faults").hb_interposer_clear_faults()


def complete_event_after(event: int, seconds: float) -> bool:
    """Completes the OpenCL user event at address `event` `seconds` from now, on a native thread
    of the interposer's (no Python runs there, so no GIL is needed); False when it cannot."""
    return _library("complete_event_after").hb_interposer_complete_event_after(event, int(seconds * 1000)) == 0


@contextlib.contextmanager
def failing(entry: str, code: int, nth: int = 1, repeat: bool = False) -> Iterator[None]:
    """:func:`fail` for the duration of a ``with`` block; every rule is cleared on exit."""
    fail(entry, code, nth, repeat)
    try:
        yield
    finally:
        clear_faults()
