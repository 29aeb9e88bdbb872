#!/usr/bin/env python3
"""Fuzzes hb.from_dlpack with DLPack tensors built field by field from fuzz bytes.

    python tests/fuzz/fuzz_dlpack.py [libFuzzer options] [corpus folders]
    python tests/fuzz/fuzz_dlpack.py -max_total_time=600 build/fuzz/dlpack tests/fuzz/corpus/dlpack

Every field of a DLManagedTensor (capsule "dltensor") or DLManagedTensorVersioned (capsule
"dltensor_versioned") comes from the input: version, flags, deleter, data, device type and id,
ndim, dtype code/bits/lanes, shape, strides (or NULL), byte_offset. The capsule goes to
hb.from_dlpack raw, or through a producer object with __dlpack__ / __dlpack_device__ (one that
takes max_version, or an old one that refuses it), with copy None, True or False.

Data pointers point into a backing allocation of this harness. A geometry whose elements lie
inside the address space but outside the backing is not run (the library cannot know how big
someone's allocation is); one that leaves the address space must be refused.

Checks on top of "no crash, no sanitizer report, no internal error":
  - what DLPack says is malformed is refused: ndim outside 0..64, a shape missing, negative
    extents, NULL data with elements, NULL strides in a 1.2+ tensor, an unknown dtype or lanes,
    a device the host cannot read, elements outside the address space, another major version;
  - an accepted tensor gives a buffer of its shape and dtype whose values are the backing's
    bytes at the tensor's elements (np.asarray, memoryview, copy(), DLPack round trips), and a
    halide_buffer_t that describes the same elements;
  - the deleter runs exactly once for a tensor that was taken, never for one that was not.

Kinds of bug these inputs found, all fixed since; while one is being fixed again, a run can step
over it (HALIDE_BUFFER_FUZZ_KNOWN, comma-separated):
  stride-overflow   strides[i] * itemsize overflowing int64 on an axis of extent <= 1
  subbyte-lanes     lanes other than 1 accepted for a sub-byte dtype (lanes 0)
  message           a refusal whose message is not the library's (e.g. a C++ exception's)
  cpu-device-id     a CPU tensor with device id != 0 accepted
"""

import ctypes
import gc
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fuzz_common as fc  # noqa: E402

atheris = fc.setup_atheris()
with atheris.instrument_imports():
    import halide_buffer as hb

# The tests' helpers (tests/common.py), imported after halide_buffer so that it is instrumented.
sys.path.insert(1, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
from common import raw_buffer  # noqa: E402

# --- the DLPack ABI (csrc/abi/dlpack_abi.h) -------------------------------------------------------


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


assert ctypes.sizeof(DLTensor) == 48 and ctypes.sizeof(DLManagedTensor) == 64
assert ctypes.sizeof(DLManagedTensorVersioned) == 80

READ_ONLY, IS_COPIED, PADDED = 1, 2, 4
CPU, CUDA, CUDA_HOST, ROCM_HOST = 1, 2, 3, 11
MAX_DIMS = 64
PRODUCER_ERRORS = ("__dlpack__() got an unexpected keyword argument 'max_version'",)
MAX_ADDRESS = 1 << 64

_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi))
_capsule_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", ctypes.pythonapi))

DELETES = {}  # struct address -> deleter calls
DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def _count_delete(address):
    DELETES[address] = DELETES.get(address, 0) + 1


DELETER_FN = DELETER(_count_delete)
DELETER_ADDRESS = ctypes.cast(DELETER_FN, ctypes.c_void_p).value
NAMES = {False: b"dltensor", True: b"dltensor_versioned"}

# The backing memory every data pointer points into, with a pattern to compare values against.
BACKING_SIZE = 1 << 16
BACKING = (np.arange(BACKING_SIZE, dtype=np.uint64) * 2654435761 >> 7).astype(np.uint8)
BASE = BACKING.ctypes.data

