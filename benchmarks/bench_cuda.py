"""CUDA: what a Buffer's copies to and from a GPU cost beside CuPy's own, and what handing a
device-resident Buffer to CuPy and PyTorch costs beside handing them a CuPy array, in one run.

Run:  python benchmarks/bench_cuda.py [--repeat R] [--number N] [--json PATH]

Without a CUDA driver it prints "skipped: no CUDA driver ..." and exits 0 (nothing to measure on
this machine); without CuPy, the peer, it exits 2. PyTorch with CUDA adds its rows.

* Copies of 256 MiB (uint8) on the default device (``hb.cuda.device()``, the legacy default
  stream), every copy blocking:
  ours, upload:      ``b.set_host_dirty(True); b.copy_to_device(dev)``  (allocated beforehand)
  ours, download:    ``b.set_device_dirty(True); b.copy_to_host()``
  pinned, upload:    ``d.data.copy_from_host(p, n)``; download ``d.data.copy_to_host(p, n)``:
                     CuPy's own blocking copies (cudaMemcpy, legacy default stream) between a
                     CuPy array ``d`` and ``p``, host memory from ``cupy.cuda.alloc_pinned_memory``
                     (page-locked: the DMA engines read it directly; the ceiling)
  pageable, upload:  the same with ``a``, a NumPy array's (pageable) memory: what
                     ``cupy.asarray(a)`` and ``d.get(out=a)`` do, minus allocation and checks
                     (the driver stages pageable memory through pinned buffers of its own)
  ours on pinned (informational): the "ours" cases on ``Buffer.from_host(p2,
                     external_writes=False)``, ``p2`` pinned: our call path on pinned memory.
  A Buffer's own host memory is pageable (calloc), so "ours" is a pageable copy; the pinned row
  is what the link can do, and "ours on pinned" shows how much of the gap is the memory, not the
  call. Each case is ``repeat`` rounds of ``COPIES`` copies, rounds of all cases interleaved,
  the best round giving the time per copy. Target: ours >= 0.90x the pinned peer's bandwidth.
* Export overhead, float32 (4, 4), ``timeit`` rounds of ``number`` calls, interleaved, the best
  round giving the cost per call, each consumer's object made and dropped:
  ``cupy.asarray(b)`` (our ``__cuda_array_interface__``, a device lease) against
  ``cupy.asarray(Interface(c))``, a thin object whose property returns the CuPy array ``c``'s own
  interface (CuPy's producer side, the same consumer; ``cupy.asarray(c)`` itself would return
  ``c``); ``cupy.from_dlpack(b)`` against ``cupy.from_dlpack(c)``; ``torch.from_dlpack(b)``
  against ``torch.from_dlpack(c)``. Informational: the imports ``hb.cuda.wrap(c)``,
  ``hb.from_dlpack(c)`` and, with PyTorch, ``hb.from_dlpack(t)`` for a CUDA tensor, and
  ``id(b)``, the timing loop's floor.

Before the figures are trusted, checks: each timed copy is counted once with its bytes
(``b.transfers``) and the data survive the round trips; every export is zero-copy (the
consumer's pointer is the buffer's device address) and moves nothing. A failed check is printed
as a ``WARNING:`` line and the exit status is 1. Ratios are measured in the same run on the same
machine; absolute times are not comparable across machines, and no target is a pass/fail check.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import warnings

import numpy as np

import halide_buffer as hb

from bench_common import (Case, CopyCase, cases_json, environment, environment_line, fmt_ratio, fmt_time, ratio,
                          run_cases, run_copy_cases, write_json)

MiB = 1 << 20
COPY_BYTES = 256 * MiB
COPIES = 4                 # per round: 1-2 GB moved, ~20-100 ms a round on a PCIe/NVLink GPU
SMALL = (4, 4)
BANDWIDTH_TARGET = 0.90    # ours / pinned peer, bandwidth (peer time / our time)


def import_peer(name):
    """A peer module, or (None, why); a peer's import-time notices are not this benchmark's."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return __import__(name), None
    except Exception as e:  # noqa: BLE001 - any import failure means "peer unavailable"
        return None, f"{type(e).__name__}: {e}"


