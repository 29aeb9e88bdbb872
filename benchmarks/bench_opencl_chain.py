"""Chains of OpenCL AOT pipelines across libraries: what a chain of three pipelines from three
shared libraries (three Halide runtimes) costs in time and in bytes moved, beside the same chain in
one library (one runtime); and whether outputs at non-zero mins stay on the device.

Run:  python benchmarks/bench_opencl_chain.py [--repeat R] [--calls N] [--json PATH]

It needs the ``halide`` wheel, a C compiler (the pipelines are built when it runs) and an OpenCL
device (PoCL is enough); without them it exits with status 2. It takes about 25 seconds with
``--repeat 5`` on 2 cores, a few of them compiling the kernels.

Every Halide OpenCL runtime in the process (each AOT library embeds its own) computes in the
context and queue of the call's device, halide_buffer's ``hb.opencl.device()``: hb.aot uploads
the inputs once through halide_buffer and allocates the outputs in its memory, so a chain of
pipelines from several libraries should move its input up once and its result down once.

The pipelines are ``out(x, y) = in(x, y) + k`` on uint8 (k = 1, 2, 4), ``gpu_tile`` 8x8, target
``...-opencl``, the output's bounds those of the input, on a 2048x2048 image (4 MiB).

1. **Chains.** ``np.asarray(C(B(A(image))))``: the image an ndarray on the host, each output a
   new Buffer made by hb.aot, the result read once on the host. "three libraries": A, B and C
   each linked into a shared library of its own (three runtimes). "one library" (the peer): the
   same three pipelines linked into one shared library, the first compiled with the runtime and
   the other two with ``-no_runtime`` (one runtime): the same kernels and the same calls, so
   the only difference is the number of runtimes. "one pipeline x3" (informational): the one
   library's A called three times. Each case is ``repeat`` rounds of ``CHAINS`` chains, rounds
   interleaved; the best round gives the time per chain.
2. **Outputs at mins (3, 3).** ``x = hb.Buffer.from_host(image).translated((3, 3))``, then
   ``x = A(x)`` ``--calls`` times (default 100; each output is placed at mins (3, 3)), then one
   ``np.asarray(x)``. The bytes moved during the calls and by the read, and the time per call
   (the loop and the read, over ``--calls``), beside the same loop at mins (0, 0) (the peer).
   ``repeat`` rounds of one loop, interleaved.

The bytes are counted twice: by ``hb.transfers()`` (halide_buffer's copies) and by the test
suite's OpenCL interposer (tests/opencl_interposer.py), which counts every ``clEnqueueReadBuffer``
/ ``clEnqueueWriteBuffer`` (and device-to-device copy and kernel launch) of the process: those of
halide_buffer and of every pipeline runtime, which look OpenCL up by name in the process. It is
installed before anything opens OpenCL. The minimum for one chain or one loop is one upload and
one download of the image (8 MiB); on a device sharing the host's memory (zero-copy, the default
there) it is 0: the copies are maps (bench_zero_copy.py puts both side by side).

Ratios are measured in the same run on the same machine; absolute times are not comparable
across machines, and nothing here is a pass/fail test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import halide_buffer as hb

from bench_common import Rounds, environment_line, finish, fmt_bytes, fmt_ratio, fmt_time, ratio
from bench_pipelines import OPENCL_TARGET, BuildError, c_compiler, opencl_prerequisites, run_tool

SHAPE = (2048, 2048)
ADDS = (("add1", 1), ("add2", 2), ("add4", 4))
CHAINS = 8          # chains per round: about 0.2 s a round on PoCL's CPU device
MINS = (3, 3)
FIELDS = ("writes", "write_bytes", "reads", "read_bytes", "copies", "kernels")


# --------------------------------------------------------------------------------------------
# Counting
# --------------------------------------------------------------------------------------------


class Counter:
    """The process's OpenCL copies (the interposer's counts, if it is installed) and
    halide_buffer's (hb.transfers())."""

    def __init__(self, interposer):
        self.interposer = interposer    # None when the interposer could not be installed

    def snapshot(self):
        t = hb.transfers()
        snap = {"counted_up": t.to_device_bytes, "counted_down": t.to_host_bytes}
        if self.interposer is not None:
            counts = self.interposer.counts()
            snap.update({k: counts[k] for k in FIELDS})
        return snap

    @staticmethod
    def delta(before, after):
        return {k: after[k] - before[k] for k in after}


