"""CUDA devices.

Nothing CUDA is needed to build or import halide_buffer: the driver's ``libcuda.so.1`` is opened
on first use (``HALIDE_BUFFER_CUDA_LIBRARY`` names another path). Buffers use each device's
*primary context*, the one CuPy, PyTorch and JAX use, so device pointers pass between them and
us as they are. Without a driver, :func:`device` raises :class:`halide_buffer.DeviceError`
("no CUDA driver found ..."); everything else keeps working.

Handing data over: ``b.copy_to_device(hb.cuda.device())`` puts a buffer on the GPU; then
``cupy.asarray(b)`` (the CUDA array interface), ``torch.from_dlpack(b)`` or
``jax.dlpack.from_dlpack(b)`` take its device memory without a copy. The other way,
:func:`wrap` (any object with ``__cuda_array_interface__``) or :func:`halide_buffer.from_dlpack`
(any DLPack producer) make a buffer whose device copy is the framework's memory.
"""

from __future__ import annotations

import atexit
import threading
from typing import Any

from . import _core
from ._core import Buffer, CudaDevice

__all__ = ["device", "is_available", "loaded_library", "wrap"]

_defaults: dict[int, CudaDevice] = {}
_defaults_lock = threading.Lock()  # one default device per ordinal even when threads race


@atexit.register
def _release_pools() -> None:
    """At exit: releases the device memory the default devices' pools keep (a device that dies
    earlier releases its own)."""
    for d in list(_defaults.values()):
        try:
            d.trim()
        except Exception:  # noqa: BLE001 (a lost context has nothing left to release)
            pass


def is_available() -> bool:
    """True when a CUDA driver loads and initialises (never raises)."""
    return _core._cuda_available()


def loaded_library() -> str | None:
    """The CUDA driver library in use, or None before the first device was opened."""
    return _core._cuda_loaded_library() or None


# Stream objects of the frameworks, by type name, and the attribute holding the CUstream. Only
# these are taken apart: another object's .ptr may be memory, not a stream.
_STREAM_TYPES = {"Stream": ("ptr", "cuda_stream"), "ExternalStream": ("ptr", "cuda_stream")}


# CUstream values that are no address: the legacy and the per-thread default stream.
_NAMED_STREAMS = (1, 2)


def _stream_number(stream: Any, trust_handle: bool) -> int:
    """A stream as the CUDA array interface numbers it: None (or 0) the legacy default stream; 1
    and 2 the legacy and per-thread default streams; any other int a CUstream handle, taken only
    with ``trust_handle=True`` (the driver would dereference a wrong one); a ``cupy.cuda.Stream``
    (``.ptr``) or ``torch.cuda.Stream`` (``.cuda_stream``) gives its own."""
    if stream is None:
        return 0
    if isinstance(stream, int) and not isinstance(stream, bool) and stream >= 0:
        if stream and stream not in _NAMED_STREAMS and not trust_handle:
            raise TypeError(f"cuda.device(): the int {stream} would reach the driver as a CUstream address, "
                            f"which nothing can check; pass the framework's stream object (cupy.cuda.Stream, "
                            f"torch.cuda.Stream), or trust_handle=True if it is a live CUstream")
        return stream
    module = type(stream).__module__.split(".")[0]
    if module in ("cupy", "cupy_backends", "torch"):
        for attribute in _STREAM_TYPES.get(type(stream).__name__, ()):
            handle = getattr(stream, attribute, None)
            if isinstance(handle, int):
                return handle
    raise TypeError(f"cuda.device(): stream must be None, a CUstream handle (int), a cupy.cuda.Stream "
                    f"or a torch.cuda.Stream, not {stream!r}; pass one of those, or None for the default stream")


