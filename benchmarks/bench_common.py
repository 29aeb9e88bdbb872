"""What the benchmarks share: the rounds a case keeps, and the environment a run reports."""

import importlib
import json
import os
import platform
import statistics
import sys
import time
import timeit
from pathlib import Path

import numpy as np

import halide_buffer as hb

TESTS = Path(__file__).resolve().parent.parent / "tests"


def test_support(name):
    """A module of the test tree's support code, ``tests/<name>.py`` (the OpenCL interposer)."""
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    return importlib.import_module(name)


class Rounds(list):
    """The per-call time of each round, in the unit its name says. The best round is the
    figure (least disturbed by the rest of the machine); the median says how noisy the run was."""

    @property
    def best(self):
        return min(self)

    @property
    def median(self):
        return statistics.median(self)


class CopyCase:
    """One kind of copy, timed in rounds of `number` blocking copies of `nbytes` each."""

    def __init__(self, key, label, nbytes, direction, side, number, fn):
        self.key = key                  # stable name for --json
        self.label = label              # what the table prints
        self.nbytes = nbytes
        self.direction = direction      # "upload" (host->device) or "download"
        self.side = side                # ours, or which peer
        self.number = number            # copies per round
        self.fn = fn                    # one copy
        self.rounds_s = Rounds()        # seconds per copy, every round

    def run_round(self):
        fn, n = self.fn, self.number
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        self.rounds_s.append((time.perf_counter() - t0) / n)

    @property
    def gbps(self):
        return self.nbytes / self.rounds_s.best / 1e9


def upload_again(b):
    """One upload of a Buffer's whole storage: its host copy marked newer, then copied up."""
    b.set_host_dirty(True)
    b.copy_to_device()


def download_again(b):
    """One download of a Buffer's whole storage: its device copy marked newer, then brought home."""
    b.set_device_dirty(True)
    b.copy_to_host()


def run_copy_cases(cases, repeat):
    """One warm-up round of every CopyCase (not kept), then `repeat` rounds, interleaved."""
    for c in cases:
        c.run_round()
        c.rounds_s.clear()
    for _ in range(repeat):
        for c in cases:
            c.run_round()


def environment():
    """The versions and machine a run's figures belong to (for --json)."""
    return {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "halide_buffer": hb.__version__,
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
    }


def environment_line():
    """The environment in one line, for the head of a table."""
    e = environment()
    return (f"python {e['python']}, numpy {e['numpy']}, halide_buffer {e['halide_buffer']}, "
            f"{e['machine']}, {e['cpus']} cpus")


class Case:
    """One statement timed with ``timeit`` in rounds of calls (see run_cases())."""

    def __init__(self, key, label, stmt, env, group, ref=None):
        self.key = key            # stable name for --json
        self.label = label        # what the table prints
        self.timer = timeit.Timer(stmt, globals=env)
        self.group = group        # "ours", "reference", "peer", "info"
        self.ref = ref            # key of the case its ratio is taken against (None: none)
        self.rounds_ns = Rounds()  # per-call ns of every round


def timing_arguments(ap):
    """--number, --repeat and --json, as the wall-time benchmarks take them."""
    ap.add_argument("--number", type=int, default=20000, help="calls per round (default 20000)")
    ap.add_argument("--repeat", type=int, default=7, help="rounds; the best counts (default 7)")
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")


