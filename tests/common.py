"""Helpers shared by the test files: plain functions, classes and constants, nothing of pytest's.

Test files import them as ``from common import ...`` (pytest puts tests/ on sys.path, as for
pipelines.py); conftest.py keeps the fixtures and hooks only.

What it offers:

- Data: `ALL_DTYPES`, `random_bits(shape, dtype, seed)`, `bits_of(a)`, and buffers on the host
  holding them: `filled(shape, dtype, seed)` (random bits) and `ramp(shape, dtype)` (0, 1, 2...);
  `on_device(b)`, b's elements as the OpenCL device holds them.
- Transfers: `counts(t)`, `Moves(b)`, `NONE`, `up(nbytes)`, `down(nbytes)`.
- The halide_buffer_t as C sees it: `HALIDE_ABI` and `HALIDE_ENUMS`, the one table of Halide's
  structs (fields, types, offsets, sizes) and enum values; the ctypes mirrors built from it
  (`HalideType`, `HalideDimension`, `HalideBufferT`, `HalideDeviceInterface`); `raw_buffer(b)`,
  `halide_dims(raw)`, `raw_view(b)`; `HOST_DIRTY`, `DEVICE_DIRTY`; `opencl_handle(raw)`.
  test_abi_layout.py checks the table against HalideRuntime.h and the mirrors against the
  table, so a wrong offset fails there rather than misleading the tests that read a
  halide_buffer_t.
- The DLPack structs as C sees them (csrc/abi/dlpack_abi.h): `DLDevice`, `DLDataType`,
  `DLTensor`, and DLPack 1.3's `ExchangeAPI` table.
"""

import ctypes
import ctypes.util
import sys

import numpy as np

import halide_buffer as hb

ALL_DTYPES = [t.name for t in hb.dtypes()]


# ---------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------


def random_bits(shape, dtype, seed=0):
    """An ndarray of `dtype` whose bytes are random: NaN payloads and every bit pattern included.

    Sub-byte ml_dtypes types are stored one per byte; their unused high bits are kept zero, as
    ml_dtypes itself produces them.
    """
    t = hb.dtype(dtype)
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=tuple(shape) + (t.itemsize,), dtype=np.uint8)
    if t.dlpack_padded:
        raw &= np.uint8((1 << t.dlpack_type[1]) - 1)
    if t.name == "bool":
        raw &= np.uint8(1)
    return raw.view(t.numpy).reshape(shape)


def filled(shape, dtype, seed=0):
    """A buffer holding random bits of `dtype` (on the host), and the ndarray of those values."""
    src = random_bits(shape, dtype, seed)
    b = hb.Buffer(shape, dtype)
    b.numpy(writable=True)[...] = src
    return b, src


def ramp(shape, dtype="float32"):
    """A buffer holding 0, 1, 2, ... in C order (on the host)."""
    b = hb.Buffer(shape, dtype)
    b.numpy(writable=True)[...] = np.arange(b.size).reshape(shape)
    return b


def bits_of(a):
    """The raw bytes of an ndarray, shaped like it, for exact comparison (NaN payloads too)."""
    a = np.ascontiguousarray(a)
    return a.view(np.uint8).reshape(a.shape + (a.dtype.itemsize,))


def at_mins_of(view, values):
    """A buffer over `values` at the view's coordinates (a part keeps its parent's)."""
    b = hb.Buffer.from_host(values)
    b.set_min(view.mins)
    return b


def on_device(b):
    """b's elements as the OpenCL device holds them (read with pyopencl, not through b)."""
    return hb.opencl.as_array(b, writable=False).get()


# ---------------------------------------------------------------------------------------------
# Transfers
# ---------------------------------------------------------------------------------------------


def pooled_blocks():
    """Device memory the pools of the devices Python knows keep for reuse: held, not lost (the
    leak checks subtract it from the driver's count of live allocations)."""
    return sum(d.pool["blocks_held"] for d in [*hb.opencl._devices, *hb.cuda._defaults.values()])