def device(ordinal: int = 0, stream: Any = None, *, trust_handle: bool = False) -> CudaDevice:
    """A CUDA device for buffers, through its primary context.

    With ``stream=None``: the default device of ``ordinal``, the same object on every call,
    whose copies run on the legacy default stream (the one CuPy and PyTorch use by default).
    With a stream (a handle, a ``cupy.cuda.Stream``, a ``torch.cuda.Stream``): a device whose
    copies run on that stream, which it keeps alive. A stream given as an int other than 0, 1 or
    2 is an address the driver dereferences unchecked: it needs ``trust_handle=True``, the
    caller's word that it is a live ``CUstream`` of this device. Raises ``halide_buffer.DeviceError`` when
    there is no CUDA driver, ``ValueError`` for an ordinal the machine lacks.
    """
    if isinstance(ordinal, bool) or not isinstance(ordinal, int):
        raise TypeError(f"cuda.device(): ordinal must be an int, not {type(ordinal).__name__}; pass e.g. 0 for "
                        f"the first GPU")
    number = _stream_number(stream, trust_handle)
    if number == 0:
        with _defaults_lock:
            if ordinal not in _defaults:
                _defaults[ordinal] = _core._cuda_open(ordinal, 0, None)
            return _defaults[ordinal]
    return _core._cuda_open(ordinal, number, stream)  # the device keeps the stream object alive


# ---------------------------------------------------------------------------------------------
# The CUDA array interface, consumer side
# ---------------------------------------------------------------------------------------------


def _dtype_of_typestr(typestr: str) -> Any:
    """The dtype of the table a CUDA array interface typestr names (the table's ``typestr``
    column: '<V2' is bfloat16's alone, as PyTorch writes it); ambiguous ones ('<V1', the 1-byte
    exotic types) need ``dtype=``."""
    if typestr.startswith(">") and typestr[2:] != "1":
        raise BufferError(f"cuda.wrap(): big-endian data ({typestr!r}) is not supported; convert the array "
                          f"to native byte order first")
    normal = "<" + typestr[1:]
    found = [t for t in _core.dtypes() if "<" + t.typestr[1:] == normal]
    if len(found) != 1:
        names = ", ".join(t.name for t in found) or "none"
        raise BufferError(f"cuda.wrap(): typestr {typestr!r} names no single dtype of the table "
                          f"(matches: {names}); pass dtype=, or use halide_buffer.from_dlpack, which "
                          f"carries the exact type")
    return found[0]


def wrap(obj: Any, *, dtype: Any = None) -> Buffer:
    """A Buffer whose device copy is the memory of ``obj`` (anything with a
    ``__cuda_array_interface__``: a CuPy array, a PyTorch CUDA tensor, a Numba device array),
    without a copy. The device data is current (``device_dirty``); the host copy is allocated on
    the first host read. ``obj`` is kept alive by the buffer, and the buffer's stream first waits
    for the stream the interface names. ``dtype`` overrides the typestr (needed for the
    ambiguous 1-byte exotic types; DLPack carries them exactly).
    """
    interface = getattr(obj, "__cuda_array_interface__", None)
    if not isinstance(interface, dict):
        raise TypeError(f"cuda.wrap(): {type(obj).__name__} has no __cuda_array_interface__; pass a "
                        f"CuPy array, a PyTorch CUDA tensor or another CUDA array")
    if interface.get("mask") is not None:
        raise BufferError("cuda.wrap(): masked arrays are not supported; pass the array's data")
    data, readonly = interface["data"]
    _core._cuda_check_wrappable(bool(readonly))
    shape = tuple(interface["shape"])
    t = _core.dtype(dtype) if dtype is not None else _dtype_of_typestr(interface["typestr"])
    strides = interface.get("strides")
    if strides is None:  # C-contiguous
        strides = _core._c_strides(list(shape), t.itemsize)
    # Version 3's stream: None means nothing to wait for; absent (versions 0-2) means the legacy
    # default stream, which is also the one our default device's copies run on.
    stream = interface.get("stream") if interface.get("version", 0) >= 3 else None
    on = _device_of_pointer(data) if data else device()
    return _core._cuda_wrap(data, list(shape), list(strides), t, on, obj, stream or 0)


def _device_of_pointer(data: int) -> CudaDevice:
    """The default device of the GPU holding ``data``."""
    return device(_core._cuda_pointer_ordinal(data, device()))
