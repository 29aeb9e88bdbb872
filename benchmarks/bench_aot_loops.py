"""AOT pipeline loops on a device: how many bytes, and how much time, a loop of calls of an OpenCL
AOT pipeline through halide_buffer.aot moves and takes per call, beside the Python extension
Halide generates for the same pipeline.

Run:  python benchmarks/bench_aot_loops.py [--repeat R] [--calls N] [--json PATH] [--no-peer]

It needs the ``halide`` wheel, a C compiler (the pipeline is built when it runs, see
bench_pipelines.py) and an OpenCL device (PoCL is enough); without them it exits with status
2. The peer is Halide's generated Python extension for the same pipeline, linked with the same
object; without a C++ compiler, or if that build fails, it is reported unavailable (with the
reason) and ours still runs.

The pipeline is ``out(x, y) = in(x, y) + 1``, ``gpu_tile`` 8x8, target ``...-opencl``, on
uint8 (512, 512) buffers, in two loops: "chain", ``calls`` calls each feeding its output into
the next (a fresh host input first, one host read of the last output at the end); and "read
each", the same with ``np.asarray(out)`` after every call. Ours: ``hb.aot`` on Buffers. Peers:
the generated extension on NumPy arrays and on Buffers. The bytes are counted twice: by
``hb.transfers()`` (ours), and by the test suite's OpenCL interposer
(tests/opencl_interposer.py), which counts every OpenCL copy (``clEnqueueReadBuffer`` /
``clEnqueueWriteBuffer``) and kernel launch of the process: halide_buffer's backend's and the
pipelines' Halide runtimes' (which look OpenCL up by name in the process). The extension's
figure is also derived from its generated wrapper: it marks every input host-dirty before the
call and copies every output to the host after it, so it must move the input up and the output
down on every call. Each case is ``repeat`` rounds of a fixed number of loops, timed with
``perf_counter``, rounds interleaved; the best round gives the time per call. Before timing,
one call of each side on fresh buffers (a host-written input, a new output) gives the bytes of
a first call.

What one call costs on the host is measured by bench_aot_calls.py.

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
from bench_pipelines import TARGET, BuildError, build_pipeline, opencl_prerequisites

CL_NAME = "hb_bench_add_one_cl"

CL_SHAPE = (512, 512)


def wrapper_copies(source: str):
    """What the generated wrapper does around the call: (marks inputs host-dirty, copies outputs
    to the host), read from its source."""
    return ("set_host_dirty()" in source, "halide_copy_to_host(" in source)


class CopyCounter:
    """The process's OpenCL copies and kernel launches, counted by the test suite's OpenCL
    interposer (tests/opencl_interposer.py): halide_buffer's backend calls through it, and the
    pipelines' Halide runtimes, which look OpenCL up by name in the process, find it first."""

    FIELDS = ("reads", "read_bytes", "writes", "write_bytes", "kernels")

    def __init__(self, interposer):
        self.interposer = interposer

    def snapshot(self):
        counts = self.interposer.counts()
        return {k: counts[k] for k in self.FIELDS}


def process_bytes():
    t = hb.transfers()
    return t.to_device_bytes, t.to_host_bytes


class Loop:
    """One side of one loop: `loops` repetitions of (fresh host input, `calls` chained calls, host
    reads) per round; keeps the time per call and the bytes of every round."""

    def __init__(self, key, loop, side, label, group, run_once, calls, loops, counter):
        self.key, self.loop, self.side, self.label, self.group = key, loop, side, label, group
        self.run_once = run_once      # one repetition; returns the last output
        self.calls, self.loops = calls, loops
        self.counter = counter
        self.rounds_s = Rounds()      # seconds per call, every round
        self.bytes_rounds = []        # per round: hb.transfers() and the counter's deltas

    def run_round(self, record=True):
        c0 = self.counter.snapshot() if self.counter else None
        t0 = process_bytes()
        start = time.perf_counter()
        for _ in range(self.loops):
            self.run_once()
        elapsed = time.perf_counter() - start
        t1 = process_bytes()
        c1 = self.counter.snapshot() if self.counter else None
        if not record:
            return
        self.rounds_s.append(elapsed / (self.loops * self.calls))
        row = {"counted_up": t1[0] - t0[0], "counted_down": t1[1] - t0[1]}
        if c0 is not None:
            row.update({k: c1[k] - c0[k] for k in CopyCounter.FIELDS})
        self.bytes_rounds.append(row)

    def per_call(self, field):
        """The bytes (or calls) of `field` per pipeline call, if every round agrees; else None."""
        values = {r.get(field) for r in self.bytes_rounds}
        if len(values) != 1 or None in values:
            return None
        return values.pop() / (self.loops * self.calls)


