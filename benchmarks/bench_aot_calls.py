"""AOT pipeline calls: what calling a Halide AOT pipeline through halide_buffer.aot costs beside
the Python extension Halide generates for the same pipeline, and beside the least a binding could
cost (the FASTCALL limit).

Run:  python benchmarks/bench_aot_calls.py [--number N] [--repeat R] [--json PATH] [--no-peer]

It needs the ``halide`` wheel and a C compiler (the pipeline is built when it runs, see
bench_pipelines.py); without them it exits with status 2. The peers need a C++ compiler: Halide's
generated Python extension for the same pipeline, linked with the same object, and the FASTCALL
limit, ``peer_fastcall_aot.cpp`` beside this file, compiled the same way; a peer that cannot be
built is reported unavailable (with the reason) and the rest still runs.

The host pipeline ``out(x, y) = in(x, y) + k`` (an int32 scalar, 3 here) on uint8 (16, 16)
buffers. Every case is timed with ``timeit`` as ``repeat`` rounds of ``number`` calls, the
rounds of all cases interleaved, the best round giving the per-call cost. Cases: ``p(b_in, 3,
b_out)`` through ``hb.aot`` on Buffers (ours); the peers: the generated extension on Buffers (it
takes their ``_get_raw_halide_buffer_t()``) and on NumPy arrays (buffer protocol), and the
FASTCALL limit ``call(b_in, 3, b_out)``, a METH_FASTCALL function that took the two
``halide_buffer_t`` addresses once, at bind time, and per call checks its arguments (count, the
bound buffers, the scalar's range), calls the entry point with the GIL released and checks its
result; informational: ``hb.aot`` on NumPy arrays (wrapped per call), the raw entry point
``name(halide_buffer_t *, int32_t, halide_buffer_t *)`` called through ctypes with the two
addresses taken once (the pipeline's own cost plus ctypes'),
``Buffer._get_raw_halide_buffer_t()`` (what the extension pays per Buffer argument) and
``id(b)`` (the timing loop's floor). The target: ``hb.aot`` <= 0.80x the faster of the
extension's two paths; the goal against the limit: ``hb.aot`` on Buffers <= 2.0x it.

The bytes a device pipeline's loop of calls moves are measured by bench_aot_loops.py.

Ratios are measured in the same run on the same machine; absolute times are not comparable
across machines, and nothing here is a pass/fail test.
"""

from __future__ import annotations

import argparse
import ctypes
import sys
import tempfile
from pathlib import Path

import numpy as np

import halide_buffer as hb

from bench_common import (Case, cases_json, environment_line, finish, fmt_ratio, noisy_timings, paired, ratio,
                          run_cases)
from bench_pipelines import TARGET, BuildError, add_k_func, build_module, build_pipeline

HERE = Path(__file__).resolve().parent
HOST_NAME = "hb_bench_add_k"
LIMIT_SOURCE = HERE / "peer_fastcall_aot.cpp"
LIMIT_MODULE = "peer_fastcall_aot"

SMALL = (16, 16)
K = 3                          # the pipeline's scalar
CALL_TARGET = 0.80             # hb.aot / the faster extension path, per call
LIMIT_GOAL = 2.0               # hb.aot on Buffers / the FASTCALL limit, per call


def build_limit(hl, workdir):
    """Compiles and imports peer_fastcall_aot.cpp as bench_pipelines.py builds the generated
    extension; returns (module, None) or (None, reason)."""
    try:
        return build_module(hl, workdir, LIMIT_MODULE, [LIMIT_SOURCE], f"compiling {LIMIT_SOURCE.name}"), None
    except BuildError as e:
        return None, str(e)
    except Exception as e:  # noqa: BLE001 - any import failure means "peer unavailable"
        return None, f"importing the compiled {LIMIT_MODULE} failed: {type(e).__name__}: {e}"