def live_counts():
    """hb._core._live_counts() with the pools' memory taken out of device_allocations: what
    buffers hold (a leak check's "back to where it started")."""
    got = hb._core._live_counts()
    got["device_allocations"] -= pooled_blocks()
    return got


def counts(t):
    """A Transfers as (to_device, to_device_bytes, to_host, to_host_bytes)."""
    return (t.to_device, t.to_device_bytes, t.to_host, t.to_host_bytes)


class Moves:
    """What a buffer's storage moved since this object was made (without a buffer: the whole
    process, hb.transfers()): `moves()` gives (to_device, to_device_bytes, to_host,
    to_host_bytes) and restarts the count."""

    def __init__(self, b=None):
        self.read = hb.transfers if b is None else (lambda: b.transfers)
        self.last = self.read()

    def __call__(self):
        now = self.read()
        delta, self.last = counts(now - self.last), now
        return delta


NONE = (0, 0, 0, 0)


def up(nbytes):
    """One host->device copy of nbytes."""
    return (1, nbytes, 0, 0)


def down(nbytes):
    """One device->host copy of nbytes."""
    return (0, 0, 1, nbytes)


# ---------------------------------------------------------------------------------------------
# The halide_buffer_t as C sees it
# ---------------------------------------------------------------------------------------------

# Every struct of HalideRuntime.h that a test reads or writes, on 64-bit targets:
# name: (sizeof, [(field, type, offsetof)]). This is the only place that knows an offset;
# test_abi_layout.py compares every row with the header, the mirrors below are built from it.
# A type names a scalar of C_SCALARS, a struct of this table, or a pointer to one ("... *");
# pointers a test only passes on or compares ("uint8_t *host", the interface's functions) are
# "void *", read as addresses.
HALIDE_ABI = {
    "halide_type_t": (4, [
        ("code", "uint8_t", 0),  # halide_type_code_t, one byte
        ("bits", "uint8_t", 1),
        ("lanes", "uint16_t", 2),
    ]),
    "halide_dimension_t": (16, [
        ("min", "int32_t", 0),
        ("extent", "int32_t", 4),
        ("stride", "int32_t", 8),
        ("flags", "uint32_t", 12),
    ]),
    "halide_device_interface_t": (128, [
        ("device_malloc", "void *", 0),
        ("device_free", "void *", 8),
        ("device_sync", "void *", 16),
        ("device_release", "void *", 24),
        ("copy_to_host", "void *", 32),
        ("copy_to_device", "void *", 40),
        ("device_and_host_malloc", "void *", 48),
        ("device_and_host_free", "void *", 56),
        ("buffer_copy", "void *", 64),
        ("device_crop", "void *", 72),
        ("device_slice", "void *", 80),
        ("device_release_crop", "void *", 88),
        ("wrap_native", "void *", 96),
        ("detach_native", "void *", 104),
        ("compute_capability", "void *", 112),
        ("impl", "void *", 120),
    ]),
    "halide_buffer_t": (56, [
        ("device", "uint64_t", 0),
        ("device_interface", "void *", 8),  # const halide_device_interface_t *
        ("host", "void *", 16),  # uint8_t *
        ("flags", "uint64_t", 24),
        ("type", "halide_type_t", 32),
        ("dimensions", "int32_t", 36),
        ("dim", "halide_dimension_t *", 40),
        ("padding", "void *", 48),
    ]),
}

# The enum values the tests and the extension rely on (halide_type_code_t, halide_buffer_flags).
HALIDE_ENUMS = {
    "halide_type_int": 0,
    "halide_type_uint": 1,
    "halide_type_float": 2,
    "halide_type_handle": 3,
    "halide_type_bfloat": 4,
    "halide_buffer_flag_host_dirty": 1,
    "halide_buffer_flag_device_dirty": 2,
}

HOST_DIRTY = HALIDE_ENUMS["halide_buffer_flag_host_dirty"]
DEVICE_DIRTY = HALIDE_ENUMS["halide_buffer_flag_device_dirty"]

