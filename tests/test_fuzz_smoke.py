"""The fuzz harnesses of tests/fuzz/, a few seconds each: their seed corpus, then a fixed number
of new inputs from a fixed seed, with a fixed hash seed: the same inputs on every run, however
loaded the machine. A crash, a sanitizer report (under tools/sanitize.sh, which this inherits),
an internal error or a check that fails makes the test fail with the harness's report.

HALIDE_BUFFER_FUZZ_KNOWN, when set, passes through: bugs of the kinds it names are stepped
over (see each harness's docstring). Longer runs: see docs/contributing.md.
"""

import importlib.util
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RUNS = 20_000  # per harness: 3 to 7 seconds each (about twice that under the sanitizers)
HANG = 240  # seconds: a bound on a hang, never reached by a run that works

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("atheris") is None,
    reason="atheris is not installed (python -m pip install atheris, or the test extra): the fuzz harnesses need it")


@pytest.mark.parametrize("name", ["dlpack", "from_host", "aot"])
def test_harness_runs_clean(name, tmp_path):
    harness = os.path.join(HERE, "fuzz", f"fuzz_{name}.py")
    corpus = os.path.join(HERE, "fuzz", "corpus", name)
    assert os.listdir(corpus), f"{corpus} has no seed inputs"
    new = tmp_path / "new"  # new inputs go here, not into the committed corpus
    new.mkdir()
    # -rss_limit_mb=0: a child's peak RSS starts at its parent's (pytest's, with PyTorch and JAX
    # loaded), which libFuzzer would take for its own. -keep_seed=1: under tools/sanitize.sh
    # atheris has no coverage feedback, and mutates the seeds only if it keeps them.
    command = [sys.executable, harness, f"-runs={RUNS}", "-seed=1", "-rss_limit_mb=0",
               "-keep_seed=1", "-print_final_stats=1", f"-artifact_prefix={tmp_path}/", str(new), corpus]
    env = {**os.environ, "PYTHONHASHSEED": "0"}  # the harness's Python-side choices repeat too
    run = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=HANG)
    output = run.stdout + run.stderr
    crashes = sorted(p.name for p in tmp_path.iterdir() if p.name != "new")
    assert run.returncode == 0 and not crashes, (
        f"{' '.join(command)} exited {run.returncode}, inputs saved: {crashes}\n{output[-6000:]}")
    assert "Done" in output and "stat::number_of_executed_units" in output, output[-3000:]