def chain(call, read, write_input, s, a, b, calls, read_each):
    """The loop body: a fresh host input into `s`, then s -> a -> b -> a ... `calls` calls."""
    def run_once():
        write_input(s)
        x, y = s, a
        for _ in range(calls):
            call(x, y)
            if read_each:
                read(y)
            x, y = y, (b if y is a else a)
        if not read_each:
            read(x)
        return x
    return run_once


def make_loops(p_cl, ext_cl, src, calls, loops, counter):
    """The loop cases of both loops: ours, the extension on ndarrays, the extension on Buffers,
    each on buffers of its own."""
    def write_buffer(b):
        b.numpy(writable=True)[...] = src

    def write_array(a):
        a[...] = src

    read = np.asarray
    cases = []
    for loop, read_each in (("chain", False), ("read each", True)):
        tag = loop.replace(" ", "_")
        bufs = [hb.Buffer(src.shape, "uint8") for _ in range(3)]
        cases.append(Loop(f"{tag}_aot_buffers", loop, "hb.aot, Buffers", "hb.aot: p(Buffer, Buffer)",
                          "ours", chain(p_cl, read, write_buffer, *bufs, calls, read_each),
                          calls, loops, counter))
        if ext_cl is not None:
            arrays = [np.zeros(src.shape, np.uint8) for _ in range(3)]
            cases.append(Loop(f"{tag}_extension_ndarrays", loop, "extension, ndarrays",
                              "extension: f(ndarray, ndarray)  [peer]", "peer",
                              chain(ext_cl, read, write_array, *arrays, calls, read_each),
                              calls, loops, counter))
            bufs = [hb.Buffer(src.shape, "uint8") for _ in range(3)]
            cases.append(Loop(f"{tag}_extension_buffers", loop, "extension, Buffers",
                              "extension: f(Buffer, Buffer)  [peer]", "peer",
                              chain(ext_cl, read, write_buffer, *bufs, calls, read_each),
                              calls, loops, counter))
    return cases


def loop_sanity_checks(cases, src, calls, counter, counter_reason):
    """Every loop computes in + calls; the counter sees the copies it should. Returns (problems,
    the counter's reason for being unusable, or None)."""
    problems = []
    expected = (src.astype(np.int64) + calls).astype(np.uint8)
    for c in cases:
        before = counter.snapshot() if counter else None
        last = c.run_once()
        if not np.array_equal(np.asarray(last), expected):
            problems.append(f"{c.loop}, {c.side}: the last output is not in + {calls}")
        if counter is not None:
            after = counter.snapshot()
            if after["kernels"] - before["kernels"] != calls:
                counter_reason = ("the OpenCL copy counter was not on the runtimes' lookup path (it "
                                  f"saw {after['kernels'] - before['kernels']} kernel launches for "
                                  f"{calls} calls)")
    return problems, counter_reason