def bind_limit(limit, fn, b_in, b_out):
    """The limit's call, bound to the entry point `fn` and to b_in and b_out by their
    halide_buffer_t addresses (the module keeps one binding: the latest)."""
    limit.bind(ctypes.cast(fn, ctypes.c_void_p).value, b_in, b_in._get_raw_halide_buffer_t(),
               b_out, b_out._get_raw_halide_buffer_t())
    return limit.call


def host_buffers(src):
    b_in = hb.Buffer(SMALL, "uint8")
    b_in.numpy(writable=True)[...] = src
    return b_in, hb.Buffer(SMALL, "uint8")


def call_sanity_checks(p, fn, ext, limit, src):
    """Every timed path computes in + 3, into the output it was given."""
    problems = []
    expected = src + np.uint8(K)

    def check(what, got):
        if not np.array_equal(np.asarray(got), expected):
            problems.append(f"{what} did not compute in + {K}")

    b_in, b_out = host_buffers(src)
    if p(b_in, K, b_out) is not b_out:
        problems.append("hb.aot did not return the output Buffer it was given")
    check("hb.aot on Buffers", b_out)
    a_in, a_out = src.copy(), np.zeros(SMALL, np.uint8)
    p(a_in, K, a_out)
    check("hb.aot on ndarrays (written in place)", a_out)
    b_in, b_out = host_buffers(src)
    rc = fn(b_in._get_raw_halide_buffer_t(), K, b_out._get_raw_halide_buffer_t())
    if rc != 0:
        problems.append(f"the raw entry point returned {rc}")
    check("the raw entry point through ctypes", b_out)
    if ext is not None:
        b_in, b_out = host_buffers(src)
        ext(b_in, K, b_out)
        check("the generated extension on Buffers", b_out)
        a_in, a_out = src.copy(), np.zeros(SMALL, np.uint8)
        ext(a_in, K, a_out)
        check("the generated extension on ndarrays", a_out)
    if limit is not None:
        b_in, b_out = host_buffers(src)
        call = bind_limit(limit, fn, b_in, b_out)
        if call(b_in, K, b_out) is not b_out:
            problems.append("the FASTCALL limit did not return the output Buffer it was given")
        check("the FASTCALL limit", b_out)
        for wrong in ((b_in, K), (b_in, K, hb.Buffer(SMALL, "uint8")), (b_in, 1 << 40, b_out)):
            try:
                call(*wrong)
            except (TypeError, OverflowError):
                pass
            else:
                problems.append(f"the FASTCALL limit accepted call{wrong!r}")
    return problems


def make_call_cases(p, fn, ext, limit, src):
    def env(**kw):
        return dict(kw, k=K)

    b_in, b_out = host_buffers(src)
    cases = [Case("aot_buffers", "hb.aot: p(Buffer, 3, Buffer)", "p(i, k, o)",
                  env(p=p, i=b_in, o=b_out), "ours")]
    if ext is not None:
        e_in, e_out = host_buffers(src)
        cases += [
            Case("extension_buffers", "extension: f(Buffer, 3, Buffer)  [peer]", "f(i, k, o)",
                 env(f=ext, i=e_in, o=e_out), "peer"),
            Case("extension_ndarrays", "extension: f(ndarray, 3, ndarray)  [peer]", "f(i, k, o)",
                 env(f=ext, i=src.copy(), o=np.zeros(SMALL, np.uint8)), "peer"),
        ]
    if limit is not None:
        l_in, l_out = host_buffers(src)
        cases.append(Case("limit", "FASTCALL limit: call(Buffer, 3, Buffer)  [peer]", "f(i, k, o)",
                          env(f=bind_limit(limit, fn, l_in, l_out), i=l_in, o=l_out), "peer"))
    r_in, r_out = host_buffers(src)
    cases += [
        Case("aot_ndarrays", "hb.aot: p(ndarray, 3, ndarray), wrapped per call", "p(i, k, o)",
             env(p=p, i=src.copy(), o=np.zeros(SMALL, np.uint8)), "info"),
        Case("ctypes_raw", "ctypes: name(raw, 3, raw), addresses taken once", "f(i, k, o)",
             env(f=fn, i=r_in._get_raw_halide_buffer_t(), o=r_out._get_raw_halide_buffer_t(),
                 keep=(r_in, r_out)), "info"),
        Case("raw_address", "Buffer._get_raw_halide_buffer_t()", "g()",
             env(g=r_in._get_raw_halide_buffer_t), "info"),
        Case("call_floor", "id(Buffer)  [timing loop floor]", "f(x)",
             env(f=id, x=b_in), "info"),
    ]
    return cases