# --------------------------------------------------------------------------------------------
# Copies
# --------------------------------------------------------------------------------------------


def pinned_array(cupy, nbytes):
    """A NumPy uint8 array over page-locked host memory (kept alive by the array's base)."""
    mem = cupy.cuda.alloc_pinned_memory(nbytes)
    return np.frombuffer(mem, np.uint8, nbytes)


def address(a):
    """A host array's data address, as CuPy's copies take it (old CuPy wants a c_void_p)."""
    return ctypes.c_void_p(a.__array_interface__["data"][0])


def cupy_copy(d, host, to_host):
    """One blocking CuPy copy of the whole of `d` from or to `host`."""
    ptr, n = address(host), d.nbytes
    return (lambda: d.data.copy_to_host(ptr, n)) if to_host else (lambda: d.data.copy_from_host(ptr, n))


def make_copy_cases(cupy, dev):
    b = hb.Buffer((COPY_BYTES,), "uint8")
    b.numpy(writable=True)[:] = 1
    b.copy_to_device(dev)                  # allocation and first upload, outside the timing
    pinned = pinned_array(cupy, COPY_BYTES)
    pinned[:] = 1
    pageable = np.ones(COPY_BYTES, np.uint8)
    d = cupy.empty(COPY_BYTES, cupy.uint8)
    d.data.copy_from_host(address(pageable), COPY_BYTES)
    ours_pinned_host = pinned_array(cupy, COPY_BYTES)
    ours_pinned_host[:] = 1
    bp = hb.Buffer.from_host(ours_pinned_host, external_writes=False)
    bp.copy_to_device(dev)

    def up(buf):
        def copy():
            buf.set_host_dirty(True)
            buf.copy_to_device(dev)
        return copy

    def down(buf):
        def copy():
            buf.set_device_dirty(True)
            buf.copy_to_host()
        return copy

    cases = [
        CopyCase("upload_ours", "ours", COPY_BYTES, "upload", "ours", COPIES, up(b)),
        CopyCase("upload_pinned", "CuPy, pinned", COPY_BYTES, "upload", "pinned", COPIES, cupy_copy(d, pinned, False)),
        CopyCase("upload_pageable", "CuPy, pageable", COPY_BYTES, "upload", "pageable", COPIES, cupy_copy(d, pageable, False)),
        CopyCase("upload_ours_pinned", "ours on pinned", COPY_BYTES, "upload", "ours_pinned", COPIES, up(bp)),
        CopyCase("download_ours", "ours", COPY_BYTES, "download", "ours", COPIES, down(b)),
        CopyCase("download_pinned", "CuPy, pinned", COPY_BYTES, "download", "pinned", COPIES, cupy_copy(d, pinned, True)),
        CopyCase("download_pageable", "CuPy, pageable", COPY_BYTES, "download", "pageable", COPIES, cupy_copy(d, pageable, True)),
        CopyCase("download_ours_pinned", "ours on pinned", COPY_BYTES, "download", "ours_pinned", COPIES, down(bp)),
    ]
    return cases, (b, bp, ours_pinned_host, pinned, pageable, d)


def check_copies(dev, keep):
    """The timed copies move what they claim: counted once each, the data intact."""
    b, bp, ours_pinned_host = keep[:3]
    problems = []
    if bp.numpy().__array_interface__["data"][0] != ours_pinned_host.__array_interface__["data"][0]:
        problems.append("the Buffer over pinned memory copied it: not a borrow")
    for label, buf in (("ours", b), ("ours on pinned", bp)):
        before = buf.transfers
        buf.set_host_dirty(True)
        buf.copy_to_device(dev)
        buf.set_device_dirty(True)
        buf.copy_to_host()
        t = buf.transfers - before
        if (t.to_device, t.to_device_bytes, t.to_host, t.to_host_bytes) != (1, COPY_BYTES, 1, COPY_BYTES):
            problems.append(f"{label}: one upload and one download were not counted as 1 x {COPY_BYTES} B each")
        if not (np.asarray(buf) == 1).all():
            problems.append(f"{label}: the data did not survive the round trips")
    return problems


