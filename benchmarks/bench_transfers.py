"""Host <-> device transfers: what a Buffer's copies cost beside raw pyopencl, and how many bytes
a standard access trace moves against the minimum.

Run:  python benchmarks/bench_transfers.py [--repeat R] [--json PATH]

Two measurements, both on the default OpenCL device (``halide_buffer.opencl.device()``), copying:
``HALIDE_BUFFER_OPENCL_ZERO_COPY=0`` unless the environment sets it (on a device sharing the
host's memory a hand-over is a map, not a copy: bench_zero_copy.py measures that):

* Copies. For each size (64 B, 1 MiB, 256 MiB of uint8), four cases:
  ours, upload:   ``b.set_host_dirty(True); b.copy_to_device()``  (allocated beforehand)
  ours, download: ``b.set_device_dirty(True); b.copy_to_host()``
  peer, upload:   ``cl.enqueue_copy(queue, clbuf, ndarray)``       (blocking)
  peer, download: ``cl.enqueue_copy(queue, ndarray, clbuf)``       (blocking)
  The peer uses the default device's own context and queue (``from_int_ptr``), so both sides
  go through the same queue to the same driver. Two more, informational ("ndmem"): ours on a
  Buffer borrowing a NumPy array (``Buffer.from_host(ndarray, external_writes=False)``), i.e.
  our call path on host memory allocated the way the peer's is (NumPy asks the kernel for
  transparent huge pages on large arrays; a Buffer's own memory comes from calloc).
  Each case is ``repeat`` rounds of a fixed number of copies (more for small sizes); the
  rounds of all cases are interleaved (round 1 of every case, then round 2, ...) and the best
  round gives the time per copy. Targets, as ours / peer in time: <= 1.10x at 64 B (latency),
  <= 1.053x at 256 MiB (>= 0.95x bandwidth).
* Bytes moved. A fixed trace of host and device reads and writes on a 1 MiB buffer is run,
  and the bytes counted in ``b.transfers`` are compared with the minimum given by a small
  reference model (a write on one side makes the other side stale; a read, or a write lease,
  on a stale side moves the whole storage once; freeing a device copy that is the only
  current one brings it home). The target is exactly 1.00; the script exits with status 1
  otherwise, or if a check fails (data read back wrong, a copy not counted once, the process
  totals disagreeing with the buffer's counters), and with status 2 without an OpenCL device.

Ratios are measured in the same run on the same machine; absolute times are not comparable
across machines, and nothing here but the bytes-moved ratio is a pass/fail check.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from functools import partial
from pathlib import Path

import numpy as np

os.environ.setdefault("HALIDE_BUFFER_OPENCL_ZERO_COPY", "0")  # before the first device: copies are measured here
import halide_buffer as hb  # noqa: E402

from bench_common import (MiB, CopyCase, download_again, environment_line, finish, fmt_bytes, fmt_time,
                          run_copy_cases, upload_again)

# (label, bytes, copies per round). The counts keep each round of each case near 15-100 ms:
# long enough that the PoCL worker threads' wake-ups average out.
SIZES = [("64 B", 64, 1000), ("1 MiB", MiB, 400), ("256 MiB", 256 * MiB, 4)]

LATENCY_TARGET = 1.10          # ours / peer time at 64 B
BANDWIDTH_TARGET = 0.95        # peer / ours time at 256 MiB, i.e. ours / peer <= 1/0.95

TRACE_BYTES = MiB


def data_address(arr: np.ndarray) -> int:
    return arr.__array_interface__["data"][0]


# --------------------------------------------------------------------------------------------
# Copies: ours against raw pyopencl
# --------------------------------------------------------------------------------------------


def make_copy_cases(cl, ctx, queue, sizes):
    """The six cases of every size, with their buffers allocated and warmed up. Returns the
    cases and the objects to keep alive (per size: our Buffer, the peer's array and cl_mem,
    the NumPy-memory Buffer and its array)."""
    cases, keep = [], []
    for label, nbytes, number in sizes:
        b = hb.Buffer((nbytes,), "uint8")
        b.numpy(writable=True)[:] = 1
        b.copy_to_device()                      # allocation and first upload, outside the timing
        host = np.ones(nbytes, np.uint8)
        clbuf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, nbytes)
        cl.enqueue_copy(queue, clbuf, host)
        nd_host = np.ones(nbytes, np.uint8)
        nd = hb.Buffer.from_host(nd_host, external_writes=False)
        nd.copy_to_device()
        keep += [b, host, clbuf, nd, nd_host]

        def peer_up(host=host, clbuf=clbuf):
            cl.enqueue_copy(queue, clbuf, host)

        def peer_down(host=host, clbuf=clbuf):
            cl.enqueue_copy(queue, host, clbuf)

        tag = label.replace(" ", "")
        cases += [
            CopyCase(f"upload_{tag}_ours", label, nbytes, "upload", "ours", number, partial(upload_again, b)),
            CopyCase(f"upload_{tag}_peer", label, nbytes, "upload", "peer", number, peer_up),
            CopyCase(f"upload_{tag}_ndmem", label, nbytes, "upload", "ndmem", number,
                 partial(upload_again, nd)),
            CopyCase(f"download_{tag}_ours", label, nbytes, "download", "ours", number, partial(download_again, b)),
            CopyCase(f"download_{tag}_peer", label, nbytes, "download", "peer", number, peer_down),
            CopyCase(f"download_{tag}_ndmem", label, nbytes, "download", "ndmem", number,
                 partial(download_again, nd)),
        ]
    return cases, keep


def check_copies(sizes, keep):
    """The timed copies move what they claim: counted once each, the data intact."""
    problems = []
    for i, (label, nbytes, _) in enumerate(sizes):
        b, nd, nd_host = keep[5 * i], keep[5 * i + 3], keep[5 * i + 4]
        if data_address(nd.numpy()) != data_address(nd_host):
            problems.append(f"{label}: the NumPy-memory Buffer copied the array: not a borrow")
        before = b.transfers
        upload_again(b)
        download_again(b)
        after = b.transfers
        if (after.to_device - before.to_device, after.to_device_bytes - before.to_device_bytes,
                after.to_host - before.to_host, after.to_host_bytes - before.to_host_bytes) \
                != (1, nbytes, 1, nbytes):
            problems.append(f"{label}: one upload and one download were not counted as "
                            f"1 x {nbytes} B each")
        if not (np.asarray(b) == 1).all():
            problems.append(f"{label}: the data did not survive the round trip")
    return problems


def measure_copies(repeat):
    """Times every copy case; returns (cases, problems, device description)."""
    import pyopencl as cl

    dev = hb.opencl.device()
    ctx = cl.Context.from_int_ptr(dev.context, retain=True)
    queue = cl.CommandQueue.from_int_ptr(dev.queue, retain=True)
    cases, keep = make_copy_cases(cl, ctx, queue, SIZES)
    run_copy_cases(cases, repeat)
    problems = check_copies(SIZES, keep)
    return cases, problems, f"{dev.name} on {dev.platform}"


# --------------------------------------------------------------------------------------------
# Bytes moved over a standard access trace
# --------------------------------------------------------------------------------------------


class ReferenceModel:
    """The fewest bytes any implementation that keeps a host and a device copy of the whole
    storage can move for a trace: one whole-storage copy whenever a stale side is read (or
    leased for writing), none otherwise."""

    def __init__(self, nbytes):
        self.nbytes = nbytes
        self.host_current = True        # a new buffer's data is on the host
        self.device_current = False     # no device copy yet
        self.allocated = False

    def host_read(self):
        if self.host_current:
            return 0, 0
        self.host_current = True
        return 0, self.nbytes

    def host_write(self):
        up, down = self.host_read()
        self.device_current = False
        return up, down

    def device_read(self):
        self.allocated = True
        if self.device_current:
            return 0, 0
        self.device_current = True
        return self.nbytes, 0

    def device_write(self):
        up, down = self.device_read()
        self.host_current = False
        return up, down

    def device_free(self):
        up, down = (0, 0) if self.host_current else self.host_read()
        self.allocated = self.device_current = False
        return up, down


def run_trace(nbytes):
    """Runs the trace on a Buffer and the model side by side. Returns the steps as
    (what, model (up, down), measured (up, down)) and a list of problems."""
    import pyopencl  # noqa: F401 - as_array needs it; fail here, before the trace starts

    b = hb.Buffer((nbytes,), "uint8")
    model = ReferenceModel(nbytes)
    steps, problems = [], []
    process_before = hb._core.transfers()

    def step(what, kind, action):
        before = b.transfers
        action()
        after = b.transfers
        measured = (after.to_device_bytes - before.to_device_bytes,
                    after.to_host_bytes - before.to_host_bytes)
        steps.append((what, getattr(model, kind)(), measured))

    def host_write(value):
        b.numpy(writable=True)[:] = value

    def device_write(value):
        a = hb.opencl.as_array(b)
        a.fill(value)
        a.queue.finish()

    def host_read(expected, view=None):
        seen = np.asarray(b if view is None else view)
        if not (seen == expected).all():
            problems.append(f"host read saw {int(seen.flat[0])}, expected {expected}")

    crop_a, crop_b = b.cropped(0, 0, nbytes // 4), b.cropped(0, nbytes // 2, 4096)

    step("host write (numpy(writable=True)) = 1", "host_write", lambda: host_write(1))
    step("device read (copy_to_device)", "device_read", b.copy_to_device)
    step("device read (copy_to_device) again", "device_read", b.copy_to_device)
    step("device write (as_array(b).fill(3))", "device_write", lambda: device_write(3))
    for i in range(3):
        step(f"host read (np.asarray) #{i + 1}", "host_read", lambda: host_read(3))
    step("host read of crop [0, 256 KiB)", "host_read", lambda: host_read(3, crop_a))
    step("host read of crop [512 KiB, +4 KiB)", "host_read", lambda: host_read(3, crop_b))
    step("host write (numpy(writable=True)) = 5", "host_write", lambda: host_write(5))
    step("device read (copy_to_device)", "device_read", b.copy_to_device)
    step("host read (np.asarray)", "host_read", lambda: host_read(5))
    step("device write (as_array(b).fill(7))", "device_write", lambda: device_write(7))
    step("host read of crop [512 KiB, +4 KiB)", "host_read", lambda: host_read(7, crop_b))
    step("device write (as_array(b).fill(9))", "device_write", lambda: device_write(9))
    step("device_free (brings the newer copy home)", "device_free", b.device_free)
    step("host read (np.asarray)", "host_read", lambda: host_read(9))

    process_after = hb._core.transfers()
    process_moved = (process_after.to_device_bytes - process_before.to_device_bytes
                     + process_after.to_host_bytes - process_before.to_host_bytes)
    total = b.transfers.to_device_bytes + b.transfers.to_host_bytes
    if process_moved != total:
        problems.append(f"process transfer totals moved {process_moved} B during the trace, the "
                        f"buffer's counters {total} B")
    if b.has_device_allocation():
        problems.append("device_free() left a device allocation")
    return steps, problems


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def report_copies(cases, repeat, device):
    print(f"host <-> device copies: best of {repeat} interleaved rounds, uint8, {device}")
    print(environment_line())
    print()
    head = (f"{'size':>8}  {'direction':<9}  {'copies':>6}  {'ours':>10}  {'peer':>10}  "
            f"{'ours GB/s':>9}  {'peer GB/s':>9}  {'ours/peer':>9}  {'paired':>7}  "
            f"{'ndmem/peer':>10}")
    print(head)
    print("-" * len(head))
    by_key = {c.key: c for c in cases}
    rows = []
    for c in cases:
        if c.side != "ours":
            continue
        p = by_key[c.key.replace("_ours", "_peer")]
        m = by_key[c.key.replace("_ours", "_ndmem")]
        r = c.rounds_s.best / p.rounds_s.best
        r_nd = m.rounds_s.best / p.rounds_s.best
        # Rounds of the two sides ran back to back, so their per-round ratios cancel drift of
        # the machine; their median backs up the ratio of the bests.
        paired = statistics.median(x / y for x, y in zip(c.rounds_s, p.rounds_s))
        rows.append({"size": c.label, "bytes": c.nbytes, "direction": c.direction,
                     "copies_per_round": c.number, "ours_s": c.rounds_s.best, "peer_s": p.rounds_s.best,
                     "ours_median_s": c.rounds_s.median, "peer_median_s": p.rounds_s.median,
                     "ours_gbps": c.gbps, "peer_gbps": p.gbps, "ratio": r,
                     "paired_ratio": paired, "ndmem_s": m.rounds_s.best, "ndmem_ratio": r_nd})
        print(f"{c.label:>8}  {c.direction:<9}  {c.number:>6}  {fmt_time(c.rounds_s.best):>10}  "
              f"{fmt_time(p.rounds_s.best):>10}  {c.gbps:9.3f}  {p.gbps:9.3f}  {r:8.3f}x  "
              f"{paired:6.3f}x  {r_nd:9.3f}x")
    print()
    noisy = [c.key for c in cases if c.rounds_s.median > 1.25 * c.rounds_s.best]
    return rows, noisy


def targets(rows):
    lat = [r for r in rows if r["bytes"] == 64]
    bw = [r for r in rows if r["bytes"] == 256 * MiB]
    out = []
    for r in lat:
        out.append({"what": f"latency at 64 B, {r['direction']}", "ratio": r["ratio"],
                    "target": f"ours/peer time <= {LATENCY_TARGET:.2f}x",
                    "met": r["ratio"] <= LATENCY_TARGET})
    for r in bw:
        bw_ratio = r["peer_s"] / r["ours_s"]
        out.append({"what": f"bandwidth at 256 MiB, {r['direction']}", "ratio": bw_ratio,
                    "time_ratio": r["ratio"],
                    "target": f"ours/peer bandwidth >= {BANDWIDTH_TARGET:.2f}x",
                    "met": bw_ratio >= BANDWIDTH_TARGET})
    for t in out:
        extra = f" (time {t['time_ratio']:.3f}x)" if "time_ratio" in t else ""
        print(f"{t['what'] + ':':<32} {t['ratio']:.3f}x{extra}  target {t['target']}: "
              f"{'met' if t['met'] else 'NOT met'}")
    return out


def report_trace(steps, nbytes):
    print()
    print(f"bytes moved over the standard access trace, {fmt_bytes(nbytes)} uint8 buffer")
    print()
    w = max(len(s[0]) for s in steps)
    head = f"{'step':<{w}}  {'minimum up/down':>16}  {'measured up/down':>16}"
    print(head)
    print("-" * len(head))
    for what, (mu, md), (u, d) in steps:
        flag = "" if (mu, md) == (u, d) else "  <- differs"
        print(f"{what:<{w}}  {fmt_bytes(mu):>7} / {fmt_bytes(md):>6}  "
              f"{fmt_bytes(u):>7} / {fmt_bytes(d):>6}{flag}")
    minimum = sum(mu + md for _, (mu, md), _ in steps)
    moved = sum(u + d for _, _, (u, d) in steps)
    r = moved / minimum
    print()
    print(f"moved {fmt_bytes(moved)} ({moved} B), minimum {fmt_bytes(minimum)} ({minimum} B): "
          f"ratio {r:.2f} (target exactly 1.00: {'met' if moved == minimum else 'NOT met'})")
    return minimum, moved


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7, help="rounds; the best counts (default 7)")
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    args = ap.parse_args(argv)

    try:
        import pyopencl  # noqa: F401
        hb.opencl.device()
    except Exception as e:  # noqa: BLE001 - no OpenCL means nothing to measure
        print(f"no OpenCL device: {type(e).__name__}: {e}", file=sys.stderr)
        return 2

    cases, problems, device = measure_copies(args.repeat)
    rows, noisy = report_copies(cases, args.repeat, device)
    target_rows = targets(rows)

    steps, trace_problems = run_trace(TRACE_BYTES)
    minimum, moved = report_trace(steps, TRACE_BYTES)
    problems += trace_problems

    finish(
        args, "transfers", problems, noisy, "the paired column disagrees with ours/peer",
        repeat=args.repeat,
        device=device,
        copies=rows,
        cases={c.key: {"bytes": c.nbytes, "direction": c.direction, "side": c.side,
                       "copies_per_round": c.number, "best_s": c.rounds_s.best,
                       "median_s": c.rounds_s.median, "rounds_s": c.rounds_s}
               for c in cases},
        targets=target_rows,
        trace={
            "bytes": TRACE_BYTES,
            "steps": [{"step": what, "minimum_up": mu, "minimum_down": md,
                       "measured_up": u, "measured_down": d}
                      for what, (mu, md), (u, d) in steps],
            "minimum_bytes": minimum,
            "moved_bytes": moved,
            "ratio": moved / minimum,
        },
    )
    return 0 if moved == minimum and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
