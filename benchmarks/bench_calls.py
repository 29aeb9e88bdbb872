"""Small calls: what the commonest one-line calls cost, ours beside a peer's, in wall time or in
instructions.

Run:  python benchmarks/bench_calls.py [--number N] [--repeat R] [--json PATH]
      python benchmarks/bench_calls.py --instructions [--quick] [--json PATH]
      python benchmarks/bench_calls.py --instructions --quick --check FILE [--require-all]
      python benchmarks/bench_calls.py --instructions --quick --update FILE

Every row is one call of ours beside the same thing done by a peer, both measured in the same
run; its figure is ours / peer, and its goal the largest ratio the project aims for. ``a`` and
``o`` are float32 (4, 4) ndarrays, ``b`` a ``Buffer((4, 4), "float32")``, ``h`` a
``halide.Buffer(a)``, ``n`` a nanobind ndarray (float32 (4, 4)), ``t`` and ``to`` float32 (4, 4)
CPU torch tensors:

* ``p(a, 3, o)`` through ``hb.aot`` against ``f(a, 3, o)``, Halide's generated Python extension,
  for the host pipeline ``out(x, y) = in(x, y) + k`` (an int32 scalar ``k``), on the same
  ndarrays: goal <= 0.8.
* ``hb.Buffer((4, 4), "float32")`` against ``np.zeros((4, 4), np.float32)``: goal <= 2.
* ``b[1:3]`` against ``a[1:3]``: goal <= 2.
* ``hb.Buffer.from_host(a)`` against ``np.asarray(memoryview(a))`` (goal <= 1.5) and against
  ``halide.Buffer(a)`` (goal <= 0.8).
* ``np.asarray(hb.Buffer.from_halide(h))`` against ``np.asarray(h)``: goal <= 1.5.
* ``np.asarray(b)`` against ``np.asarray(n)``: goal <= 1.0.
* ``p(bi, 3, bo)`` through ``hb.aot`` on Buffers against the FASTCALL limit of the same call
  (``bench_aot_calls.py``'s ``peer_fastcall_aot.cpp``: one ``METH_FASTCALL`` function over the
  pipeline's entry point with the two ``halide_buffer_t`` addresses taken once): goal <= 2.0.
* ``p(t, to)`` through ``hb.aot`` on torch tensors, and ``p(a, ao)`` on ndarrays, against
  ``f(t, to)`` and ``f(a, ao)``, Apache TVM FFI's ``add_one`` (``bench_tvm_ffi.py``'s peer,
  ``peer_tvm_ffi_add.cpp``) on the same kind of arguments, for the host pipeline ``out(x, y) =
  in(x, y) + 1`` on float32 (no scalar): goal <= 1.0 each.
* Informational: ``id(b)``, the floor of the loop.

The pipeline and the extension are built when the script runs, by ``bench_pipelines.py`` (its
``add_k_func`` on float32), the FASTCALL limit by ``bench_aot_calls.py``; the nanobind peer is
``bench_dlpack.py``'s; the ``+ 1`` pipeline and the TVM FFI peer are ``bench_tvm_ffi.py``'s. A row
whose peer cannot be built (no ``halide`` wheel, no compiler, no nanobind, no PyTorch, no TVM FFI)
is reported skipped, with the reason; the rest still runs.

Wall time (the default): every call is timed with ``timeit`` as ``repeat`` rounds of ``number``
calls, the rounds of all cases interleaved, the best round giving the per-call cost.

Instructions (``--instructions``): the instructions a call executes, counted by valgrind's
callgrind in a child Python (``PYTHONHASHSEED=0``) that counts nothing at start; the TVM FFI rows
in a second one (importing tvm_ffi imports PyTorch, which moves other rows' counts). A small C
library of callgrind's client requests, compiled when the script runs and loaded with ctypes,
brackets each loop: every case is warmed up, then run as a loop of N1 calls and one of N2 calls,
each counted on its own; the per-call figure is (I(N2) - I(N1)) / (N2 - N1), so what a loop
costs once (timeit's setup, the brackets) cancels. The child gets a small fixed environment,
padded to a fixed size, and sees its files by relative names: with the same build, checkout and
versions the counts repeat exactly, whatever the load of the machine. Another machine,
compiler or checkout folder may move them by a few per cent (memory layout, the CPU's code
paths), which --check's 10% leaves room for.

``--check FILE`` compares each row's instruction ratio with the one FILE keeps and exits with
status 1, naming the row, when a ratio grew by more than 10% (an improvement passes).
``--update FILE`` rewrites FILE with this run's counts, ratios and environment. Both imply
``--instructions``. A skipped row is not a failure unless ``--require-all`` is given (as in CI,
where every peer can be built).

Exit status: 0; 1 when --check fails or a case does not do what its row says (a ``WARNING:``
line); 2 when --instructions cannot count (no valgrind, no C compiler or valgrind headers).

Absolute figures belong to one machine, one build and one set of versions; the ratios are what
to compare. The goals are reported, not enforced: --check only keeps a ratio from growing.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import halide_buffer as hb

from bench_common import Case, environment, environment_line, finish, noisy_timings, run_cases

HERE = Path(__file__).resolve().parent
SMALL = (4, 4)
PIPELINE = "hb_bench_add_k"
K = 3
TOLERANCE = 0.10  # --check: the most a row's instruction ratio may grow over the committed one

# Loop lengths of --instructions: (warm-up calls, N1, N2).
CALLS_FULL = (2000, 2000, 12000)
CALLS_QUICK = (500, 1000, 3000)


# --------------------------------------------------------------------------------------------
# The rows
# --------------------------------------------------------------------------------------------


class Row:
    """One comparison: a case of ours against a case of a peer, and the ratio the project aims for."""

    def __init__(self, key, label, ours, peer, goal):
        self.key = key      # stable name, in the figures file and --json
        self.label = label  # what the tables print
        self.ours = ours    # the key of our case
        self.peer = peer    # the key of the peer's case
        self.goal = goal    # the largest ours / peer the project aims for


ROWS = [
    Row("aot_call", "p(a, 3, o): hb.aot / generated extension", "aot_ndarrays", "extension_ndarrays", 0.8),
    Row("buffer_new", 'Buffer((4, 4), "float32") / np.zeros', "buffer_new", "ndarray_zeros", 2.0),
    Row("slice", "b[1:3] / a[1:3]", "buffer_slice", "ndarray_slice", 2.0),
    Row("from_host_vs_numpy", "Buffer.from_host(a) / np.asarray(memoryview(a))", "from_host",
        "asarray_memoryview", 1.5),
    Row("from_host_vs_halide", "Buffer.from_host(a) / halide.Buffer(a)", "from_host", "halide_buffer", 0.8),
    Row("from_halide", "np.asarray(Buffer.from_halide(h)) / np.asarray(h)", "asarray_from_halide",
        "asarray_halide", 1.5),
    Row("asarray", "np.asarray(b) / np.asarray(n), nanobind", "asarray_buffer", "asarray_nanobind", 1.0),
    Row("aot_limit", "p(bi, 3, bo): hb.aot on Buffers / FASTCALL limit", "aot_buffers", "fastcall_limit", 2.0),
    Row("tvm_ffi_tensors", "p(t, to): hb.aot on torch tensors / TVM FFI", "aot_tensors", "tvm_ffi_tensors", 1.0),
    Row("tvm_ffi_ndarrays", "p(a, ao): hb.aot on ndarrays / TVM FFI", "aot_ndarrays_add_one", "tvm_ffi_ndarrays",
        1.0),
]


# --------------------------------------------------------------------------------------------
# The peers, built when the script runs
# --------------------------------------------------------------------------------------------


def build_pipeline(hl, workdir):
    """The pipeline ``out(x, y) = in(x, y) + k`` on float32, as a shared library (for hb.aot) and
    as Halide's generated extension, built by bench_pipelines.py. Returns {"library",
    "extension"} paths (None where one could not be built) and {"pipeline", "extension"} reasons."""
    from bench_pipelines import BuildError, add_k_func
    from bench_pipelines import build_pipeline as build

    paths, reasons = {"library": None, "extension": None}, {}
    try:
        built = build(hl, workdir, PIPELINE, False, True,
                      lambda hl, name, gpu: add_k_func(hl, name, gpu, hl.Float(32)))
    except BuildError as e:
        reasons["pipeline"] = str(e)
        return paths, reasons
    paths["library"] = str(built.library)
    if built.extension is None:
        reasons["extension"] = built.extension_reason
    else:
        paths["extension"] = built.extension.__file__
    return paths, reasons


def build_all(workdir):
    """Everything the rows need that is built at run time, as paths a child process can load
    (see load_all()): {"halide", "torch": bool, "library", "extension", "limit", "add_one",
    "tvm_ffi", "nanobind": path or None, "reasons": {what: why it is missing}}."""
    spec = {"halide": False, "torch": False, "library": None, "extension": None, "limit": None, "add_one": None,
            "tvm_ffi": None, "nanobind": None, "reasons": {}}
    from bench_pipelines import BuildError
    from bench_tvm_ffi import build_add_one, build_tvm_peer

    try:
        import torch  # noqa: F401
    except ImportError as e:
        spec["reasons"]["torch"] = f"PyTorch is not installed (pip install torch): {e}"
    else:
        spec["torch"] = True
    peer, why = build_tvm_peer(workdir)
    if peer is None:
        spec["reasons"]["tvm_ffi"] = why
    else:
        spec["tvm_ffi"] = str(peer)
    try:
        import halide as hl
    except ImportError as e:
        spec["reasons"]["halide"] = f"the halide wheel is not installed (pip install 'halide>=21,<22'): {e}"
    else:
        spec["halide"] = True
        paths, reasons = build_pipeline(hl, workdir)
        spec.update(paths)
        spec["reasons"].update(reasons)
        from bench_aot_calls import build_limit

        module, why = build_limit(hl, workdir)
        if module is None:
            spec["reasons"]["limit"] = why
        else:
            spec["limit"] = module.__file__
        try:
            spec["add_one"] = str(build_add_one(hl, workdir))
        except BuildError as e:
            spec["reasons"]["add_one"] = str(e)
    # bench_dlpack.py's nanobind ndarray. Importing bench_dlpack imports PyTorch, as the TVM FFI
    # rows do (in the counting child too).
    from bench_dlpack import build_peer

    module, why = build_peer(workdir)
    if module is None:
        spec["reasons"]["nanobind"] = why
    else:
        spec["nanobind"] = module.__file__
        spec["nanobind_version"] = module.nanobind_version
    return spec


class Loaded:
    """What load_all() made of a spec: the modules and objects the cases call."""

    hl = p = f = nb = limit = fn = p1 = tvm = torch = None


def import_from(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_all(spec):
    got = Loaded()
    if spec["halide"]:
        import halide as hl

        got.hl = hl
    if spec["library"]:
        got.p = hb.aot.load(spec["library"], PIPELINE)
        got.fn = ctypes.CDLL(spec["library"])[PIPELINE]  # the library hb.aot opened: the same runtime
    if spec["limit"] and got.fn is not None:
        got.limit = import_from(Path(spec["limit"]), "peer_fastcall_aot")
    if spec["extension"]:
        got.f = getattr(import_from(Path(spec["extension"]), PIPELINE), PIPELINE)
    if spec["nanobind"]:
        got.nb = import_from(Path(spec["nanobind"]), "peer_nanobind_ndarray")
    if spec["add_one"]:
        from bench_tvm_ffi import ADD_ONE

        got.p1 = hb.aot.load(spec["add_one"], ADD_ONE)
    if spec["tvm_ffi"]:
        from bench_tvm_ffi import load_tvm_peer

        got.tvm = load_tvm_peer(spec["tvm_ffi"])
    if spec["torch"]:
        import torch

        got.torch = torch
    return got


# --------------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------------


def inputs():
    a = np.arange(16, dtype=np.float32).reshape(SMALL)
    return a, np.zeros(SMALL, np.float32), hb.Buffer(SMALL, "float32")


def bound_limit(got, bi, bo):
    """The FASTCALL limit's call bound to the pipeline and to bi and bo (the module keeps one
    binding: the latest)."""
    got.limit.bind(ctypes.cast(got.fn, ctypes.c_void_p).value, bi, bi._get_raw_halide_buffer_t(),
                   bo, bo._get_raw_halide_buffer_t())
    return got.limit.call


def make_cases(got):
    """Every case the rows name that can run here, and the id() floor. The same cases are timed
    in this process or counted in the child."""
    a, o, b = inputs()
    asarray = np.asarray
    cases = []
    if got.p is not None:
        cases.append(Case("aot_ndarrays", "p(a, 3, o), hb.aot", "p(a, k, o)", {"p": got.p, "a": a, "k": K, "o": o},
                          "ours"))
    if got.p is not None:
        bi, bo = hb.Buffer.from_host(a.copy()), hb.Buffer(SMALL, "float32")
        cases.append(Case("aot_buffers", "p(bi, 3, bo), hb.aot on Buffers", "p(a, k, o)",
                          {"p": got.p, "a": bi, "k": K, "o": bo}, "ours"))
    if got.limit is not None:
        bi, bo = hb.Buffer.from_host(a.copy()), hb.Buffer(SMALL, "float32")
        cases.append(Case("fastcall_limit", "c(bi, 3, bo), the FASTCALL limit", "c(a, k, o)",
                          {"c": bound_limit(got, bi, bo), "a": bi, "k": K, "o": bo}, "peer"))
    if got.f is not None:
        cases.append(Case("extension_ndarrays", "f(a, 3, o), generated extension", "f(a, k, o)",
                          {"f": got.f, "a": a, "k": K, "o": o.copy()}, "peer"))
    if got.p1 is not None and got.torch is not None:
        t, to = got.torch.from_numpy(a.copy()), got.torch.zeros(SMALL)
        cases.append(Case("aot_tensors", "p(t, to), hb.aot on torch tensors", "p(t, o)",
                          {"p": got.p1, "t": t, "o": to}, "ours"))
    if got.tvm is not None and got.torch is not None:
        t, to = got.torch.from_numpy(a.copy()), got.torch.zeros(SMALL)
        cases.append(Case("tvm_ffi_tensors", "f(t, to), TVM FFI on torch tensors", "f(t, o)",
                          {"f": got.tvm, "t": t, "o": to}, "peer"))
    if got.p1 is not None:
        cases.append(Case("aot_ndarrays_add_one", "p(a, ao), hb.aot on ndarrays", "p(a, o)",
                          {"p": got.p1, "a": a.copy(), "o": o.copy()}, "ours"))
    if got.tvm is not None:
        cases.append(Case("tvm_ffi_ndarrays", "f(a, ao), TVM FFI on ndarrays", "f(a, o)",
                          {"f": got.tvm, "a": a.copy(), "o": o.copy()}, "peer"))
    cases += [
        Case("buffer_new", 'Buffer((4, 4), "float32")', "B(s, d)", {"B": hb.Buffer, "s": SMALL, "d": "float32"},
             "ours"),
        Case("ndarray_zeros", "np.zeros((4, 4), np.float32)", "z(s, d)",
             {"z": np.zeros, "s": SMALL, "d": np.float32}, "peer"),
        Case("buffer_slice", "b[1:3]", "b[1:3]", {"b": b}, "ours"),
        Case("ndarray_slice", "a[1:3]", "a[1:3]", {"a": a}, "peer"),
        Case("from_host", "Buffer.from_host(a)", "F(a)", {"F": hb.Buffer.from_host, "a": a}, "ours"),
        Case("asarray_memoryview", "np.asarray(memoryview(a))", "g(m(a))",
             {"g": asarray, "m": memoryview, "a": a}, "peer"),
    ]
    if got.hl is not None:
        # h views a; no Buffer over h is kept, so every from_halide(h) makes and drops the binding.
        h = got.hl.Buffer(a)
        cases += [
            Case("halide_buffer", "halide.Buffer(a)", "H(a)", {"H": got.hl.Buffer, "a": a}, "peer"),
            Case("asarray_from_halide", "np.asarray(Buffer.from_halide(h))", "g(F(h))",
                 {"g": asarray, "F": hb.Buffer.from_halide, "h": h}, "ours"),
            Case("asarray_halide", "np.asarray(h)", "g(h)", {"g": asarray, "h": h}, "peer"),
        ]
    cases.append(Case("asarray_buffer", "np.asarray(b)", "g(b)", {"g": asarray, "b": b}, "ours"))
    if got.nb is not None:
        cases.append(Case("asarray_nanobind", "np.asarray(n), nanobind", "g(n)",
                          {"g": asarray, "n": got.nb.matrix()}, "peer"))
    cases.append(Case("call_floor", "id(b), the loop's floor", "f(b)", {"f": id, "b": b}, "info"))
    return cases


def sanity_checks(got):
    """Each case does what its row says, before anything is measured."""
    problems = []
    a, o, b = inputs()
    if got.p is not None:
        got.p(a, K, o)
        if not np.array_equal(o, a + K):
            problems.append("hb.aot p(a, 3, o) did not write a + 3 into o")
    if got.f is not None:
        o2 = np.zeros(SMALL, np.float32)
        got.f(a, K, o2)
        if not np.array_equal(o2, a + K):
            problems.append("the generated extension f(a, 3, o) did not write a + 3 into o")
    if got.p is not None:
        bi, bo = hb.Buffer.from_host(a.copy()), hb.Buffer(SMALL, "float32")
        if got.p(bi, K, bo) is not bo or not np.array_equal(np.asarray(bo), a + K):
            problems.append("hb.aot p(bi, 3, bo) on Buffers did not write a + 3 into bo")
    if got.limit is not None:
        bi, bo = hb.Buffer.from_host(a.copy()), hb.Buffer(SMALL, "float32")
        if bound_limit(got, bi, bo)(bi, K, bo) is not bo or not np.array_equal(np.asarray(bo), a + K):
            problems.append("the FASTCALL limit c(bi, 3, bo) did not write a + 3 into bo")
    if got.torch is not None:
        for what, call in (("hb.aot p(t, to)", got.p1), ("TVM FFI f(t, to)", got.tvm)):
            if call is None:
                continue
            t, to = got.torch.from_numpy(a.copy()), got.torch.zeros(SMALL)
            call(t, to)
            if not np.array_equal(to.numpy(), a + 1):
                problems.append(f"{what} on torch tensors did not write t + 1 into to")
    for what, call in (("hb.aot p(a, ao)", got.p1), ("TVM FFI f(a, ao)", got.tvm)):
        if call is None:
            continue
        ao = np.zeros(SMALL, np.float32)
        call(a, ao)
        if not np.array_equal(ao, a + 1):
            problems.append(f"{what} on ndarrays did not write a + 1 into ao")
    if np.asarray(b[1:3]).shape != (2, 4):
        problems.append(f"b[1:3] has shape {np.asarray(b[1:3]).shape}, not (2, 4)")
    if np.asarray(hb.Buffer.from_host(a)).__array_interface__["data"][0] != a.__array_interface__["data"][0]:
        problems.append("Buffer.from_host(a) does not share a's memory")
    if got.hl is not None:
        h = got.hl.Buffer(a)
        v = np.asarray(hb.Buffer.from_halide(h))
        if v.__array_interface__["data"][0] != a.__array_interface__["data"][0] or not np.array_equal(v, a):
            problems.append("np.asarray(Buffer.from_halide(halide.Buffer(a))) is not a view of a")
    if got.nb is not None:
        v = np.asarray(got.nb.matrix())
        if v.dtype != np.float32 or v.shape != SMALL or v.__array_interface__["data"][0] != got.nb.data_address():
            problems.append(f"np.asarray(nanobind ndarray) gave {v.dtype} {v.shape}, or a copy")
    return problems


# What a case needs beyond NumPy and halide_buffer, in the order it is built (the first missing
# one is why the case did not run): the keys of build_all()'s reasons.
NEEDS = {
    "aot_ndarrays": ("halide", "pipeline"),
    "extension_ndarrays": ("halide", "pipeline", "extension"),
    "halide_buffer": ("halide",),
    "asarray_from_halide": ("halide",),
    "asarray_halide": ("halide",),
    "asarray_nanobind": ("nanobind",),
    "aot_buffers": ("halide", "pipeline"),
    "fastcall_limit": ("halide", "pipeline", "limit"),
    "aot_tensors": ("torch", "halide", "add_one"),
    "tvm_ffi_tensors": ("torch", "tvm_ffi"),
    "aot_ndarrays_add_one": ("halide", "add_one"),
    "tvm_ffi_ndarrays": ("tvm_ffi",),
}


def skipped_rows(keys, spec):
    """{row key: why} for the rows one of whose cases did not run (is not in `keys`)."""
    out = {}
    for row in ROWS:
        for case in (row.ours, row.peer):
            if case not in keys:
                whys = [spec["reasons"][n] for n in NEEDS.get(case, ()) if n in spec["reasons"]]
                out[row.key] = whys[0] if whys else f"{case} did not run"
                break
    return out


# --------------------------------------------------------------------------------------------
# Wall time
# --------------------------------------------------------------------------------------------


def run_wall(args, spec):
    got = load_all(spec)
    problems = sanity_checks(got)
    cases = make_cases(got)
    run_cases(cases, args.number, args.repeat)
    by_key = {c.key: c for c in cases}
    skipped = skipped_rows(by_key, spec)

    print(f"small calls: best of {args.repeat} x {args.number} calls, float32 {SMALL}")
    print(environment_line())
    print()
    w = max(len(r.label) for r in ROWS)
    head = (f"{'row':<{w}}  {'ours ns':>8}  {'peer ns':>8}  {'ratio':>6}  {'paired':>6}  {'goal':>6}  verdict")
    print(head)
    print("-" * len(head))
    rows = {}
    for r in ROWS:
        if r.key in skipped:
            print(f"{r.label:<{w}}  skipped: {skipped[r.key]}")
            rows[r.key] = {"skipped": skipped[r.key]}
            continue
        ours, peer = by_key[r.ours].rounds_ns, by_key[r.peer].rounds_ns
        x = ours.best / peer.best
        paired = statistics.median(u / v for u, v in zip(ours, peer))
        met = x <= r.goal
        print(f"{r.label:<{w}}  {ours.best:8.1f}  {peer.best:8.1f}  {x:5.2f}x  {paired:5.2f}x  "
              f"{r.goal:5.2f}x  {'met' if met else 'NOT met'}")
        rows[r.key] = {"ours_ns": ours.best, "peer_ns": peer.best, "ratio": x, "paired_median": paired,
                       "goal": r.goal, "met": met}
    floor = by_key["call_floor"].rounds_ns.best
    print(f"{'id(b), the loop floor':<{w}}  {floor:8.1f}")
    print()
    met = sum(1 for v in rows.values() if v.get("met"))
    print(f"goals met: {met} of {len(rows) - len(skipped)} rows measured"
          + (f" ({len(skipped)} skipped)" if skipped else ""))
    noisy = noisy_timings(cases)
    finish(args, "calls", problems, noisy, "a paired ratio disagrees with the ratio of the bests",
           number=args.number, repeat=args.repeat, shape=list(SMALL), rows=rows,
           cases={c.key: {"label": c.label, "group": c.group, "best_ns": c.rounds_ns.best,
                          "median_ns": c.rounds_ns.median, "rounds_ns": list(c.rounds_ns)} for c in cases},
           floor_ns=floor)
    return 1 if problems else 0


# --------------------------------------------------------------------------------------------
# Instructions: one child Python under callgrind
# --------------------------------------------------------------------------------------------

# Callgrind's client requests as functions ctypes can call. Each request is a few instructions
# that do nothing outside valgrind.
MARKS_SOURCE = r"""
#include <valgrind/callgrind.h>
void marks_start_instrumentation(void) { CALLGRIND_START_INSTRUMENTATION; }
void marks_zero(void) { CALLGRIND_ZERO_STATS; }
void marks_toggle_collect(void) { CALLGRIND_TOGGLE_COLLECT; }
void marks_dump(const char *what) { CALLGRIND_DUMP_STATS_AT(what); }
int marks_on_valgrind(void) { return RUNNING_ON_VALGRIND; }
"""


def valgrind_version():
    try:
        out = subprocess.run(["valgrind", "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip() or None


def build_marks(workdir):
    """Compiles the client requests into a shared library; returns (path, None) or (None, why)."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        return None, "no C compiler (cc, gcc or $CC) for callgrind's client requests"
    src, lib = workdir / "callgrind_marks.c", workdir / "libcallgrind_marks.so"
    src.write_text(MARKS_SOURCE)
    try:
        proc = subprocess.run([*shlex.split(cc), "-O2", "-shared", "-fPIC", str(src), "-o", str(lib)],
                              capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"compiling callgrind's client requests failed: {e}"
    if proc.returncode != 0:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        return None, (f"compiling callgrind's client requests failed (exit {proc.returncode}; valgrind's "
                      f"headers, valgrind/callgrind.h, are needed): {tail}")
    return lib, None


def count_child(spec_path):
    """The child under callgrind: loads what the parent built, then counts each case's loops."""
    spec = json.loads(Path(spec_path).read_text())
    marks = ctypes.CDLL(spec["marks"])
    marks.marks_dump.argtypes = [ctypes.c_char_p]
    if not marks.marks_on_valgrind():
        print("the counting child must run under valgrind", file=sys.stderr)
        return 2
    got = load_all(spec)
    cases = [c for c in make_cases(got) if (c.key in TVM_FFI_CASES) == (spec["group"] == "tvm_ffi")]
    warm, n1, n2 = spec["calls"]
    # Instrumenting from here on only: the imports above ran at valgrind's uninstrumented speed.
    marks.marks_start_instrumentation()
    for c in cases:
        c.timer.timeit(warm)  # first calls fill caches
        for n in (n1, n2):
            marks.marks_zero()
            marks.marks_toggle_collect()
            c.timer.timeit(n)
            marks.marks_toggle_collect()
            marks.marks_dump(f"{c.key} {n}".encode())
    Path(spec["done"]).write_text(json.dumps([c.key for c in cases]))
    return 0


# The cases counted in a child of their own: importing tvm_ffi imports PyTorch (wherever it is
# installed), and a process with PyTorch loaded counts other calls differently (np.zeros 7% more),
# so the other rows keep a child without it. Each child: (group, spec, callgrind's output, its
# log, the list of cases it counted), the first one's names as they were before it had a second.
TVM_FFI_CASES = ("aot_tensors", "tvm_ffi_tensors", "aot_ndarrays_add_one", "tvm_ffi_ndarrays")
CHILDREN = (("other", "spec.json", "callgrind.out", "valgrind.log", "done.json"),
            ("tvm_ffi", "spec_tvm_ffi.json", "callgrind_tvm_ffi.out", "valgrind_tvm_ffi.log", "done_tvm_ffi.json"))


def group_spec(spec, group):
    """The spec a child of `group` loads: only what its cases need (no PyTorch, no TVM FFI in the
    other child; no halide wheel, extension, limit or nanobind in the TVM FFI child)."""
    if group == "tvm_ffi":
        return dict(spec, halide=False, library=None, extension=None, limit=None, nanobind=None)
    return dict(spec, torch=False, add_one=None, tvm_ffi=None)


# The files of a spec, all in the working folder.
PATHS = ("library", "extension", "add_one", "tvm_ffi", "nanobind", "marks")
REQUEST = "desc: Trigger: Client Request: "  # a dump's header line: what CALLGRIND_DUMP_STATS_AT was given


def read_dumps(prefix):
    """{(case key, calls): instructions} from callgrind's dump files prefix.1, prefix.2, ..."""
    counts = {}
    for path in Path(prefix).parent.glob(Path(prefix).name + ".*"):
        desc = totals = None
        for line in path.read_text().splitlines():
            if line.startswith(REQUEST):
                desc = line[len(REQUEST):].split()
            elif line.startswith("totals:"):
                totals = int(line.split()[1])
        if desc and len(desc) == 2 and totals is not None:
            counts[(desc[0], int(desc[1]))] = totals
    return counts


CHILD_STRINGS = 16384  # bytes of argv and environment strings the counting child starts with


def child_environment(argv):
    """The counting child's environment: the few variables it needs, fixed values, and padding
    that makes its strings and argv's take CHILD_STRINGS bytes. A process's stack starts below
    them, so their size moves every stack address; that alone changed some counts by 2% (one more
    variable, or a longer value, in the caller's shell)."""
    env = {k: os.environ[k] for k in ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "VALGRIND_LIB") if k in os.environ}
    env.update(PYTHONHASHSEED="0", PYTHONNOUSERSITE="1", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               MKL_NUM_THREADS="1", HL_NUM_THREADS="1")
    used = sum(len(a) + 1 for a in (*argv, argv[0])) + sum(len(k) + len(v) + 2 for k, v in env.items())
    pad = "HB_BENCH_PADDING"
    env[pad] = "x" * max(0, CHILD_STRINGS - used - len(pad) - 2)
    return env