def measure_copies(cupy, dev, repeat):
    cases, keep = make_copy_cases(cupy, dev)
    run_copy_cases(cases, repeat)
    return cases, check_copies(dev, keep)


def report_copies(cases, repeat, device):
    print(f"host <-> device copies of {COPY_BYTES // MiB} MiB: best of {repeat} interleaved rounds "
          f"of {COPIES}, {device}")
    head = (f"{'direction':<9}  {'case':<15}  {'best':>9}  {'median':>9}  {'GB/s':>7}  "
            f"{'vs pinned':>9}  {'vs pageable':>11}")
    print(head)
    print("-" * len(head))
    by_key = {c.key: c for c in cases}
    rows = {}
    for direction in ("upload", "download"):
        pinned = by_key[f"{direction}_pinned"]
        pageable = by_key[f"{direction}_pageable"]
        for side in ("ours", "pinned", "pageable", "ours_pinned"):
            c = by_key[f"{direction}_{side}"]
            # Bandwidth ratios: the peer's time over ours (> 1: ours is faster).
            vs_pinned = pinned.rounds_s.best / c.rounds_s.best
            vs_pageable = pageable.rounds_s.best / c.rounds_s.best
            paired = statistics.median(p / x for x, p in zip(c.rounds_s, pinned.rounds_s))
            rows[c.key] = {"direction": direction, "side": side, "best_s": c.rounds_s.best,
                           "median_s": c.rounds_s.median, "gbps": c.gbps,
                           "bandwidth_vs_pinned": vs_pinned, "bandwidth_vs_pinned_paired": paired,
                           "bandwidth_vs_pageable": vs_pageable, "rounds_s": list(c.rounds_s)}
            print(f"{direction:<9}  {c.label:<15}  {fmt_time(c.rounds_s.best):>9}  "
                  f"{fmt_time(c.rounds_s.median):>9}  {c.gbps:7.2f}  {vs_pinned:8.2f}x  {vs_pageable:10.2f}x")
    print()
    targets = []
    for direction in ("upload", "download"):
        r = rows[f"{direction}_ours"]
        met = r["bandwidth_vs_pinned"] >= BANDWIDTH_TARGET
        targets.append({"what": f"{direction} bandwidth, ours / CuPy pinned", "ratio": r["bandwidth_vs_pinned"],
                        "paired": r["bandwidth_vs_pinned_paired"], "target": f">= {BANDWIDTH_TARGET:.2f}x",
                        "met": met})
        print(f"{direction} bandwidth, ours / CuPy pinned: {r['bandwidth_vs_pinned']:.2f}x "
              f"(per-round median {r['bandwidth_vs_pinned_paired']:.2f}x; target >= {BANDWIDTH_TARGET:.2f}x: "
              f"{'met' if met else 'NOT met'}); / CuPy pageable: {r['bandwidth_vs_pageable']:.2f}x; "
              f"ours on pinned / CuPy pinned: {rows[f'{direction}_ours_pinned']['bandwidth_vs_pinned']:.2f}x")
    return rows, targets


# --------------------------------------------------------------------------------------------
# Export overhead
# --------------------------------------------------------------------------------------------


class Interface:
    """A thin producer whose interface is the CuPy array's own, computed per access as ours is."""

    __slots__ = ("c",)

    def __init__(self, c):
        self.c = c

    @property
    def __cuda_array_interface__(self):
        return self.c.__cuda_array_interface__