def report_loops(cases, args, device, ext_reason, counter_ok, counter_reason, nbytes, wrapper):
    print(f"bytes per call of an OpenCL pipeline: best of {args.repeat} interleaved rounds, "
          f"uint8 {CL_SHAPE} ({fmt_bytes(nbytes)}), {args.calls} calls a loop, {device}, "
          f"target {TARGET}-opencl")
    print(environment_line())
    print(f"peer (generated extension): "
          f"{'built' if ext_reason is None else 'unavailable: ' + ext_reason}")
    state = "on the Halide runtimes' lookup path" if counter_ok else f"unavailable: {counter_reason}"
    print(f"OpenCL copy counter: {state}")
    marks_dirty, copies_home = wrapper_copies(wrapper)
    derived = nbytes * (int(marks_dirty) + int(copies_home)) if wrapper else None
    if wrapper:
        before = "marks every input host-dirty" if marks_dirty else "does not mark inputs host-dirty"
        after = "copies every output to the host" if copies_home else "does not copy outputs home"
        print(f"the generated wrapper {before} and {after} around each call: it must move "
              f"{fmt_bytes(derived)} a call")
    print()
    w = max(len(c.label) for c in cases)
    head = (f"{'loop':<10}  {'case':<{w}}  {'per call':>9}  {'vs ours':>7}  {'paired':>7}  "
            f"{'moved/call':>10}  {'up':>9}  {'down':>9}  {'counted/call':>12}  {'kernels':>7}")
    print(head)
    print("-" * len(head))
    rows = []
    ours_by_loop = {c.loop: c for c in cases if c.group == "ours"}
    for c in cases:
        ours = ours_by_loop[c.loop]
        r = c.rounds_s.best / ours.rounds_s.best
        paired = statistics.median(x / y for x, y in zip(c.rounds_s, ours.rounds_s))
        up, down = c.per_call("write_bytes"), c.per_call("read_bytes")
        moved = None if up is None or down is None else up + down
        cu, cd = c.per_call("counted_up"), c.per_call("counted_down")
        counted = None if cu is None or cd is None else cu + cd
        kernels = c.per_call("kernels")
        row = {"loop": c.loop, "case": c.key, "label": c.label, "group": c.group,
               "best_s_per_call": c.rounds_s.best, "median_s_per_call": c.rounds_s.median,
               "rounds_s_per_call": c.rounds_s, "vs_ours": r, "paired_vs_ours": paired,
               "moved_bytes_per_call": moved if counter_ok else None,
               "up_bytes_per_call": up if counter_ok else None,
               "down_bytes_per_call": down if counter_ok else None,
               "hb_transfers_bytes_per_call": counted,
               "kernels_per_call": kernels if counter_ok else None,
               "derived_bytes_per_call": derived if c.group == "peer" else None,
               "rounds_bytes": c.bytes_rounds}
        rows.append(row)
        counted_text = fmt_bytes(counted) if c.group == "ours" else "-"
        print(f"{c.loop:<10}  {c.label:<{w}}  {fmt_time(c.rounds_s.best):>9}  {r:6.2f}x  "
              f"{paired:6.2f}x  {fmt_bytes(row['moved_bytes_per_call']):>10}  "
              f"{fmt_bytes(row['up_bytes_per_call']):>9}  {fmt_bytes(row['down_bytes_per_call']):>9}  "
              f"{counted_text:>12}  "
              f"{'-' if row['kernels_per_call'] is None else format(row['kernels_per_call'], '.2f'):>7}")
    print()
    summary = {}
    how = "OpenCL copies counted" if counter_ok else "hb.transfers() for ours"
    e_how = "OpenCL copies counted" if counter_ok else "derived from the generated wrapper"
    for loop, ours in ours_by_loop.items():
        o = next(r for r in rows if r["case"] == ours.key)
        ours_moved = o["moved_bytes_per_call"] if counter_ok else o["hb_transfers_bytes_per_call"]
        s = {"ours_bytes_per_call": ours_moved, "ours_counted_by": how,
             "ours_hb_transfers_bytes_per_call": o["hb_transfers_bytes_per_call"]}
        parts = []
        for e in (r for r in rows if r["loop"] == loop and r["group"] == "peer"):
            e_moved = e["moved_bytes_per_call"] if counter_ok else e["derived_bytes_per_call"]
            s[e["case"]] = {"bytes_per_call": e_moved, "counted_by": e_how,
                            "ours_bytes_ratio": ratio(ours_moved, e_moved),
                            "ours_time_ratio": 1 / e["vs_ours"],
                            "ours_time_ratio_paired": 1 / e["paired_vs_ours"]}
            on = "ndarrays" if e["case"].endswith("ndarrays") else "Buffers"
            parts.append(f"{fmt_ratio(ratio(ours_moved, e_moved))} the bytes, "
                         f"{1 / e['vs_ours']:.2f}x the time (paired {1 / e['paired_vs_ours']:.2f}x) "
                         f"of the extension on {on} ({fmt_bytes(e_moved)})")
        print(f"{loop + ':':<10} hb.aot moves {fmt_bytes(ours_moved)} a call"
              + (": " + "; ".join(parts) if parts else " (peer unavailable)"))
        summary[loop] = s
    has_peer = any(r["group"] == "peer" for r in rows)
    peer_how = (" for both sides" if e_how == how else f"; the extension's: {e_how}") if has_peer else ""
    print(f"bytes: {how}{peer_how}"
          + (f"; the extension's wrapper implies {fmt_bytes(derived)} a call" if derived else ""))
    return rows, summary, derived


def loop_consistency(cases, counter_ok):
    """Per-round bytes agree; ours' hb.transfers() agrees with the OpenCL copies it made."""
    problems = []
    for c in cases:
        fields = ("counted_up", "counted_down") + (("write_bytes", "read_bytes") if counter_ok else ())
        for field in fields:
            if c.per_call(field) is None:
                problems.append(f"{c.loop}, {c.side}: {field} differs between rounds")
        if counter_ok and c.group == "ours":
            up, down = c.per_call("write_bytes"), c.per_call("read_bytes")
            cu, cd = c.per_call("counted_up"), c.per_call("counted_down")
            if None not in (up, down, cu, cd) and (up, down) != (cu, cd):
                n = c.loops * c.calls
                problems.append(f"{c.loop}, hb.aot: hb.transfers() counted {fmt_bytes(cu * n)} up / "
                                f"{fmt_bytes(cd * n)} down a round, the pipeline runtime's OpenCL "
                                f"copies moved {fmt_bytes(up * n)} up / {fmt_bytes(down * n)} down")
    return problems


