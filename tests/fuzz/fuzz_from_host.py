#!/usr/bin/env python3
"""Fuzzes Buffer.from_host with buffer-protocol exporters whose Py_buffer fields come from
fuzz bytes.

    python tests/fuzz/fuzz_from_host.py [libFuzzer options] [corpus folders]
    python tests/fuzz/fuzz_from_host.py -max_total_time=600 build/fuzz/from_host tests/fuzz/corpus/from_host

The exporter is fuzz_exporter.Exporter, a small CPython extension built from exporter.c at
start (into build/fuzz/): its getbuffer fills format, itemsize, ndim, shape, strides,
suboffsets, readonly, len and buf as the input says (shape, strides, suboffsets NULL or arrays
of ndim entries), or refuses. Buffer.from_host takes it with copy False or True.

The buffer points into a backing allocation of this harness. A geometry whose elements lie in
the address space but outside the backing is not run: an exporter is trusted to describe
memory it has (the library cannot check a pointer); a geometry that leaves the address space
cannot describe memory at all.

Checks on top of "no crash, no sanitizer report, no internal error":
  - refused: suboffsets, a format or itemsize the dtype table lacks, ndim outside 0..64,
    negative extents, extents or strides beyond Halide's int32, strides that are not whole
    elements, elements outside the address space;
  - accepted: the buffer has the exporter's shape, strides (where they matter), dtype, data
    pointer and read-only flag (wraps), and holds the exporter's values (np.asarray, copy(),
    memoryview, a DLPack round trip);
  - every getbuffer is matched by exactly one releasebuffer once the buffer is gone.

Kinds of bug these inputs found, all fixed since; while one is being fixed again, a run can step
over it (HALIDE_BUFFER_FUZZ_KNOWN, comma-separated):
  address-space     a geometry whose elements leave the address space accepted
  negative-ndim     a negative ndim not refused (crash or internal error)
  message           a refusal whose message is not the library's (e.g. a C++ exception's)
  null-shape        a NULL shape with ndim >= 2 dereferenced
  c-strides-overflow  C-contiguous strides (no strides given) overflowing int64 before the
                    shape is checked (UBSan)
  itemsize-truncation  a format-less export's itemsize beyond int32 truncated in its
                    C-contiguous strides (no strides given)
  len-division      len / itemsize trapping (itemsize 0, or len -2**63 and itemsize -1; no format,
                    one axis, no shape)
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fuzz_common as fc  # noqa: E402

atheris = fc.setup_atheris()
import halide_buffer as hb  # noqa: E402

sys.path.insert(0, os.path.dirname(fc.build_library("exporter.c", "fuzz_exporter", python_extension=True)))
import fuzz_exporter  # noqa: E402

EXPORTER_ERRORS = ("this exporter refuses", "read-only exporter")
MAX_DIMS = 64
MAX_ADDRESS = 1 << 64
INT32_MAX = 2**31 - 1

BACKING_SIZE = 1 << 16
BACKING = (np.arange(BACKING_SIZE, dtype=np.uint64) * 2654435761 >> 7).astype(np.uint8)
BASE = BACKING.ctypes.data

# Format -> itemsize of the rows the buffer protocol can carry (with byte-order prefixes).
FORMATS = [(t.format, t.itemsize) for t in hb.dtypes() if t.format]
ALIASES = [("l", 8), ("L", 8), ("n", 8), ("N", 8), ("c", 1), ("i", 4), ("q", 8)]
ODD_FORMATS = [b"", b"x", b"4i", b"T{i:x:}", b">i", b"!i", b"ii", b"Zq", b"\xff", b"i\x00junk", b"@", b"<",
               b"O", b"P", b"?" * 300]
EXTENTS = [0, 1, 1, 2, 2, 3, 4, 5, 8, 16, INT32_MAX, INT32_MAX + 1, 2**40, 2**62, 2**63 - 1, -1, -2**63]
STRIDES_EL = [0, 1, 1, -1, 2, -2, 3, 4, -4, 8, 16, -16, 64, 256]
STRIDES_BYTES = [0, 1, -1, 3, 7, 2**31 - 1, 2**31, -2**31, 2**33, 2**34 + 16, -2**34, 2**62, 2**63 - 1, -2**63]
NDIMS = [0, 1, 1, 1, 2, 2, 3, 4, 64, 65, 100, -1, -2, -2**31]
ITEMSIZES = [0, 1, 2, 3, 4, 8, 16, -1, -8, 2**31, 2**62, 2**63 - 1, -2**63]


def clamp(v):
    """v, saturated to Py_ssize_t."""
    return max(min(v, 2**63 - 1), -2**63)


class Case:
    """One export as the input describes it."""

    def __init__(self, f):
        choice = f.small(0, 7)
        if choice <= 4:
            fmt, self.itemsize = f.pick(FORMATS)
            self.format = (f.pick(["", "", "@", "=", "<"]) + fmt).encode()
        elif choice == 5:
            fmt, self.itemsize = f.pick(ALIASES)
            self.format = fmt.encode()
        elif choice == 6:
            self.format, self.itemsize = None, f.pick([1, 1, 2, 4, 0, -1])
        else:
            self.format = f.pick(ODD_FORMATS) if f.flag() else f.bytes(f.small(0, 8)).replace(b"\0", b"")
            self.itemsize = f.pick(ITEMSIZES)
        if f.small(0, 7) == 0:
            self.itemsize = f.pick(ITEMSIZES)
        self.ndim = f.pick(NDIMS) if f.small(0, 5) == 0 else f.small(0, 4)
        n = max(0, self.ndim)
        unit = self.itemsize if self.itemsize > 0 else 1
        self.shape = None if f.small(0, 9) == 0 else tuple(
            f.pick(EXTENTS) if f.small(0, 4) == 0 else f.small(0, 6) for _ in range(n))
        self.strides = None if f.small(0, 3) == 0 else tuple(
            f.pick(STRIDES_BYTES) if f.small(0, 4) == 0 else clamp(f.pick(STRIDES_EL) * unit) for _ in range(n))
        self.suboffsets = None if f.small(0, 15) else tuple(f.pick([-1, 0, 8]) for _ in range(n))
        self.readonly = f.flag()
        self.fail = f.small(0, 31) == 0
        place = f.small(0, 15)
        self.buf = 0 if place == 0 else (f.int(64, False) if place == 1 else BASE + f.small(0, BACKING_SIZE))
        self.len_choice = f.small(0, 7)
        self.len = f.int(64, True, [0, 1, 8, BACKING_SIZE]) if self.len_choice == 0 else None
        self.copy = f.small(0, 3) == 0
        self.external_writes = f.flag()

    def exported_len(self):
        """len: as a C exporter would compute it (product * itemsize), or fuzzed."""
        if self.len is not None:
            return self.len
        n = self.itemsize
        for e in self.shape or ():
            n *= e
        return clamp(n)

    def dims(self):
        """The shape the library reads (len / itemsize for one axis without a shape)."""
        if self.ndim <= 0:
            return []
        if self.shape is None:
            if self.ndim != 1 or self.itemsize == 0:
                return None
            q = abs(self.exported_len()) // abs(self.itemsize)  # C division truncates
            return [q if (self.exported_len() >= 0) == (self.itemsize > 0) else -q]
        return list(self.shape[: self.ndim])

    def unit(self):
        """The bytes of one element as the library reads them: its dtype's itemsize."""
        return 1 if self.format is None else self.itemsize

    def byte_strides(self):
        dims = self.dims()
        if self.strides is not None:
            return list(self.strides[: self.ndim])
        out, s = [0] * len(dims), self.itemsize  # C-contiguous in the exporter's itemsize
        for i in reversed(range(len(dims))):
            out[i] = s
            s *= max(dims[i], 1)
        return out

    def byte_range(self):
        dims = self.dims()
        return fc.element_range(self.buf, dims, self.byte_strides(), self.unit())

    def must_refuse(self):
        """Why the input must be refused, or None (known bug kinds are not counted)."""
        if self.fail:
            return "getbuffer failed"
        if self.suboffsets is not None:
            return "suboffsets"
        if self.ndim < 0:
            return None if fc.known("negative-ndim") else "a negative ndim"
        if self.ndim > MAX_DIMS:
            return "ndim > 64"
        dims = self.dims()
        if dims is None:
            return "no shape"
        if any(e < 0 for e in dims):
            return "a negative extent"
        if any(e > INT32_MAX for e in dims):
            return "an extent beyond int32"
        return None

    def checks_after(self, b):
        """What an accepted buffer must be."""
        dims = self.dims()
        fc.check("shape", list(b.shape) == dims, f"shape {b.shape} for {dims}")
        fc.check("dtype", b.itemsize == self.unit(), f"{b.dtype.name} for format {self.format!r}, itemsize "
                 f"{self.itemsize}")
        if self.copy:
            return
        fc.check("readonly", b.readonly == bool(self.readonly), f"readonly {b.readonly} for {self.readonly}")
        for n, s, got in zip(dims, self.byte_strides(), b.strides):
            if n > 1 and b.size:
                fc.check("strides", got == s, f"strides {b.strides} for {self.byte_strides()}")
                fc.check("strides", s % b.itemsize == 0 and -2**31 <= s // b.itemsize <= INT32_MAX,
                         f"stride {s} (itemsize {b.itemsize}) accepted")
        r = self.byte_range()
        if r is not None:
            fc.check("address-space", 0 <= r[0] and r[1] <= MAX_ADDRESS,
                     f"accepted elements at [{r[0]:#x}, {r[1]:#x}), outside the address space")

    def backed(self):
        r = self.byte_range()
        return r is None or (BASE <= r[0] and r[1] <= BASE + BACKING_SIZE)