def export_objects(cupy, torch, dev):
    b = hb.Buffer(SMALL, "float32")
    b.copy_to_device(dev)
    c = cupy.zeros(SMALL, cupy.float32)
    t = torch.zeros(SMALL, dtype=torch.float32, device="cuda") if torch is not None else None
    return b, c, t


def check_exports(cupy, torch, b, c, t):
    """Every timed export is zero-copy and moves nothing."""
    problems = []
    before = b.transfers
    address = b.__cuda_array_interface__["data"][0]
    if cupy.asarray(b).data.ptr != address:
        problems.append("cupy.asarray(b) is not the buffer's device memory")
    if cupy.from_dlpack(b).data.ptr != address:
        problems.append("cupy.from_dlpack(b) is not the buffer's device memory")
    if cupy.asarray(Interface(c)).data.ptr != c.data.ptr:
        problems.append("cupy.asarray(Interface(c)) is not c's memory")
    if hb.cuda.wrap(c).__cuda_array_interface__["data"][0] != c.data.ptr:
        problems.append("hb.cuda.wrap(c) is not c's memory")
    if hb.from_dlpack(c).__cuda_array_interface__["data"][0] != c.data.ptr:
        problems.append("hb.from_dlpack(c) is not c's memory")
    if torch is not None:
        if torch.from_dlpack(b).data_ptr() != address:
            problems.append("torch.from_dlpack(b) is not the buffer's device memory")
        if hb.from_dlpack(t).__cuda_array_interface__["data"][0] != t.data_ptr():
            problems.append("hb.from_dlpack(t) is not the tensor's memory")
    moved = b.transfers - before
    if moved.to_device or moved.to_host:
        problems.append(f"the exports copied: {moved}")
    return problems


def make_export_cases(cupy, torch, b, c, t):
    env = {"cupy": cupy, "torch": torch, "hb": hb, "b": b, "c": c, "t": t, "Interface": Interface,
           "ic": Interface(c)}
    cases = [
        Case("cupy_asarray_buffer", "cupy.asarray(Buffer)", "cupy.asarray(b)", env, "ours", "cupy_asarray_interface"),
        Case("cupy_asarray_interface", "cupy.asarray(Interface(cupy array))  [peer]", "cupy.asarray(ic)", env,
             "peer", None),
        Case("cupy_from_dlpack_buffer", "cupy.from_dlpack(Buffer)", "cupy.from_dlpack(b)", env, "ours",
             "cupy_from_dlpack_cupy"),
        Case("cupy_from_dlpack_cupy", "cupy.from_dlpack(cupy array)  [peer]", "cupy.from_dlpack(c)", env, "peer",
             None),
    ]
    if torch is not None:
        cases += [
            Case("torch_from_dlpack_buffer", "torch.from_dlpack(Buffer)", "torch.from_dlpack(b)", env, "ours",
                 "torch_from_dlpack_cupy"),
            Case("torch_from_dlpack_cupy", "torch.from_dlpack(cupy array)  [peer]", "torch.from_dlpack(c)", env,
                 "peer", None),
            Case("hb_from_dlpack_tensor", "hb.from_dlpack(CUDA tensor)", "hb.from_dlpack(t)", env, "info",
                 "cupy_from_dlpack_cupy"),
        ]
    cases += [
        Case("hb_cuda_wrap_cupy", "hb.cuda.wrap(cupy array)", "hb.cuda.wrap(c)", env, "info",
             "cupy_asarray_interface"),
        Case("hb_from_dlpack_cupy", "hb.from_dlpack(cupy array)", "hb.from_dlpack(c)", env, "info",
             "cupy_from_dlpack_cupy"),
        Case("call_floor", "id(Buffer)  [loop floor]", "id(b)", env, "info", None),
    ]
    return cases