def first_call(p_cl, ext_cl, src, counter):
    """One call on fresh buffers (a host-written input, a new output), outside the timing: the
    bytes each side moves before any loop (the counter's and, for ours, hb.transfers())."""
    def fresh_buffers():
        i = hb.Buffer(src.shape, "uint8")
        i.numpy(writable=True)[...] = src
        return i, hb.Buffer(src.shape, "uint8")

    sides = [("aot_buffers", "hb.aot, Buffers", p_cl, fresh_buffers)]
    if ext_cl is not None:
        sides += [("extension_ndarrays", "extension, ndarrays", ext_cl,
                   lambda: (src.copy(), np.zeros(src.shape, np.uint8))),
                  ("extension_buffers", "extension, Buffers", ext_cl, fresh_buffers)]
    out = {}
    for key, label, call, make in sides:
        i, o = make()
        c0, t0 = counter.snapshot(), process_bytes()
        call(i, o)
        c1, t1 = counter.snapshot(), process_bytes()
        out[key] = {"label": label, "up": c1["write_bytes"] - c0["write_bytes"],
                    "down": c1["read_bytes"] - c0["read_bytes"],
                    "counted_up": t1[0] - t0[0], "counted_down": t1[1] - t0[1]}
    return out


def measure_loops(hl, workdir, args, counter, counter_reason, dev):
    """Builds the OpenCL pipeline, runs the loops. Returns (the report's pieces, problems, noisy)."""
    built = build_pipeline(hl, workdir, CL_NAME, True, not args.no_peer)
    p_cl = hb.aot.load(built.library, CL_NAME)
    ext_cl = getattr(built.extension, CL_NAME) if built.extension is not None else None
    src = np.random.default_rng(1).integers(0, 256, CL_SHAPE, dtype=np.uint8)
    # Loops per round: 128 calls, about 30 ms a round on PoCL's CPU device at the default size.
    loops = max(1, 128 // args.calls)
    cases = make_loops(p_cl, ext_cl, src, args.calls, loops, counter)
    problems, counter_reason = loop_sanity_checks(cases, src, args.calls, counter, counter_reason)
    counter_ok = counter is not None and counter_reason is None
    fresh = first_call(p_cl, ext_cl, src, counter) if counter_ok else None
    for c in cases:                     # warm-up round, not counted
        c.run_round(record=False)
    for _ in range(args.repeat):
        for c in cases:
            c.run_round()
    problems += loop_consistency(cases, counter_ok)
    device = f"{dev.name} on {dev.platform}"
    rows, summary, derived = report_loops(cases, args, device, built.extension_reason, counter_ok,
                                          counter_reason, src.nbytes, built.wrapper_source)
    if fresh:
        print("first call on fresh buffers (host-written input, new output): "
              + "; ".join(f"{f['label']} {fmt_bytes(f['up'])} up / {fmt_bytes(f['down'])} down"
                          + (f" (hb.transfers() counted {fmt_bytes(f['counted_up'])} up / "
                             f"{fmt_bytes(f['counted_down'])} down)" if k == "aot_buffers" else "")
                          for k, f in fresh.items()))
    noisy = [f"{c.loop}: {c.label}" for c in cases if c.rounds_s.median > 1.25 * c.rounds_s.best]
    return {"first_call": fresh, "device": device, "shape": list(CL_SHAPE), "bytes": int(src.nbytes),
            "calls_per_loop": args.calls, "loops_per_round": loops,
            "peer": {"available": ext_cl is not None, "reason": built.extension_reason},
            "counter": {"available": counter_ok, "reason": counter_reason},
            "extension_derived_bytes_per_call": derived,
            "rows": rows, "summary": summary}, problems, noisy


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7, help="rounds; the best counts (default 7)")
    ap.add_argument("--calls", type=int, default=8, help="pipeline calls in one loop (default 8)")
    ap.add_argument("--no-peer", action="store_true", help="skip building the generated extension")
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    args = ap.parse_args(argv)
    if args.calls < 1:
        ap.error("--calls must be at least 1")

    ready = opencl_prerequisites()  # the copy counter goes in before the OpenCL loader does
    if ready is None:
        return 2
    hl, interposer, counter_reason, dev = ready
    counter = CopyCounter(interposer) if interposer else None

    with tempfile.TemporaryDirectory(prefix="hb_bench_aot_loops_", ignore_cleanup_errors=True) as tmp:
        try:
            opencl, problems, noisy = measure_loops(hl, Path(tmp), args, counter, counter_reason, dev)
        except BuildError as e:
            print(f"cannot build the pipeline: {e}", file=sys.stderr)
            return 2

    finish(
        args, "aot_loops", problems, noisy, "a paired ratio disagrees with the ratio of the bests",
        repeat=args.repeat,
        target=TARGET,
        opencl=opencl,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
