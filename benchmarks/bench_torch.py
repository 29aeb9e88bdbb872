"""PyTorch: what calling a Halide AOT pipeline with torch tensors costs, and what ``hb.torch.op``
adds over the custom op a user would write by hand around ``hb.aot``.

Run:  python benchmarks/bench_torch.py [--number N] [--repeat R] [--json PATH]

It needs PyTorch, the ``halide`` wheel and a C compiler (the pipeline is built when it runs, with
tests/pipelines.py); without them it exits with status 2.

The host pipeline ``out(x, y) = in(x, y) * 2 + offset`` on uint8 (16, 16), ``offset`` a uint8
scalar, its output sized like its input (so an op can allocate it). Every case is timed with
``timeit`` as ``repeat`` rounds of ``number`` calls, the rounds of all cases interleaved, the best
round giving the per-call cost. Two comparisons, each measured side by side in the same run:

(a) ``p(t_in, 3, t_out)`` on CPU tensors against the same call on NumPy arrays: what a tensor
    argument costs over an ndarray (informational; no target).
(b) ``f(t, 3)``, ``f = hb.torch.op(p)``, against the custom op written by hand:
    ``torch.library.custom_op`` around ``out = torch.empty_like(t); p(t, offset, out)``, with a
    ``register_fake`` of ``torch.empty_like``. The target: ``hb.torch.op`` <= 1.30x the hand-written op.

Informational rows: the raw call on Buffers, the op through ``torch.ops`` (the packet, as a
model's code calls it), ``torch.empty_like`` and ``t * 2 + 3`` in torch itself (the cost of an
allocation and of a native op on such a tensor), and ``id(t)``, the floor of the timing loop.

Ratios are measured in the same run on the same machine; absolute times are not comparable
across machines, and nothing here is a pass/fail test.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

import halide_buffer as hb

try:  # at module level: the hand-written op's annotations name torch.Tensor (evaluated lazily)
    import torch

    import halide_buffer.torch as hbt
except ImportError as e:
    torch, TORCH_REASON = None, f"{type(e).__name__}: {e}"

from bench_common import Case, cases_json, environment_line, finish, fmt_ratio, noisy_timings, paired, ratio, run_cases
from bench_pipelines import TARGET, BuildError, c_compiler, pipelines

NAME = "hb_bench_torch_affine"
SMALL = (16, 16)
OFFSET = 3
OP_TARGET = 1.30               # hb.torch.op / the hand-written custom op, per call


def build(hl, workdir: Path):
    """The pipeline, built and loaded with hb.aot: out = in * 2 + offset, sized like its input."""
    cc = c_compiler()
    if not cc:
        raise BuildError("no C compiler (gcc, cc, clang or $CC) to link the pipeline")
    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(hl.UInt(8), 2, "inp")
    offset = hl.Param(hl.UInt(8), "offset")
    out = hl.Func(NAME)
    out[x, y] = inp[x, y] * hl.u8(2) + offset
    out.vectorize(x, 16, hl.TailStrategy.GuardWithIf)
    pipelines.output_bounds_follow(out, inp)
    try:
        return pipelines.compile_and_load(workdir, cc[0], out, [inp, offset], NAME, target=TARGET)
    except Exception as e:  # noqa: BLE001 - Halide's and the linker's failures alike
        raise BuildError(f"building {NAME} failed: {type(e).__name__}: {e}") from e


def by_hand(p):
    """The custom op a user writes around hb.aot: they know the output is shaped like the input."""

    @torch.library.custom_op("hb_bench::affine_by_hand", mutates_args=())
    def affine_by_hand(inp: torch.Tensor, offset: int) -> torch.Tensor:
        out = torch.empty_like(inp)
        p(inp, offset, out)
        return out

    @affine_by_hand.register_fake
    def _(inp, offset):
        return torch.empty_like(inp)

    return affine_by_hand


def sanity_checks(p, op, hand, src):
    """Every timed path computes in * 2 + offset, into the output it was given or returned."""
    problems = []
    t = torch.from_numpy(src.copy())
    expected = t * 2 + OFFSET

    def check(what, got):
        if not torch.equal(torch.as_tensor(np.asarray(got)) if not isinstance(got, torch.Tensor) else got, expected):
            problems.append(f"{what} did not compute in * 2 + {OFFSET}")

    o = torch.empty_like(t)
    p(t, OFFSET, o)
    check("p(tensor, 3, tensor), written in place", o)
    a_out = np.zeros(SMALL, np.uint8)
    p(src.copy(), OFFSET, a_out)
    check("p(ndarray, 3, ndarray), written in place", a_out)
    check("hb.torch.op", op(t, OFFSET))
    check("the hand-written custom op", hand(t, OFFSET))
    return problems


def make_cases(p, op, hand, src):
    def env(**kw):
        return kw

    t, t_out = torch.from_numpy(src.copy()), torch.zeros(SMALL, dtype=torch.uint8)
    b_in, b_out = hb.Buffer.from_host(src, copy=True), hb.Buffer(SMALL, "uint8")
    packet = getattr(torch.ops.halide_buffer, NAME)
    return [
        Case("call_tensors", "p(tensor, 3, tensor)", "p(i, 3, o)", env(p=p, i=t, o=t_out), "ours", ref="call_ndarrays"),
        Case("call_ndarrays", "p(ndarray, 3, ndarray)  [reference]", "p(i, 3, o)",
             env(p=p, i=src.copy(), o=np.zeros(SMALL, np.uint8)), "reference"),
        Case("op", "hb.torch.op: f(t, 3)", "f(t, 3)", env(f=op, t=t), "ours", ref="by_hand"),
        Case("by_hand", "custom_op by hand: g(t, 3)  [peer]", "g(t, 3)", env(g=hand, t=t), "peer"),
        Case("op_packet", "torch.ops.halide_buffer.<name>(t, 3)", "f(t, 3)", env(f=packet, t=t), "info",
             ref="by_hand"),
        Case("call_buffers", "p(Buffer, 3, Buffer)", "p(i, 3, o)", env(p=p, i=b_in, o=b_out), "info",
             ref="call_ndarrays"),
        Case("empty_like", "torch.empty_like(t)", "e(t)", env(e=torch.empty_like, t=t), "info"),
        Case("torch_native", "t * 2 + 3 in torch", "t * 2 + 3", env(t=t), "info"),
        Case("floor", "id(t)  [timing loop floor]", "f(x)", env(f=id, x=t), "info"),
    ]


def report(cases, args):
    by_key = {c.key: c for c in cases}
    best = {k: c.rounds_ns.best for k, c in by_key.items()}
    print(f"torch calls: best of {args.repeat} x {args.number} calls, host pipeline out = in * 2 + offset, "
          f"uint8 {SMALL}, target {TARGET}")
    print(f"{environment_line()}, torch {torch.__version__}")
    print()
    w = max(len(c.label) for c in cases)
    head = f"{'case':<{w}}  {'best ns':>8}  {'median':>8}  {'vs ref':>8}"
    print(head)
    print("-" * len(head))
    for c in cases:
        r = ratio(c.rounds_ns.best, best[c.ref]) if c.ref else None
        print(f"{c.label:<{w}}  {c.rounds_ns.best:8.1f}  {c.rounds_ns.median:8.1f}  {fmt_ratio(r):>8}")
    print()
    floor = best["floor"]
    ratios = {
        "call_tensors_vs_ndarrays": best["call_tensors"] / best["call_ndarrays"],
        "call_tensors_vs_ndarrays_paired_median": paired(by_key, "call_tensors", "call_ndarrays"),
        "op_vs_by_hand": best["op"] / best["by_hand"],
        "op_vs_by_hand_net_of_floor": (best["op"] - floor) / (best["by_hand"] - floor),
        "op_vs_by_hand_paired_median": paired(by_key, "op", "by_hand"),
        "op_vs_call_tensors": best["op"] / best["call_tensors"],
        "op_vs_torch_native": best["op"] / best["torch_native"],
    }
    met = ratios["op_vs_by_hand"] <= OP_TARGET
    print(f"(a) p(tensor, 3, tensor) / p(ndarray, 3, ndarray): {ratios['call_tensors_vs_ndarrays']:.2f}x "
          f"(median of per-round ratios {ratios['call_tensors_vs_ndarrays_paired_median']:.2f}x)")
    print(f"(b) hb.torch.op f(t, 3) / custom_op by hand: {ratios['op_vs_by_hand']:.2f}x "
          f"(target <= {OP_TARGET:.2f}x: {'met' if met else 'NOT met'}; {ratios['op_vs_by_hand_net_of_floor']:.2f}x "
          f"net of the loop floor; median of per-round ratios {ratios['op_vs_by_hand_paired_median']:.2f}x)")
    print(f"    hb.torch.op / the bare call p(tensor, 3, tensor): {ratios['op_vs_call_tensors']:.2f}x "
          f"(what the op adds: {best['op'] - best['call_tensors']:.0f} ns); / t * 2 + 3 in torch: "
          f"{ratios['op_vs_torch_native']:.2f}x")
    target = {"op_vs_by_hand_max": OP_TARGET, "met": met}
    return ratios, target, noisy_timings(cases)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--number", type=int, default=20000, help="calls per round (default 20000)")
    ap.add_argument("--repeat", type=int, default=7, help="rounds; the best counts (default 7)")
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    args = ap.parse_args(argv)

    if torch is None:
        print(f"needs PyTorch (pip install torch): {TORCH_REASON}", file=sys.stderr)
        return 2
    try:
        import halide as hl
    except ImportError as e:
        print(f"needs the halide wheel (pip install halide): {e}", file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory(prefix="hb_bench_torch_", ignore_cleanup_errors=True) as tmp:
        try:
            p = build(hl, Path(tmp))
        except BuildError as e:
            print(f"cannot build the pipeline: {e}", file=sys.stderr)
            return 2
        op, hand = hbt.op(p), by_hand(p)
        src = np.arange(SMALL[0] * SMALL[1], dtype=np.uint8).reshape(SMALL)
        problems = sanity_checks(p, op, hand, src)
        cases = make_cases(p, op, hand, src)
        run_cases(cases, args.number, args.repeat)
        ratios, target, noisy = report(cases, args)

    finish(args, "torch", problems, noisy, "a paired ratio disagrees with the ratio of the bests",
           number=args.number, repeat=args.repeat, target=TARGET, shape=list(SMALL), torch=torch.__version__,
           cases=cases_json(cases), ratios=ratios, op_target=target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
