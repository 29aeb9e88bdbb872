"""The CUDA driver stand-in (tests/drivers/cuda_standin.c): building it, loading it in place of
libcuda, and its control API.

It proves halide_buffer's CUDA bookkeeping on any machine: which driver calls are made, on
which memory, in which context and stream, in which order, and what happens when one fails.
It proves nothing about CUDA itself (no kernel runs, no GPU peer can read its memory): that is
tests/gpu/run_checks.sh's job, on a GPU.

``install()`` (called by conftest.py before anything opens a driver) points
``HALIDE_BUFFER_CUDA_LIBRARY`` at the stand-in unless that variable is already set: set it to
``libcuda.so.1`` to run the suite against a real driver.
"""

from __future__ import annotations

import contextlib
import ctypes
import os

import halide_buffer as hb

import native_library

ENV = "HALIDE_BUFFER_CUDA_LIBRARY"
NAME = "cuda_standin"

# cuda.h's codes the tests inject.
OUT_OF_MEMORY = 2
ILLEGAL_ADDRESS = 700
LAUNCH_FAILED = 719

_library: ctypes.CDLL | None = None
_build_error: str | None = None


def path() -> str | None:
    """The stand-in's shared library (built when missing), or None without a compiler."""
    global _build_error
    try:
        return str(native_library.build(NAME))
    except native_library.BuildError as e:
        _build_error = str(e)
        return None


def install() -> None:
    """Makes the stand-in the CUDA driver of this process and its children, unless a driver
    was named already."""
    if os.environ.get(ENV):
        return
    built = path()
    if built:
        os.environ[ENV] = built


def active() -> bool:
    """Whether halide_buffer's CUDA driver is the stand-in (loading it when it is named)."""
    named = os.environ.get(ENV, "")
    return os.path.basename(named) == f"lib{NAME}.so" and hb.cuda.is_available()


def why_inactive() -> str:
    """A skip reason for tests that need the stand-in."""
    if _build_error:
        return f"the CUDA driver stand-in could not be built: {_build_error}"
    return f"{ENV} names another CUDA driver ({os.environ.get(ENV)!r}), not the stand-in"


def lib() -> ctypes.CDLL:
    """The loaded stand-in (the very library halide_buffer opened), with its control API typed."""
    global _library
    if _library is None:
        assert active(), why_inactive()
        lib = ctypes.CDLL(os.environ[ENV], mode=os.RTLD_NOW | os.RTLD_GLOBAL)
        c = ctypes
        for name, restype, argtypes in [
            ("hb_standin_live_allocations", c.c_long, []),
            ("hb_standin_total_allocations", c.c_long, []),
            ("hb_standin_context_refs", c.c_long, [c.c_int]),
            ("hb_standin_violations", c.c_long, [c.c_long, c.c_char_p, c.c_size_t]),
            ("hb_standin_clear_violations", None, []),
            ("hb_standin_calls", c.c_long, [c.c_char_p]),
            ("hb_standin_fail", c.c_int, [c.c_char_p, c.c_long, c.c_int, c.c_int]),
            ("hb_standin_clear_faults", None, []),
            ("hb_standin_read", c.c_int, [c.c_uint64, c.c_void_p, c.c_size_t]),
            ("hb_standin_write", c.c_int, [c.c_uint64, c.c_void_p, c.c_size_t]),
            ("hb_standin_enqueue_write", c.c_int, [c.c_void_p, c.c_uint64, c.c_void_p, c.c_size_t]),
            ("hb_standin_pending", c.c_long, []),
            ("cuStreamCreate", c.c_int, [c.POINTER(c.c_void_p), c.c_uint]),
            ("cuStreamDestroy_v2", c.c_int, [c.c_void_p]),
            ("cuStreamSynchronize", c.c_int, [c.c_void_p]),
            ("cuDevicePrimaryCtxRetain", c.c_int, [c.POINTER(c.c_void_p), c.c_int]),
            ("cuDevicePrimaryCtxRelease_v2", c.c_int, [c.c_int]),
            ("cuCtxPushCurrent_v2", c.c_int, [c.c_void_p]),
            ("cuCtxPopCurrent_v2", c.c_int, [c.POINTER(c.c_void_p)]),
            ("cuMemAlloc_v2", c.c_int, [c.POINTER(c.c_uint64), c.c_size_t]),
            ("cuMemFree_v2", c.c_int, [c.c_uint64]),
            ("cuMemGetAddressRange_v2", c.c_int, [c.POINTER(c.c_uint64), c.POINTER(c.c_size_t), c.c_uint64]),
        ]:
            f = getattr(lib, name)
            f.restype, f.argtypes = restype, argtypes
        _library = lib
    return _library


