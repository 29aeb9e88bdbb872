#!/usr/bin/env python3
"""Fuzzes hb.aot.load and Pipeline with Halide AOT metadata built from fuzz bytes.

    python tests/fuzz/fuzz_aot.py [libFuzzer options] [corpus folders]
    python tests/fuzz/fuzz_aot.py -max_total_time=600 build/fuzz/aot tests/fuzz/corpus/aot

fuzz_pipeline.c is built once into build/fuzz/libhb_fuzz_pipeline.so: a stand-in for a Halide
pipeline library exporting fuzz_argv, fuzz_metadata and halide_set_error_handler. Before each
load the harness rewrites the halide_filter_metadata_t that fuzz_metadata() returns: version,
num_arguments, target, and each argument's name (NULL, empty, huge, not UTF-8, with a NUL
inside), kind (out of range too), dimensions (negative, huge) and type (handle, odd bits and
lanes), and scalar default. Then hb.aot.load(path, "fuzz"); .name, .target, repr() and
.arguments are read; and the pipeline is called with small buffers, arrays, scalars, wrong
objects or nothing, by position or by name. fuzz_argv reads every scalar, answers bounds
queries, reads every input element and writes every output element, and fails when told to.

Checks on top of "no crash, no sanitizer report, no internal error": .arguments lists each
argument but __user_context with one of the three kinds; a pipeline failure raises
PipelineError with the pipeline's code; a call returns one buffer per output.

Metadata Halide never generates must be refused at load (Case.damaged() says which), and
well-formed metadata must load.

Kinds of bug these inputs found, all fixed since; while one is being fixed again, a run can step
over it (HALIDE_BUFFER_FUZZ_KNOWN, comma-separated):
  kind-range        an argument kind outside 0..2 (a table read past its end)
  handle-buffer     a buffer argument of a type no dtype has (a NULL dtype dereferenced)
  negative-dims     negative dimensions of a buffer argument
  huge-dims         a buffer argument of more than 64 dimensions (a bounds query allocates 16
                    bytes per dimension, up to 32 GiB, before the count is checked)
  null-name         a NULL argument name
  null-target       a NULL target string
  handle-scalar     a handle scalar given an int outside 0..2**64-1 or an ndarray (internal error)
  name-utf8         an argument name that is not UTF-8 (UnicodeDecodeError instead of the error)
  error-utf8        a pipeline error message that is not UTF-8 (the process terminates)
  negative-count    a negative num_arguments
  message           a refusal whose message is not the library's (e.g. a C++ exception's)
"""

import ctypes
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fuzz_common as fc  # noqa: E402

atheris = fc.setup_atheris()
import halide_buffer as hb  # noqa: E402

LIBRARY = fc.build_library("fuzz_pipeline.c", "hb_fuzz_pipeline")


class HalideType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class Argument(ctypes.Structure):
    _fields_ = [("name", ctypes.c_void_p), ("kind", ctypes.c_int32), ("dimensions", ctypes.c_int32),
                ("type", HalideType), ("scalar_def", ctypes.c_void_p), ("scalar_min", ctypes.c_void_p),
                ("scalar_max", ctypes.c_void_p), ("scalar_estimate", ctypes.c_void_p),
                ("buffer_estimates", ctypes.c_void_p)]


class Metadata(ctypes.Structure):
    _fields_ = [("version", ctypes.c_int32), ("num_arguments", ctypes.c_int32), ("arguments", ctypes.c_void_p),
                ("target", ctypes.c_void_p), ("name", ctypes.c_void_p)]


assert ctypes.sizeof(Argument) == 64 and ctypes.sizeof(Metadata) == 32

LIB = ctypes.CDLL(LIBRARY)  # the same handle hb.aot.load gets: these globals are the ones it reads
METADATA = Metadata.in_dll(LIB, "fuzz_metadata_value")
RESULT = ctypes.c_int32.in_dll(LIB, "fuzz_argv_result")
MESSAGE = ctypes.c_void_p.in_dll(LIB, "fuzz_error_message")
QUERY_EXTENT = ctypes.c_int32.in_dll(LIB, "fuzz_query_extent")

