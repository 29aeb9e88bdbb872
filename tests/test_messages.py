"""What a newcomer meets: each wrong input is answered `<entry>(): <what is wrong>; <what to do>`,
and the fix a message names works."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

import halide_buffer as hb


def message(call, error):
    """The message of the `error` that call() raises."""
    with pytest.raises(error) as info:
        call()
    return str(info.value)


def check(text, entry, what, fix):
    """`text` reads `<entry>(): ...<what>...; ...<fix>...`."""
    assert text.startswith(f"{entry}(): "), text
    assert re.search(re.escape(what) + r".*; .*" + re.escape(fix), text, re.DOTALL), text


def python(code, **env):
    """Runs `code` in a fresh interpreter; its completed process."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **env})


# --- Buffer.from_host() of values ---------------------------------------------------------------

@pytest.mark.parametrize("values", [[1, 2, 3], (1.5, 2.5), [[1, 2], [3, 4]], 7], ids=repr)
def test_from_host_copies_values_numpy_reads(values):
    check(message(lambda: hb.Buffer.from_host(values), TypeError), "Buffer.from_host",
          f"{type(values).__name__} holds no memory to wrap", "pass copy=True to copy its values")
    b = hb.Buffer.from_host(values, copy=True)
    expected = np.asarray(values)
    assert b.dtype == hb.dtype(expected.dtype) and b.shape == expected.shape and not b.readonly
    np.testing.assert_array_equal(np.asarray(b), expected)
    b.numpy(writable=True)[...] = 0  # the buffer owns its copy
    assert np.asarray(b).sum() == 0


def test_from_host_refuses_ragged_values():
    check(message(lambda: hb.Buffer.from_host([[1, 2], [3]], copy=True), ValueError), "Buffer.from_host",
          "numpy.asarray() cannot read the list (", "pass numbers in nested sequences of equal lengths")


# --- host memory exhausted ----------------------------------------------------------------------

HUGE = as_strided(np.zeros(1, np.uint8), shape=(2**30, 2**30), strides=(0, 0))  # 1 EiB, no memory


@pytest.mark.parametrize("call, entry, asked", [
    (lambda: hb.Buffer((2**20, 2**20, 2**10)), "Buffer",
     "9007199254740992 bytes (8192 TiB: shape (1048576, 1048576, 1024), float64)"),
    (lambda: hb.Buffer.from_host(HUGE, copy=True), "Buffer.from_host",
     "1152921504606846976 bytes (1024 PiB: shape (1073741824, 1073741824), uint8)"),
    (lambda: hb.Buffer.from_host(HUGE).copy(), "copy", "1152921504606846976 bytes (1024 PiB"),
    (lambda: hb.from_dlpack(hb.Buffer.from_host(HUGE), copy=True), "from_dlpack", "1152921504606846976 bytes"),
], ids=["Buffer", "from_host copy", "copy", "from_dlpack copy"])
def test_out_of_memory_says_how_much_was_asked_for(call, entry, asked):
    check(message(call, MemoryError), entry, "out of host memory for " + asked,
          "free host memory or ask for fewer elements")


# --- halide_buffer.opencl, halide_buffer.cuda and the command line --------------------------------

class CudaArray:
    def __init__(self, typestr):
        self.__cuda_array_interface__ = {"shape": (4,), "typestr": typestr, "data": (1 << 40, False),
                                         "version": 3, "strides": None, "stream": None}


