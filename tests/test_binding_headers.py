"""The binding layer's headers (docs/architecture.md, "The binding layer"): Buffer's own pybind11
caster is defined in csrc/python/py_buffer.h and declared in py_glue.h, which every binding file
includes. A binding file that returns a Buffer to Python without py_buffer.h must not compile:
it would otherwise use pybind11's generic caster, and the program would hold two casters for one
type (the generic one skips new_buffer_object(), where a Buffer object keeps its Buffer).
"""

import shlex
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pybind11
import pytest

ROOT = Path(__file__).resolve().parent.parent
CXX = shlex.split(sysconfig.get_config_var("CXX") or "c++")

# A binding function returning a Buffer to Python, after the includes under test.
RETURNS_A_BUFFER = """
hb::Buffer make_one();
void bind_make_one(hb::py::module_ &m) { m.def("make_one", &make_one); }
"""


def compile_binding(tmp_path, header):
    """Compiles (syntax only, as setup.py's flags) a binding file including `header` alone."""
    if shutil.which(CXX[0]) is None:
        pytest.skip(f"no C++ compiler ({CXX[0]})")
    source = tmp_path / "py_returns_a_buffer.cpp"
    source.write_text(f'#include "python/{header}"\n{RETURNS_A_BUFFER}')
    command = [*CXX, "-std=c++17", "-fvisibility=hidden", "-fsyntax-only", f"-I{ROOT / 'csrc'}",
               f"-I{pybind11.get_include()}", f"-I{sysconfig.get_paths()['include']}", str(source)]
    return subprocess.run(command, capture_output=True, text=True)


def test_a_binding_file_returning_a_buffer_compiles_with_py_buffer_h(tmp_path):
    result = compile_binding(tmp_path, "py_buffer.h")
    assert result.returncode == 0, result.stderr


def test_a_binding_file_returning_a_buffer_without_py_buffer_h_does_not_compile(tmp_path):
    result = compile_binding(tmp_path, "py_glue.h")
    assert result.returncode != 0, "a Buffer was cast with pybind11's generic caster"
    assert "incomplete type" in result.stderr and "type_caster<hb::Buffer>" in result.stderr
