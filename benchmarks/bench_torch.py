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

(c) The same two with a gradient: ``f = hb.torch.op(q, backward=dq)`` on a float32 (16, 16)
    tensor that requires grad, ``q`` = in * 2 + k and ``dq`` its gradient pipeline (d_inp = d_out
    * 2), against a hand-written ``custom_op`` + ``register_fake`` + ``register_autograd`` calling
    the same two pipelines: the forward alone (autograd records the graph), and forward plus
    ``backward()``. The target: <= 1.30x each.
(d) ``hb.torch.op`` of the pipeline without its output's bounds set (sized by the rule of
    docs/aot.md "Outputs not given", kept per shape) against the one that sets them: the sizing
    costs nothing once the shape was seen (informational, about 1.00x).

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

from bench_common import (Case, cases_json, environment_line, finish, fmt_ratio, noisy_timings, paired, ratio,
                          run_cases, timing_arguments)
from bench_pipelines import TARGET, BuildError, c_compiler, pipelines

NAME = "hb_bench_torch_affine"
SMALL = (16, 16)
OFFSET = 3
OP_TARGET = 1.30               # hb.torch.op / the hand-written custom op, per call


def build(hl, workdir: Path, sized=True, name=NAME):
    """The pipeline, built and loaded with hb.aot: out = in * 2 + offset, sized like its input
    (`sized`), or its output's bounds unset."""
    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(hl.UInt(8), 2, "inp")
    offset = hl.Param(hl.UInt(8), "offset")
    out = hl.Func(name)
    out[x, y] = inp[x, y] * hl.u8(2) + offset
    out.vectorize(x, 16, hl.TailStrategy.GuardWithIf)
    if sized:
        pipelines.output_bounds_follow(out, inp)
    return _compiled(workdir, out, [inp, offset], name)


def _compiled(workdir: Path, func, args, name):
    cc = c_compiler()
    if not cc:
        raise BuildError("no C compiler (gcc, cc, clang or $CC) to link the pipeline")
    try:
        return pipelines.compile_and_load(workdir, cc[0], func, args, name, target=TARGET)
    except Exception as e:  # noqa: BLE001 - Halide's and the linker's failures alike
        raise BuildError(f"building {name} failed: {type(e).__name__}: {e}") from e


def build_with_gradient(hl, workdir: Path):
    """q: out = in * 2 + k (float32, bounds unset) and dq, its gradient pipeline (inp, d_<out> in,
    d_inp = d_out * 2 out), in HelloPyTorch's convention."""
    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(hl.Float(32), 2, "inp")
    k = hl.Param(hl.Float(32), "k")
    out = hl.Func(NAME + "_scale")
    out[x, y] = inp[x, y] * 2 + k
    d_out = hl.ImageParam(hl.Float(32), 2, "d_" + NAME + "_scale")
    d_inp = hl.Func("d_inp")
    d_inp[x, y] = d_out[x, y] * 2
    return (_compiled(workdir, out, [inp, k], NAME + "_scale"),
            _compiled(workdir, d_inp, [inp, d_out], NAME + "_scale_grad"))


def by_hand_with_gradient(q, dq):
    """The differentiable custom op a user writes around hb.aot and the same two pipelines."""

    @torch.library.custom_op("hb_bench::scale_by_hand", mutates_args=())
    def scale_by_hand(inp: torch.Tensor, k: float) -> torch.Tensor:
        out = torch.empty_like(inp)
        q(inp.detach(), k, out)  # hb.aot refuses a tensor that requires grad
        return out

    @scale_by_hand.register_fake
    def _(inp, k):
        return torch.empty_like(inp)

    @torch.library.custom_op("hb_bench::scale_by_hand_grad", mutates_args=())
    def scale_grad(inp: torch.Tensor, d_out: torch.Tensor) -> torch.Tensor:
        d_inp = torch.empty_like(inp)
        dq(inp.detach(), d_out.detach(), d_inp)
        return d_inp

    @scale_grad.register_fake
    def _(inp, d_out):
        return torch.empty_like(inp)

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    def backward(ctx, grad):
        (inp,) = ctx.saved_tensors
        return scale_grad(inp, grad.contiguous()), None

    scale_by_hand.register_autograd(backward, setup_context=setup_context)
    return scale_by_hand


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


def gradient_checks(op, hand):
    """Both differentiable ops compute in * 2 + k and the gradient 2."""
    problems = []
    for what, f in (("hb.torch.op with backward", op), ("the hand-written differentiable op", hand)):
        t = torch.rand(SMALL).requires_grad_()
        y = f(t, 0.5)
        y.backward(torch.ones(SMALL))
        if not torch.equal(y.detach(), t.detach() * 2 + 0.5) or not torch.equal(t.grad, torch.full(SMALL, 2.0)):
            problems.append(f"{what} did not compute in * 2 + k and its gradient 2")
    return problems


