"""Zero-copy residency and the device memory pool on a device that shares the host's memory
(PoCL's CPU device): what each saves, side by side in one run with the device that copies.

Run:  python benchmarks/bench_zero_copy.py [--repeat R] [--calls N] [--json PATH]

It needs an OpenCL device reporting host-unified memory, the ``halide`` wheel and a C compiler
(the pipelines of bench_opencl_chain.py are built when it runs); without them it exits with
status 2. Two devices on the same context and queue: ``hb.opencl.device()`` (zero-copy, the
default) and ``hb.opencl.device(zero_copy=False)`` with its pool off (``pool_limit = 0``): how
every copy and allocation went before zero-copy and the pool ("before").

1. **Transfers, 256 MiB** of uint8, a Buffer's own memory: ``set_host_dirty(True);
   copy_to_device()`` and ``set_device_dirty(True); copy_to_host()`` on each device, beside raw
   pyopencl's blocking ``enqueue_copy`` on the same queue (the peer). Target: peer / zero-copy
   >= 50 both ways (a map moves no byte); the copying device as bench_transfers.py measures it.
2. **Chain**: bench_opencl_chain.py's chain of three pipelines from three libraries on a uint8
   2048x2048 NumPy image, ``np.asarray(C(B(A(image))))``. Zero-copy: the image as it is (hb.aot
   computes on the default device). Before: the image wrapped and uploaded to the copying device,
   which is what hb.aot did with it before. Targets: 0 bytes copied (hb.transfers() and the
   OpenCL interposer's count of every runtime's reads and writes), time <= 0.7x before.
3. **Loop**: ``calls`` calls (default 1000) of the first pipeline on a 64x64 input (and on a 512x512
   one, bench_aot_loops.py's size) already on the device, its output not given (hb.aot allocates it), the previous output dropped as the next
   arrives. Zero-copy with its pool, the copying device with its pool, and before. Targets: no
   ``clCreateBuffer`` after the loop's first two calls (the interposer's count and the pool's
   misses agree), time per call <= 0.8x before.
4. **Dask**: ``hb.dask.map_pipeline`` of the first pipeline over the 2048x2048 image in 512x512
   chunks, computed; bytes copied per chunk. Target: 0 on the zero-copy device.

Rounds are interleaved and the best gives the time; ratios are of the same run on the same
machine, and nothing here is a pass/fail test.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np

import halide_buffer as hb

from bench_common import (MiB, CopyCase, Rounds, download_again, environment_line, finish, fmt_bytes, fmt_time,
                          ratio, run_copy_cases, upload_again)
from bench_opencl_chain import SHAPE, build_pipelines
from bench_pipelines import OPENCL_TARGET, BuildError, opencl_prerequisites

TRANSFER_BYTES = 256 * MiB
LOOP_SHAPES = [(64, 64), (512, 512)]  # 4 KiB, as small as a call gets; 256 KiB, bench_aot_loops.py's size
DASK_CHUNKS = (512, 512)


def moved_bytes(interposer, since):
    """Bytes copied since the `since` snapshot: (hb.transfers() up + down, every runtime's reads and
    writes counted by the interposer, or None without it)."""
    t = hb.transfers() - since[0]
    counted = None
    if interposer is not None:
        now = interposer.counts()
        counted = now["read_bytes"] + now["write_bytes"] - since[1]["read_bytes"] - since[1]["write_bytes"]
    return t.to_device_bytes + t.to_host_bytes, counted


def snapshot(interposer):
    return hb.transfers(), (interposer.counts() if interposer is not None else None)


# --- 1. transfers ----------------------------------------------------------------------------------


def transfer_cases(cl, zero_copy, before):
    queue = cl.CommandQueue.from_int_ptr(zero_copy.queue)
    ctx = cl.Context.from_int_ptr(zero_copy.context)
    keep, cases = [], []
    for side, device in (("zero_copy", zero_copy), ("before", before)):
        b = hb.Buffer((TRANSFER_BYTES,), "uint8")
        b.numpy(writable=True)[:] = 1
        b.copy_to_device(device)
        keep.append(b)
        cases += [CopyCase(f"upload_{side}", side, TRANSFER_BYTES, "upload", side, 4, partial(upload_again, b)),
                  CopyCase(f"download_{side}", side, TRANSFER_BYTES, "download", side, 4,
                           partial(download_again, b))]
    host = np.ones(TRANSFER_BYTES, np.uint8)
    clbuf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, TRANSFER_BYTES)
    cl.enqueue_copy(queue, clbuf, host)
    keep += [host, clbuf]
    cases += [CopyCase("upload_peer", "pyopencl", TRANSFER_BYTES, "upload", "peer", 4,
                       lambda: cl.enqueue_copy(queue, clbuf, host)),
              CopyCase("download_peer", "pyopencl", TRANSFER_BYTES, "download", "peer", 4,
                       lambda: cl.enqueue_copy(queue, host, clbuf))]
    return cases, keep


def report_transfers(cases):
    best = {c.key: c.rounds_s.best for c in cases}
    rows = {}
    print(f"1. transfers of {fmt_bytes(TRANSFER_BYTES)}, a Buffer's own memory")
    print(f"   {'direction':<9} {'zero-copy':>10} {'before':>10} {'pyopencl':>10} {'peer/zero-copy':>15} "
          f"{'before/peer':>12}")
    for d in ("upload", "download"):
        z, b, p = best[f"{d}_zero_copy"], best[f"{d}_before"], best[f"{d}_peer"]
        rows[d] = {"zero_copy_s": z, "before_s": b, "peer_s": p, "peer_over_zero_copy": ratio(p, z),
                   "before_over_peer": ratio(b, p)}
        print(f"   {d:<9} {fmt_time(z):>10} {fmt_time(b):>10} {fmt_time(p):>10} {ratio(p, z):>14.0f}x "
              f"{ratio(b, p):>11.2f}x")
    return rows


# --- 2. chain ---------------------------------------------------------------------------------------


def chain_case(stages, src, device):
    """One chain on the default device (device None: the image as it is), or on `device` (the
    image wrapped and uploaded there first, as hb.aot did before)."""

    def run():
        x = src
        if device is not None:
            x = hb.Buffer.from_host(src, external_writes=False)
            x.copy_to_device(device)
        for p in stages:
            x = p(x)
        return np.asarray(x)

    return run


def timed_rounds(cases, repeat, number):
    """Every case once (warm-up), then `repeat` interleaved rounds of `number` runs; seconds per
    run, every round."""
    rounds = {k: Rounds() for k in cases}
    for fn in cases.values():
        fn()
    for _ in range(repeat):
        for k, fn in cases.items():
            t0 = time.perf_counter()
            for _ in range(number):
                fn()
            rounds[k].append((time.perf_counter() - t0) / number)
    return rounds


# --- 3. loop ----------------------------------------------------------------------------------------


def loop_case(p, device, calls, shape):
    x = hb.Buffer.from_host(np.random.default_rng(2).integers(0, 256, shape, dtype=np.uint8),
                            external_writes=False)
    x.copy_to_device(device)

    def run():
        out = None
        for _ in range(calls):
            out = p(x)
        out.device_sync()  # the queued kernels finish inside the time
        return out

    return run


def loop_allocations(p, device, calls, interposer, shape):
    """clCreateBuffer calls and pool misses during a loop, after its first two calls."""
    device.trim()
    x = hb.Buffer.from_host(np.zeros(shape, np.uint8), external_writes=False)
    x.copy_to_device(device)
    out = p(x)
    out = p(x)
    made = interposer.counts()["mem_created"] if interposer is not None else None
    misses = device.pool["misses"]
    for _ in range(calls - 2):
        out = p(x)
    del out
    created = interposer.counts()["mem_created"] - made if interposer is not None else None
    return created, device.pool["misses"] - misses


def measure_loop(p, devices, args, interposer, shape):
    """Section 3 for one shape: the time per call and the allocations of each device's loop."""
    loops = {k: loop_case(p, device, args.calls, shape) for k, device in devices.items()}
    rounds = timed_rounds(loops, args.repeat, 1)
    allocations = {k: loop_allocations(p, device, args.calls, interposer, shape) for k, device in devices.items()}
    print(f"3. {args.calls} calls of {p.name} on {shape}, the output not given")
    loop = {}
    for k in loops:
        per_call = rounds[k].best / args.calls
        created, misses = allocations[k]
        loop[k] = {"per_call_s": per_call, "clCreateBuffer_after_two_calls": created,
                   "pool_misses_after_two_calls": misses}
        print(f"   {k:<10} {fmt_time(per_call):>10} per call; after the first two calls: clCreateBuffer "
              f"{created}, pool misses {misses}")
    loop["ratio"] = ratio(loop["zero_copy"]["per_call_s"], loop["before"]["per_call_s"])
    print(f"   zero-copy / before: {loop['ratio']:.2f}x per call")
    print()
    return loop, rounds


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="rounds; the best counts (default 5)")
    ap.add_argument("--calls", type=int, default=1000, help="calls of the loop (default 1000)")
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    args = ap.parse_args(argv)
    ready = opencl_prerequisites()  # the interposer goes in before the OpenCL loader does
    if ready is None:
        return 2
    hl, interposer, counter_reason, zero_copy = ready
    if not zero_copy.zero_copy:
        print(f"{zero_copy!r} does not share the host's memory (or zero-copy is turned off): nothing to compare",
              file=sys.stderr)
        return 2
    import pyopencl as cl

    before = hb.opencl.device(zero_copy=False)
    before.pool_limit = 0
    problems = []
    src = np.random.default_rng(1).integers(0, 256, SHAPE, dtype=np.uint8)
    print(f"zero-copy and the pool: best of {args.repeat} interleaved rounds, {zero_copy.name} on "
          f"{zero_copy.platform}")
    print(environment_line())
    print("OpenCL copy counter: " + ("installed" if interposer is not None else f"unavailable: {counter_reason}"))
    print()

    cases, keep = transfer_cases(cl, zero_copy, before)
    run_copy_cases(cases, args.repeat)
    transfers = report_transfers(cases)
    del keep
    print()

    with tempfile.TemporaryDirectory(prefix="hb_bench_zero_copy_", ignore_cleanup_errors=True) as tmp:
        try:
            three, _ = build_pipelines(hl, Path(tmp))
        except BuildError as e:
            print(f"cannot build the pipelines: {e}", file=sys.stderr)
            return 2
        expected = (src.astype(np.int64) + 7).astype(np.uint8)
        chains = {"zero_copy": chain_case(three, src, None), "before": chain_case(three, src, before)}
        bytes_per_chain = {}
        for k, fn in chains.items():
            since = snapshot(interposer)
            if not np.array_equal(fn(), expected):
                problems.append(f"chain, {k}: the result is not image + 7")
            bytes_per_chain[k] = moved_bytes(interposer, since)
        chain_s = timed_rounds(chains, args.repeat, 4)
        z, b = chain_s["zero_copy"].best, chain_s["before"].best
        chain = {"zero_copy_s": z, "before_s": b, "ratio": ratio(z, b),
                 "bytes": {k: {"hb_transfers": v[0], "interposer": v[1]} for k, v in bytes_per_chain.items()}}
        print(f"2. np.asarray(C(B(A(image)))) on a NumPy image {SHAPE}, three libraries")
        for k in chains:
            counted = bytes_per_chain[k]
            print(f"   {k:<10} {fmt_time(chain_s[k].best):>10} per chain; copied: hb.transfers() "
                  f"{fmt_bytes(counted[0])}, OpenCL reads+writes "
                  f"{'n/a' if counted[1] is None else fmt_bytes(counted[1])}")
        print(f"   zero-copy / before: {ratio(z, b):.2f}x")
        print()

        p = three[0]
        # The copying device with its pool: a device of its own on the context (its own queue),
        # so "before"'s pool stays off.
        pooled = hb.opencl.device(cl.Context.from_int_ptr(zero_copy.context), zero_copy=False)
        devices = {"zero_copy": zero_copy, "pool": pooled, "before": before}
        loop, loop_s = {}, {}
        for shape in LOOP_SHAPES:
            tag = "x".join(map(str, shape))
            loop[tag], rounds = measure_loop(p, devices, args, interposer, shape)
            loop_s.update({f"{k} {tag}": r for k, r in rounds.items()})
        import dask.array as da

        image = da.from_array(src, chunks=DASK_CHUNKS)
        chunks = image.npartitions
        since = snapshot(interposer)
        (got,) = hb.dask.compute(hb.dask.map_pipeline(p, image))
        counted = moved_bytes(interposer, since)
        if not np.array_equal(got, (src.astype(np.int64) + 1).astype(np.uint8)):
            problems.append("dask: the result is not image + 1")
        dask = {"chunks": chunks, "hb_transfers_per_chunk": counted[0] / chunks,
                "interposer_per_chunk": None if counted[1] is None else counted[1] / chunks}
        print(f"4. hb.dask.map_pipeline({p.name}) over {SHAPE} in {DASK_CHUNKS} chunks ({chunks}): copied per "
              f"chunk: hb.transfers() {fmt_bytes(dask['hb_transfers_per_chunk'])}, OpenCL reads+writes "
              f"{'n/a' if counted[1] is None else fmt_bytes(dask['interposer_per_chunk'])}")

    noisy = [k for k, r in {**chain_s, **loop_s}.items() if r.median > 1.25 * r.best]
    finish(args, "zero_copy", problems, noisy, "", repeat=args.repeat, calls=args.calls,
           device=f"{zero_copy.name} on {zero_copy.platform}", target=OPENCL_TARGET, transfers=transfers,
           chain=chain, loop=loop, dask=dask)
    return 0


if __name__ == "__main__":
    sys.exit(main())
