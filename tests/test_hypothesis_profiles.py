"""The hypothesis profiles of tests/conftest.py: "quick" by default, "ci" for CI's counts, and who
picks which: the `examples` fixture (a property test's count under the loaded profile), CI's step
of its own for the counts the quick run leaves out, and tools/mutate.py (quick unless told)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import mutate  # noqa: E402


@pytest.fixture(params=["quick", "ci", "explore"])
def loaded_profile(request):
    """One of the suite's profiles loaded for the test, the one before loaded again after it."""
    before = settings.get_current_profile_name()
    settings.load_profile(request.param)
    yield request.param
    settings.load_profile(before)


def test_the_default_profile_is_quick_and_reproducible():
    assert settings.get_current_profile_name() == os.environ.get("HYPOTHESIS_PROFILE", "quick")
    for name in ("quick", "ci"):
        profile = settings.get_profile(name)
        assert profile.derandomize and profile.database is None, name
    assert not settings.get_profile("explore").derandomize


def test_the_profiles_do_not_depend_on_a_ci_environment():
    """Hypothesis loads a derandomized profile of its own wherever CI is set; the suite's profiles
    are the same there and here."""
    probe = ("import sys; sys.path.insert(0, 'tests'); import conftest; from hypothesis import settings; "
             "print([(n, settings.get_profile(n).derandomize, settings.get_profile(n).deadline) "
             "for n in conftest.PROFILES])")
    answers = []
    for ci in ("", "true"):
        env = {k: v for k, v in os.environ.items() if k not in ("CI", "HYPOTHESIS_PROFILE")}
        if ci:
            env["CI"] = ci
        done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        answers.append(done.stdout)
    assert answers[0] == answers[1]
    assert "timedelta" not in answers[0], "a profile has a deadline: " + answers[0]


@pytest.mark.examples(quick=3, ci=7)
def test_the_examples_fixture_gives_the_count_of_the_loaded_profile(loaded_profile, examples):
    assert examples == {"quick": 3, "ci": 7, "explore": 7}[loaded_profile]


def test_ci_runs_the_examples_at_cis_counts():
    """.ci/run has a step of its own for what the quick run leaves out: every test marked
    `examples` under HYPOTHESIS_PROFILE=ci."""
    script = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^[^#\n]*HYPOTHESIS_PROFILE=ci\b[^\n]*python -m pytest\b[^\n]* -m examples\b", script, re.M), \
        ".ci/run: no step runs `HYPOTHESIS_PROFILE=ci python -m pytest -m examples`"


def test_mutate_judges_with_the_quick_profile_unless_told(tmp_path, monkeypatch):
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "ci")  # the shell's choice does not leak into the judgement
    assert mutate.parse_args([]).profile == "quick"
    assert mutate.environment(tmp_path, 1)["HYPOTHESIS_PROFILE"] == "quick"
    args = mutate.parse_args(["--profile", "ci"])
    assert mutate.environment(tmp_path, 1, args.profile)["HYPOTHESIS_PROFILE"] == "ci"
    with pytest.raises(SystemExit):
        mutate.parse_args(["--profile", "explore"])  # not reproducible: no measure