def run_cases(cases, number, repeat):
    """Warms every case up, then runs `repeat` rounds of `number` calls, the cases interleaved
    round by round (so a busy stretch of the machine hits them all alike)."""
    warm = max(1, number // 10)
    for c in cases:
        c.timer.timeit(warm)
    for _ in range(repeat):
        for c in cases:
            c.rounds_ns.append(c.timer.timeit(number) / number * 1e9)


def noisy_timings(cases, groups=("ours", "reference", "peer")):
    """Labels of the timed cases of `groups` whose median round is over 1.25x their best."""
    return [c.label for c in cases if c.group in groups and c.rounds_ns.median > 1.25 * c.rounds_ns.best]


def print_noise_note(noisy, disagreement):
    """The note for a noisy run: which cases, and which figures to compare before trusting it."""
    if noisy:
        print(f"note: noisy run (median > 1.25 x best for: {', '.join(noisy)}); another process "
              f"was busy. If {disagreement}, rerun, e.g. with --repeat 21.")


KiB, MiB = 1 << 10, 1 << 20


def fmt_bytes(n):
    """A byte count for a table: whole MiB or KiB as such ("256 MiB"), other sizes of 1 KiB and
    more to three significant digits ("36.5 KiB"), smaller ones in bytes; "-" for None."""
    if n is None:
        return "-"
    for unit, size in (("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            return f"{int(n // size)} {unit}" if n % size == 0 else f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def fmt_time(s):
    """A time in seconds for a table: microseconds under 1 ms, milliseconds above."""
    return f"{s * 1e6:.1f} us" if s < 1e-3 else f"{s * 1e3:.2f} ms"


def ratio(x, y):
    return None if (x is None or y is None) else x / y


def fmt_ratio(r):
    return "-" if r is None else f"{r:.2f}x"


def print_case_table(cases, ref_ns, peer_ns, ref_title):
    """Each case's best and median ns per call, and its ratios to the reference and the peer."""
    w = max(len(c.label) for c in cases)
    print(f"{'case':<{w}}  {'best ns':>8}  {'median':>8}  {ref_title:>8}  {'vs peer':>8}")
    print("-" * (w + 2 + 8 + 2 + 8 + 2 + 8 + 2 + 8))
    for c in cases:
        print(f"{c.label:<{w}}  {c.rounds_ns.best:8.1f}  {c.rounds_ns.median:8.1f}  "
              f"{fmt_ratio(ratio(c.rounds_ns.best, ref_ns)):>8}  {fmt_ratio(ratio(c.rounds_ns.best, peer_ns)):>8}")
    print()


def paired(by_key, key, ref):
    """The median of per-round ratios key / ref of two interleaved cases, or None if either did
    not run."""
    if key not in by_key or ref not in by_key:
        return None
    return statistics.median(x / y for x, y in zip(by_key[key].rounds_ns, by_key[ref].rounds_ns))


def print_ms_table(cases, by_key):
    """Slow cases in milliseconds: each one's best and median, and its ratio to its own reference
    (Case.ref; 1/N when it is under 0.01)."""
    w = max(len(c.label) for c in cases)
    print(f"{'case':<{w}}  {'best ms':>9}  {'median':>9}  {'vs ref':>7}  ref")
    print("-" * (w + 2 + 9 + 2 + 9 + 2 + 7 + 2 + 3))
    for c in cases:
        ref = by_key[c.ref] if c.ref else None
        r = ratio(c.rounds_ns.best, ref.rounds_ns.best if ref else None)
        shown = f"1/{1 / r:.0f}" if r is not None and r < 0.01 else fmt_ratio(r)
        print(f"{c.label:<{w}}  {c.rounds_ns.best / 1e6:9.2f}  {c.rounds_ns.median / 1e6:9.2f}  "
              f"{shown:>7}  {ref.key if ref and ref is not c else ''}")
    print()


def cases_json(cases):
    """Every case as the JSON reports keep it: label, group, reference, best and median ns, rounds."""
    return {c.key: {"label": c.label, "group": c.group, "ref": c.ref, "best_ns": c.rounds_ns.best,
                    "median_ns": c.rounds_ns.median, "rounds_ns": list(c.rounds_ns)} for c in cases}


def write_json(path, report):
    """Keeps a run's figures (--json)."""
    Path(path).write_text(json.dumps(report, indent=2) + "\n")


def finish(args, benchmark, problems, noisy, disagreement, environment_=None, **figures):
    """The end of every benchmark's run: its warnings and the noise note printed, and with --json
    the report written: the benchmark's name, `figures`, the environment, problems and noisy
    cases."""
    for p in problems:
        print(f"WARNING: {p}")
    print_noise_note(noisy, disagreement)
    if args.json:
        write_json(args.json, {"benchmark": benchmark, **figures, "environment": environment_ or environment(),
                               "problems": problems, "noisy": noisy})