@pytest.mark.parametrize("call, error, entry, what, fix", [
    (lambda: hb.opencl.as_array(np.zeros(3)), TypeError, "opencl.as_array",
     "expected a halide_buffer.Buffer, not ndarray", "halide_buffer.Buffer.from_host(obj)"),
    (lambda: hb.opencl.wrap(np.zeros(3)), TypeError, "opencl.wrap",
     "expected a pyopencl.array.Array or pyopencl.Buffer, not ndarray", "halide_buffer.Buffer.from_host(obj)"),
    (lambda: hb.cuda.device("0"), TypeError, "cuda.device", "ordinal must be an int, not str", "pass e.g. 0"),
    (lambda: hb.cuda.device(stream="s"), TypeError, "cuda.device", "stream must be None, a CUstream handle",
     "None for the default stream"),
    (lambda: hb.cuda.wrap(CudaArray(">f4")), BufferError, "cuda.wrap", "big-endian data ('>f4') is not supported",
     "convert the array to native byte order"),
], ids=["as_array", "opencl.wrap", "cuda ordinal", "cuda stream", "cuda.wrap big-endian"])
def test_device_modules_name_the_fix(call, error, entry, what, fix):
    check(message(call, error), entry, what, fix)


@pytest.mark.parametrize("call, entry", [
    (lambda: hb.opencl.as_array(hb.Buffer(3)), "opencl.as_array"),
    (lambda: hb.opencl.wrap(object()), "opencl.wrap"),
    (lambda: hb.opencl.device(context=object()), "opencl.device"),
])
def test_pyopencl_missing_says_how_to_install_it(monkeypatch, call, entry):
    monkeypatch.setitem(sys.modules, "pyopencl", None)  # as if it were not installed
    with pytest.raises(ModuleNotFoundError) as info:
        call()
    check(str(info.value), entry, "pyopencl is not installed", "pip install 'halide_buffer[opencl]'")
    assert info.value.name == "pyopencl"


def test_demo_without_pyopencl_says_how_to_install_it():
    run = python("import sys; sys.modules['pyopencl'] = None\n"
                 "from halide_buffer.cli import main; sys.exit(main(['demo']))")
    assert run.returncode == 1 and "Traceback" not in run.stderr and run.stdout == ""
    assert run.stderr.startswith("python -m halide_buffer demo: demo.run(): pyopencl is not installed; "
                                 "pip install 'halide_buffer[opencl]'"), run.stderr


def test_demo_without_opencl_prints_the_whole_reason(tmp_path):
    missing = str(tmp_path / "libOpenCL-missing.so")
    run = subprocess.run([sys.executable, "-m", "halide_buffer", "demo"], capture_output=True, text=True,
                         env={**os.environ, "HALIDE_BUFFER_OPENCL_LIBRARY": missing})
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert "opencl.device(): no OpenCL loader found" in run.stderr and missing in run.stderr


def test_info_prints_the_whole_opencl_reason(tmp_path):
    missing = str(tmp_path / "libOpenCL-missing.so")
    out = subprocess.run([sys.executable, "-m", "halide_buffer"], capture_output=True, text=True, check=True,
                         env={**os.environ, "HALIDE_BUFFER_OPENCL_LIBRARY": missing}).stdout
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("  OpenCL: none"))
    assert lines[at].endswith("Tried:")
    assert lines[at + 1].startswith("    " + missing + ": ")  # the loader tried, under its heading


def test_help_is_plain_text():
    out = subprocess.run([sys.executable, "-m", "halide_buffer", "--help"], capture_output=True, text=True,
                         check=True).stdout
    assert "``" not in out and ":mod:" not in out and ":func:" not in out
    assert "Report what halide_buffer finds on this machine" in out
    assert "pip install 'halide_buffer[opencl]'" in " ".join(out.split())


def test_loaded_library_is_none_until_a_loader_is_open(tmp_path):
    run = python("import halide_buffer as hb\n"
                 "print(repr(hb.opencl.loaded_library()), repr(hb.cuda.loaded_library()))\n"
                 "try:\n    hb.opencl.device()\nexcept hb.DeviceError:\n    pass\n"
                 "print(repr(hb.opencl.loaded_library()))",
                 HALIDE_BUFFER_OPENCL_LIBRARY=str(tmp_path / "libOpenCL-missing.so"))
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["None None", "None"]