def count_instructions(spec, workdir, calls):
    """Runs each child (CHILDREN) under callgrind; returns ({case key: instructions per call},
    {group: seconds}). The TVM FFI child runs only where one of its cases can."""
    # The child runs in `workdir` and sees every file by a relative name: a path with the
    # temporary folder's random name in it moved some counts by up to 2% from run to run.
    spec = {k: (f"./{Path(v).relative_to(workdir)}" if k in PATHS and v else v) for k, v in spec.items()}
    per_call, seconds = {}, {}
    for group, spec_name, out_name, log_name, done_name in CHILDREN:
        if group == "tvm_ffi" and not (spec["add_one"] or spec["tvm_ffi"]):
            continue
        child_spec = dict(group_spec(spec, group), calls=list(calls), done=done_name, group=group)
        (workdir / spec_name).write_text(json.dumps(child_spec))
        child = [sys.executable, str(Path(__file__).resolve()), "--count-child", spec_name]
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no", "--cache-sim=no",
               "--branch-sim=no", f"--callgrind-out-file={out_name}", f"--log-file={log_name}", *child]
        env = child_environment(child)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, env=env, cwd=workdir, capture_output=True, text=True, timeout=1800)
        seconds[group] = time.perf_counter() - t0
        if proc.returncode != 0 or not (workdir / done_name).is_file():
            log = (workdir / log_name).read_text() if (workdir / log_name).is_file() else ""
            tail = (proc.stderr.strip() + "\n" + log.strip()).strip().splitlines()[-15:]
            raise RuntimeError(f"the counting child ({group}) failed (exit {proc.returncode}):\n  "
                               + "\n  ".join(tail))
        keys = json.loads((workdir / done_name).read_text())
        counts = read_dumps(workdir / out_name)
        _, n1, n2 = calls
        for k in keys:
            if (k, n1) not in counts or (k, n2) not in counts:
                raise RuntimeError(f"callgrind wrote no counts for {k}")
            per_call[k] = (counts[(k, n2)] - counts[(k, n1)]) / (n2 - n1)
    return per_call, seconds