# --------------------------------------------------------------------------------------------
# The pipelines
# --------------------------------------------------------------------------------------------


def adder(hl, add, name):
    """out(x, y) = in(x, y) + add (uint8, wrapping), 8x8 GPU tiles, the output's bounds the
    input's (so an input at mins (3, 3) gives an output at mins (3, 3))."""
    from pipelines import output_bounds_follow  # tests/pipelines.py, on the path via bench_pipelines

    x, y, xo, yo, xi, yi = (hl.Var(n) for n in ("x", "y", "xo", "yo", "xi", "yi"))
    inp = hl.ImageParam(hl.UInt(8), 2, "inp")
    out = hl.Func(name)
    out[x, y] = inp[x, y] + hl.u8(add)
    out.gpu_tile(x, y, xo, yo, xi, yi, 8, 8)
    output_bounds_follow(out, inp)
    return out, [inp]


def compile_object(hl, workdir, add, name, target):
    obj = workdir / f"{name}.o"
    func, args = adder(hl, add, name)
    try:
        func.compile_to_object(str(obj), args, name, hl.Target(target))
    except Exception as e:  # noqa: BLE001 - Halide raises its own error types
        raise BuildError(f"Halide's compile_to_object failed for {name}: {type(e).__name__}: {e}") from e
    return obj


def link(cc, library, objects):
    run_tool([*cc, "-shared", "-o", str(library), *map(str, objects), "-lpthread", "-ldl", "-lm"],
             f"linking {library.name}")


def build_pipelines(hl, workdir: Path):
    """(three pipelines from three libraries, the same three from one library)."""
    cc = c_compiler()
    if not cc:
        raise BuildError("no C compiler (gcc, cc, clang or $CC) to link the pipelines")
    three, one_objects = [], []
    for i, (name, add) in enumerate(ADDS):
        obj = compile_object(hl, workdir, add, name, OPENCL_TARGET)
        link(cc, workdir / f"lib{name}.so", [obj])
        three.append(hb.aot.load(workdir / f"lib{name}.so", name))
        # One runtime in the one library: the first object carries it, the others go without.
        target = OPENCL_TARGET if i == 0 else OPENCL_TARGET + "-no_runtime"
        one_objects.append(compile_object(hl, workdir, add, f"one_{name}", target))
    link(cc, workdir / "libone_library.so", one_objects)
    one = [hb.aot.load(workdir / "libone_library.so", f"one_{name}") for name, _ in ADDS]
    return three, one


# --------------------------------------------------------------------------------------------
# 1. Chains
# --------------------------------------------------------------------------------------------


class Chain:
    """One case of the chains: `CHAINS` chains a round; keeps the time per chain and the bytes of
    every round."""

    def __init__(self, key, label, group, stages, add, counter):
        self.key, self.label, self.group = key, label, group
        self.stages = stages
        self.add = add                  # what the chain adds to the image
        self.counter = counter
        self.rounds_s = Rounds()
        self.bytes_rounds = []

    def run_once(self, src):
        x = src
        for p in self.stages:
            x = p(x)
        return np.asarray(x)

    def run_round(self, src, record=True):
        c0 = self.counter.snapshot()
        start = time.perf_counter()
        for _ in range(CHAINS):
            self.run_once(src)
        elapsed = time.perf_counter() - start
        c1 = self.counter.snapshot()
        if record:
            self.rounds_s.append(elapsed / CHAINS)
            self.bytes_rounds.append(Counter.delta(c0, c1))

    def per_chain(self, field):
        """`field` per chain if every round agrees, else None."""
        values = {r.get(field) for r in self.bytes_rounds}
        if len(values) != 1 or None in values:
            return None
        return values.pop() / CHAINS