def loaded() -> bool:
    """Whether a test has used the stand-in in this process (nothing is loaded to ask)."""
    return _library is not None


def live_allocations() -> int:
    return lib().hb_standin_live_allocations()


def context_refs(ordinal: int = 0) -> int:
    return lib().hb_standin_context_refs(ordinal)


def violations() -> list[str]:
    """The misuse recorded since the last clear (messages of the first 64)."""
    n = lib().hb_standin_violations(0, None, 0)
    out = []
    for i in range(min(n, 64)):
        text = ctypes.create_string_buffer(256)
        lib().hb_standin_violations(i, text, 256)
        out.append(text.value.decode())
    return out + ([f"... and {n - 64} more"] if n > 64 else [])


def clear_violations() -> None:
    lib().hb_standin_clear_violations()


def calls(entry: str) -> int:
    """How many times `entry` (without its _v2 suffix: "cuMemAlloc") was called."""
    return lib().hb_standin_calls(entry.encode())


def fail(entry: str, code: int, nth: int = 1, repeat: bool = False) -> None:
    """The nth call from now of `entry` fails with `code` (every call from then on with
    `repeat`, until clear_faults())."""
    assert lib().hb_standin_fail(entry.encode(), nth, code, int(repeat)), f"cannot inject into {entry}"


def clear_faults() -> None:
    lib().hb_standin_clear_faults()


@contextlib.contextmanager
def failing(entry: str, code: int, nth: int = 1, repeat: bool = False):
    fail(entry, code, nth, repeat)
    try:
        yield
    finally:
        clear_faults()


def pending() -> int:
    """Queued device work nobody waited for yet."""
    return lib().hb_standin_pending()


def read(address: int, nbytes: int) -> bytes:
    """Device memory as it is now (what a kernel would read)."""
    out = ctypes.create_string_buffer(nbytes)
    assert lib().hb_standin_read(address, out, nbytes), f"0x{address:x} + {nbytes} is not device memory"
    return out.raw


def write(address: int, data: bytes) -> None:
    """Writes device memory now, as a kernel would."""
    assert lib().hb_standin_write(address, data, len(data)), f"0x{address:x} + {len(data)} is not device memory"


def enqueue_write(stream: int, address: int, data: bytes) -> None:
    """Queues a write on `stream`, as a producer's kernel: it lands when the stream is waited for."""
    assert lib().hb_standin_enqueue_write(stream, address, data, len(data)), "cannot queue the write"


class Context:
    """A device's primary context, current on this thread while the `with` block runs (tests
    create streams and memory in it, as a framework would)."""

    def __init__(self, ordinal: int = 0):
        self.ordinal = ordinal

    def __enter__(self):
        handle = ctypes.c_void_p()
        assert lib().cuDevicePrimaryCtxRetain(ctypes.byref(handle), self.ordinal) == 0
        assert lib().cuCtxPushCurrent_v2(handle) == 0
        return self

    def __exit__(self, *exc):
        popped = ctypes.c_void_p()
        assert lib().cuCtxPopCurrent_v2(ctypes.byref(popped)) == 0
        assert lib().cuDevicePrimaryCtxRelease_v2(self.ordinal) == 0


def stream_create(ordinal: int = 0, non_blocking: bool = False) -> int:
    with Context(ordinal):
        handle = ctypes.c_void_p()
        assert lib().cuStreamCreate(ctypes.byref(handle), int(non_blocking)) == 0
    return handle.value


def stream_destroy(stream: int, ordinal: int = 0) -> None:
    with Context(ordinal):
        assert lib().cuStreamDestroy_v2(stream) == 0


def stream_synchronize(stream: int, ordinal: int = 0) -> None:
    """Waits for `stream`, as a consumer synchronising its own stream would."""
    with Context(ordinal):
        assert lib().cuStreamSynchronize(stream) == 0


def mem_alloc(nbytes: int, ordinal: int = 0) -> int:
    """Device memory a foreign producer owns (free it with mem_free)."""
    with Context(ordinal):
        address = ctypes.c_uint64()
        assert lib().cuMemAlloc_v2(ctypes.byref(address), nbytes) == 0
    return address.value


def allocation_of(address: int, ordinal: int = 0) -> tuple[int, int] | None:
    """(base, size) of the live device allocation holding `address`; None for any other address
    (host memory, freed memory)."""
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    with Context(ordinal):
        rc = lib().cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), address)
    return (base.value, size.value) if rc == 0 else None


def mem_free(address: int, ordinal: int = 0) -> None:
    with Context(ordinal):
        assert lib().cuMemFree_v2(address) == 0
