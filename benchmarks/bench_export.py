"""Export overhead: what handing a small Buffer to NumPy costs, beside its peers, in one run.

Run:  python benchmarks/bench_export.py [--number N] [--repeat R] [--json PATH] [--no-peer]

Every case is timed with ``timeit`` as ``repeat`` rounds of ``number`` calls; the rounds of all
cases are interleaved (round 1 of every case, then round 2, ...) so that drift of the machine
hits every case alike, and the best round gives the per-call cost. Cases:

* ``np.asarray(b)`` and ``memoryview(b)`` for ``b = halide_buffer.Buffer((4, 4), "float32")``:
  the buffer protocol export (NumPy calls ``getbuffer`` once, through a memoryview).
* NumPy's own path, ``np.asarray(memoryview(a))`` for ``a = np.zeros((4, 4), np.float32)``: the
  reference. Ratios "vs NumPy" are ours / this; the project's target is <= 1.0x.
* ``np.asarray(p)`` for ``p``, an object of a pybind11 class with ``def_buffer`` (the peer),
  compiled at run time from ``peer_def_buffer.cpp`` beside this file. Without a C++ compiler or
  pybind11 headers the peer is reported unavailable and the rest still runs.
* Informational: ``np.asarray(b)`` for a bfloat16 Buffer (no PEP 3118 format, so NumPy falls back
  to ``__array__``), ``b.numpy()``, the two halves of the reference (``memoryview(a)``, and
  ``np.asarray(m)`` for a memoryview ``m`` made once), and ``id(b)`` (the timing loop's floor).
* Size independence: ``np.asarray(b)`` for a (2048, 2048) float32 Buffer over the (4, 4) one;
  a zero-copy export gives ~1.0.

Ratios are measured in the same run on the same machine; absolute nanoseconds are not
comparable across machines, and nothing here is a pass/fail test.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import numpy as np

import halide_buffer as hb

from bench_common import (Case, cases_json, environment_line, finish, fmt_ratio, noisy_timings, print_case_table,
                          ratio, run_cases)

HERE = Path(__file__).resolve().parent
PEER_SOURCE = HERE / "peer_def_buffer.cpp"
PEER_MODULE = "peer_def_buffer"

SMALL = (4, 4)


# --------------------------------------------------------------------------------------------
# The pybind11 def_buffer peer, built at run time
# --------------------------------------------------------------------------------------------


def build_peer(workdir: Path):
    """Compiles and imports peer_def_buffer.cpp; returns (module, None) or (None, reason)."""
    if not PEER_SOURCE.is_file():
        return None, f"{PEER_SOURCE.name} is missing"
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not cxx:
        return None, "no C++ compiler (g++ or $CXX) found"
    try:
        includes = subprocess.run(
            [sys.executable, "-m", "pybind11", "--includes"],
            check=True, capture_output=True, text=True, timeout=60,
        ).stdout.split()
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"`python -m pybind11 --includes` failed: {e}"
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    target = workdir / (PEER_MODULE + suffix)
    # -O3 -DNDEBUG: the optimisation level setuptools gives the halide_buffer extension.
    cmd = [*shlex.split(cxx), "-O3", "-DNDEBUG", "-std=c++17", "-shared", "-fPIC",
           "-fvisibility=hidden", *includes, str(PEER_SOURCE), "-o", str(target)]
    if sys.platform == "darwin":
        cmd[1:1] = ["-undefined", "dynamic_lookup"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"compiling the peer failed: {e}"
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        return None, (f"compiling the peer failed (exit {proc.returncode})"
                      + (": " + " | ".join(tail) if tail else ""))
    try:
        spec = importlib.util.spec_from_file_location(PEER_MODULE, target)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 - any import failure means "peer unavailable"
        return None, f"importing the compiled peer failed: {type(e).__name__}: {e}"
    return module, None


# --------------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------------



def data_address(arr: np.ndarray) -> int:
    return arr.__array_interface__["data"][0]


def sanity_checks(b, b_big, b_bf16, peer_obj):
    """Functional checks of what is timed (a zero-copy claim must be true before timing it)."""
    problems = []
    v = np.asarray(b)
    if v.dtype != np.float32 or v.shape != SMALL:
        problems.append(f"np.asarray(Buffer) gave {v.dtype} {v.shape}")
    if data_address(v) != data_address(b.numpy()):
        problems.append("np.asarray(Buffer) does not share the Buffer's memory")
    big = np.asarray(b_big)
    if data_address(big) != data_address(b_big.numpy()):
        problems.append("np.asarray(big Buffer) copied: not zero-copy")
    bf = np.asarray(b_bf16)
    if bf.dtype.name != "bfloat16" or bf.shape != SMALL:
        problems.append(f"np.asarray(bfloat16 Buffer) gave {bf.dtype} {bf.shape}")
    if peer_obj is not None:
        p = np.asarray(peer_obj)
        if p.dtype != np.float32 or p.shape != SMALL:
            problems.append(f"np.asarray(def_buffer peer) gave {p.dtype} {p.shape}")
    return problems


def make_cases(b, b_big, b_bf16, a, peer_obj, big_shape):
    asarray, mv = np.asarray, memoryview
    cases = [
        Case("asarray_buffer", "np.asarray(Buffer f32)", "f(x)",
             {"f": asarray, "x": b}, "ours"),
        Case("memoryview_buffer", "memoryview(Buffer f32)", "f(x)",
             {"f": mv, "x": b}, "ours"),
        Case("asarray_memoryview_ndarray", "np.asarray(memoryview(ndarray))  [reference]",
             "f(m(x))", {"f": asarray, "m": mv, "x": a}, "reference"),
    ]
    if peer_obj is not None:
        cases.append(Case("asarray_def_buffer", "np.asarray(pybind11 def_buffer)  [peer]",
                          "f(x)", {"f": asarray, "x": peer_obj}, "peer"))
    cases += [
        Case("asarray_buffer_bf16", "np.asarray(Buffer bf16) via __array__", "f(x)",
             {"f": asarray, "x": b_bf16}, "info"),
        Case("numpy_method", "Buffer.numpy() f32", "x.numpy()", {"x": b}, "info"),
        Case("memoryview_ndarray", "memoryview(ndarray)", "f(x)", {"f": mv, "x": a}, "info"),
        Case("asarray_prebuilt_memoryview", "np.asarray(m), m = memoryview(ndarray) kept",
             "f(x)", {"f": asarray, "x": memoryview(a)}, "info"),
        Case("asarray_buffer_big", f"np.asarray(Buffer f32 {big_shape[0]}x{big_shape[1]})",
             "f(x)", {"f": asarray, "x": b_big}, "info"),
        Case("call_floor", "id(Buffer)  [timing loop floor]", "f(x)",
             {"f": id, "x": b}, "info"),
    ]
    return cases


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--number", type=int, default=20000, help="calls per round (default 20000)")
    ap.add_argument("--repeat", type=int, default=7, help="rounds; the best counts (default 7)")
    ap.add_argument("--big", type=int, nargs=2, default=(2048, 2048), metavar=("ROWS", "COLS"),
                    help="shape of the size-independence buffer (default 2048 2048)")
    ap.add_argument("--no-peer", action="store_true", help="skip building the pybind11 peer")
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    args = ap.parse_args(argv)
    big_shape = tuple(args.big)

    b = hb.Buffer(SMALL, dtype="float32")
    b_big = hb.Buffer(big_shape, dtype="float32")
    b_bf16 = hb.Buffer(SMALL, dtype="bfloat16")
    a = np.zeros(SMALL, np.float32)

    with tempfile.TemporaryDirectory(prefix="hb_bench_peer_", ignore_cleanup_errors=True) as tmp:
        if args.no_peer:
            peer_mod, peer_reason = None, "skipped (--no-peer)"
        else:
            peer_mod, peer_reason = build_peer(Path(tmp))
        peer_obj = peer_mod.Matrix(*SMALL) if peer_mod is not None else None

        problems = sanity_checks(b, b_big, b_bf16, peer_obj)
        cases = make_cases(b, b_big, b_bf16, a, peer_obj, big_shape)
        run_cases(cases, args.number, args.repeat)
        del peer_obj

    by_key = {c.key: c for c in cases}
    best = {k: c.rounds_ns.best for k, c in by_key.items()}
    ref = best["asarray_memoryview_ndarray"]
    peer = best.get("asarray_def_buffer")

    print(f"export overhead: best of {args.repeat} x {args.number} calls, float32 {SMALL} "
          f"unless noted")
    print(environment_line())
    print(f"peer (pybind11 def_buffer): "
          f"{'built from ' + PEER_SOURCE.name if peer_mod is not None else 'unavailable: ' + peer_reason}")
    print()
    print_case_table(cases, ref, peer, "vs NumPy")

    r_np = ratio(best["asarray_buffer"], ref)
    r_peer = ratio(best["asarray_buffer"], peer)
    r_mv = ratio(best["memoryview_buffer"], best["memoryview_ndarray"])
    r_size = ratio(best["asarray_buffer_big"], best["asarray_buffer"])
    floor = best["call_floor"]
    r_np_net = ratio(best["asarray_buffer"] - floor, ref - floor)
    # Per-round ratios pair rounds taken milliseconds apart, so a busy neighbour that slows a
    # whole stretch of the run cancels out; their median backs up the ratio of the bests.
    r_np_paired = statistics.median(
        x / y for x, y in zip(by_key["asarray_buffer"].rounds_ns,
                              by_key["asarray_memoryview_ndarray"].rounds_ns))
    noisy = noisy_timings(cases)
    verdict = "met" if r_np <= 1.0 else "NOT met"
    print(f"np.asarray(Buffer) / NumPy's np.asarray(memoryview(ndarray)): {r_np:.2f}x "
          f"(target <= 1.00x: {verdict}; {r_np_net:.2f}x net of the loop floor)")
    print(f"  same, median of per-round ratios:                           {r_np_paired:.2f}x")
    print(f"np.asarray(Buffer) / pybind11 def_buffer peer:                "
          f"{fmt_ratio(r_peer) if r_peer is not None else 'peer unavailable'}")
    print(f"memoryview(Buffer) / memoryview(ndarray):                     {r_mv:.2f}x")
    print(f"size independence, np.asarray {big_shape} / {SMALL}:       {r_size:.2f}x "
          f"(zero-copy gives ~1.0)")
    finish(
        args, "export", problems, noisy, "the two ratio lines above disagree",
        number=args.number,
        repeat=args.repeat,
        shape=list(SMALL),
        big_shape=list(big_shape),
        peer={"available": peer_mod is not None, "reason": peer_reason},
        cases=cases_json(cases),
        ratios={
            "asarray_vs_numpy": r_np,
            "asarray_vs_numpy_net_of_floor": r_np_net,
            "asarray_vs_numpy_paired_median": r_np_paired,
            "asarray_vs_def_buffer": r_peer,
            "memoryview_vs_numpy_memoryview": r_mv,
            "size_big_over_small": r_size,
            "bf16_asarray_vs_numpy": ratio(best["asarray_buffer_bf16"], ref),
            "numpy_method_vs_numpy": ratio(best["numpy_method"], ref),
        },
        target={"asarray_vs_numpy_max": 1.0, "met": r_np <= 1.0},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
