"""tools/mutation_areas.toml: every source file the mutant generator can mutate is in an area, so that
`tools/mutate.py --generate` measures the whole package, and every file an area names exists."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import mutant_generator  # noqa: E402
import mutate  # noqa: E402

SOURCE_FOLDERS = ("csrc", "halide_buffer")


def mutable_files() -> list[str]:
    """The files under csrc/ and halide_buffer/ the generator makes at least one mutant of (a header
    of declarations only, or `_version.py`, has no line an operator applies to)."""
    found = []
    for folder in SOURCE_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*")):
            rel = path.relative_to(ROOT).as_posix()
            if path.is_file() and mutant_generator.language(rel) and mutant_generator.generate(ROOT, rel):
                found.append(rel)
    return found


def area_tests() -> dict[str, list[str]]:
    return mutate.load_areas(mutate.DEFAULT_AREAS)[0]


def test_the_package_has_mutable_files_of_both_languages():
    files = mutable_files()
    assert "csrc/storage/buffer.cpp" in files and "csrc/storage/buffer.h" in files
    assert "halide_buffer/dask.py" in files


def test_every_mutable_file_is_in_an_area():
    listed = area_tests()
    missing = [f for f in mutable_files() if f not in listed]
    assert missing == [], (f"tools/mutation_areas.toml: no area names the tests of {', '.join(missing)}; add each "
                           "to the area whose tests exercise it (two to four test files)")


def test_every_file_of_an_area_exists():
    gone = [f for f in area_tests() if not (ROOT / f).is_file()]
    assert gone == [], f"tools/mutation_areas.toml: areas name files that do not exist: {', '.join(gone)}"


def test_every_test_file_of_an_area_exists():
    named = {t for tests in area_tests().values() for t in tests}
    gone = sorted(t for t in named if not (ROOT / t.split("::")[0]).is_file())
    assert gone == [], f"tools/mutation_areas.toml: areas name test files that do not exist: {', '.join(gone)}"
