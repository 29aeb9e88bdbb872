"""Memory per live Buffer: the resident memory a small Buffer keeps, beside a NumPy array's.

Run:  python benchmarks/rss_per_buffer.py [--count N] [--json PATH]

Each kind is measured in a fresh Python process of its own, so that neither reuses memory the
other freed: ``hb.Buffer((4, 4), "float32")`` (ours) and ``np.zeros((4, 4), np.float32)`` (the
reference). The process makes a few hundred objects and drops them (first calls fill caches),
allocates a list of ``count`` slots (default 200,000), reads its resident set size
(``/proc/self/statm``), fills the list with new objects, all kept alive, and reads it again.
The figure is the growth divided by the count: what one live object costs, its Python object,
its metadata and its 64 bytes of data together. The list's own 8 bytes per slot were allocated
before the first reading, so they are not part of it. The project's goal for ours is <= 400 B.

Linux only (it reads /proc). Resident memory grows by whole pages, and the allocators keep some
of it back, so the figures are good to a few bytes per object at this count; nothing here is a
pass/fail test.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
from pathlib import Path

GOAL = 400  # bytes per live hb.Buffer((4, 4), "float32")
WARM = 500  # objects made and dropped before the first reading

KINDS = {
    "buffer": 'hb.Buffer((4, 4), "float32")',
    "ndarray": "np.zeros((4, 4), np.float32)",
}


def resident_bytes():
    """The resident set size of this process: /proc/self/statm's second field, in pages."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def child(kind, count):
    """In a fresh process: the resident growth per live object of `kind`, printed as JSON."""
    import numpy as np

    import halide_buffer as hb

    if kind == "buffer":
        def make():
            return hb.Buffer((4, 4), "float32")
    else:
        def make():
            return np.zeros((4, 4), np.float32)
    for _ in range(WARM):
        make()
    objs = [None] * count  # the list's slots: allocated (and touched) before the first reading
    gc.collect()
    before = resident_bytes()
    for i in range(count):
        objs[i] = make()
    gc.collect()
    after = resident_bytes()
    print(json.dumps({"kind": kind, "count": count, "growth": after - before,
                      "per_object": (after - before) / count}))
    return 0


def measure(kind, count):
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", kind, "--count", str(count)],
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"the {kind} process failed (exit {proc.returncode}): "
                           + " | ".join(proc.stderr.strip().splitlines()[-5:]))
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=200_000, help="live objects of each kind (default 200000)")
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    ap.add_argument("--child", choices=sorted(KINDS), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args.child, args.count)
    if not Path("/proc/self/statm").is_file():
        print("needs /proc/self/statm (Linux)", file=sys.stderr)
        return 2

    from bench_common import environment, environment_line

    got = {kind: measure(kind, args.count) for kind in KINDS}
    ours, ref = got["buffer"]["per_object"], got["ndarray"]["per_object"]
    print(f"memory per live object: resident growth over {args.count:,} objects kept alive, "
          f"each kind in a fresh process")
    print(environment_line())
    print()
    w = max(len(v) for v in KINDS.values())
    for kind, label in KINDS.items():
        print(f"{label:<{w}}  {got[kind]['per_object']:6.0f} B")
    met = ours <= GOAL
    print()
    print(f"hb.Buffer / ndarray: {ours / ref:.2f}x; hb.Buffer: {ours:.0f} B per object "
          f"(goal <= {GOAL} B: {'met' if met else 'NOT met'})")
    if args.json:
        Path(args.json).write_text(json.dumps({"benchmark": "rss_per_buffer", "count": args.count, "results": got,
                                               "goal_bytes": GOAL, "met": met, "environment": environment()},
                                              indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
