#!/usr/bin/env python3
"""Mutation testing of the C++ core: does the test suite notice a small bug in csrc/?

Each mutant in tools/mutants.toml replaces one exact snippet of a source file (a flipped
comparison, an off-by-one, a dropped flag update) and names the test files that should catch it.
For each selected mutant this script

1. copies the repository's tracked files, its build folder and its built extension into a scratch
   tree (once per job; the checkout it is run from is only read, never written),
2. applies the mutant there and rebuilds in place (`setup.py build_ext --inplace`, incremental:
   only the units the edit touched compile again),
3. runs `python -m pytest -x -q -p no:cacheprovider <tests>` against the scratch tree,
4. restores the source and goes on with the next mutant.

Outcomes: KILLED (the tests failed), TIMEOUT (they ran past --timeout; counted as killed),
SURVIVED (they passed: the tests miss that bug), INVALID (the mutant does not compile; not
counted), STALE (the snippet no longer occurs exactly once in the file, as after a refactoring,
or a test file it names is gone: reported loudly and skipped, not counted), ERROR (pytest
collected no test: fix the mutant's `tests`; or the build compiled nothing after the change, so
the extension would not hold the mutant; not counted).

Kill rate = killed / (killed + survived), timeouts counted as killed. The exit status is 1 when
the rate is below --min-rate (or when no mutant could be judged), 0 otherwise.

    python tools/mutate.py --list                 # the mutants, and which are stale
    python tools/mutate.py                        # all of them
    python tools/mutate.py --only dlpack-readonly-flag,dtype-int16-code --keep

Standard library only (tomllib: Python >= 3.11).
"""

from __future__ import annotations

import argparse
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    sys.exit("tools/mutate.py needs Python 3.11 or later (tomllib)")

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MUTANTS = ROOT / "tools" / "mutants.toml"
# Build outputs that the extension's incremental build does not use (and that are large).
SKIPPED_BUILD_FOLDERS = {"sanitize", "fuzz"}
# The builds and test runs under way (each in a process group of its own), ended on Ctrl-C.
RUNNING: set[subprocess.Popen] = set()
RUNNING_LOCK = threading.Lock()


@dataclass
class Mutant:
    id: str
    file: str
    description: str
    original: str
    replacement: str
    tests: list[str]
    timeout: float | None = None


@dataclass
class Result:
    mutant: Mutant
    status: str  # KILLED, TIMEOUT, SURVIVED, INVALID, STALE, ERROR
    build_s: float = 0.0
    test_s: float = 0.0
    detail: str = ""


# --- the mutant list ----------------------------------------------------------------------------


def load_mutants(path: Path) -> list[Mutant]:
    with open(path, "rb") as f:
        data = tomllib.load(f)
    mutants, seen = [], set()
    for i, entry in enumerate(data.get("mutant", [])):
        missing = [k for k in ("id", "file", "description", "original", "replacement", "tests") if k not in entry]
        if missing:
            sys.exit(f"{path}: mutant #{i + 1} ({entry.get('id', 'no id')}) lacks {', '.join(missing)}")
        unknown = set(entry) - set(Mutant.__dataclass_fields__)
        if unknown:
            sys.exit(f"{path}: mutant {entry['id']!r}: unknown key(s) {', '.join(sorted(unknown))}")
        if entry["id"] in seen:
            sys.exit(f"{path}: mutant id {entry['id']!r} appears twice")
        if not entry["file"].startswith("csrc/"):
            sys.exit(f"{path}: mutant {entry['id']!r}: file {entry['file']!r} is not under csrc/")
        if entry["original"] == entry["replacement"]:
            sys.exit(f"{path}: mutant {entry['id']!r}: the replacement equals the original")
        seen.add(entry["id"])
        mutants.append(Mutant(**{k: entry[k] for k in Mutant.__dataclass_fields__ if k in entry}))
    return mutants


def staleness(root: Path, m: Mutant) -> str | None:
    """Why the mutant cannot be applied in root, or None when its snippet occurs exactly once."""
    path = root / m.file
    if not path.is_file():
        moved = sorted(str(p.relative_to(root)) for p in (root / "csrc").rglob(path.name))
        return f"{m.file} does not exist" + (f" (moved to {' or '.join(moved)}? update `file`)" if moved else "")
    count = path.read_text(encoding="utf-8").count(m.original)
    if count != 1:
        return f"the snippet occurs {count} times in {m.file} (must be exactly once)"
    missing = [t for t in m.tests if not (root / t.split("::")[0]).exists()]
    if missing:
        return f"test file(s) {', '.join(missing)} do not exist"
    return None


