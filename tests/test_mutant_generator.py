"""tools/mutant_generator.py: each operator makes the mutants it promises, never inside a string,
a comment or a preprocessor line, and a mutant's id stays the same while its line does.
tools/mutate.py: a mutant counts as killed only when a test judged it, never when its tests' fixtures
did not start."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
import mutant_generator as g  # noqa: E402
import mutate  # noqa: E402

CPP = """\
#include "a < b.h"
// if (x == y) return 1;
int f(int *a, int n, bool ok) {
    if (n == 0) return -1;
    const char *s = "a < b && c";
    count += 1;
    set_dirty(a);
    return ok && a[n] < 3 ? 1 : 0;  // x > y
}
"""

PY = '''\
def f(a, n):
    """if n == 0: return"""
    if n is None:
        raise ValueError("n < 0 or n > 1")  # a == b
    total = n + 1
    return not a or n > 2
'''


def mutants(tmp_path, name, text):
    (tmp_path / name).write_text(text)
    return g.generate(tmp_path, name)


def changes(ms, operator):
    return sorted((m.line, m.replacement.strip()) for m in ms if m.operator == operator)


def test_cpp_operators_make_their_mutants_and_only_in_code(tmp_path):
    ms = mutants(tmp_path, "a.cpp", CPP)
    assert {m.line for m in ms} <= {3, 4, 6, 7, 8}  # never the #include, the comment or the string's line
    assert all(m.original == CPP.splitlines()[m.line - 1] for m in ms)
    assert changes(ms, "cmp") == [(4, "if (n != 0) return -1;"),
                                  (8, "return ok && a[n] <= 3 ? 1 : 0;  // x > y")]
    assert changes(ms, "logic") == [(8, "return ok || a[n] < 3 ? 1 : 0;  // x > y")]
    assert changes(ms, "neg") == [(4, "if (n == 0) return 1;")]
    assert (4, "if (!(n == 0)) return -1;") in changes(ms, "ret")
    assert changes(ms, "index") == [(8, "return ok && a[n + 1] < 3 ? 1 : 0;  // x > y")]
    assert changes(ms, "delete") == [(6, ";"), (7, ";")]
    assert changes(ms, "arith") == [(6, "count -= 1;")]
    assert (8, "return ok && a[n] < 4 ? 1 : 0;  // x > y") in changes(ms, "one")


def test_python_operators_make_their_mutants_and_only_in_code(tmp_path):
    ms = mutants(tmp_path, "a.py", PY)
    assert 2 not in {m.line for m in ms}  # the docstring
    assert changes(ms, "cmp") == [(3, "if n is not None:"), (6, "return not a or n >= 2")]
    assert changes(ms, "logic") == [(6, "return not a and n > 2")]
    assert changes(ms, "not") == [(6, "return a or n > 2")]
    assert changes(ms, "ret") == [(3, "if not (n is None):")]
    assert changes(ms, "delete") == [(5, "pass")]
    assert changes(ms, "arith") == [(5, "total = n - 1")]
    assert [m.replacement[:4] for m in ms if m.operator == "delete"] == ["    "]  # indentation kept


def test_ids_follow_the_line_not_its_number(tmp_path):
    before = {m.id: m.replacement for m in mutants(tmp_path, "a.cpp", CPP)}
    after = {m.id: m.replacement for m in mutants(tmp_path, "a.cpp", "// a new first line\n" + CPP)}
    assert before == after and len(before) == len(set(before))


def test_files_of_other_languages_are_refused(tmp_path):
    (tmp_path / "a.txt").write_text("a < b\n")
    with pytest.raises(ValueError, match="C\\+\\+ or Python only"):
        g.generate(tmp_path, "a.txt")


def test_every_recorded_equivalent_is_a_mutant_the_generator_still_makes():
    # An equivalent whose line moved to another file or changed is a stale record: its reason no
    # longer speaks of any mutant, and the mutant that replaced it is judged afresh.
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    areas = tomllib.loads((root / "tools" / "mutation_areas.toml").read_text())
    made = {m.id for area in areas["area"] for f in area["files"] for m in g.generate(root, f)}
    stale = [e["id"] for e in areas["equivalent"] if e["id"] not in made]
    assert stale == [], f"tools/mutation_areas.toml: equivalents no generated mutant has: {stale}"


# --- tools/mutate.py: what a mutant's test run says -----------------------------------------------

# The module a fake mutant changes: `value()` returns 2 instead of 1, or the import itself fails.
MODULE = """\
LIMIT = 1


