"""tools/mutant_generator.py: each operator makes the mutants it promises, never inside a string,
a comment or a preprocessor line, and a mutant's id stays the same while its line does."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
import mutant_generator as g  # noqa: E402

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
