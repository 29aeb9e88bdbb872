"""Data operations: what fill and copy_from cost beside the peer doing the same with its own API.

Run:  python benchmarks/bench_data.py [--repeat R] [--mib N] [--json PATH]

Cases, on 256 MiB of float32 by default (``--mib``), the device being the default OpenCL device
(``halide_buffer.opencl.device()``, PoCL on a machine without a GPU):

  fill on the device:  ``b.fill(1.5)`` on a buffer whose device copy is current
                       vs ``cl.enqueue_fill_buffer(queue, mem, np.float32(1.5), 0, nbytes).wait()``
  copy_from host:      ``dst.copy_from(src)``, both host-only       vs ``np.copyto(dst, src)``
  copy_from device:    ``dst.copy_from(src)``, both device copies current
                       vs ``cl.enqueue_copy(queue, dst_mem, src_mem).wait()``

The peer uses the default device's own context and queue (``from_int_ptr``), so both sides go
through the same queue to the same driver. Each case is ``repeat`` rounds of a few calls; the
rounds of all cases are interleaved and the best round gives the time per call. Targets, as
peer time / ours (so >= 1 is as fast as the peer): fill >= 0.9, copy_from host >= 0.9,
copy_from device >= 0.9. The script also checks that the device cases moved nothing between
host and device (exit status 1 otherwise, or if the data read back is wrong; 2 without an
OpenCL device).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

import halide_buffer as hb

from bench_common import CopyCase, environment, environment_line, run_copy_cases

MiB = 1 << 20
TARGET = 0.9  # peer time / ours


def cases(nbytes, dev):
    import pyopencl as cl

    ctx = cl.Context.from_int_ptr(dev.context)
    queue = cl.CommandQueue.from_int_ptr(dev.queue)
    n = nbytes // 4
    out = []

    filled = hb.Buffer(n, "float32")
    filled.copy_to_device(dev)
    peer_fill = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, nbytes)
    pattern = np.float32(1.5)
    out += [
        CopyCase("fill_device_ours", "fill on the device", nbytes, "device", "ours", 4,
                 lambda: filled.fill(1.5)),
        CopyCase("fill_device_peer", "fill on the device", nbytes, "device", "pyopencl", 4,
                 lambda: cl.enqueue_fill_buffer(queue, peer_fill, pattern, 0, nbytes).wait()),
    ]

    src_host, dst_host = hb.Buffer(n, "float32"), hb.Buffer(n, "float32")
    src_host.fill(2.0)
    a, b = np.full(n, 2.0, np.float32), np.empty(n, np.float32)
    out += [
        CopyCase("copy_host_ours", "copy_from host", nbytes, "host", "ours", 4,
                 lambda: dst_host.copy_from(src_host)),
        CopyCase("copy_host_peer", "copy_from host", nbytes, "host", "numpy", 4, lambda: np.copyto(b, a)),
    ]

    src_dev, dst_dev = hb.Buffer(n, "float32"), hb.Buffer(n, "float32")
    src_dev.fill(3.0)
    src_dev.copy_to_device(dev)
    dst_dev.copy_to_device(dev)
    peer_src = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, nbytes)
    peer_dst = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, nbytes)
    for mem in (peer_fill, peer_src, peer_dst):  # touched once, as ours were by their uploads
        cl.enqueue_fill_buffer(queue, mem, np.float32(3.0), 0, nbytes).wait()
    out += [
        CopyCase("copy_device_ours", "copy_from device", nbytes, "device", "ours", 4,
                 lambda: dst_dev.copy_from(src_dev)),
        CopyCase("copy_device_peer", "copy_from device", nbytes, "device", "pyopencl", 4,
                 lambda: cl.enqueue_copy(queue, peer_dst, peer_src).wait()),
    ]
    return out, (filled, dst_host, dst_dev, src_dev)


def check(buffers):
    """The device cases moved nothing across the bus, and every result reads back right."""
    filled, dst_host, dst_dev, src_dev = buffers
    problems = []
    for name, b in [("fill", filled), ("copy_from device (dst)", dst_dev), ("copy_from device (src)", src_dev)]:
        t = b.transfers
        if t.to_host or t.to_device > 1:
            problems.append(f"{name}: moved {t}")
    for name, b in [("fill", filled), ("copy_from device", dst_dev)]:
        if not b.device_dirty():
            problems.append(f"{name}: did not run on the device")
    for name, b, value in [("fill", filled, 1.5), ("copy_from host", dst_host, 2.0),
                           ("copy_from device", dst_dev, 3.0)]:
        if not b.all_equal(value):
            problems.append(f"{name}: wrong data read back")
    return problems


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    try:
        dev = hb.opencl.device()
    except hb.DeviceError as e:
        print(f"no OpenCL device: {e}", file=sys.stderr)
        return 2
    all_cases, buffers = cases(args.mib * MiB, dev)
    run_copy_cases(all_cases, args.repeat)

    print(f"# {environment_line()}; device: {dev!r}; {args.mib} MiB float32, best of {args.repeat} rounds")
    print(f"{'case':<20} {'ours ms':>9} {'peer ms':>9} {'peer':>9} {'peer/ours':>10} {'target':>7}")
    rows = []
    for ours, peer in zip(all_cases[::2], all_cases[1::2]):
        ratio = peer.rounds_s.best / ours.rounds_s.best
        rows.append({"case": ours.label, "ours_s": ours.rounds_s.best, "peer_s": peer.rounds_s.best,
                     "peer": peer.side, "peer_over_ours": ratio, "ours_rounds_s": list(ours.rounds_s),
                     "peer_rounds_s": list(peer.rounds_s)})
        print(f"{ours.label:<20} {ours.rounds_s.best * 1e3:9.2f} {peer.rounds_s.best * 1e3:9.2f} "
              f"{peer.side:>9} {ratio:10.2f} {'>= ' + str(TARGET):>7}")
    problems = check(buffers)
    for p in problems:
        print(f"CHECK FAILED: {p}", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps({"environment": environment(), "mib": args.mib, "rows": rows,
                                         "problems": problems}, indent=2))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