def make_cases(p, op, hand, src, unsized, grads):
    def env(**kw):
        return kw

    g_op, g_hand = grads
    tg = torch.rand(SMALL).requires_grad_()
    ones = torch.ones(SMALL)

    t, t_out = torch.from_numpy(src.copy()), torch.zeros(SMALL, dtype=torch.uint8)
    b_in, b_out = hb.Buffer.from_host(src, copy=True), hb.Buffer(SMALL, "uint8")
    packet = getattr(torch.ops.halide_buffer, NAME)
    return [
        Case("call_tensors", "p(tensor, 3, tensor)", "p(i, 3, o)", env(p=p, i=t, o=t_out), "ours", ref="call_ndarrays"),
        Case("call_ndarrays", "p(ndarray, 3, ndarray)  [reference]", "p(i, 3, o)",
             env(p=p, i=src.copy(), o=np.zeros(SMALL, np.uint8)), "reference"),
        Case("op", "hb.torch.op: f(t, 3)", "f(t, 3)", env(f=op, t=t), "ours", ref="by_hand"),
        Case("by_hand", "custom_op by hand: g(t, 3)  [peer]", "g(t, 3)", env(g=hand, t=t), "peer"),
        Case("op_grad", "hb.torch.op(q, backward=dq): f(t, 0.5), t requiring grad", "f(t, 0.5)",
             env(f=g_op, t=tg), "ours", ref="by_hand_grad"),
        Case("by_hand_grad", "custom_op + register_autograd by hand: g(t, 0.5)  [peer]", "g(t, 0.5)",
             env(g=g_hand, t=tg), "peer"),
        Case("op_train", "hb.torch.op(q, backward=dq): f(t, 0.5).backward(ones)", "f(t, 0.5).backward(g)",
             env(f=g_op, t=tg, g=ones), "ours", ref="by_hand_train"),
        Case("by_hand_train", "custom_op by hand: g(t, 0.5).backward(ones)  [peer]", "f(t, 0.5).backward(g)",
             env(f=g_hand, t=tg, g=ones), "peer"),
        Case("op_unsized", "hb.torch.op of the pipeline without bounds: f(t, 3)", "f(t, 3)", env(f=unsized, t=t),
             "info", ref="op"),
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
        "op_grad_vs_by_hand": best["op_grad"] / best["by_hand_grad"],
        "op_train_vs_by_hand": best["op_train"] / best["by_hand_train"],
        "op_unsized_vs_op": best["op_unsized"] / best["op"],
    }
    met = all(ratios[k] <= OP_TARGET for k in ("op_vs_by_hand", "op_grad_vs_by_hand", "op_train_vs_by_hand"))
    print(f"(a) p(tensor, 3, tensor) / p(ndarray, 3, ndarray): {ratios['call_tensors_vs_ndarrays']:.2f}x "
          f"(median of per-round ratios {ratios['call_tensors_vs_ndarrays_paired_median']:.2f}x)")
    print(f"(b) hb.torch.op f(t, 3) / custom_op by hand: {ratios['op_vs_by_hand']:.2f}x "
          f"({ratios['op_vs_by_hand_net_of_floor']:.2f}x net of the loop floor; median of per-round ratios "
          f"{ratios['op_vs_by_hand_paired_median']:.2f}x)")
    print(f"(c) with a backward: forward {ratios['op_grad_vs_by_hand']:.2f}x, forward + backward "
          f"{ratios['op_train_vs_by_hand']:.2f}x the hand-written differentiable custom_op")
    print(f"    the target of (b) and (c), each <= {OP_TARGET:.2f}x: {'met' if met else 'NOT met'}")
    print(f"(d) an op of the pipeline without its bounds set / with them: {ratios['op_unsized_vs_op']:.2f}x")
    print(f"    hb.torch.op / the bare call p(tensor, 3, tensor): {ratios['op_vs_call_tensors']:.2f}x "
          f"(what the op adds: {best['op'] - best['call_tensors']:.0f} ns); / t * 2 + 3 in torch: "
          f"{ratios['op_vs_torch_native']:.2f}x")
    target = {"op_vs_by_hand_max": OP_TARGET, "met": met}
    return ratios, target, noisy_timings(cases)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    timing_arguments(ap)
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
            unsized = hbt.op(build(hl, Path(tmp), sized=False, name=NAME + "_unsized"))
            q, dq = build_with_gradient(hl, Path(tmp))
        except BuildError as e:
            print(f"cannot build the pipeline: {e}", file=sys.stderr)
            return 2
        op, hand = hbt.op(p), by_hand(p)
        grads = (hbt.op(q, backward=dq), by_hand_with_gradient(q, dq))
        src = np.arange(SMALL[0] * SMALL[1], dtype=np.uint8).reshape(SMALL)
        problems = sanity_checks(p, op, hand, src)
        problems += gradient_checks(*grads)
        cases = make_cases(p, op, hand, src, unsized, grads)
        run_cases(cases, args.number, args.repeat)
        ratios, target, noisy = report(cases, args)

    finish(args, "torch", problems, noisy, "a paired ratio disagrees with the ratio of the bests",
           number=args.number, repeat=args.repeat, target=TARGET, shape=list(SMALL), torch=torch.__version__,
           cases=cases_json(cases), ratios=ratios, op_target=target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
