"""setup.py's build: binding sources in unity units, and only what an edit touched compiled again.

Each test builds a small stand-in for csrc/ (folders per layer, plain C++, quick to compile) with the project's own
setup.py and pyproject.toml in a temporary folder, and reads which objects changed.
"""

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# A binding file: its own names in an anonymous namespace, as the real ones have.
BINDING = "namespace {{\nint {n}_value() {{ return 3; }}\n}}  // namespace\nint {n}() {{ return {n}_value(); }}\n"

SOURCES = {
    "csrc/core/a.h": "int a();\n",
    "csrc/core/a.cpp": '#include "core/a.h"\nint a() { return 1; }\n',  # includes name the layer
    "csrc/storage/b.cpp": "int b() { return 2; }\n",
    "csrc/hooks/opencl_context_hooks.c": "int hooks(void) { return 4; }\n",  # a library of its own, in C
    **{f"csrc/python/py_{n}.cpp": BINDING.format(n=n) for n in ("one", "two", "three", "four")},
    # The C++ test program's own source: the core without its bindings links into it.
    "tests/cpp/main.cpp": "int a();\nint b();\nint main() { return a() + b() == 3 ? 0 : 1; }\n",
}


def build(tree, *args, **env):
    subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace", *args], cwd=tree,
                   env={**os.environ, "HALIDE_BUFFER_BUILD_JOBS": "2", **env}, check=True,
                   capture_output=True)


def objects(tree):
    """Every object of the build, by name, with its modification time."""
    return {p.relative_to(tree).as_posix(): p.stat().st_mtime_ns for p in Path(tree, "build").rglob("*.o")}


def recompiled(before, after):
    return sorted(Path(name).name for name in after if after[name] != before.get(name))


@pytest.fixture
def tree(tmp_path):
    """The project's build files and a small csrc/, built once."""
    for name in ("setup.py", "pyproject.toml", "README.md", "LICENSE", "halide_buffer/_version.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "halide_buffer/__init__.py").write_text("")
    for name, text in SOURCES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    build(tmp_path)
    return tmp_path


def test_binding_sources_compile_in_three_unity_units_the_others_alone(tree):
    assert sorted(Path(name).name for name in objects(tree)) == [
        "a.o", "b.o", "bindings_1.o", "bindings_2.o", "bindings_3.o", "opencl_context_hooks.o"]
    units = sorted(Path(tree, "build").rglob("unity/bindings_*.cpp"))
    included = [Path(p).name for unit in units for p in re.findall(r'#include "(.+)"', unit.read_text())]
    assert included == ["py_four.cpp", "py_one.cpp", "py_three.cpp", "py_two.cpp"]  # name order, once each
    assert list(tree.glob("halide_buffer/_core*.so")) and list(tree.glob("halide_buffer/_opencl_hooks*.so"))


def test_an_edit_compiles_again_only_the_units_it_touched(tree):
    before = objects(tree)
    build(tree)
    assert objects(tree) == before  # nothing changed: nothing compiled

    os.utime(tree / "csrc/core/a.h")  # included by a.cpp alone
    build(tree)
    after = objects(tree)
    assert recompiled(before, after) == ["a.o"]

    os.utime(tree / "csrc/python/py_three.cpp")
    build(tree)
    unit = [u for u in Path(tree, "build").rglob("unity/bindings_*.cpp") if "py_three.cpp" in u.read_text()]
    assert recompiled(after, objects(tree)) == [unit[0].with_suffix(".o").name]


def test_a_changed_compile_command_compiles_every_unit_again(tree):
    before = objects(tree)
    os.utime(tree / "csrc/storage/b.cpp")
    flag = "-DHALIDE_BUFFER_TEST_FLAG"  # CXXFLAGS for C++ in newer setuptools, CFLAGS in older
    build(tree, CFLAGS=flag, CXXFLAGS=flag)
    # Every unit of _core; the hooks library, whose source is older than it, setuptools skips
    # whole before any unit is looked at (its one C file has no flags of ours to change).
    core = sorted(Path(name).name for name in before if "opencl_context_hooks" not in name)
    assert recompiled(before, objects(tree)) == core


def test_force_compiles_every_unit_again(tree):
    before = objects(tree)
    build(tree, "--force")
    assert recompiled(before, objects(tree)) == sorted(Path(name).name for name in before)


def test_the_cpp_test_program_is_the_core_without_its_bindings_built_incrementally(tree):
    """setup.py build_cpp_tests: tests/cpp/ and csrc/ but csrc/python/, compiled without Python's or
    pybind11's headers into build/cpp_tests/, linked as a program; again only what changed."""
    folder = tree / "build/cpp_tests"

    def build_program():
        subprocess.run([sys.executable, "setup.py", "build_cpp_tests"], cwd=tree, check=True, capture_output=True)
        return {p.relative_to(folder).as_posix(): p.stat().st_mtime_ns for p in folder.rglob("*.o")}

    before = build_program()
    assert sorted(before) == ["csrc/core/a.o", "csrc/storage/b.o", "tests/cpp/main.o"]
    assert subprocess.run([folder / "core_tests"]).returncode == 0
    stamp = (folder / "csrc/core/a.o.cmd").read_text()
    assert "-Icsrc" in stamp.split("\n") and "-std=c++17" in stamp.split("\n")  # the extension's flags
    assert "pybind11" not in stamp and sysconfig.get_paths()["include"] not in stamp
    program = (folder / "core_tests").stat().st_mtime_ns
    assert build_program() == before and (folder / "core_tests").stat().st_mtime_ns == program

    os.utime(tree / "csrc/core/a.h")
    after = build_program()
    assert recompiled(before, after) == ["a.o"]
    assert (folder / "core_tests").stat().st_mtime_ns > program


def test_the_long_description_links_only_to_absolute_urls():
    """On a package index a link relative to the repository leads nowhere: setup.py points the
    README's links at the repository's files."""
    out = subprocess.run([sys.executable, "setup.py", "--long-description"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    readme_links = re.findall(r"\]\(([^)\s]+)\)", (ROOT / "README.md").read_text())
    links = re.findall(r"\]\(([^)\s]+)\)", out)
    assert len(links) == len(readme_links) > 0
    urls = dict(u.split(", ", 1) for u in importlib.metadata.metadata("halide_buffer").get_all("Project-URL"))
    source = urls["Source"] + "/blob/main/"
    for written, given in zip(readme_links, links):
        assert given == (written if re.match(r"https?://|#", written) else source + written)