# --- the scratch tree ---------------------------------------------------------------------------


def tracked_files(root: Path) -> list[str]:
    out = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], check=True, capture_output=True).stdout
    return [p for p in out.decode().split("\0") if p]


def rewrite_keeping_time(path: Path, old: str, new: str) -> None:
    """Replaces old by new in path and gives it back its modification time (so the build does not
    take it for a change)."""
    text = path.read_text(encoding="utf-8")
    if old not in text:
        return
    stat = path.stat()
    path.write_text(text.replace(old, new), encoding="utf-8")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def make_scratch(root: Path) -> Path:
    """A copy of root's tracked files (as they are in its work tree), its build folder and its
    built extension, modification times kept so that the first build there compiles nothing."""
    scratch = Path(tempfile.mkdtemp(prefix="halide_buffer-mutate-")).resolve()  # as setup.py names it
    for rel in tracked_files(root):
        src = root / rel
        if not src.is_file():  # deleted in the work tree, or a submodule
            continue
        dst = scratch / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
    build = root / "build"
    if build.is_dir():
        for child in build.iterdir():
            if child.name in SKIPPED_BUILD_FOLDERS:
                continue
            if child.is_dir():
                shutil.copytree(child, scratch / "build" / child.name, symlinks=True)
            else:
                (scratch / "build").mkdir(exist_ok=True)
                shutil.copy2(child, scratch / "build" / child.name)
    for ext in (root / "halide_buffer").glob("_core*.so"):
        shutil.copy2(ext, scratch / "halide_buffer" / ext.name)
    # The generated unity units of the bindings include their sources by absolute path, and their
    # dependency files name them so (the tree they were built in, which may not even be root's
    # when its build folder was copied from elsewhere): point both at the scratch tree, times
    # kept. Else the build would never look at those sources again.
    for unity in scratch.glob("build/temp.*/unity"):
        for f in [*unity.glob("*.cpp"), *unity.glob("*.d")]:
            text = f.read_text(encoding="utf-8")
            roots = {m.group(1) for m in re.finditer(r'(/[^\s"]*)/csrc/[\w.+-]+\.(?:cpp|h)\b', text)}
            for old_root in roots - {str(scratch)}:
                rewrite_keeping_time(f, old_root + "/", str(scratch) + "/")
    return scratch


def environment(scratch: Path, jobs: int) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(scratch), *filter(None, [env.get("PYTHONPATH")])])
    if jobs > 1:  # the jobs share the cores: one compile each unless told otherwise
        env.setdefault("HALIDE_BUFFER_BUILD_JOBS", "1")
    return env