def value():
    return 1
"""
WRONG_VALUE = (5, "    return 2")
IMPORT_FAILS = (1, "raise ImportError('the extension did not load')")

NO_CLUSTER = """
@pytest.fixture
def cluster():
    raise TimeoutError("the cluster's workers did not start in time")
"""
# Starts at the second try only: a cluster that timed out under load once.
CLUSTER_ON_SECOND_TRY = """
@pytest.fixture
def cluster():
    tried = pathlib.Path(__file__).with_name("tried")
    if not tried.exists():
        tried.write_text("")
        raise TimeoutError("the cluster's workers did not start in time")
"""
CHECKED_AFTER = """
@pytest.fixture
def leak_check():
    yield
    pytest.fail("a device allocation is left alive")
"""


@pytest.fixture
def judge(tmp_path, monkeypatch):
    """Judges a mutant of MODULE with one test file, as tools/mutate.py does, in a tree needing no build."""
    monkeypatch.setattr(mutate, "build", lambda *_: (0, "", 0.0))
    worker = mutate.Worker.__new__(mutate.Worker)  # its scratch tree is tmp_path, made here
    worker.scratch, worker.env, worker.build_timeout = tmp_path, dict(os.environ), 60

    def judge(tests, mutation):
        (tmp_path / "mod.py").write_text(MODULE)
        (tmp_path / "test_mod.py").write_text("import pathlib\n\nimport pytest\n\nimport mod\n" + tests)
        (tmp_path / "tried").unlink(missing_ok=True)
        line, replacement = mutation
        m = mutate.Mutant(id="mod.py:fake", file="mod.py", description="", original=MODULE.splitlines()[line - 1],
                          replacement=replacement, tests=["test_mod.py"], line=line, operator="one")
        result = worker.judge(m, 60)
        assert (tmp_path / "mod.py").read_text() == MODULE  # the source is restored
        return result

    return judge


def test_a_failed_test_kills_the_mutant(judge):
    r = judge("def test_value():\n    assert mod.value() == 1\n", WRONG_VALUE)
    assert r.status == "KILLED" and "test_value" in r.detail


def test_errors_at_setup_only_are_an_error_not_a_kill(judge):
    r = judge(NO_CLUSTER + "def test_value(cluster):\n    assert mod.value() == 1\n", WRONG_VALUE)
    assert (r.status, r.unjudged) == ("ERROR", True)
    assert "errors at setup only, twice" in r.detail and "TimeoutError" in r.detail


def test_a_fixture_that_starts_at_the_second_try_judges_the_mutant(judge):
    r = judge(CLUSTER_ON_SECOND_TRY + "def test_value(cluster):\n    assert mod.value() == 1\n", WRONG_VALUE)
    assert (r.status, r.unjudged) == ("KILLED", False)
    r = judge(CLUSTER_ON_SECOND_TRY + "def test_limit(cluster):\n    assert mod.LIMIT == 1\n", WRONG_VALUE)
    assert r.status == "SURVIVED"


def test_the_second_try_runs_the_tests_after_the_error_too(judge):
    # -x stops the first run at the fixture's error; the tests after it judge the mutant on the second.
    r = judge(NO_CLUSTER + "def test_with_cluster(cluster):\n    pass\n\n\n"
                           "def test_value():\n    assert mod.value() == 1\n", WRONG_VALUE)
    assert r.status == "KILLED" and "test_value" in r.detail


def test_an_error_at_teardown_is_a_check_that_kills(judge):
    r = judge(CHECKED_AFTER + "def test_value(leak_check):\n    mod.value()\n", WRONG_VALUE)
    assert r.status == "KILLED"


def test_an_import_the_mutant_broke_kills_it(judge):
    r = judge("def test_value():\n    assert mod.value() == 1\n", IMPORT_FAILS)
    assert r.status == "KILLED" and "exit status 2" in r.detail


def test_no_report_is_no_setup_error(tmp_path):
    # pytest crashed before writing its report: the exit status decides, as before.
    assert not mutate.errors_at_setup_only(tmp_path / "missing.xml")
    (tmp_path / "cut.xml").write_text("<testsuites><testsuite><testcase><error message='failed on setup")
    assert not mutate.errors_at_setup_only(tmp_path / "cut.xml")