C_SCALARS = {
    "uint8_t": ctypes.c_uint8,
    "uint16_t": ctypes.c_uint16,
    "int32_t": ctypes.c_int32,
    "uint32_t": ctypes.c_uint32,
    "uint64_t": ctypes.c_uint64,
    "void *": ctypes.c_void_p,
}


def halide_abi_layout():
    """HALIDE_ABI and HALIDE_ENUMS under the keys of ``halide_buffer._core._abi_layout()``:
    "sizeof(S)", "offsetof(S, field)" and the enum names."""
    layout = {}
    for struct, (size, fields) in HALIDE_ABI.items():
        layout[f"sizeof({struct})"] = size
        for field, _, offset in fields:
            layout[f"offsetof({struct}, {field})"] = offset
    layout.update(HALIDE_ENUMS)
    return layout


def _mirror(struct, doc):
    """A ctypes.Structure of HALIDE_ABI's `struct`; its fields' types come from the table, which
    names only structs declared before it."""

    def ctype(name):
        if name in C_SCALARS:
            return C_SCALARS[name]
        if name.endswith(" *"):
            return ctypes.POINTER(ctype(name[:-2]))
        return MIRRORS[name]

    cls = type(struct, (ctypes.Structure,), {
        "__doc__": doc,
        "_fields_": [(field, ctype(t)) for field, t, _ in HALIDE_ABI[struct][1]],
    })
    MIRRORS[struct] = cls
    return cls


MIRRORS = {}  # struct name -> its ctypes mirror, filled by _mirror()
HalideType = _mirror("halide_type_t", "halide_type_t: code, bits, lanes.")
HalideDimension = _mirror("halide_dimension_t", "halide_dimension_t: min, extent, stride, flags.")
HalideDeviceInterface = _mirror(
    "halide_device_interface_t", "halide_device_interface_t: the runtime's entry points, as addresses.")
HalideBufferT = _mirror(
    "halide_buffer_t", "halide_buffer_t, to read (or write) what a published view really holds.")


def raw_buffer(b):
    """b's published halide_buffer_t, read and written in place."""
    return HalideBufferT.from_address(b._get_raw_halide_buffer_t())


def halide_dims(raw):
    """[(min, extent, stride in elements)] of a halide_buffer_t, Halide's dimension 0 first."""
    return [(raw.dim[i].min, raw.dim[i].extent, raw.dim[i].stride) for i in range(raw.dimensions)]


def raw_view(b):
    """(host address, halide_dims()) of b's halide_buffer_t."""
    raw = raw_buffer(b)
    return raw.host, halide_dims(raw)


def opencl_handle(raw):
    """(byte offset, cl_mem) that an OpenCL halide_buffer_t::device points at: the layout of
    Halide's OpenCL runtime, which ours shares."""
    offset, mem = (ctypes.c_uint64 * 2).from_address(raw.device)
    return offset, mem


# ---------------------------------------------------------------------------------------------
# The DLPack structs as C sees them (csrc/abi/dlpack_abi.h)
# ---------------------------------------------------------------------------------------------


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.c_void_p),  # int64_t *
        ("strides", ctypes.c_void_p),  # int64_t *
        ("byte_offset", ctypes.c_uint64),
    ]


class ExchangeAPI(ctypes.Structure):
    """DLPack 1.3's DLPackExchangeAPI: its header (version, prev_api), then its five functions."""

    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("prev_api", ctypes.c_void_p),
                ("managed_tensor_allocator", ctypes.c_void_p),
                ("managed_tensor_from_py_object_no_sync", ctypes.c_void_p),
                ("managed_tensor_to_py_object_no_sync", ctypes.c_void_p),
                ("dltensor_from_py_object_no_sync", ctypes.c_void_p),
                ("current_work_stream", ctypes.c_void_p)]


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def _mallinfo2():
    """glibc's mallinfo2(), or None where there is none (another C library, glibc before 2.33)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        f = libc.mallinfo2
    except (OSError, AttributeError):
        return None
    f.restype = _MallInfo2
    return f


MALLINFO2 = _mallinfo2()  # bytes malloc has handed out: MALLINFO2().uordblks; None where unknown
