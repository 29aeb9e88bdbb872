"""Pickling and shared memory: what sending a Buffer costs beside sending an ndarray.

Run:  python benchmarks/bench_pickle.py [--number N] [--repeat R] [--slow-repeat R] [--mib N] [--json PATH]

Every case is timed with ``timeit`` in rounds, the rounds of the cases of one group interleaved,
and the best round gives the time per call. ``b`` is a Buffer, ``a`` an ndarray, both uint8 and
one-dimensional, 1 KiB or 256 MiB (``--mib``), filled with the same repeating pattern.

* Out of band (``--number`` calls a round, ``--repeat`` rounds): ``bufs = []; pickle.dumps(x,
  protocol=5, buffer_callback=bufs.append)`` and ``pickle.loads(s, buffers=bufs)``, for ``b``
  and ``a`` at both sizes. The project's target: ours <= 1.2x NumPy's time for each, and the
  same time at both sizes (no copy, no per-byte work).
* In band (``--slow-repeat`` rounds of one call): ``pickle.loads(pickle.dumps(x, protocol=4))``
  of 256 MiB, ``b`` against ``a`` (informational: both copy the bytes).
* Round trip to a worker process: ``pool.submit(identity, x).result()`` on a
  ``concurrent.futures.ProcessPoolExecutor(1)`` (default start method) started and warmed up
  before timing, ``identity`` returning its argument. A 256 MiB Buffer in shared memory
  (``Buffer(..., shared=True)``: it travels as a descriptor and comes back as a view of the same
  storage; 20 calls a round, ``--repeat`` rounds) against a 256 MiB ndarray sent by value (the
  target: the shared Buffer >= 100x as fast), and a Buffer not shared, by value
  (informational); the two by-value cases take ``--slow-repeat`` rounds of one call.

Before timing, the script checks that each case does what its row says: the out-of-band
pickles hand out the memory of ``x`` itself and loads wraps it; the in-band ones copy and read
back equal; the shared result shares storage with the original and sees a write made in the
worker; the by-value results equal their inputs without sharing their memory. A failed check is
a ``WARNING:`` line and exit status 1. Nothing here is a pass/fail test of speed.
"""

from __future__ import annotations

import argparse
import pickle
import sys
from concurrent.futures import ProcessPoolExecutor

import numpy as np

import halide_buffer as hb

from bench_common import (Case, cases_json, environment, environment_line, noisy_timings, paired, print_case_table,
                          print_ms_table, print_noise_note, run_cases, write_json)

KiB, MiB = 1 << 10, 1 << 20
OOB_TARGET = 1.2        # ours / NumPy's time, each out-of-band case
SHARED_TARGET = 100.0   # ndarray round trip / shared Buffer round trip
SHARED_CALLS = 20       # shared round trips a round
WRITTEN = 201           # the value the worker writes (the pattern never holds it)


def identity(x):
    """The worker's function: sends its argument back."""
    return x


def write_last(x, value):
    """The worker writes one element of a shared Buffer; the parent must see it."""
    x[x.shape[0] - 1] = value


def pattern(nbytes):
    """0, 1, ..., 250, 0, 1, ...: every page touched, and a copy that drops bytes reads back wrong."""
    return np.resize(np.arange(251, dtype=np.uint8), nbytes)


def buffer_like(a, shared=False):
    b = hb.Buffer(a.shape, "uint8", shared=shared)
    np.copyto(b.numpy(writable=True), a)
    return b


def address(x):
    return np.asarray(x).__array_interface__["data"][0]


def check_out_of_band(name, x):
    """A protocol-5 pickle hands out x's own memory once, and loads wraps it."""
    bufs = []
    s = pickle.dumps(x, protocol=5, buffer_callback=bufs.append)
    if len(bufs) != 1 or address(bufs[0].raw()) != address(x):
        return [f"{name}: protocol 5 did not hand out its own memory out of band ({len(bufs)} buffers)"]
    y = pickle.loads(s, buffers=bufs)
    if type(y) is not type(x) or address(y) != address(x) or not np.array_equal(np.asarray(y), np.asarray(x)):
        return [f"{name}: protocol-5 loads did not wrap the memory it was given"]
    return []


def check_in_band(name, x):
    """Protocol 4 carries the bytes in the pickle; loads copies them back."""
    s = pickle.dumps(x, protocol=4)
    y = pickle.loads(s)
    if len(s) < np.asarray(x).nbytes or type(y) is not type(x) or address(y) == address(x) \
            or not np.array_equal(np.asarray(y), np.asarray(x)):
        return [f"{name}: protocol 4 did not carry the bytes in band and read back equal"]
    return []