KINDS_TEXT = ("input_scalar", "input_buffer", "output_buffer")
NAMES = [b"input", b"output", b"a", b"b", b"x", b"gain", b"__user_context", b"", None, b"\xff\xfe", b"ab\x00cd",
         b"n" * 100_000, b"dup", b"dup", "caf\u00e9".encode()]
KINDS = [0, 1, 2, 0, 1, 2, 1, 2, 3, -1, 2**31 - 1, -2**31]
DIMS = [0, 1, 2, 3, 1, 2, -1, -2**31, 2**31 - 1, 64, 65, 1000]
HALIDE_TYPES = sorted({t.halide_type for t in hb.dtypes() if t.halide_type})
ODD_TYPES = [(3, 64, 1), (2, 8, 1), (1, 7, 1), (0, 32, 0), (0, 32, 2), (9, 8, 1), (255, 255, 65535), (2, 128, 1)]
TARGETS = [b"x86-64-linux", b"host", b"x86-64-linux-opencl", b"x86-64-linux-cuda", b"", None, b"\xff",
           b"-opencl-cuda", b"t" * 100_000]
MESSAGES = [b"the pipeline failed", b"", None, b"\xff\xfe", b"line\n", b"m" * 10_000]
RESULTS = [0, 0, 0, 0, -1, -3, 1, -2**31]
QUERY = [1, 2, 3, 0, -1, -2**31, 2**31 - 1]
SCALARS = [0, 1, -1, 7, 255, 256, 2**31, 2**63, -2**63 - 1, 2**64, 1.5, float("nan"), True, None, "x",
           np.int8(3), np.float32(2.5)]


def dtype_of(code, bits, lanes):
    """The first row of the table with this Halide type (the library's choice), or None."""
    for t in hb.dtypes():
        if t.halide_type == (code, bits, lanes):
            return t
    return None


def c_text(keep, value):
    if value is None:
        return None
    buf = ctypes.create_string_buffer(value)
    keep.append(buf)
    return ctypes.addressof(buf)