def measure_chains(three, one, src, repeat, counter):
    cases = [
        Chain("three_libraries", "three libraries (three runtimes)", "ours", three, 7, counter),
        Chain("one_library", "one library, three pipelines  [peer]", "peer", one, 7, counter),
        Chain("one_pipeline_x3", "one library, one pipeline x3", "info", [one[0]] * 3, 3, counter),
    ]
    problems, first = [], {}
    for c in cases:  # the first chain compiles the kernels; then check the result and its bytes
        before = counter.snapshot()
        got = c.run_once(src)
        first[c.key] = Counter.delta(before, counter.snapshot())
        if not np.array_equal(got, (src.astype(np.int64) + c.add).astype(np.uint8)):
            problems.append(f"chain, {c.label}: the result is not image + {c.add}")
    for c in cases:  # warm-up round, not kept
        c.run_round(src, record=False)
    for _ in range(repeat):
        for c in cases:
            c.run_round(src)
    return cases, first, problems


def report_chains(cases, nbytes, counter_ok):
    peer = next(c for c in cases if c.group == "peer")
    w = max(len(c.label) for c in cases)
    head = (f"{'case':<{w}}  {'per chain':>9}  {'median':>9}  {'vs peer':>7}  {'paired':>7}  "
            f"{'moved':>8}  {'up':>7}  {'down':>7}  {'hb.transfers()':>14}  {'kernels':>7}")
    print(head)
    print("-" * len(head))
    rows = []
    for c in cases:
        paired = statistics.median(x / y for x, y in zip(c.rounds_s, peer.rounds_s))
        up, down = c.per_chain("write_bytes"), c.per_chain("read_bytes")
        cu, cd = c.per_chain("counted_up"), c.per_chain("counted_down")
        moved = None if None in (up, down) else up + down
        counted = None if None in (cu, cd) else cu + cd
        kernels = c.per_chain("kernels")
        row = {"case": c.key, "label": c.label, "group": c.group,
               "best_s_per_chain": c.rounds_s.best, "median_s_per_chain": c.rounds_s.median,
               "rounds_s_per_chain": list(c.rounds_s),
               "vs_peer": c.rounds_s.best / peer.rounds_s.best, "paired_vs_peer": paired,
               "moved_bytes_per_chain": moved, "up_bytes_per_chain": up, "down_bytes_per_chain": down,
               "device_copies_per_chain": c.per_chain("copies"), "kernels_per_chain": kernels,
               "hb_transfers_up_per_chain": cu, "hb_transfers_down_per_chain": cd,
               "hb_transfers_bytes_per_chain": counted, "rounds_bytes": c.bytes_rounds}
        rows.append(row)
        print(f"{c.label:<{w}}  {fmt_time(c.rounds_s.best):>9}  {fmt_time(c.rounds_s.median):>9}  "
              f"{fmt_ratio(row['vs_peer']):>7}  {fmt_ratio(paired):>7}  {fmt_bytes(moved):>8}  "
              f"{fmt_bytes(up):>7}  {fmt_bytes(down):>7}  {fmt_bytes(counted):>14}  "
              f"{'-' if kernels is None else format(kernels, '.0f'):>7}")
    print()
    ours = rows[0]
    minimum = minimum_bytes(nbytes)
    moved = ours["moved_bytes_per_chain"] if counter_ok else ours["hb_transfers_bytes_per_chain"]
    print(f"three libraries / one library, time per chain: {fmt_ratio(ours['vs_peer'])} "
          f"(paired {fmt_ratio(ours['paired_vs_peer'])}); goal <= 1.05x")
    print(f"three libraries, bytes per chain: {fmt_bytes(moved)} moved "
          f"({'OpenCL copies counted' if counter_ok else 'hb.transfers()'}), "
          f"minimum {fmt_bytes(minimum)} ({MINIMUM_WHY[minimum == 0]}): "
          f"moved / minimum {fmt_ratio(ratio(moved, minimum) if minimum else None)}")
    return rows, {"time_ratio": ours["vs_peer"], "time_ratio_paired": ours["paired_vs_peer"],
                  "bytes_per_chain": moved, "minimum_bytes": minimum,
                  "bytes_ratio": ratio(moved, minimum) if minimum else None}


