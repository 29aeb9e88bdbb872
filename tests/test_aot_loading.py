"""hb.aot.load: which file it opens."""

import os
import pathlib
import re

import numpy as np
import pytest

import halide_buffer as hb

from test_aot import affine_offset_func, expected_affine
from test_halide_pipeline import build, c_compiler, random_u8

pytestmark = pytest.mark.needs_halide


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The folder holding libhb_aot_where.so."""
    directory = tmp_path_factory.mktemp("aot_loading")
    cc = c_compiler()
    build(directory, cc, *affine_offset_func(), "hb_aot_where")
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