def instruction_rows(per_call, spec):
    """{row key: {"ours", "peer", "ratio"} or {"skipped": why}}."""
    skipped = skipped_rows(per_call, spec)
    rows = {}
    for r in ROWS:
        if r.key in skipped:
            rows[r.key] = {"skipped": skipped[r.key]}
        else:
            ours, peer = per_call[r.ours], per_call[r.peer]
            rows[r.key] = {"ours": round(ours, 1), "peer": round(peer, 1), "ratio": round(ours / peer, 4)}
    return rows


def check_rows(rows, committed, tolerance=TOLERANCE):
    """Compares each measured row's ratio with the committed one. Returns (compared, failures,
    notes): the keys compared, one message per row whose ratio grew by more than `tolerance`,
    and one line per row not compared (skipped here, or absent from the committed figures)."""
    compared, failures, notes = [], [], []
    kept = committed.get("rows", {})
    labels = {r.key: r.label for r in ROWS}
    for key, row in rows.items():
        label = labels.get(key, key)
        if "skipped" in row:
            notes.append(f"row {label!r} not compared: skipped ({row['skipped']})")
            continue
        old = kept.get(key, {}).get("ratio")
        if old is None:
            notes.append(f"row {label!r} not compared: the committed figures have no ratio for it")
            continue
        compared.append(key)
        growth = row["ratio"] / old - 1
        if row["ratio"] > old * (1 + tolerance):
            failures.append(f"row {label!r}: instruction ratio {row['ratio']:.3f}x, committed {old:.3f}x "
                            f"(+{growth:.1%}, more than the +{tolerance:.0%} allowed)")
    return compared, failures, notes