# Why the minimum is what it is, by whether it is 0.
MINIMUM_WHY = {False: "one upload, one download", True: "zero-copy: the device's memory is the host's"}


def minimum_bytes(nbytes):
    """What a chain or a loop must move: the image up and the result down, or nothing on a device
    whose copies are maps (zero-copy)."""
    return 0 if hb.opencl.device().zero_copy else 2 * nbytes


def chain_consistency(cases, counter_ok):
    problems = []
    for c in cases:
        fields = ("counted_up", "counted_down") + (("write_bytes", "read_bytes") if counter_ok else ())
        for field in fields:
            if c.per_chain(field) is None:
                problems.append(f"chain, {c.label}: {field} differs between rounds")
        if counter_ok and c.per_chain("kernels") != len(c.stages):
            problems.append(f"chain, {c.label}: the interposer saw {c.per_chain('kernels')} kernel launches "
                            f"a chain for {len(c.stages)} calls (is it on the runtimes' lookup path?)")
        if counter_ok:
            seen = (c.per_chain("write_bytes"), c.per_chain("read_bytes"))
            counted = (c.per_chain("counted_up"), c.per_chain("counted_down"))
            if None not in seen + counted and seen != counted:
                problems.append(f"chain, {c.label}: the process's OpenCL copies moved {fmt_bytes(seen[0])} "
                                f"up / {fmt_bytes(seen[1])} down a chain, hb.transfers() counted "
                                f"{fmt_bytes(counted[0])} / {fmt_bytes(counted[1])}")
    return problems


# --------------------------------------------------------------------------------------------
# 2. Outputs at non-zero mins
# --------------------------------------------------------------------------------------------


class MinsLoop:
    """`calls` calls x = p(x) from a host image at `mins`, then one read; per round: the time
    per call, and the bytes during the calls and of the read."""

    def __init__(self, key, label, group, p, mins, calls, counter):
        self.key, self.label, self.group = key, label, group
        self.p, self.mins, self.calls, self.counter = p, mins, calls, counter
        self.rounds_s = Rounds()
        self.calls_rounds, self.read_rounds = [], []
        self.last_mins = None

    def run_round(self, src, record=True):
        x = hb.Buffer.from_host(src)
        if any(self.mins):
            x = x.translated(self.mins)
        c0 = self.counter.snapshot()
        start = time.perf_counter()
        for _ in range(self.calls):
            x = self.p(x)
        c1 = self.counter.snapshot()
        result = np.asarray(x)     # in the time: the calls' queued work is done when it returns
        elapsed = time.perf_counter() - start
        c2 = self.counter.snapshot()
        self.last_mins = tuple(x.mins)
        if record:
            self.rounds_s.append(elapsed / self.calls)
            self.calls_rounds.append(Counter.delta(c0, c1))
            self.read_rounds.append(Counter.delta(c1, c2))
        return result

    def agreed(self, rounds, field):
        values = {r.get(field) for r in rounds}
        return values.pop() if len(values) == 1 and None not in values else None


def measure_mins(p, src, calls, repeat, counter):
    cases = [MinsLoop("mins_3_3", f"x = A(x) at mins {MINS}", "ours", p, MINS, calls, counter),
             MinsLoop("mins_0_0", "x = A(x) at mins (0, 0)  [peer]", "peer", p, (0, 0), calls, counter)]
    problems = []
    expected = (src.astype(np.int64) + calls).astype(np.uint8)
    for c in cases:  # warm-up loop, not kept: also the check of the result and of its mins
        got = c.run_round(src, record=False)
        if not np.array_equal(got, expected):
            problems.append(f"mins loop, {c.label}: the result is not image + {calls}")
        if c.last_mins != tuple(c.mins):
            problems.append(f"mins loop, {c.label}: the last output is at mins {c.last_mins}")
    for _ in range(repeat):
        for c in cases:
            c.run_round(src)
    return cases, problems