# The dtype table by DLPack type: (code, bits) -> (name, itemsize, padded).
TABLE = {t.dlpack_type[:2]: (t.name, t.itemsize, t.dlpack_padded) for t in hb.dtypes()}
TYPES = sorted(t.dlpack_type for t in hb.dtypes())

EXTENTS = [0, 1, 1, 2, 2, 3, 4, 5, 7, 8, 16, 100, 2**31 - 1, 2**31, 2**32, 2**62, 2**63 - 1, -1, -2**63]
STRIDES = [0, 1, 1, -1, 2, -2, 3, 4, -4, 5, 8, 16, -16, 64, 256, -256, 2**31 - 1, -2**31, 2**31, 2**32,
           2**60, 2**61, 2**62, 2**63 - 1, -2**63, -2**62, -2**61]
NDIMS = [0, 1, 1, 2, 2, 3, 4, 5, 64, 65, -1, 2**31 - 1, -2**31]
DEVICES = [CPU] * 6 + [CUDA, CUDA_HOST, 4, 7, 10, ROCM_HOST, 13, 0, -1, 2**31 - 1]
IDS = [0] * 6 + [1, -1, 2**31 - 1, -2**31]
VERSIONS = [(1, 3)] * 4 + [(1, 0), (1, 1), (1, 2), (1, 99), (0, 5), (2, 0), (0xFFFFFFFF, 0xFFFFFFFF)]
OFFSETS = [0, 0, 1, 2, 4, 8, 64, 2**63, 2**64 - 1, 2**64 - 8, 2**63 - 1]
DATA = [0, 0, 1, 64, BACKING_SIZE // 2, BACKING_SIZE - 64, BACKING_SIZE - 1, BACKING_SIZE]


class Producer:
    """A tensor library's object: each __dlpack__ call makes a new capsule of the one tensor."""

    def __init__(self, struct, versioned, device, old_style):
        self.struct, self.versioned, self.device, self.old_style = struct, versioned, device, old_style
        self.capsules = []

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        if self.old_style and (max_version is not None or copy is not None):
            raise TypeError("__dlpack__() got an unexpected keyword argument 'max_version'")
        c = new_capsule(self.struct, self.versioned)
        self.capsules.append(c)
        return c

    def __dlpack_device__(self):
        return self.device


class OldProducer(Producer):
    """One without __dlpack_device__."""

    __dlpack_device__ = None


def new_capsule(struct, versioned):
    return _capsule_new(ctypes.addressof(struct), NAMES[versioned], None)


def int64s(values):
    return (ctypes.c_int64 * max(len(values), 1))(*[v if v < 2**63 else v - 2**64 for v in values])


class Case:
    """One tensor as the input describes it, and what the library must make of it."""

    def __init__(self, f):
        self.versioned = f.flag()
        self.version = f.pick(VERSIONS) if self.versioned else (0, 0)
        self.flags = f.int(64, False, [0, 0, READ_ONLY, IS_COPIED, PADDED, READ_ONLY | PADDED, 7])
        if not self.versioned:
            self.flags = 0
        self.deleter = f.small(0, 7) != 0
        self.device = (f.pick(DEVICES), f.pick(IDS))
        self.ndim = f.pick(NDIMS) if f.small(0, 7) == 0 else f.small(0, 4)
        if f.small(0, 3):
            self.code, self.bits, self.lanes = f.pick(TYPES)
            if f.small(0, 7) == 0:
                self.lanes = f.pick([0, 2, 3, 4, 8, 65535])
        else:
            self.code = f.int(8, False, range(19))
            self.bits = f.int(8, False, [1, 2, 4, 6, 8, 16, 32, 64, 128])
            self.lanes = f.int(16, False, [0, 1, 1, 2, 4])
        stored = max(0, min(self.ndim, MAX_DIMS + 2))  # the entries the struct really has
        self.shape = None if f.small(0, 31) == 0 else [f.pick(EXTENTS) if f.small(0, 3) == 0 else f.small(0, 6)
                                                        for _ in range(stored)]
        self.strides = None if f.small(0, 5) == 0 else [f.pick(STRIDES) if f.small(0, 2) == 0 else f.small(-8, 40)
                                                         for _ in range(stored)]
        self.data_offset = f.pick(DATA) if f.small(0, 3) == 0 else f.small(0, BACKING_SIZE)
        self.byte_offset = f.pick(OFFSETS) if f.small(0, 3) == 0 else f.small(0, 255)
        self.null_data = f.small(0, 15) == 0
        self.wild_data = f.int(64, False) if f.small(0, 15) == 0 else None  # any address at all
        self.copy = f.pick([None, None, True, False])
        self.route = f.pick(["producer", "producer", "capsule", "old", "old-kwargs", "other-device"])
        self.drop_early = f.flag()

    # -- what DLPack and the buffer model say --------------------------------------------------

    def row(self):
        return TABLE.get((self.code, self.bits))

    def packed(self):
        """Packed lanes per element, as the library reads them (0: one element per item)."""
        row = self.row()
        if row and row[2] and not (self.flags & PADDED) and self.lanes >= 1:
            return self.lanes
        return 0

    def unit_bits(self):
        row = self.row()
        return self.bits * self.packed() if self.packed() else row[1] * 8

    def dims(self):
        """The extents (valid for 0 <= ndim <= 64 with a shape, or ndim 0)."""
        return list(self.shape[: self.ndim]) if self.ndim > 0 else []

    def element_strides(self):
        """Strides in elements (NULL strides: C-contiguous)."""
        if self.ndim <= 0:
            return []
        if self.strides is not None:
            return list(self.strides[: self.ndim])
        out, s = [0] * self.ndim, 1
        for i in reversed(range(self.ndim)):
            out[i] = s
            s *= max(self.shape[i], 1)
        return out

    def count(self):
        n = 1
        for e in self.dims():
            n *= e
        return n

    def must_refuse(self):
        """Why DLPack's rules (or the buffer model) say this tensor is malformed, or None.
        `known` bug kinds are not counted."""
        v = self.versioned
        if v and self.version[0] != 1:
            return "another major version"
        dtype, device_id = self.device
        if dtype not in (CPU, CUDA, CUDA_HOST, ROCM_HOST):
            return "a device the host cannot read"
        if dtype == CPU and device_id != 0 and not fc.known("cpu-device-id"):
            return "a CPU tensor with device id != 0"
        if not 0 <= self.ndim <= MAX_DIMS:
            return "ndim out of range"
        if self.ndim > 0 and self.shape is None:
            return "no shape"
        if self.ndim > 0 and self.strides is None and v and self.version >= (1, 2):
            return "NULL strides in 1.2+"
        row = self.row()
        if row is None:
            return "an unknown dtype"
        if self.lanes != 1:
            if not row[2] or self.flags & PADDED:
                return "lanes != 1 of a whole-byte or padded dtype"
            if self.lanes == 0 and not fc.known("subbyte-lanes"):
                return "lanes 0"
            if self.bits * self.lanes % 8:
                return "packed lanes that are no whole bytes"
        if any(e < 0 for e in self.dims()):
            return "a negative extent"
        count = self.count()
        if count >= 2**63:
            return "more than 2**63 elements"
        if count and self.data() == 0:
            return "NULL data with elements"
        r = self.bit_range()
        if r and (r[0] < 0 or r[1] > MAX_ADDRESS * 8):
            return "elements outside the address space"
        if self.data() + self.byte_offset >= MAX_ADDRESS:
            return "data + byte_offset outside the address space"
        return None

    def data(self):
        if self.wild_data is not None:
            return self.wild_data
        return 0 if self.null_data else BASE + self.data_offset

    def first(self):
        return self.data() + self.byte_offset

    def bit_range(self):
        """[lo, hi) in bits of every element's bits, or None with no elements."""
        if any(e <= 0 for e in self.dims()):
            return None
        unit = self.unit_bits()
        r = fc.element_range(0, self.dims(), [s * unit for s in self.element_strides()], unit)
        return (self.first() * 8 + r[0], self.first() * 8 + r[1])

    def byte_range(self):
        r = self.bit_range()
        return None if r is None else (r[0] // 8, -(-r[1] // 8))

    def backed(self):
        r = self.byte_range()
        return r is None or (BASE <= r[0] and r[1] <= BASE + BACKING_SIZE)

    def stride_overflow(self):
        itemsize = self.row()[1] if self.row() else 1
        return any(n <= 1 and not -2**63 <= s * itemsize < 2**63
                   for n, s in zip(self.dims(), self.element_strides()))

    def result_shape(self):
        shape = self.dims()
        return shape + [self.lanes] if self.packed() > 1 else shape

    def expected_bytes(self):
        """The tensor's values as the buffer must hold them (C order, one item per element)."""
        shape, strides = self.dims(), self.element_strides()
        if not self.packed():
            itemsize = self.row()[1]
            view = np.ndarray(shape, np.dtype((np.void, itemsize)), buffer=BACKING, offset=self.first() - BASE,
                              strides=[s * itemsize if n > 1 else 0 for n, s in zip(shape, strides)])
            return view.tobytes()
        bits, lanes = self.bits, self.packed()
        raw = BACKING.tobytes()
        out = bytearray()
        for index in np.ndindex(*shape):
            element = sum(i * s for i, s in zip(index, strides))
            for j in range(lanes):
                bit = (self.first() - BASE) * 8 + (element * lanes + j) * bits
                window = raw[bit // 8] | (raw[bit // 8 + 1] << 8 if bit // 8 + 1 < len(raw) else 0)
                out.append((window >> (bit % 8)) & ((1 << bits) - 1))
        return bytes(out)

    # -- the struct ----------------------------------------------------------------------------

    def build(self):
        s = DLManagedTensorVersioned() if self.versioned else DLManagedTensor()
        if self.versioned:
            s.major, s.minor = self.version
            s.flags = self.flags
        s.deleter = DELETER_ADDRESS if self.deleter else None
        t = s.dl_tensor
        t.data = self.data() or None
        t.device.device_type, t.device.device_id = self.device
        t.ndim = self.ndim
        t.dtype.code, t.dtype.bits, t.dtype.lanes = self.code, self.bits, self.lanes
        self.keep = []
        for field, values in (("shape", self.shape), ("strides", self.strides)):
            if values is not None:
                a = int64s(values)
                self.keep.append(a)
                setattr(t, field, ctypes.addressof(a))
        t.byte_offset = self.byte_offset
        return s


def describe(case):
    return (f"versioned={case.versioned} version={case.version} flags={case.flags:#x} device={case.device} "
            f"ndim={case.ndim} dtype=({case.code}, {case.bits}, {case.lanes}) shape={case.shape} "
            f"strides={case.strides} data=base+{case.data() - BASE} byte_offset={case.byte_offset} "
            f"copy={case.copy} route={case.route}")


def check_halide_buffer(b, a):
    """The halide_buffer_t of `b` describes the elements of `a` (np.asarray(b))."""
    if b.dtype.halide_type is None:
        return  # complex128: refused, Halide has no such type
    raw = raw_buffer(b)
    unit, extra = b.itemsize, 0
    fc.check("halide-buffer", raw.dimensions == a.ndim, f"{raw.dimensions} dimensions for {a.ndim} axes")
    host = raw.host or 0
    fc.check("halide-buffer", a.size == 0 or host == a.ctypes.data,
             f"host {host:#x} is not the first element {a.ctypes.data:#x}")
    for axis in range(a.ndim):
        d = raw.dim[a.ndim - 1 - axis + extra]
        fc.check("halide-buffer", d.extent == a.shape[axis], f"axis {axis}: extent {d.extent} for {a.shape[axis]}")
        if a.shape[axis] > 1 and a.size:
            fc.check("halide-buffer", d.stride * unit == a.strides[axis],
                     f"axis {axis}: stride {d.stride} elements for {a.strides[axis]} bytes")


def read_back(case, b):
    """Everything a reader does with an accepted tensor, checked against the backing's bytes
    (only the description when the tensor is not in the backing)."""
    row = case.row()
    fc.check("shape", list(b.shape) == case.result_shape(), f"shape {b.shape} for {case.result_shape()}")
    fc.check("dtype", b.dtype.name == row[0], f"dtype {b.dtype.name} for {row[0]}")
    a = fc.numpy_view(b)
    if a is None:
        return
    if case.copy is not True and not case.packed():
        fc.check("readonly", b.readonly == bool(case.flags & READ_ONLY), f"readonly {b.readonly}")
        fc.check("wrap", a.size == 0 or a.ctypes.data == case.first(), "the wrap is not at the first element")
    check_halide_buffer(b, a)
    if b.nbytes > fc.READ_LIMIT or a.size == 0 or not case.backed():
        return
    expected = case.expected_bytes()
    got = a.tobytes()
    fc.check("values", got == expected, f"np.asarray(b) holds other values than the tensor: {got[:32]!r} "
             f"for {expected[:32]!r}")
    fc.check_values(b, expected)


def run(case):
    """Imports the case's tensor; checks what comes back."""
    struct = case.build()
    address = ctypes.addressof(struct)
    DELETES.pop(address, None)
    producer = None
    if case.route == "capsule":
        capsules = [new_capsule(struct, case.versioned)]
        source = capsules[0]
    else:
        device = case.device if case.route != "other-device" else (CPU, 0)
        cls = OldProducer if case.route == "old" else Producer
        producer = cls(struct, case.versioned, device, case.route in ("old", "old-kwargs"))
        capsules = producer.capsules
        source = producer
    reason = case.must_refuse()
    b = None
    try:
        b = hb.from_dlpack(source, copy=case.copy)
    except Exception as e:  # noqa: BLE001 - refusals are fine, anything else is a finding
        fc.refused(e, "from_dlpack", PRODUCER_ERRORS)
    del source
    if b is not None:
        fc.check(reason_kind(reason), reason is None, f"accepted a tensor with {reason}: {describe(case)}")
        if reason is None:
            read_back(case, b)
    taken = sum(fc_name(c).startswith(b"used_") for c in capsules)
    fc.check("ownership", taken <= 1, f"{taken} capsules taken for one import")
    if case.drop_early:
        del capsules[:]
    del b, producer
    if DELETES.get(address, 0) != (taken if case.deleter else 0):
        gc.collect()
    deletes = DELETES.get(address, 0)
    fc.check("ownership", deletes == (taken if case.deleter else 0),
             f"the deleter ran {deletes} times for a tensor taken {taken} times: {describe(case)}")
    del struct


def fc_name(capsule):
    return _capsule_name(capsule) or b""


def reason_kind(reason):
    return {"a CPU tensor with device id != 0": "cpu-device-id", "lanes 0": "subbyte-lanes"}.get(reason, "accepted")


def skip(case):
    """Inputs this harness does not run: memory it cannot back, copies too big to make here,
    and known bugs."""
    if case.ndim < 0 or case.ndim > MAX_DIMS or (case.ndim and case.shape is None) or case.row() is None:
        return False  # refused before any element is reached
    if any(e < 0 for e in case.dims()):
        return False
    if fc.known("stride-overflow") and case.stride_overflow():
        return True
    count = case.count()
    if count == 0 or count >= 2**63 or case.data() == 0:
        return False
    r = case.byte_range()
    if r[0] < 0 or r[1] > MAX_ADDRESS or case.first() >= MAX_ADDRESS:
        return False  # must be refused: no element is ever read
    if not case.backed():
        # Someone's memory we do not have: a copy (or unpacking) would read it; a wrap is
        # checked, never read.
        return case.copy is True or bool(case.packed())
    if (case.copy is True or case.packed()) and count * max(case.row()[1], case.packed() or 1) > fc.READ_LIMIT:
        case.copy = None  # a copy of that size is legitimate, and too slow for a fuzzer
        if case.packed():
            return True
    return False



if __name__ == "__main__":
    fc.fuzz(globals(), atheris, Case, skip, run, describe, "the tensor")