def run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float | None) -> tuple[int | None, str, float]:
    """(exit status or None on timeout, output, seconds). On timeout the whole process group goes."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    with RUNNING_LOCK:
        RUNNING.add(proc)
    try:
        out, _ = proc.communicate(timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out, _ = proc.communicate()
        rc = None
    finally:
        with RUNNING_LOCK:
            RUNNING.discard(proc)
    return rc, out.decode(errors="replace"), time.monotonic() - start


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def build(scratch: Path, env: dict[str, str], timeout: float) -> tuple[int | None, str, float]:
    return run([sys.executable, "setup.py", "build_ext", "--inplace"], scratch, env, timeout)


def units_compiled(build_output: str) -> int:
    """How many translation units the build compiled (setup.py says so when it builds at all)."""
    found = re.search(r"compiling (\d+) of \d+ translation units", build_output)
    return int(found.group(1)) if found else 0


class Worker:
    """One scratch tree, used for one mutant after another."""

    def __init__(self, root: Path, jobs: int, build_timeout: float):
        self.scratch = make_scratch(root)
        try:
            self.env = environment(self.scratch, jobs)
            self.build_timeout = build_timeout
            rc, out, secs = build(self.scratch, self.env, build_timeout)
            if rc != 0:
                raise RuntimeError(f"the unmutated scratch tree does not build:\n{tail(out)}")
            self.setup_note = (f"{self.scratch}; first build {secs:.1f} s, {units_compiled(out)} units compiled"
                               " (0 when the checkout's build is up to date)")
            check = "import halide_buffer, sys; sys.stdout.write(halide_buffer.__file__)"
            rc, out, _ = run([sys.executable, "-c", check], self.scratch, self.env, 120)
            if rc != 0 or not Path(out.strip()).resolve().is_relative_to(self.scratch.resolve()):
                raise RuntimeError(f"halide_buffer in the scratch tree imports from elsewhere: {out.strip()}")
        except BaseException:
            shutil.rmtree(self.scratch, ignore_errors=True)
            raise

    def judge(self, m: Mutant, test_timeout: float) -> Result:
        why = staleness(self.scratch, m)
        if why:
            return Result(m, "STALE", detail=why)
        path = self.scratch / m.file
        original = path.read_bytes()
        try:
            path.write_text(original.decode("utf-8").replace(m.original, m.replacement), encoding="utf-8")
            rc, out, build_s = build(self.scratch, self.env, self.build_timeout)
            if rc != 0:
                return Result(m, "INVALID", build_s, detail=first_error(out) if rc is not None else "build timed out")
            if not units_compiled(out):  # the mutant is not in the extension: its tests would prove nothing
                return Result(m, "ERROR", build_s, detail=f"the build compiled nothing after {m.file} changed")
            cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *m.tests]
            rc, out, test_s = run(cmd, self.scratch, self.env, m.timeout or test_timeout)
            if rc is None:
                return Result(m, "TIMEOUT", build_s, test_s, f"tests ran past {m.timeout or test_timeout:.0f} s")
            if rc == 0:
                return Result(m, "SURVIVED", build_s, test_s, last_line(out))
            if rc == 5:  # nothing was collected: the list names no test
                return Result(m, "ERROR", build_s, test_s, f"no tests ran: {last_line(out)}")
            # Failed tests (1), collection or conftest errors (2, 4), a crash (negative): noticed.
            return Result(m, "KILLED", build_s, test_s, first_failure(out) if rc == 1 else
                          f"pytest exit status {rc}: {first_failure(out)}")
        finally:
            path.write_bytes(original)  # newer than the mutant's object: the next build recompiles it

    def close(self, keep: bool) -> None:
        if keep:
            print(f"kept the scratch tree: {self.scratch} (its sources are restored; its extension is the last "
                  f"mutant's build until `python setup.py build_ext --inplace` runs there)")
        else:
            shutil.rmtree(self.scratch, ignore_errors=True)


# --- output -------------------------------------------------------------------------------------


def tail(text: str, lines: int = 20) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1].strip("= ") if lines else ""


def first_failure(text: str) -> str:
    for line in text.splitlines():
        if line.startswith(("FAILED ", "ERROR ")):
            return line
    return last_line(text)


def first_error(text: str) -> str:
    for line in text.splitlines():
        if "error:" in line:
            return line.strip()
    return last_line(text)


def clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def print_table(results: list[Result]) -> None:
    rows = [("id", "file", "outcome", "build s", "tests s", "detail")]
    for r in results:
        rows.append((r.mutant.id, r.mutant.file, r.status, f"{r.build_s:.1f}", f"{r.test_s:.1f}", clip(r.detail, 90)))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    for n, row in enumerate(rows):
        print("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:5])) + "  " + row[5])
        if n == 0:
            print("  ".join("-" * w for w in widths) + "  ------")


def list_mutants(root: Path, mutants: list[Mutant]) -> int:
    for m in mutants:
        why = staleness(root, m)
        print(f"{m.id}  [{m.file}]  {'STALE: ' + why if why else 'ok'}")
        print(f"    {m.description}")
        print(f"    tests: {' '.join(m.tests)}")
    stale = sum(staleness(root, m) is not None for m in mutants)
    print(f"{len(mutants)} mutants, {stale} stale")
    return 0


# --- main ---------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", metavar="ID[,ID...]", help="run only these mutants")
    p.add_argument("--list", action="store_true", help="list the mutants (and which are stale) and exit")
    p.add_argument("--min-rate", type=float, default=0.9,
                   help="exit with status 1 when the kill rate is below this (default 0.9)")
    p.add_argument("--jobs", type=int, default=1, help="mutants judged at once, each in its own scratch tree "
                                                       "(default 1)")
    p.add_argument("--keep", action="store_true", help="keep the scratch tree(s) for debugging")
    p.add_argument("--timeout", type=float, default=600,
                   help="seconds a mutant's tests may run before it counts as TIMEOUT (default 600; a "
                        "mutant's own `timeout` wins)")
    p.add_argument("--build-timeout", type=float, default=900, help="seconds a build may take (default 900)")
    p.add_argument("--mutants", type=Path, default=DEFAULT_MUTANTS,
                   help="the mutant list (default tools/mutants.toml)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    mutants = load_mutants(args.mutants)
    if args.only:
        wanted = [i.strip() for i in args.only.split(",") if i.strip()]
        known = {m.id for m in mutants}
        unknown = [i for i in wanted if i not in known]
        if unknown:
            print(f"unknown mutant id(s): {', '.join(unknown)} (see --list)", file=sys.stderr)
            return 2
        mutants = [m for m in mutants if m.id in wanted]
    if args.list:
        return list_mutants(ROOT, mutants)

    results: dict[str, Result] = {}
    runnable = []
    for m in mutants:  # stale ones are known before any copying: reported at once, loudly
        why = staleness(ROOT, m)
        if why:
            print(f"STALE  {m.id}: {why}; update or remove it in {args.mutants.name}", file=sys.stderr)
            results[m.id] = Result(m, "STALE", detail=why)
        else:
            runnable.append(m)

    todo: queue.Queue[Mutant] = queue.Queue()
    for m in runnable:
        todo.put(m)
    lock = threading.Lock()
    done = [0]
    failures: list[str] = []

    finished = threading.Semaphore(0)  # released by each worker as it ends
    stop = threading.Event()  # set on Ctrl-C: the outcome under way is not one

    def work() -> None:
        try:
            judge_all()
        finally:
            finished.release()

    def judge_all() -> None:
        try:
            worker = Worker(ROOT, args.jobs, args.build_timeout)
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            with lock:
                failures.append(str(e))
            return
        with lock:
            print(f"scratch tree ready ({worker.setup_note})", flush=True)
        try:
            while True:
                try:
                    m = todo.get_nowait()
                except queue.Empty:
                    return
                r = worker.judge(m, args.timeout)
                if stop.is_set():
                    return
                with lock:
                    results[m.id] = r
                    done[0] += 1
                    print(f"[{done[0]}/{len(runnable)}] {r.status:8} {m.id}  (build {r.build_s:.1f} s, "
                          f"tests {r.test_s:.1f} s)  {clip(r.detail, 100)}", flush=True)
        finally:
            worker.close(args.keep)

    start = time.monotonic()
    threads = [threading.Thread(target=work, daemon=True) for _ in range(min(max(1, args.jobs), len(runnable)))]
    ended = 0
    try:
        for t in threads:
            t.start()
        while ended < len(threads):
            if finished.acquire(timeout=0.5):
                ended += 1
    except KeyboardInterrupt:
        stop.set()
        while not todo.empty():  # no worker starts another mutant
            todo.get_nowait()
        with RUNNING_LOCK:
            for proc in RUNNING:
                kill_group(proc)
        # Each worker restores its source and removes its scratch tree (unless --keep).
        while ended < len(threads) and finished.acquire(timeout=60):
            ended += 1
        print("interrupted", file=sys.stderr)
        return 130
    for f in failures:
        print(f"error: {f}", file=sys.stderr)
    if any(m.id not in results for m in runnable):
        print("error: not every mutant was judged", file=sys.stderr)
        return 2

    ordered = [results[m.id] for m in mutants if m.id in results]
    print()
    print_table(ordered)
    count = {s: sum(r.status == s for r in ordered)
             for s in ("KILLED", "TIMEOUT", "SURVIVED", "INVALID", "STALE", "ERROR")}
    killed = count["KILLED"] + count["TIMEOUT"]
    judged = killed + count["SURVIVED"]
    print()
    print(f"{len(ordered)} mutants: {count['KILLED']} killed, {count['TIMEOUT']} timed out (counted as killed), "
          f"{count['SURVIVED']} survived, {count['INVALID']} invalid, {count['STALE']} stale, {count['ERROR']} error; "
          f"{time.monotonic() - start:.0f} s")
    if count["STALE"]:
        print(f"WARNING: {count['STALE']} stale mutant(s): their snippets no longer match the sources; "
              f"update them in {args.mutants.name}", file=sys.stderr)
    if not judged:
        print("kill rate: undefined (no mutant was killed or survived)")
        return 1
    rate = killed / judged
    print(f"kill rate: {killed}/{judged} = {rate:.0%} (minimum {args.min_rate:.0%})")
    return 0 if rate >= args.min_rate else 1


if __name__ == "__main__":
    sys.exit(main())