def report_mins(cases, nbytes, counter_ok, calls):
    peer = next(c for c in cases if c.group == "peer")
    w = max(len(c.label) for c in cases)
    up_f, down_f = ("write_bytes", "read_bytes") if counter_ok else ("counted_up", "counted_down")
    head = (f"{'case':<{w}}  {'per call':>9}  {'vs peer':>7}  {'paired':>7}  {'calls: up':>9}  "
            f"{'calls: down':>11}  {'read: down':>10}  {'moved':>8}  {'hb.transfers()':>14}")
    print(head)
    print("-" * len(head))
    rows = []
    for c in cases:
        paired = statistics.median(x / y for x, y in zip(c.rounds_s, peer.rounds_s))
        up, down = c.agreed(c.calls_rounds, up_f), c.agreed(c.calls_rounds, down_f)
        read_up, read_down = c.agreed(c.read_rounds, up_f), c.agreed(c.read_rounds, down_f)
        moved = None if None in (up, down, read_up, read_down) else up + down + read_up + read_down
        counted = [c.agreed(r, f) for r in (c.calls_rounds, c.read_rounds)
                   for f in ("counted_up", "counted_down")]
        counted_total = None if None in counted else sum(counted)
        row = {"case": c.key, "label": c.label, "group": c.group, "mins": list(c.mins), "calls": calls,
               "best_s_per_call": c.rounds_s.best, "median_s_per_call": c.rounds_s.median,
               "rounds_s_per_call": list(c.rounds_s),
               "vs_peer": c.rounds_s.best / peer.rounds_s.best, "paired_vs_peer": paired,
               "calls_up_bytes": up, "calls_down_bytes": down, "read_up_bytes": read_up,
               "read_down_bytes": read_down, "moved_bytes": moved, "hb_transfers_bytes": counted_total,
               "kernels": c.agreed(c.calls_rounds, "kernels"),
               "rounds_calls": c.calls_rounds, "rounds_read": c.read_rounds}
        rows.append(row)
        print(f"{c.label:<{w}}  {fmt_time(c.rounds_s.best):>9}  {fmt_ratio(row['vs_peer']):>7}  "
              f"{fmt_ratio(paired):>7}  {fmt_bytes(up):>9}  {fmt_bytes(down):>11}  "
              f"{fmt_bytes(read_down):>10}  {fmt_bytes(moved):>8}  {fmt_bytes(counted_total):>14}")
    print()
    ours = rows[0]
    print(f"outputs at mins {MINS}: {fmt_bytes(ours['calls_down_bytes'])} brought home during {calls} "
          f"calls (goal 0 B), {fmt_bytes(ours['moved_bytes'])} moved in all (minimum "
          f"{fmt_bytes(minimum_bytes(nbytes))}); time per call / at mins (0, 0): {fmt_ratio(ours['vs_peer'])} "
          f"(paired {fmt_ratio(ours['paired_vs_peer'])})")
    return rows, {"downloads_during_calls_bytes": ours["calls_down_bytes"],
                  "moved_bytes": ours["moved_bytes"], "minimum_bytes": minimum_bytes(nbytes),
                  "time_ratio": ours["vs_peer"], "time_ratio_paired": ours["paired_vs_peer"]}


