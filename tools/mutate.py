#!/usr/bin/env python3
"""Mutation testing: does the test suite notice a small bug in csrc/ or halide_buffer/?

Two kinds of mutants. Generated ones (--generate; tools/mutant_generator.py): every operator over
every line of the files of tools/mutation_areas.toml, a seeded random sample judged by the test
files that table names for each file; the measure of the suite's strength. Listed ones
(tools/mutants.toml): each replaces one exact snippet of a source file (a bug once found, or a rule
that matters) and names the test files that should catch it. For each selected mutant this script

1. copies the repository's tracked files, its build folder and its built extension into a scratch
   tree (once per job; the checkout it is run from is only read, never written),
2. applies the mutant there and rebuilds in place (`setup.py build_ext --inplace`, incremental:
   only the units the edit touched compile again),
3. runs `python -m pytest -x -q -p no:cacheprovider <tests>` against the scratch tree, with a
   JUnit XML report that tells a failed test from an error at the setup of one, under the suite's
   quick hypothesis profile (the property tests' `quick` counts, as the README's command runs
   them) unless --profile ci asks for CI's counts,
4. restores the source and goes on with the next mutant.

Outcomes: KILLED (a test failed, or pytest stopped otherwise: a collection error, a crash),
TIMEOUT (the tests ran past --timeout; counted as killed), SURVIVED (they passed: the tests miss
that bug), INVALID (the mutant does not compile; not counted), STALE (the snippet no longer
occurs exactly once in the file, as after a refactoring, or a test file it names is gone:
reported loudly and skipped, not counted), ERROR (not counted: pytest collected no test, fix the
mutant's `tests`; or the tests ended with errors at setup only, twice, the second time without
-x: a fixture that did not start, such as a cluster of worker processes timing out under load,
judges nothing, so the mutant is reported loudly and the exit status is 1; or an object
including the mutated file did not recompile, so the extension would not hold the mutant: exit
status 2), EQUIVALENT (a generated mutant tools/mutation_areas.toml lists as unable to change
behaviour, with its reason: not run, not counted). Each list of tests first runs on the
unmutated tree and must pass.

Kill rate = killed / (killed + survived), timeouts counted as killed. The exit status is 1 when
the rate is below --min-rate, when no mutant could be judged or when a mutant's tests could not
start (errors at setup), 0 otherwise.

    python tools/mutate.py --generate --sample 170 --seed 2026 --jobs 2
    python tools/mutate.py --list                 # the mutants, and which are stale
    python tools/mutate.py                        # all of them
    python tools/mutate.py --only dlpack-readonly-flag,dtype-int16-code --keep

Standard library only (tomllib: Python >= 3.11).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mutant_generator  # noqa: E402 (beside this script)

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    sys.exit("tools/mutate.py needs Python 3.11 or later (tomllib)")

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MUTANTS = ROOT / "tools" / "mutants.toml"
DEFAULT_AREAS = ROOT / "tools" / "mutation_areas.toml"
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
    line: int | None = None  # generated mutants replace this whole line (1-based), whose text is `original`
    operator: str = "hand"  # generated mutants: the operator (tools/mutant_generator.py)


@dataclass
class Result:
    mutant: Mutant
    status: str  # KILLED, TIMEOUT, SURVIVED, INVALID, STALE, ERROR, EQUIVALENT
    build_s: float = 0.0
    test_s: float = 0.0
    detail: str = ""
    loud: bool = False  # an ERROR that means the tool itself is broken (a unit did not recompile)
    unjudged: bool = False  # an ERROR of tests that could not start (errors at setup only, twice)


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


def load_areas(path: Path) -> tuple[dict[str, list[str]], dict[str, str]]:
    """({source file: its test files}, {equivalent mutant id: reason}) from tools/mutation_areas.toml."""
    with open(path, "rb") as f:
        data = tomllib.load(f)
    tests: dict[str, list[str]] = {}
    for area in data.get("area", []):
        for file in area["files"]:
            if file in tests:
                sys.exit(f"{path}: {file} is in two areas")
            tests[file] = list(area["tests"])
    equivalent = {}
    for entry in data.get("equivalent", []):
        if not entry.get("reason", "").strip():
            sys.exit(f"{path}: equivalent mutant {entry.get('id')!r} has no reason")
        equivalent[entry["id"]] = entry["reason"]
    return tests, equivalent


def generated_mutants(root: Path, tests: dict[str, list[str]], files: list[str]) -> list[Mutant]:
    """Every mutant of every operator over the whole of each file (tools/mutant_generator.py)."""
    out = []
    for file in files:
        if file not in tests:
            sys.exit(f"{file}: no area of {DEFAULT_AREAS.name} names its tests; add it to one")
        for g in mutant_generator.generate(root, file):
            out.append(Mutant(id=g.id, file=g.file, description=f"line {g.line}: {g.operator}", original=g.original,
                              replacement=g.replacement, tests=tests[file], line=g.line, operator=g.operator))
    return out


def staleness(root: Path, m: Mutant) -> str | None:
    """Why the mutant cannot be applied in root, or None when its snippet occurs exactly once."""
    path = root / m.file
    if not path.is_file():
        moved = sorted(str(p.relative_to(root)) for p in (root / "csrc").rglob(path.name))
        return f"{m.file} does not exist" + (f" (moved to {' or '.join(moved)}? update `file`)" if moved else "")
    text = path.read_text(encoding="utf-8")
    if m.line is not None:
        lines = text.splitlines()
        if m.line > len(lines) or lines[m.line - 1] != m.original:
            return f"line {m.line} of {m.file} is no longer the mutant's original"
    elif text.count(m.original) != 1:
        return f"the snippet occurs {text.count(m.original)} times in {m.file} (must be exactly once)"
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
            # Sources sit one folder down (csrc/<layer>/file): the root is what comes before csrc/.
            roots = {m.group(1) for m in re.finditer(r'(/[^\s"]*?)/csrc/(?:[\w.+-]+/)*[\w.+-]+\.(?:cpp|h)\b', text)}
            for old_root in roots - {str(scratch)}:
                rewrite_keeping_time(f, old_root + "/", str(scratch) + "/")
    return scratch


# The hypothesis profiles of tests/conftest.py a mutant may be judged with: "quick" (the default,
# as the README's command runs the suite) and "ci" (the property tests at CI's counts).
PROFILES = ("quick", "ci")


def environment(scratch: Path, jobs: int, profile: str = "quick") -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(scratch), *filter(None, [env.get("PYTHONPATH")])])
    env["HYPOTHESIS_PROFILE"] = profile  # the tool's choice, whatever the shell had set
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


def mutated(text: str, m: Mutant) -> str:
    """The file's text with the mutant applied: its line replaced, or its snippet."""
    if m.line is None:
        return text.replace(m.original, m.replacement)
    lines = text.splitlines(keepends=True)
    ending = lines[m.line - 1][len(m.original):]
    lines[m.line - 1] = m.replacement + ending
    return "".join(lines)