def report_calls(cases, args, ext_reason, limit_reason):
    by_key = {c.key: c for c in cases}
    best = {k: c.rounds_ns.best for k, c in by_key.items()}
    peers = [k for k in ("extension_buffers", "extension_ndarrays") if k in best]
    ref_key = min(peers, key=lambda k: best[k]) if peers else None
    ref = best[ref_key] if ref_key else None
    floor = best["call_floor"]

    print(f"call overhead: best of {args.repeat} x {args.number} calls, host pipeline "
          f"out = in + k (k = {K}), uint8 {SMALL}, target {TARGET}")
    print(environment_line())
    peer = ("built from compile_to(python_extension)" if ext_reason is None
            else f"unavailable: {ext_reason}")
    print(f"peer (Halide's generated Python extension): {peer}")
    limit = (f"built from {LIMIT_SOURCE.name}" if limit_reason is None else f"unavailable: {limit_reason}")
    print(f"peer (the FASTCALL limit): {limit}")
    print()
    w = max(len(c.label) for c in cases)
    head = f"{'case':<{w}}  {'best ns':>8}  {'median':>8}  {'vs ext':>8}  {'vs ext nd':>9}  {'vs limit':>8}"
    print(head)
    print("-" * len(head))
    for c in cases:
        print(f"{c.label:<{w}}  {c.rounds_ns.best:8.1f}  {c.rounds_ns.median:8.1f}  "
              f"{fmt_ratio(ratio(c.rounds_ns.best, best.get('extension_buffers'))):>8}  "
              f"{fmt_ratio(ratio(c.rounds_ns.best, best.get('extension_ndarrays'))):>9}  "
              f"{fmt_ratio(ratio(c.rounds_ns.best, best.get('limit'))):>8}")
    print()

    ratios = {"aot_vs_extension_buffers": ratio(best["aot_buffers"], best.get("extension_buffers")),
              "aot_vs_extension_ndarrays": ratio(best["aot_buffers"], best.get("extension_ndarrays")),
              "aot_ndarrays_vs_extension_ndarrays": ratio(best["aot_ndarrays"],
                                                          best.get("extension_ndarrays")),
              "aot_vs_ctypes_raw": ratio(best["aot_buffers"], best["ctypes_raw"]),
              "aot_vs_limit": ratio(best["aot_buffers"], best.get("limit"))}
    target = None
    if ref_key:
        r = best["aot_buffers"] / ref
        r_net = (best["aot_buffers"] - floor) / (ref - floor)
        # Per-round ratios pair rounds taken milliseconds apart, so a busy neighbour that slows
        # a whole stretch of the run cancels out; their median backs up the ratio of the bests.
        per_round = {k: paired(by_key, "aot_buffers", k) for k in peers}
        ratios.update({"aot_vs_faster_extension": r, "aot_vs_faster_extension_net_of_floor": r_net,
                       **{f"aot_vs_{k}_paired_median": v for k, v in per_round.items()}})
        met = r <= CALL_TARGET
        target = {"aot_vs_faster_extension_max": CALL_TARGET, "against": ref_key, "met": met}
        which = "Buffers" if ref_key == "extension_buffers" else "ndarrays"
        print(f"hb.aot p(Buffer, 3, Buffer) / the faster extension path (on {which}): {r:.2f}x "
              f"(target <= {CALL_TARGET:.2f}x: {'met' if met else 'NOT met'}; "
              f"{r_net:.2f}x net of the loop floor)")
        for k in peers:
            on = "Buffers " if k == "extension_buffers" else "ndarrays"
            print(f"  / extension on {on}: {ratios['aot_vs_' + k]:.2f}x, "
                  f"median of per-round ratios {per_round[k]:.2f}x")
        print(f"hb.aot on ndarrays (wrapped per call) / extension on ndarrays: "
              f"{fmt_ratio(ratios['aot_ndarrays_vs_extension_ndarrays'])}")
    else:
        print(f"hb.aot p(Buffer, 3, Buffer) / generated extension: peer unavailable: {ext_reason}")
    limit_goal = None
    if "limit" in best:
        r = ratios["aot_vs_limit"]
        r_net = (best["aot_buffers"] - floor) / (best["limit"] - floor)
        per_round = paired(by_key, "aot_buffers", "limit")
        met = r <= LIMIT_GOAL
        ratios.update(aot_vs_limit_net_of_floor=r_net, aot_vs_limit_paired_median=per_round)
        limit_goal = {"aot_vs_limit_max": LIMIT_GOAL, "met": met}
        print(f"hb.aot on Buffers / the FASTCALL limit: {r:.2f}x (goal <= {LIMIT_GOAL:.2f}x: "
              f"{'met' if met else 'NOT met'}; median of per-round ratios {per_round:.2f}x; "
              f"{r_net:.2f}x net of the loop floor)")
    else:
        print(f"hb.aot on Buffers / the FASTCALL limit: peer unavailable: {limit_reason}")
    print(f"hb.aot p(Buffer, 3, Buffer) / raw ctypes call: {ratios['aot_vs_ctypes_raw']:.2f}x "
          f"(what the call adds over the pipeline: "
          f"{best['aot_buffers'] - best['ctypes_raw']:.0f} ns)")
    noisy = noisy_timings(cases, ("ours", "peer"))
    return ratios, target, limit_goal, noisy


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--number", type=int, default=20000, help="calls per round (default 20000)")
    ap.add_argument("--repeat", type=int, default=7, help="rounds; the best counts (default 7)")
    ap.add_argument("--no-peer", action="store_true",
                    help="skip building the peers (the generated extension, the FASTCALL limit)")
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    args = ap.parse_args(argv)

    try:
        import halide as hl
    except ImportError as e:
        print(f"needs the halide wheel (pip install halide): {e}", file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory(prefix="hb_bench_aot_calls_", ignore_cleanup_errors=True) as tmp:
        try:
            built = build_pipeline(hl, Path(tmp), HOST_NAME, False, not args.no_peer, add_k_func)
        except BuildError as e:
            print(f"cannot build the pipeline: {e}", file=sys.stderr)
            return 2
        limit, limit_reason = (None, "skipped (--no-peer)") if args.no_peer else build_limit(hl, Path(tmp))
        p = hb.aot.load(built.library, HOST_NAME)
        lib = ctypes.CDLL(str(built.library))  # the library hb.aot opened: the same runtime
        fn = lib[HOST_NAME]
        fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p], ctypes.c_int
        ext = getattr(built.extension, HOST_NAME) if built.extension is not None else None
        src = np.arange(SMALL[0] * SMALL[1], dtype=np.uint8).reshape(SMALL)

        problems = call_sanity_checks(p, fn, ext, limit, src)
        cases = make_call_cases(p, fn, ext, limit, src)
        run_cases(cases, args.number, args.repeat)
        ratios, target, limit_goal, noisy = report_calls(cases, args, built.extension_reason, limit_reason)

    finish(
        args, "aot_calls", problems, noisy, "a paired ratio disagrees with the ratio of the bests",
        number=args.number,
        repeat=args.repeat,
        target=TARGET,
        shape=list(SMALL),
        scalar=K,
        peer={"available": ext is not None, "reason": built.extension_reason},
        limit={"available": limit is not None, "reason": limit_reason},
        cases=cases_json(cases),
        ratios=ratios,
        call_target=target,
        limit_goal=limit_goal,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