class Case:
    """Metadata and a call, as the input describes them."""

    def __init__(self, f):
        self.version = f.pick([1, 1, 1, 1, 1, 1, 0, 2, -1])
        n = f.small(0, 5)
        self.args = []
        for _ in range(n):
            a = {"name": f.pick(NAMES) if f.small(0, 2) == 0 else f.pick([b"input", b"output", b"k", b"z"]) + bytes([48 + len(self.args)]),
                 "kind": f.pick(KINDS) if f.small(0, 3) == 0 else f.small(0, 2),
                 "dimensions": f.pick(DIMS) if f.small(0, 3) == 0 else f.small(0, 3),
                 "type": f.pick(ODD_TYPES) if f.small(0, 7) == 0 else f.pick(HALIDE_TYPES),
                 "default": f.pick(SCALARS[:10]) if f.small(0, 3) == 0 else None}
            a["given"] = f.pick(["buffer", "buffer", "array", "none", "scalar", "wrong-dtype", "wrong-dims",
                                 "object", "absent"])
            a["extent"] = f.small(0, 3)
            a["scalar"] = f.pick(SCALARS)
            a["by_name"] = f.small(0, 3) == 0
            self.args.append(a)
        self.count = f.pick([n, n, n, n - 1, -1, -2**31]) if n else f.pick([0, 0, -1])
        self.count = min(self.count, n)  # the array has n entries: more would be someone's memory
        self.target = f.pick(TARGETS)
        self.result = f.pick(RESULTS)
        self.message = f.pick(MESSAGES)
        self.query = f.pick(QUERY)
        self.extra_positional = f.small(0, 15) == 0

    def declared(self):
        return self.args[: max(self.count, 0)]

    def damaged(self):
        """Why aot.load must refuse this metadata (Halide never generates it), or None."""
        def text(value):  # a C string: up to its first NUL, UTF-8 or not
            if value is None:
                return None
            try:
                return value.split(b"\0")[0].decode()
            except UnicodeDecodeError:
                return None

        if self.version != 1:
            return "version"
        if self.count < 0:
            return "negative-count"
        if text(self.target) is None:
            return "target"
        for a in self.declared():
            kind, dims, t = a["kind"], a["dimensions"], a["type"]
            if not text(a["name"]):
                return "name"
            if not 0 <= kind <= 2:
                return "kind-range"
            if kind == 0 and dims != 0:
                return "scalar-dims"
            if kind != 0 and not 0 <= dims <= 64:
                return "dims"
            if kind != 0 and dtype_of(*t) is None:
                return "handle-buffer"
        return None

    def step_over(self):
        """Whether the input hits a known bug the run steps over."""
        for a in self.declared():
            kind, dims, t = a["kind"], a["dimensions"], a["type"]
            if a["name"] is None and fc.known("null-name"):
                return True
            if a["name"] is not None and fc.known("name-utf8"):
                try:
                    a["name"].split(b"\0")[0].decode()
                except UnicodeDecodeError:
                    return True
            if not 0 <= kind <= 2 and fc.known("kind-range"):
                return True
            if kind != 0 and dims < 0 and fc.known("negative-dims"):
                return True
            if kind != 0 and dims > 64 and fc.known("huge-dims"):
                return True
            if kind != 0 and dtype_of(*t) is None and fc.known("handle-buffer"):
                return True
            # Values reach other arguments than their own (by name, shifted positions): any.
            if (kind == 0 and t[0] == 3 and fc.known("handle-scalar") and
                    any(isinstance(b["scalar"], (int, np.integer)) and not 0 <= b["scalar"] < 2**64
                        or b["given"] == "array" for b in self.args)):
                return True
        if self.target is None and fc.known("null-target"):
            return True
        if self.result != 0 and self.message is not None and fc.known("error-utf8"):
            try:
                self.message.decode()
            except UnicodeDecodeError:
                return True
        return self.count < 0 and fc.known("negative-count")

    def install(self):
        """Writes the metadata into the library; returns what must stay alive with it."""
        keep = []
        array = (Argument * max(len(self.args), 1))()
        keep.append(array)
        for slot, a in zip(array, self.args):
            slot.name = c_text(keep, a["name"])
            slot.kind = a["kind"]
            slot.dimensions = a["dimensions"]
            slot.type.code, slot.type.bits, slot.type.lanes = a["type"]
            if a["default"] is not None and isinstance(a["default"], (int, float)):
                value = ctypes.c_uint64(0)
                if isinstance(a["default"], float):
                    ctypes.c_double.from_buffer(value).value = a["default"]
                else:
                    value.value = int(a["default"]) % 2**64
                keep.append(value)
                slot.scalar_def = ctypes.addressof(value)
        METADATA.version = self.version
        METADATA.num_arguments = self.count
        METADATA.arguments = ctypes.addressof(array)
        METADATA.target = c_text(keep, self.target)
        METADATA.name = c_text(keep, b"fuzz")
        RESULT.value = self.result
        MESSAGE.value = c_text(keep, self.message)
        QUERY_EXTENT.value = self.query if self.small_outputs() else 1
        return keep

    def small_outputs(self):
        """Whether outputs allocated after the bounds query stay small (a big one is legitimate,
        and slow)."""
        e = self.query
        for a in self.declared():
            if a["kind"] == 2 and e > 1 and 0 < a["dimensions"] and e ** min(a["dimensions"], 64) * 16 > 1 << 20:
                return False
        return True

    def value_for(self, a):
        """What the call passes for an argument (or `absent`)."""
        given, dims, t = a["given"], a["dimensions"], a["type"]
        row = dtype_of(*t)
        shape = tuple([a["extent"]] * dims) if 0 <= dims <= 6 else (1,)
        if a["kind"] == 0 or given == "scalar":
            return a["scalar"] if given not in ("absent", "none") else None
        if given == "absent":
            return self
        if given == "none":
            return None
        if given == "object":
            return "not a buffer"
        if given == "wrong-dtype" or row is None:
            return hb.Buffer(shape, "complex64" if row is None or row.name != "complex64" else "int8")
        if given == "wrong-dims":
            return hb.Buffer(shape + (1,), row)
        if given == "array":
            return np.zeros(shape, row.numpy)
        return hb.Buffer(shape, row)


