"""The hl.Buffer bridge: what reading Halide's own buffer through ours costs, beside Halide's read.

Run:  python benchmarks/bench_halide.py [--number N] [--repeat R] [--json PATH]

Every case is timed with ``timeit`` as ``repeat`` rounds of ``number`` calls; the rounds of all
cases are interleaved, and the best round gives the per-call cost. ``h`` is a float32
``hl.Buffer`` of extents [4, 4] (made by Halide, so it owns its memory); ``b`` a Buffer.

* ``np.asarray(hb.Buffer.from_halide(h))``: a Buffer made over ``h`` (bound to its
  halide_buffer_t, one residency state) and read by NumPy, the Buffer dropped every call.
* ``np.asarray(h)``: Halide's own buffer protocol, the reference. The project's target for the
  ratio is <= 1.5x.
* ``np.asarray(hb.Buffer.from_host(np.asarray(h)))``: the peer, the other zero-copy way to a
  Buffer over ``h``'s memory (through Halide's buffer protocol: no shared state, no bfloat16).
* Informational: ``from_halide`` alone; ``np.asarray(b)`` of a ``from_halide`` Buffer kept;
  ``h._get_raw_halide_buffer_t()`` (the call ``from_halide`` makes into Halide's bindings);
  ``b.bits()`` (the floor of any call returning a new Buffer: pybind11 makes and drops the
  Python object); ``b.to_halide()`` of a host Buffer against ``hl.Buffer(a)`` of an ndarray;
  ``id(h)`` (the timing loop's floor).

Ratios are measured in the same run; nothing here is a pass/fail test.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import numpy as np

import halide_buffer as hb

from bench_common import (Case, cases_json, environment, environment_line, noisy_timings, print_case_table,
                          print_noise_note, ratio, run_cases, timing_arguments, write_json)

EXTENTS = [4, 4]  # Halide's order; NumPy shape (4, 4)
TARGET = 1.5



def sanity_checks(h, kept):
    """What is timed must be what the rows say: zero-copy, one state, the same values."""
    problems = []
    h.fill(1.5)
    a = np.asarray(hb.Buffer.from_halide(h))
    if a.__array_interface__["data"][0] != np.asarray(h).__array_interface__["data"][0]:
        problems.append("np.asarray(Buffer.from_halide(h)) does not share h's memory")
    if a.shape != tuple(reversed(EXTENTS)) or not np.all(a == 1.5):
        problems.append(f"np.asarray(Buffer.from_halide(h)) gave {a.shape} {a.ravel()[:4]}")
    if not hb.Buffer.from_halide(h).shares_storage_with(kept):
        problems.append("a second from_halide(h) made a second state")
    if kept.to_halide() is not h:
        problems.append("to_halide() of the Buffer over h is not h")
    return problems


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    timing_arguments(ap)
    args = ap.parse_args(argv)
    try:
        import halide as hl
    except ModuleNotFoundError as e:
        print(f"bench_halide: the halide package is needed ({e}); pip install 'halide>=21,<22'")
        return 2

    h = hl.Buffer(hl.Float(32), EXTENTS)
    h2 = hl.Buffer(hl.Float(32), EXTENTS)  # never bound: from_halide makes a storage every call
    a = np.zeros(tuple(reversed(EXTENTS)), np.float32)
    host = hb.Buffer(a.shape, "float32")
    kept = hb.Buffer.from_halide(h)
    problems = sanity_checks(h, kept)

    asarray, from_halide, from_host = np.asarray, hb.Buffer.from_halide, hb.Buffer.from_host
    cases = [
        Case("asarray_from_halide", "np.asarray(Buffer.from_halide(h))", "f(g(x))",
             {"f": asarray, "g": from_halide, "x": h2}, "ours"),
        Case("asarray_hl", "np.asarray(h)  [reference: Halide's buffer protocol]", "f(x)",
             {"f": asarray, "x": h2}, "reference"),
        Case("asarray_from_host", "np.asarray(Buffer.from_host(np.asarray(h)))  [peer]", "f(g(f(x)))",
             {"f": asarray, "g": from_host, "x": h2}, "peer"),
        Case("from_halide", "Buffer.from_halide(h)", "g(x)", {"g": from_halide, "x": h2}, "info"),
        Case("asarray_kept", "np.asarray(b), b = Buffer.from_halide(h) kept", "f(x)",
             {"f": asarray, "x": kept}, "info"),
        Case("raw_address", "h._get_raw_halide_buffer_t()", "x._get_raw_halide_buffer_t()", {"x": h2}, "info"),
        Case("bits", "b.bits()  [floor of a call returning a Buffer]", "x.bits()", {"x": host}, "info"),
        Case("to_halide", "b.to_halide(), b a host Buffer", "x.to_halide()", {"x": host}, "info"),
        Case("hl_buffer_of_ndarray", "hl.Buffer(ndarray)", "f(x)", {"f": hl.Buffer, "x": a}, "info"),
        Case("call_floor", "id(h)  [timing loop floor]", "f(x)", {"f": id, "x": h2}, "info"),
    ]
    run_cases(cases, args.number, args.repeat)

    by_key = {c.key: c for c in cases}
    best = {k: c.rounds_ns.best for k, c in by_key.items()}
    ref, peer = best["asarray_hl"], best["asarray_from_host"]
    print(f"hl.Buffer bridge: best of {args.repeat} x {args.number} calls, float32 hl.Buffer {EXTENTS}")
    print(environment_line())
    print()
    print_case_table(cases, ref, peer, "vs ref")

    r_ref = ratio(best["asarray_from_halide"], ref)
    r_paired = statistics.median(
        x / y for x, y in zip(by_key["asarray_from_halide"].rounds_ns, by_key["asarray_hl"].rounds_ns))
    r_peer = ratio(best["asarray_from_halide"], peer)
    floor_of_return = best["bits"] + best["raw_address"] + best["asarray_kept"]
    r_floor = ratio(floor_of_return, ref)
    noisy = noisy_timings(cases)
    verdict = "met" if r_ref <= TARGET else "NOT met"
    print(f"np.asarray(Buffer.from_halide(h)) / np.asarray(h):    {r_ref:.2f}x (target <= {TARGET:.2f}x: {verdict})")
    print(f"  same, median of per-round ratios:                   {r_paired:.2f}x")
    print(f"  / np.asarray(Buffer.from_host(np.asarray(h))) peer: {r_peer:.2f}x")
    print(f"  floor (b.bits() + _get_raw_halide_buffer_t() + np.asarray(b)) / np.asarray(h): {r_floor:.2f}x")
    for p in problems:
        print(f"WARNING: {p}")
    print_noise_note(noisy, "the two ratio lines above disagree")

    if args.json:
        write_json(args.json, {
            "benchmark": "halide",
            "number": args.number,
            "repeat": args.repeat,
            "extents": EXTENTS,
            "environment": environment(),
            "cases": cases_json(cases),
            "ratios": {"from_halide_asarray_vs_hl": r_ref, "paired_median": r_paired,
                       "vs_from_host_peer": r_peer, "floor_vs_hl": r_floor},
            "target": {"from_halide_asarray_vs_hl_max": TARGET, "met": r_ref <= TARGET},
            "problems": problems,
            "noisy": noisy,
        })
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