def check_round_trips(pool, shared, b, a):
    """The shared Buffer comes back as a view of its own storage and sees the worker's writes;
    the others come back by value, equal and in memory of their own."""
    problems = []
    r = pool.submit(identity, shared).result()
    if not (isinstance(r, hb.Buffer) and r.is_shared and r.shares_storage_with(shared)):
        problems.append("shared Buffer: the round trip did not return a view of its own storage")
    pool.submit(write_last, shared, WRITTEN).result()
    if np.asarray(shared)[-1] != WRITTEN or np.asarray(r)[-1] != WRITTEN:
        problems.append("shared Buffer: a write made in the worker is not seen in the parent")
    rb = pool.submit(identity, b).result()
    if not isinstance(rb, hb.Buffer) or rb.is_shared or rb.shares_storage_with(b) \
            or not np.array_equal(np.asarray(rb), np.asarray(b)):
        problems.append("Buffer by value: the round trip did not return an equal copy")
    ra = pool.submit(identity, a).result()
    if not isinstance(ra, np.ndarray) or np.shares_memory(ra, a) or not np.array_equal(ra, a):
        problems.append("ndarray by value: the round trip did not return an equal copy")
    return problems


def out_of_band_cases(size, b, a):
    """dumps and loads, protocol 5 out of band, of b (ours) and a (NumPy) of one size."""
    cases = []
    dumps = "bufs = []; dumps(x, protocol=5, buffer_callback=bufs.append)"
    for op in ("dumps", "loads"):
        for key, x, group in (("buffer", b, "ours"), ("ndarray", a, "reference")):
            name = type(x).__name__
            if op == "dumps":
                stmt, env = dumps, {"dumps": pickle.dumps, "x": x}
            else:
                bufs = []
                env = {"loads": pickle.loads, "bufs": bufs,
                       "s": pickle.dumps(x, protocol=5, buffer_callback=bufs.append)}
                stmt = "loads(s, buffers=bufs)"
            tag = "  [reference]" if group == "reference" else ""
            cases.append(Case(f"oob_{op}_{key}_{size}", f"pickle.{op}({name}){tag}",
                              stmt, env, group, ref=f"oob_{op}_ndarray_{size}"))
    return cases


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--number", type=int, default=20000, help="out-of-band calls per round (default 20000)")
    ap.add_argument("--repeat", type=int, default=7, help="rounds of the fast cases; the best counts (default 7)")
    ap.add_argument("--slow-repeat", type=int, default=3,
                    help="rounds of the cases that copy the large buffer (default 3)")
    ap.add_argument("--mib", type=int, default=256, help="the large size, in MiB (default 256)")
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    args = ap.parse_args(argv)
    large = args.mib * MiB
    sizes = {"1k": KiB, "large": large}
    size_text = {"1k": "1 KiB", "large": f"{args.mib} MiB"}

    with ProcessPoolExecutor(1) as pool:
        pool.submit(identity, None).result()  # the worker starts here, before anything is timed
        arrays = {s: pattern(n) for s, n in sizes.items()}
        buffers = {s: buffer_like(a) for s, a in arrays.items()}
        a, b = arrays["large"], buffers["large"]
        shared = buffer_like(a, shared=True)
        problems = []
        for s in sizes:
            problems += check_out_of_band(f"Buffer {size_text[s]}", buffers[s])
            problems += check_out_of_band(f"ndarray {size_text[s]}", arrays[s])
        problems += check_in_band("Buffer", b) + check_in_band("ndarray", a)
        problems += check_round_trips(pool, shared, b, a)

        oob = {s: out_of_band_cases(s, buffers[s], arrays[s]) for s in sizes}
        fast = oob["1k"] + oob["large"]
        run_cases(fast, args.number, args.repeat)
        submit = {"submit": pool.submit, "f": identity}
        shared_case = Case("round_trip_shared", "round trip, shared Buffer (a descriptor)",
                           "submit(f, x).result()", {**submit, "x": shared}, "ours", ref="round_trip_ndarray")
        run_cases([shared_case], SHARED_CALLS, args.repeat)
        load_dump = {"loads": pickle.loads, "dumps": pickle.dumps}
        slow = [
            Case("in_band_buffer", "pickle.loads(pickle.dumps(Buffer, protocol=4))", "loads(dumps(x, protocol=4))",
                 {**load_dump, "x": b}, "info", ref="in_band_ndarray"),
            Case("in_band_ndarray", "pickle.loads(pickle.dumps(ndarray, protocol=4))  [reference]",
                 "loads(dumps(x, protocol=4))", {**load_dump, "x": a}, "reference", ref="in_band_ndarray"),
            Case("round_trip_buffer", "round trip, Buffer by value", "submit(f, x).result()",
                 {**submit, "x": b}, "info", ref="round_trip_ndarray"),
            Case("round_trip_ndarray", "round trip, ndarray by value  [reference]", "submit(f, x).result()",
                 {**submit, "x": a}, "reference", ref="round_trip_ndarray"),
        ]
        run_cases(slow, 1, args.slow_repeat)
    cases = fast + [shared_case] + slow
    by_key = {c.key: c for c in cases}
    best = {k: c.rounds_ns.best for k, c in by_key.items()}

    print(f"Pickling and shared memory: uint8, best of {args.repeat} x {args.number} calls (out of band), "
          f"{args.repeat} x {SHARED_CALLS} (shared round trip), {args.slow_repeat} x 1 (the rest)")
    print(environment_line())
    print()
    for s in sizes:
        for op, pair in (("dumps", oob[s][:2]), ("loads", oob[s][2:])):
            print(f"pickle.{op}, protocol 5 out of band, {size_text[s]}:")
            print_case_table(pair, pair[1].rounds_ns.best, None, "vs NumPy")
    print(f"{args.mib} MiB, in band and to a ProcessPoolExecutor(1) worker and back:")
    print_ms_table([shared_case] + slow, by_key)

    ratios, met = {}, {}
    print(f"out of band, Buffer / ndarray (target <= {OOB_TARGET:.2f}x each; median of per-round ratios):")
    for s in sizes:
        for op in ("dumps", "loads"):
            key, ref = f"oob_{op}_buffer_{s}", f"oob_{op}_ndarray_{s}"
            r, p = best[key] / best[ref], paired(by_key, key, ref)
            ratios[f"{op}_{s}"], ratios[f"{op}_{s}_paired"] = r, p
            met[f"{op}_{s}"] = r <= OOB_TARGET
            print(f"  {op} {size_text[s]:>8}: {r:.2f}x ({p:.2f}x)  {'met' if r <= OOB_TARGET else 'NOT met'}")
    print(f"size independence, {size_text['large']} / 1 KiB (1.00x: no per-byte work):")
    for op in ("dumps", "loads"):
        for key in ("buffer", "ndarray"):
            r = best[f"oob_{op}_{key}_large"] / best[f"oob_{op}_{key}_1k"]
            ratios[f"{op}_{key}_large_over_1k"] = r
        print(f"  {op}: Buffer {ratios[f'{op}_buffer_large_over_1k']:.2f}x, "
              f"ndarray {ratios[f'{op}_ndarray_large_over_1k']:.2f}x")
    ratios["in_band"] = best["in_band_buffer"] / best["in_band_ndarray"]
    ratios["in_band_paired"] = paired(by_key, "in_band_buffer", "in_band_ndarray")
    print(f"in band, protocol 4 dumps + loads, Buffer / ndarray: {ratios['in_band']:.2f}x "
          f"({ratios['in_band_paired']:.2f}x)  (informational)")
    speedup = best["round_trip_ndarray"] / best["round_trip_shared"]
    ratios["round_trip_ndarray_over_shared"] = speedup
    met["round_trip_shared"] = speedup >= SHARED_TARGET
    print(f"round trip, ndarray by value / shared Buffer: {speedup:.0f}x as fast "
          f"(target >= {SHARED_TARGET:.0f}x: {'met' if met['round_trip_shared'] else 'NOT met'})")
    ratios["round_trip_buffer"] = best["round_trip_buffer"] / best["round_trip_ndarray"]
    ratios["round_trip_buffer_paired"] = paired(by_key, "round_trip_buffer", "round_trip_ndarray")
    print(f"round trip, Buffer by value / ndarray by value: {ratios['round_trip_buffer']:.2f}x "
          f"({ratios['round_trip_buffer_paired']:.2f}x)  (informational)")
    for p in problems:
        print(f"WARNING: {p}")
    noisy = noisy_timings(cases)
    print_noise_note(noisy, "a best-round ratio and its per-round median disagree")

    if args.json:
        write_json(args.json, {
            "benchmark": "pickle",
            "number": args.number,
            "repeat": args.repeat,
            "slow_repeat": args.slow_repeat,
            "shared_calls": SHARED_CALLS,
            "large_bytes": large,
            "environment": environment(),
            "cases": cases_json(cases),
            "ratios": ratios,
            "target": {"out_of_band_max": OOB_TARGET, "round_trip_shared_speedup_min": SHARED_TARGET, "met": met},
            "problems": problems,
            "noisy": noisy,
        })
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
