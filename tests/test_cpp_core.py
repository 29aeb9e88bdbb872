"""The C++ core without Python: the test program of tests/cpp/ (the call plan, the DLPack import,
the copy planner), built by `python setup.py build_cpp_tests` from every source of csrc/ but the
bindings, and run once per case it registers, so that a failure names its case.

The call plan's cases load real pipelines: the library built here from the `halide` wheel, named
on the program's command line (--pipelines). docs/contributing.md says how to run the program alone.
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import halide as hl
import pytest

import pipelines

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "cpp_tests"  # setup.py build_cpp_tests' folder
PROGRAM = BUILD / "core_tests"
LIBRARY = BUILD / "libcall_plan.so"
CASE = re.compile(r"^TEST_CASE\((\w+)\)", re.MULTILINE)
# The pipelines tests/cpp/test_call_plan.cpp loads, by function name (the first holds Halide's runtime).
PIPELINES = {"hb_cpp_affine": pipelines.affine_offset_func, "hb_cpp_stencil": pipelines.stencil_func}


def registered_cases():
    """The cases the sources register (TEST_CASE(name) at a line's start), in file order."""
    sources = sorted((ROOT / "tests" / "cpp").glob("*.cpp"))
    return [name for source in sources for name in CASE.findall(source.read_text())]


@pytest.fixture(scope="module")
def program():
    """The test program, built (only what changed since the last build compiles again)."""
    compiler = os.environ.get("CXX") or sysconfig.get_config_var("CXX") or "c++"  # what setuptools uses
    if not shutil.which(shlex.split(compiler)[0]):
        pytest.skip(f"no C++ compiler ({compiler}) on PATH to build the C++ test program: install one, "
                    f"or name it in CXX")
    built = subprocess.run([sys.executable, "setup.py", "build_cpp_tests"], cwd=ROOT, capture_output=True,
                           text=True)
    assert built.returncode == 0, f"building the C++ test program failed:\n{built.stdout[-4000:]}{built.stderr}"
    return PROGRAM


@pytest.fixture(scope="module")
def call_plan_library():
    """The pipelines of tests/cpp/test_call_plan.cpp in one library, built anew (a few seconds) into
    build/cpp_tests/, where the program run alone finds it too."""
    BUILD.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=BUILD) as folder:
        objects = []
        for i, (name, make) in enumerate(PIPELINES.items()):
            func, args = make()
            target = pipelines.TARGET if i == 0 else pipelines.NO_RUNTIME_TARGET
            objects.append(Path(folder, f"{name}.o"))
            func.compile_to_object(str(objects[-1]), args, name, hl.Target(target))
        built = pipelines.link(Path(folder), pipelines.c_compiler(), objects, LIBRARY.name)
        os.replace(built, LIBRARY)  # whole: another run may be loading the last one
    return LIBRARY


def run(program, *args):
    return subprocess.run([str(program), *map(str, args)], capture_output=True, text=True, timeout=600)


def test_the_program_lists_every_case_its_sources_register(program):
    listed = run(program, "--list")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == registered_cases()
    assert len(set(registered_cases())) == len(registered_cases())


@pytest.mark.parametrize("case", registered_cases())
def test_case(program, call_plan_library, case):
    done = run(program, "--pipelines", call_plan_library, case)
    if done.returncode < 0:
        pytest.fail(f"{case} died of signal {-done.returncode}:\n{done.stdout}{done.stderr}", pytrace=False)
    if done.returncode != 0:
        pytest.fail(f"{done.stdout}{done.stderr}", pytrace=False)
    assert done.stdout == f"ok {case}\n"


def test_an_unknown_case_is_a_usage_error(program):
    done = run(program, "no_such_case")
    assert done.returncode == 2
    assert "no case is named 'no_such_case' (--list names them)" in done.stderr
