"""hb.aot.load: which file it opens, and the device API a pipeline's runtime finds by itself.

Halide's GPU runtimes look their API up by name in the process (clGetPlatformIDs, cuInit), else
try to open libOpenCL.so / libcuda.so themselves. An OpenCL pipeline loaded with hb.aot must
find the loader halide_buffer.opencl uses (PoCL from pip included) without any other call first:
that is checked in a fresh interpreter, where nothing else has opened it.
"""

import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

import halide_buffer as hb

import halide as hl

from pipelines import (OPENCL_TARGET, TARGET, affine_offset_func, brighter_opencl_func, build, c_compiler,
                       expected_affine, link, random_u8)

pytestmark = pytest.mark.needs_halide


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The folder holding libhb_aot_where.so (host) and libhb_aot_fresh.so (OpenCL)."""
    directory = tmp_path_factory.mktemp("aot_loading")
    cc = c_compiler()
    build(directory, cc, *affine_offset_func(), "hb_aot_where")
    build(directory, cc, *brighter_opencl_func(), "hb_aot_fresh", target=OPENCL_TARGET)
    return directory


def runs(p):
    """`p` is the hb_aot_where pipeline, and it works."""
    a = random_u8(np.random.default_rng(40), (4, 32))
    np.testing.assert_array_equal(np.asarray(p(a, 7)), expected_affine(a, 7))


class Place(os.PathLike):
    """A path-like object that is not a pathlib path."""

    def __init__(self, path):
        self.path = path

    def __fspath__(self):
        return self.path


# ---------------------------------------------------------------------------------------------
# Which file
# ---------------------------------------------------------------------------------------------


def test_a_bare_name_of_a_file_in_the_current_directory_loads(built, monkeypatch):
    monkeypatch.chdir(built)
    runs(hb.aot.load("libhb_aot_where.so", "hb_aot_where"))


def test_relative_and_absolute_paths_load_as_str_or_pathlike(built, monkeypatch):
    monkeypatch.chdir(built.parent)
    relative = f"{built.name}/libhb_aot_where.so"
    for path in (relative, pathlib.Path(relative), Place(relative), str(built / "libhb_aot_where.so"),
                 built / "libhb_aot_where.so", Place(str(built / "libhb_aot_where.so"))):
        runs(hb.aot.load(path, "hb_aot_where"))
    monkeypatch.chdir(built)
    runs(hb.aot.load(pathlib.Path("libhb_aot_where.so"), "hb_aot_where"))
    runs(hb.aot.load(Place("libhb_aot_where.so"), "hb_aot_where"))


# A library's C code calling a pipeline of another library: it imports that pipeline's names.
_CALLS_INNER = """
int hb_ld_inner_argv(void **args);
const void *hb_ld_inner_metadata(void);
int call_inner(void **args) { return hb_ld_inner_argv(args); }
const void *inner_metadata(void) { return hb_ld_inner_metadata(); }
"""


def test_without_a_name_a_library_calling_another_librarys_pipeline_loads_its_own(tmp_path):
    """libwrapped.so holds the pipeline hb_ld_outer and code calling hb_ld_inner of libhb_ld_inner.so,
    whose <name>_argv and <name>_metadata it imports: its only pipeline is hb_ld_outer."""
    cc = c_compiler()
    build(tmp_path, cc, *affine_offset_func(), "hb_ld_inner")
    func, args = affine_offset_func()
    func.compile_to_object(str(tmp_path / "outer.o"), args, "hb_ld_outer", hl.Target(TARGET))
    (tmp_path / "calls_inner.c").write_text(_CALLS_INNER)
    lib = link(tmp_path, cc, [tmp_path / "outer.o", tmp_path / "calls_inner.c"], "libwrapped.so",
               extra=["-fPIC", f"-L{tmp_path}", "-l:libhb_ld_inner.so", f"-Wl,-rpath,{tmp_path}"])
    p = hb.aot.load(lib)
    assert p.name == "hb_ld_outer"
    runs(p)


def test_a_bare_name_that_is_no_file_goes_to_the_system_search(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # Not here, and not anywhere the system looks: the message says where it looked.
    with pytest.raises(ValueError) as info:
        hb.aot.load("libhb_aot_nowhere.so", "hb_aot_nowhere")
    assert re.fullmatch(
        r"aot.load\(\): cannot load libhb_aot_nowhere.so: no such file in the current directory "
        r"\((?P<cwd>.+)\), and the system's library search \(LD_LIBRARY_PATH, the ldconfig cache, /lib, "
        r"/usr/lib\) gave: .*No such file or directory; pass the path of the library file, relative to "
        r"the current directory or absolute", str(info.value))
    assert os.path.samefile(re.search(r"current directory \((.+?)\), and", str(info.value))[1], tmp_path)
    # The system's search finds the C library's math library: it is opened (and is no pipeline).
    with pytest.raises(ValueError, match=r"^aot.load\(\): libm.so.6 has no sin_argv / sin_metadata; "):
        hb.aot.load("libm.so.6", "sin")


def test_a_missing_path_says_so(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for path in ("./libhb_aot_missing.so", tmp_path / "libhb_aot_missing.so"):
        with pytest.raises(ValueError, match=rf"^aot.load\(\): cannot load {re.escape(str(path))}: cannot open "
                                             r"shared object file: No such file or directory; pass the path of "
                                             r"a shared library built from Halide's compile_to_object output$"):
            hb.aot.load(path, "hb_aot_missing")


# ---------------------------------------------------------------------------------------------
# The OpenCL loader, in a fresh interpreter
# ---------------------------------------------------------------------------------------------

FRESH = """
import sys
import numpy as np
import halide_buffer as hb
p = hb.aot.load(sys.argv[1], "hb_aot_fresh")  # the first call of halide_buffer
src = np.full((16, 24), 5, np.uint8)
out = p(src) if sys.argv[2] == "allocated" else p(src, hb.Buffer((16, 24), "uint8"))
print(out.device_dirty(), np.asarray(out).min(), np.asarray(out).max())
print(hb.opencl.loaded_library() == hb.opencl.library_candidates()[0])
print(hb.cuda.loaded_library() is None)
"""


def run_fresh(script, *args, **env):
    environment = {k: v for k, v in os.environ.items() if k != hb.opencl.ENV_LIBRARY}
    environment.update(env)
    return subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True,
                          env=environment, timeout=300)


@pytest.mark.parametrize("output", ["given", "allocated"])
def test_an_opencl_pipeline_runs_without_opening_a_device_first(built, output):
    # The last line: no CUDA driver was opened for a pipeline that is not CUDA's (where one exists).
    run = run_fresh(FRESH, built / "libhb_aot_fresh.so", output)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["True 15 15", "True", "True"]


NO_OPENCL = """
import sys
import numpy as np
import halide_buffer as hb
p = hb.aot.load(sys.argv[1], "hb_aot_fresh")
src = hb.Buffer.from_host(np.ones((16, 16), np.uint8))
for call in (lambda: p(src, hb.Buffer((16, 16), "uint8")), lambda: p(src)):
    try:
        call()
    except hb.DeviceError as e:
        print(e.code, e.name)
        print(e)
print(np.asarray(src).sum())  # the process lives on, its buffers intact
"""


def test_without_any_opencl_the_call_says_what_to_install(built, tmp_path):
    missing = tmp_path / "no-opencl" / "libOpenCL.so.1"
    run = run_fresh(NO_OPENCL, built / "libhb_aot_fresh.so", **{hb.opencl.ENV_LIBRARY: str(missing)})
    assert run.returncode == 0, run.stderr
    message = (f"hb_aot_fresh(): no OpenCL loader found; pip install 'halide_buffer[opencl]' for pyopencl and "
               f"PoCL, install a system OpenCL ICD loader (libOpenCL.so.1), or set HALIDE_BUFFER_OPENCL_LIBRARY "
               f"to a libOpenCL. Tried:\n  {missing}: cannot open shared object file: No such file or directory")
    assert run.stdout == f"-1001 CL_PLATFORM_NOT_FOUND_KHR\n{message}\n" * 2 + "256\n"