def figures_environment(spec):
    e = environment()
    try:
        import halide as hl  # noqa: F401
        from importlib.metadata import version

        e["halide"] = version("halide")
    except Exception:  # noqa: BLE001 - no halide: no version to record
        e["halide"] = None
    e["nanobind"] = spec.get("nanobind_version")
    for key, dist in (("torch", "torch"), ("tvm_ffi", "apache-tvm-ffi")):
        try:
            from importlib.metadata import version

            e[key] = version(dist)
        except Exception:  # noqa: BLE001 - not installed: no version to record
            e[key] = None
    e["valgrind"] = valgrind_version()
    e["implementation"] = platform.python_implementation()
    return e


def run_instructions(args, spec, workdir):
    if not shutil.which("valgrind"):
        print("--instructions needs valgrind (callgrind) on PATH", file=sys.stderr)
        return 2
    marks, why = build_marks(workdir)
    if marks is None:
        print(f"--instructions: {why}", file=sys.stderr)
        return 2
    got = load_all(spec)
    problems = sanity_checks(got)
    del got
    calls = CALLS_QUICK if args.quick else CALLS_FULL
    try:
        per_call, seconds = count_instructions(dict(spec, marks=str(marks)), workdir, calls)
    except (RuntimeError, subprocess.SubprocessError) as e:
        print(f"--instructions: {e}", file=sys.stderr)
        return 2
    rows = instruction_rows(per_call, spec)
    committed = None
    if args.check:
        try:
            committed = json.loads(Path(args.check).read_text())
        except (OSError, ValueError) as e:
            print(f"--check: cannot read {args.check}: {e}", file=sys.stderr)
            return 2

    warm, n1, n2 = calls
    print(f"small calls: instructions per call, callgrind, ({n2} - {n1} calls) after {warm} warm-up calls, "
          f"float32 {SMALL}")
    print(f"{environment_line()}, {valgrind_version()}")
    print()
    w = max(len(r.label) for r in ROWS)
    kept = (committed or {}).get("rows", {})
    head = f"{'row':<{w}}  {'ours':>9}  {'peer':>9}  {'ratio':>7}  {'goal':>6}  {'verdict':<7}"
    if committed:
        head += f"  {'committed':>9}  {'change':>7}"
    print(head)
    print("-" * len(head))
    for r in ROWS:
        row = rows[r.key]
        if "skipped" in row:
            print(f"{r.label:<{w}}  skipped: {row['skipped']}")
            continue
        line = (f"{r.label:<{w}}  {row['ours']:9.0f}  {row['peer']:9.0f}  {row['ratio']:6.3f}x  {r.goal:5.2f}x  "
                f"{'met' if row['ratio'] <= r.goal else 'NOT met':<7}")
        old = kept.get(r.key, {}).get("ratio")
        if committed:
            line += (f"  {old:8.3f}x  {row['ratio'] / old - 1:+7.1%}" if old else f"  {'-':>9}  {'-':>7}")
        print(line)
    print(f"{'id(b), the loop floor':<{w}}  {per_call['call_floor']:9.0f}")
    print()
    print(f"counted in {sum(seconds.values()):.0f} s under callgrind ("
          + ", ".join(f"{v:.0f} s the {k} child" for k, v in seconds.items()) + ")")

    status = 1 if problems else 0
    if committed is not None:
        compared, failures, notes = check_rows(rows, committed)
        for n in notes:
            print(n)
        print(f"--check: compared {len(compared)} of {len(ROWS)} rows with {args.check} "
              f"(a ratio may grow by {TOLERANCE:.0%})")
        env_then = committed.get("environment", {})
        env_now = figures_environment(spec)
        moved = [f"{k} {env_then.get(k)} -> {env_now.get(k)}"
                 for k in ("python", "numpy", "halide", "nanobind", "torch", "tvm_ffi")
                 if env_then.get(k) != env_now.get(k)]
        if moved:
            print(f"note: the figures were committed with other versions ({', '.join(moved)})")
        for f in failures:
            print(f"FAILED: {f}")
        if failures:
            print(f"If the change is intended, rerun with --update {args.check} and commit the file.")
            status = 1
        elif args.require_all and len(compared) < len(ROWS):
            print(f"FAILED: --require-all: {len(ROWS) - len(compared)} rows were not compared")
            status = 1
        else:
            print("--check: no ratio grew by more than the tolerance")
    if args.update:
        figures = {
            "benchmark": "calls_instructions",
            "command": f"python benchmarks/bench_calls.py --instructions{' --quick' if args.quick else ''} "
                       f"--update {args.update}",
            "calls": {"warm_up": warm, "n1": n1, "n2": n2},
            "tolerance": TOLERANCE,
            "environment": figures_environment(spec),
            "rows": {r.key: {"label": r.label, "goal": r.goal, **rows[r.key]} for r in ROWS},
            "floor": round(per_call["call_floor"], 1),
        }
        Path(args.update).write_text(json.dumps(figures, indent=2) + "\n")
        print(f"--update: wrote {args.update}")
    finish(args, "calls_instructions", problems, [], "", environment_=figures_environment(spec),
           calls={"warm_up": warm, "n1": n1, "n2": n2}, rows=rows, per_call=per_call, seconds=seconds)
    return status


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--number", type=int, default=20000, help="wall time: calls per round (default 20000)")
    ap.add_argument("--repeat", type=int, default=7, help="wall time: rounds; the best counts (default 7)")
    ap.add_argument("--instructions", action="store_true", help="count instructions with callgrind instead")
    ap.add_argument("--quick", action="store_true",
                    help=f"instructions: loops of {CALLS_QUICK[1]} and {CALLS_QUICK[2]} calls "
                         f"(default {CALLS_FULL[1]} and {CALLS_FULL[2]})")
    ap.add_argument("--check", metavar="FILE", help="fail if a row's instruction ratio grew by more than "
                                                    f"{TOLERANCE:.0%} over FILE's (implies --instructions)")
    ap.add_argument("--update", metavar="FILE", help="write this run's instruction figures to FILE "
                                                     "(implies --instructions)")
    ap.add_argument("--require-all", action="store_true", help="with --check: fail unless every row was compared")
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    ap.add_argument("--count-child", metavar="SPEC", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.count_child:
        return count_child(args.count_child)
    if args.check or args.update:
        args.instructions = True

    with tempfile.TemporaryDirectory(prefix="hb_bench_calls_", ignore_cleanup_errors=True) as tmp:
        workdir = Path(tmp)
        spec = build_all(workdir)
        for what, why in spec["reasons"].items():
            print(f"{what} unavailable: {why}")
        if args.instructions:
            return run_instructions(args, spec, workdir)
        return run_wall(args, spec)


if __name__ == "__main__":
    sys.exit(main())