def report_exports(cases, number, repeat):
    print(f"exports of a device-resident float32 {SMALL}: best of {repeat} x {number} calls")
    w = max(len(c.label) for c in cases)
    head = f"{'case':<{w}}  {'best ns':>9}  {'median':>9}  {'vs peer':>8}"
    print(head)
    print("-" * len(head))
    by_key = {c.key: c for c in cases}
    for c in cases:
        ref = by_key.get(c.ref)
        r = ratio(c.rounds_ns.best, ref.rounds_ns.best if ref else None)
        print(f"{c.label:<{w}}  {c.rounds_ns.best:9.0f}  {c.rounds_ns.median:9.0f}  {fmt_ratio(r):>8}")
    print()
    ratios = {}
    for c in cases:
        if c.group != "ours":
            continue
        ref = by_key[c.ref]
        r = c.rounds_ns.best / ref.rounds_ns.best
        paired = statistics.median(x / y for x, y in zip(c.rounds_ns, ref.rounds_ns))
        ratios[c.key] = {"vs": c.ref, "ratio": r, "paired": paired}
        print(f"{c.label} / {ref.label.split('  [')[0]}: {r:.2f}x (per-round median {paired:.2f}x)")
    return ratios


# --------------------------------------------------------------------------------------------


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7, help="rounds; the best counts (default 7)")
    ap.add_argument("--number", type=int, default=2000, help="export calls per round (default 2000)")
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    args = ap.parse_args(argv)

    if not hb.cuda.is_available():
        try:
            hb.cuda.device()
            why = "the driver did not initialise"
        except hb.DeviceError as e:
            why = str(e)
        print(f"skipped: no CUDA driver ({why})")
        return 0
    cupy, why = import_peer("cupy")
    if cupy is None:
        print(f"CuPy, the peer, is not usable: {why}", file=sys.stderr)
        return 2
    torch, torch_why = import_peer("torch")
    if torch is not None and not torch.cuda.is_available():
        torch, torch_why = None, f"torch {torch.__version__} has no CUDA"

    dev = hb.cuda.device()
    device = f"{dev.name} (compute capability {'.'.join(map(str, dev.compute_capability))})"
    print(f"{environment_line()}, cupy {cupy.__version__}, "
          f"{'torch ' + torch.__version__ if torch is not None else 'torch unavailable: ' + torch_why}")
    print()

    copy_cases, problems = measure_copies(cupy, dev, args.repeat)
    copy_rows, targets = report_copies(copy_cases, args.repeat, device)
    print()

    b, c, t = export_objects(cupy, torch, dev)
    problems += check_exports(cupy, torch, b, c, t)
    cases = make_export_cases(cupy, torch, b, c, t)
    before = b.transfers
    run_cases(cases, args.number, args.repeat)
    moved = b.transfers - before
    if moved.to_device or moved.to_host:
        problems.append(f"the timed exports copied: {moved}")
    export_ratios = report_exports(cases, args.number, args.repeat)

    for p in problems:
        print(f"WARNING: {p}")
    noisy = [c.key for c in copy_cases if c.rounds_s.median > 1.25 * c.rounds_s.best]
    noisy += [c.key for c in cases if c.group != "info" and c.rounds_ns.median > 1.25 * c.rounds_ns.best]
    if noisy:
        print(f"note: noisy run (median > 1.25 x best for: {', '.join(noisy)}); rerun with more --repeat.")

    if args.json:
        env = environment()
        env.update(cupy=cupy.__version__, torch=torch.__version__ if torch is not None else None,
                   device=device, global_memory_size=dev.global_memory_size)
        write_json(args.json, {
            "benchmark": "cuda",
            "repeat": args.repeat,
            "number": args.number,
            "copy_bytes": COPY_BYTES,
            "copies_per_round": COPIES,
            "environment": env,
            "copies": copy_rows,
            "targets": targets,
            "exports": cases_json(cases),
            "export_ratios": export_ratios,
            "torch_reason": torch_why,
            "problems": problems,
            "noisy": noisy,
        })
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