def describe(c):
    return (f"format={c.format!r} itemsize={c.itemsize} ndim={c.ndim} shape={c.shape} strides={c.strides} "
            f"suboffsets={c.suboffsets} readonly={c.readonly} fail={c.fail} buf=base+{c.buf - BASE} "
            f"len={c.exported_len()} copy={c.copy}")


def read_back(case, b):
    a = fc.numpy_view(b)
    if a is None:
        return
    if not case.copy:
        fc.check("wrap", a.size == 0 or a.ctypes.data == case.buf, "the wrap is not at buf")
    if b.nbytes > fc.READ_LIMIT or a.size == 0:
        return
    dims = case.dims()
    expected = np.ndarray(dims, np.dtype((np.void, b.itemsize)), buffer=BACKING, offset=case.buf - BASE,
                          strides=[s if n > 1 else 0 for n, s in zip(dims, case.byte_strides())]).tobytes()
    fc.check("values", a.tobytes() == expected, "np.asarray(b) holds other values than the export")
    fc.check_values(b, expected)


def run(case):
    exporter = fuzz_exporter.Exporter(
        case.buf, case.exported_len(), case.readonly, case.itemsize, case.format,
        case.ndim, case.shape, case.strides, case.suboffsets, case.fail)
    reason = case.must_refuse()
    b = None
    try:
        b = hb.Buffer.from_host(exporter, copy=case.copy, external_writes=case.external_writes)
    except Exception as e:  # noqa: BLE001 - refusals are fine, anything else is a finding
        fc.refused(e, "Buffer.from_host", EXPORTER_ERRORS)
    if b is not None:
        fc.check("accepted", reason is None, f"accepted an export with {reason}")
        case.checks_after(b)
        if case.backed():
            read_back(case, b)
        if not case.copy:
            fc.check("release", exporter.gets - exporter.releases == 1,
                     f"{exporter.gets} getbuffer, {exporter.releases} releasebuffer while a wrap is alive")
    del b
    fc.check("release", exporter.gets == exporter.releases,
             f"{exporter.gets} getbuffer, {exporter.releases} releasebuffer once the buffer is gone")