def describe(c):
    args = ", ".join(f"{{name={(a['name'] or b'')[:20]!r}{'' if a['name'] is not None else '(NULL)'} "
                     f"kind={a['kind']} dims={a['dimensions']} type={a['type']} given={a['given']}}}" for a in c.args)
    return (f"version={c.version} num_arguments={c.count} target={(c.target or b'')[:30]!r}"
            f"{'' if c.target is not None else '(NULL)'} result={c.result} query={c.query} arguments=[{args}]")


def call(case, p):
    positional, named, given_outputs = [], {}, []
    for a in case.declared():
        if a["name"] == b"__user_context":
            continue
        value = case.value_for(a)
        if value is case:
            continue
        if a["kind"] == 2:
            given_outputs.append(value)
        name = a["name"]
        if a["by_name"] and name:
            try:
                named[name.split(b"\0")[0].decode()] = value
                continue
            except UnicodeDecodeError:
                pass
        if named:  # positional after a keyword cannot be: pass the rest by name too
            named[f"arg{len(named)}"] = value
        else:
            positional.append(value)
    if case.extra_positional:
        positional.append(hb.Buffer((1,), "uint8"))
    out = None
    try:
        out = p(*positional, **named)
    except hb.PipelineError as e:
        fc.check("pipeline-error", case.result != 0 and e.code == case.result,
                 f"PipelineError code {e.code} for a pipeline that returned {case.result}")
        return
    except Exception as e:  # noqa: BLE001 - refusals are fine, anything else is a finding
        fc.refused(e)  # scalars go through NumPy's and Python's own conversions: their messages
        return
    outputs = [a for a in case.declared() if a["kind"] == 2 and a["name"] != b"__user_context"]
    got = out if isinstance(out, tuple) else (out,)
    fc.check("outputs", len(got) == len(outputs), f"{len(got)} results for {len(outputs)} outputs")
    for b in got:  # a Buffer, or the very object given (an ndarray output comes back as given)
        fc.check("outputs", isinstance(b, hb.Buffer) or any(b is g for g in given_outputs),
                 f"an output that is {type(b).__name__}, not the object given")
    # A call whose outputs are all empty computes nothing: the pipeline, and its result, unseen.
    ran = not got or not all((b.size if isinstance(b, hb.Buffer) else np.size(b)) == 0 for b in got)
    fc.check("outputs", case.result == 0 or not ran, f"a pipeline that returned {case.result} gave {type(out).__name__}")


def run(case):
    keep = case.install()
    try:
        p = hb.aot.load(LIBRARY, "fuzz")
    except Exception as e:  # noqa: BLE001
        fc.refused(e, "aot.load")
        fc.check("load", case.damaged() is not None, f"load refused well-formed metadata: {e}")
        return
    fc.check("load", case.damaged() is None, f"loaded metadata it must refuse ({case.damaged()})")
    try:
        p.name, repr(p), p.target
        arguments = p.arguments
    except Exception as e:  # noqa: BLE001
        fc.refused(e)
        arguments = None
    if arguments is not None:
        expected = [a for a in case.declared() if a["name"] != b"__user_context"]
        fc.check("arguments", len(arguments) == len(expected), f"{len(arguments)} arguments for {len(expected)}")
        for d, a in zip(arguments, expected):
            fc.check("kind-range", d["kind"] in KINDS_TEXT, f"kind {d['kind']!r} for {a['kind']}")
            fc.check("arguments", d["dimensions"] == a["dimensions"], f"dimensions {d['dimensions']}")
    call(case, p)
    del p
    del keep



if __name__ == "__main__":
    fc.fuzz(globals(), atheris, Case, Case.step_over, run, describe, "the metadata")