def mins_consistency(cases, counter_ok):
    problems = []
    for c in cases:
        for name, rounds in (("calls", c.calls_rounds), ("read", c.read_rounds)):
            fields = ("counted_up", "counted_down") + (("write_bytes", "read_bytes") if counter_ok else ())
            for field in fields:
                if c.agreed(rounds, field) is None:
                    problems.append(f"mins loop, {c.label}, {name}: {field} differs between rounds")
            if counter_ok:
                seen = (c.agreed(rounds, "write_bytes"), c.agreed(rounds, "read_bytes"))
                counted = (c.agreed(rounds, "counted_up"), c.agreed(rounds, "counted_down"))
                if None not in seen + counted and seen != counted:
                    problems.append(f"mins loop, {c.label}, {name}: the process's OpenCL copies moved "
                                    f"{fmt_bytes(seen[0])} up / {fmt_bytes(seen[1])} down, "
                                    f"hb.transfers() counted {fmt_bytes(counted[0])} / "
                                    f"{fmt_bytes(counted[1])}")
    return problems


# --------------------------------------------------------------------------------------------


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7, help="rounds; the best counts (default 7)")
    ap.add_argument("--calls", type=int, default=100,
                    help="calls of the loop at mins (3, 3) (default 100)")
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    args = ap.parse_args(argv)
    if args.repeat < 1 or args.calls < 1:
        ap.error("--repeat and --calls must be at least 1")

    ready = opencl_prerequisites()  # the interposer goes in before the OpenCL loader does
    if ready is None:
        return 2
    hl, interposer, counter_reason, dev = ready
    counter = Counter(interposer)
    counter_ok = interposer is not None
    device = f"{dev.name} on {dev.platform}"
    src = np.random.default_rng(1).integers(0, 256, SHAPE, dtype=np.uint8)

    with tempfile.TemporaryDirectory(prefix="hb_bench_opencl_chain_", ignore_cleanup_errors=True) as tmp:
        try:
            three, one = build_pipelines(hl, Path(tmp))
        except BuildError as e:
            print(f"cannot build the pipelines: {e}", file=sys.stderr)
            return 2
        chains, first, problems = measure_chains(three, one, src, args.repeat, counter)
        loops, more = measure_mins(three[0], src, args.calls, args.repeat, counter)
        problems += more + chain_consistency(chains, counter_ok) + mins_consistency(loops, counter_ok)

    print(f"chains of OpenCL pipelines across libraries: best of {args.repeat} interleaved rounds, "
          f"uint8 {SHAPE} ({fmt_bytes(src.nbytes)}), {device}, target {OPENCL_TARGET}")
    print(environment_line())
    print("OpenCL copy counter: " + ("installed (every runtime's clEnqueueRead/WriteBuffer)"
                                     if counter_ok else f"unavailable: {counter_reason}"))
    print()
    print(f"1. np.asarray(C(B(A(image)))), {CHAINS} chains a round; bytes per chain "
          f"(moved/up/down: OpenCL copies counted)")
    chain_rows, chain_summary = report_chains(chains, src.nbytes, counter_ok)
    f = first["three_libraries"]
    if counter_ok:
        print(f"first chain (kernels compiled): {fmt_bytes(f['write_bytes'])} up / "
              f"{fmt_bytes(f['read_bytes'])} down; hb.transfers() {fmt_bytes(f['counted_up'])} / "
              f"{fmt_bytes(f['counted_down'])}")
    print()
    print(f"2. x = A(x) {args.calls} times from a host image, then np.asarray(x); one loop a round")
    mins_rows, mins_summary = report_mins(loops, src.nbytes, counter_ok, args.calls)
    noisy = [c.label for c in (*chains, *loops) if c.rounds_s.median > 1.25 * c.rounds_s.best]
    finish(
        args, "opencl_chain", problems, noisy, "a paired ratio disagrees with the ratio of the bests",
        repeat=args.repeat, target=OPENCL_TARGET, device=device, shape=list(SHAPE),
        bytes=int(src.nbytes), chains_per_round=CHAINS,
        counter={"available": counter_ok, "reason": counter_reason},
        chains={"rows": chain_rows, "first_chain": first, "summary": chain_summary},
        mins={"rows": mins_rows, "summary": mins_summary},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