def c_strides_overflow(dims, itemsize):
    """Whether C-contiguous strides over `dims` overflow int64 in the library's loop (the
    itemsize as a C int, then times each extent, 0 counting as 1)."""
    s = (itemsize + 2**31) % 2**32 - 2**31
    for n in reversed(dims):
        s *= max(n, 1)
        if not -2**63 <= s < 2**63:
            return True
    return False


def skip(case):
    """Inputs not run: memory this harness cannot back, and known bugs."""
    if case.fail or case.suboffsets is not None:
        return False
    if (case.format is None and case.ndim == 1 and case.shape is None and
            (case.itemsize == 0 or (case.itemsize == -1 and case.exported_len() == -2**63))):
        return fc.known("len-division")
    if case.shape is None and case.ndim >= 2:
        return fc.known("null-shape")
    if case.format is None and case.strides is None and case.ndim >= 1 and not -2**31 <= case.itemsize < 2**31:
        return fc.known("itemsize-truncation")
    if case.ndim < 0:
        return fc.known("negative-ndim")
    dims = case.dims()
    if dims is None:
        return False
    if case.strides is None and fc.known("c-strides-overflow") and c_strides_overflow(dims, case.itemsize):
        return True  # computed before ndim and the extents are checked
    if case.ndim > MAX_DIMS:
        return False
    if any(e < 0 or e > INT32_MAX for e in dims):
        return False
    if case.copy and np.prod(dims, dtype=object) * max(case.unit(), 1) > fc.READ_LIMIT:
        case.copy = False  # a copy of that size is legitimate, and too slow for a fuzzer
    r = case.byte_range()
    if r is None or case.backed():
        return False
    if r[0] < 0 or r[1] > MAX_ADDRESS:
        # No memory at all: a wrap must be refused; a copy would read it (the exporter lied).
        return case.copy or fc.known("address-space")
    # Someone's memory we do not have: a copy would read it; a wrap is checked, never read.
    return case.copy



if __name__ == "__main__":
    fc.fuzz(globals(), atheris, Case, skip, run, describe, "the export")