def objects_including(scratch: Path, file: str) -> list[Path]:
    """The build's objects whose gcc dependency file names file (a source or a header)."""
    target = (scratch / file).resolve()
    found = []
    for dep in scratch.glob("build/temp.*/**/*.d"):
        text = dep.read_text(encoding="utf-8").replace("\\\n", " ")
        for name in text.partition(": ")[2].split():
            p = Path(name)
            if (p if p.is_absolute() else scratch / p).resolve() == target:
                found.append(dep.with_suffix(".o"))
                break
    return found


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


def pytest_command(tests: list[str], *options: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", *options, *tests]


def errors_at_setup_only(report: Path) -> bool:
    """Whether pytest's JUnit XML report holds errors at the setup of tests and nothing else that
    failed: a fixture that did not start (a cluster timing out, a pipeline that did not compile),
    so no test ran against the mutant. A failure, an error at teardown (a check after the test,
    such as the CUDA stand-in's strict mode) or a collection error (an import the mutant broke)
    each judged it. No report (pytest crashed) is not this case either."""
    try:
        cases = ET.parse(report).getroot().iter("testcase")
        at_setup = other = 0
        for case in cases:
            for child in case:
                if child.tag == "error" and child.get("message", "").startswith("failed on setup"):
                    at_setup += 1
                elif child.tag in ("failure", "error"):
                    other += 1
    except (OSError, ET.ParseError):
        return False
    return at_setup > 0 and other == 0


def tests_outcome(rc: int | None, report: Path) -> str:
    """What one run of a mutant's tests says: TIMEOUT, SURVIVED, NO TESTS, SETUP ERROR (errors at
    setup only, nothing judged) or KILLED (a failed test; a collection error, which is an import
    the mutant broke; a crash)."""
    if rc is None:
        return "TIMEOUT"
    if rc == 0:
        return "SURVIVED"
    if rc == 5:  # nothing was collected: the list names no test
        return "NO TESTS"
    if rc == 1 and errors_at_setup_only(report):
        return "SETUP ERROR"
    return "KILLED"


class Worker:
    """One scratch tree, used for one mutant after another."""

    def __init__(self, root: Path, jobs: int, build_timeout: float, profile: str = "quick"):
        self.scratch = make_scratch(root)
        try:
            self.env = environment(self.scratch, jobs, profile)
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
            path.write_text(mutated(original.decode("utf-8"), m), encoding="utf-8")
            if m.file.endswith(".py"):
                # Python runs from the scratch tree as it is, but the extension may still hold the last
                # C++ mutant (its source is restored, not yet rebuilt): build the unmutated one first.
                rc, out, build_s = build(self.scratch, self.env, self.build_timeout)
                if rc != 0:
                    return Result(m, "ERROR", build_s, detail=f"the unmutated extension does not build: "
                                                              f"{first_error(out)}", loud=True)
            else:
                objects = objects_including(self.scratch, m.file)
                if not objects:
                    return Result(m, "ERROR", detail=f"no object of the build includes {m.file}: the mutant "
                                                     "would not be in the extension")
                before = {o: o.stat().st_mtime_ns for o in objects}
                rc, out, build_s = build(self.scratch, self.env, self.build_timeout)
                if rc != 0:
                    return Result(m, "INVALID", build_s, detail=first_error(out) if rc is not None else "build timed out")
                stale = [o for o in objects if not o.exists() or o.stat().st_mtime_ns == before[o]]
                if stale:  # the mutant is not in the extension: its tests would prove nothing
                    return Result(m, "ERROR", build_s, detail=f"{', '.join(o.name for o in stale)} did not recompile "
                                                              f"after {m.file} changed", loud=True)
            timeout = m.timeout or test_timeout
            outcome, rc, out, test_s = self.test(m.tests, timeout, "-x")
            if outcome == "SETUP ERROR":
                # A fixture did not start (under load, a cluster may time out): judged once more, every
                # test running this time, so that the tests that do not need that fixture judge it too.
                outcome, rc, out, again_s = self.test(m.tests, timeout)
                test_s += again_s
            if outcome == "TIMEOUT":
                return Result(m, "TIMEOUT", build_s, test_s, f"tests ran past {timeout:.0f} s")
            if outcome == "SURVIVED":
                return Result(m, "SURVIVED", build_s, test_s, last_line(out))
            if outcome == "NO TESTS":
                return Result(m, "ERROR", build_s, test_s, f"no tests ran: {last_line(out)}")
            if outcome == "SETUP ERROR":
                return Result(m, "ERROR", build_s, test_s, f"errors at setup only, twice: no test judged it: "
                                                           f"{first_failure(out)}", unjudged=True)
            return Result(m, "KILLED", build_s, test_s, first_failure(out) if rc == 1 else
                          f"pytest exit status {rc}: {first_failure(out)}")
        finally:
            path.write_bytes(original)  # newer than the mutant's object: the next build recompiles it

    def test(self, tests: list[str], timeout: float, *options: str) -> tuple[str, int | None, str, float]:
        """(tests_outcome(), exit status, output, seconds) of one run of the tests in the scratch tree."""
        report = self.scratch / "build" / "mutate-junit.xml"
        report.unlink(missing_ok=True)  # a report left from the last run must not be read for this one
        rc, out, secs = run(pytest_command(tests, f"--junitxml={report}", *options), self.scratch, self.env, timeout)
        return tests_outcome(rc, report), rc, out, secs

    def baseline(self, tests: list[str], timeout: float) -> str | None:
        """None when the tests pass on the unmutated tree, else what failed."""
        rc, out, _ = run(pytest_command(tests, "-x"), self.scratch, self.env, timeout)
        return None if rc == 0 else ("timed out" if rc is None else first_failure(out))

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


def print_rates(results: list[Result]) -> None:
    """The kill rate of each file (killed, timed out, survived)."""
    files = sorted({r.mutant.file for r in results})
    if len(files) < 2:
        return
    print()
    width = max(len(f) for f in files)
    for f in files:
        mine = [r for r in results if r.mutant.file == f]
        killed = sum(r.status in ("KILLED", "TIMEOUT") for r in mine)
        judged = killed + sum(r.status == "SURVIVED" for r in mine)
        rate = f"{killed / judged:4.0%}" if judged else "   -"
        print(f"{f.ljust(width)}  {killed:3}/{judged:<3} {rate}")


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
    p.add_argument("--profile", choices=PROFILES, default="quick",
                   help="the hypothesis profile of tests/conftest.py the tests run with: quick (default: the "
                        "property tests' quick counts, as the README's command) or ci (CI's counts, slower)")
    p.add_argument("--mutants", type=Path, default=DEFAULT_MUTANTS,
                   help="the mutant list (default tools/mutants.toml)")
    g = p.add_argument_group("generated mutants (instead of the list)")
    g.add_argument("--generate", action="store_true",
                   help="generate mutants by operator over whole files (tools/mutant_generator.py)")
    g.add_argument("--files", nargs="+", metavar="FILE",
                   help="the files to mutate (default: every file of tools/mutation_areas.toml)")
    g.add_argument("--sample", type=int, metavar="N", help="judge N of them drawn at random (default: all)")
    g.add_argument("--seed", type=int, default=0, help="the sample's seed (default 0); printed with the report")
    p.add_argument("--report", metavar="FILE", type=Path,
                   help="write every outcome to FILE as JSON (id, file, line, operator, original, replacement, "
                        "status, detail)")
    g.add_argument("--ids", metavar="FILE", type=Path,
                   help="judge only the generated mutants whose ids FILE lists (one per line), e.g. a "
                        "sample's survivors again")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    equivalent: dict[str, str] = {}
    if args.generate:
        tests, equivalent = load_areas(DEFAULT_AREAS)
        mutants = generated_mutants(ROOT, tests, args.files or list(tests))
        print(f"{len(mutants)} mutants generated over {len(args.files or tests)} file(s)")
        if args.sample is not None and args.sample < len(mutants):
            mutants = random.Random(args.seed).sample(mutants, args.sample)
            print(f"a sample of {args.sample}, seed {args.seed}")
        if args.ids:
            wanted = set(args.ids.read_text().split())
            mutants = [m for m in mutants if m.id in wanted]
    else:
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

    print(f"hypothesis profile: {args.profile}"
          + (" (the property tests' quick counts; --profile ci for CI's)" if args.profile == "quick" else
             " (the property tests at CI's counts)"), flush=True)
    results: dict[str, Result] = {}
    runnable = []
    for m in mutants:  # stale ones are known before any copying: reported at once, loudly
        why = staleness(ROOT, m)
        if m.id in equivalent:
            results[m.id] = Result(m, "EQUIVALENT", detail=equivalent[m.id])
        elif why:
            print(f"STALE  {m.id}: {why}; update or remove it in {args.mutants.name}", file=sys.stderr)
            results[m.id] = Result(m, "STALE", detail=why)
        else:
            runnable.append(m)

    todo: queue.Queue[Mutant] = queue.Queue()
    for m in runnable:
        todo.put(m)
    lock = threading.Lock()
    baseline: dict[tuple[str, ...], str | None] = {}  # a list of tests: None when it passes unmutated
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
            worker = Worker(ROOT, args.jobs, args.build_timeout, args.profile)
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            with lock:
                failures.append(str(e))
            return
        with lock:
            print(f"scratch tree ready ({worker.setup_note})", flush=True)
            # Each list of tests must pass on the unmutated tree first, or every mutant would seem killed.
            for tests in sorted({tuple(m.tests) for m in runnable} - baseline.keys()):
                baseline[tests] = worker.baseline(list(tests), args.timeout)
                print(f"baseline {'passed' if baseline[tests] is None else 'FAILED'}: {' '.join(tests)}", flush=True)
            broken = {t: why for t, why in baseline.items() if why is not None}
        if broken:
            with lock:
                failures.extend(f"the unmutated tree fails {' '.join(t)}: {why}" for t, why in broken.items())
            stop.set()
            worker.close(args.keep)
            return
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
    if stop.is_set():
        return 2
    if any(m.id not in results for m in runnable):
        print("error: not every mutant was judged", file=sys.stderr)
        return 2

    ordered = [results[m.id] for m in mutants if m.id in results]
    print()
    print_table(ordered)
    count = {s: sum(r.status == s for r in ordered)
             for s in ("KILLED", "TIMEOUT", "SURVIVED", "INVALID", "STALE", "ERROR", "EQUIVALENT")}
    killed = count["KILLED"] + count["TIMEOUT"]
    judged = killed + count["SURVIVED"]
    print()
    print(f"{len(ordered)} mutants: {count['KILLED']} killed, {count['TIMEOUT']} timed out (counted as killed), "
          f"{count['SURVIVED']} survived, {count['INVALID']} invalid, {count['STALE']} stale, {count['ERROR']} error, "
          f"{count['EQUIVALENT']} equivalent; {time.monotonic() - start:.0f} s")
    print_rates(ordered)
    if args.report:
        args.report.write_text(json.dumps([{
            "id": r.mutant.id, "file": r.mutant.file, "line": r.mutant.line, "operator": r.mutant.operator,
            "original": r.mutant.original, "replacement": r.mutant.replacement, "status": r.status,
            "detail": r.detail} for r in ordered], indent=1) + "\n")
    if args.generate:
        print(f"seed {args.seed}, sample {args.sample if args.sample is not None else 'all'}")
    print(f"hypothesis profile: {args.profile}")
    if count["STALE"]:
        print(f"WARNING: {count['STALE']} stale mutant(s): their snippets no longer match the sources; "
              f"update them in {args.mutants.name}", file=sys.stderr)
    loud = [r for r in ordered if r.loud]
    if loud:
        for r in loud:
            print(f"error: {r.mutant.id}: {r.detail}", file=sys.stderr)
        print(f"error: {len(loud)} mutant(s) never reached the extension: this tool's rebuild is broken",
              file=sys.stderr)
        return 2
    unjudged = [r for r in ordered if r.unjudged]
    for r in unjudged:
        print(f"error: {r.mutant.id}: {r.detail}", file=sys.stderr)
    if unjudged:
        print(f"error: {len(unjudged)} mutant(s) judged by no test: their tests ended with errors at setup only "
              f"(a fixture that did not start), twice; not counted: judge them again (--ids, --only)", file=sys.stderr)
    if not judged:
        print("kill rate: undefined (no mutant was killed or survived)")
        return 1
    rate = killed / judged
    print(f"kill rate: {killed}/{judged} = {rate:.0%} (minimum {args.min_rate:.0%})")
    return 0 if rate >= args.min_rate and not unjudged else 1


if __name__ == "__main__":
    sys.exit(main())
