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


@pytest.fixture
def b():
    buf = hb.Buffer((4, 6), "int16")
    buf.numpy(writable=True)[...] = np.arange(24).reshape(4, 6)
    return buf


def python(code, **env):
    """Runs `code` in a fresh interpreter; its completed process."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **env})


# --- Buffer(): an array where a shape goes ----------------------------------------------------

@pytest.mark.parametrize("obj, name", [(np.zeros((3, 4)), "numpy.ndarray"), (np.array([3, 4]), "numpy.ndarray"),
                                       (np.array([True]), "numpy.ndarray"), (bytearray(b"\x02\x03"), "bytearray"),
                                       (memoryview(b"\x02"), "memoryview")],
                         ids=["float array", "int array", "bool array", "bytearray", "memoryview"])
def test_constructor_given_data_points_to_from_host(obj, name):
    text = message(lambda: hb.Buffer(obj), TypeError)
    check(text, "Buffer", f"shape must be an int or a sequence of ints, not {name}",
          "use Buffer.from_host(obj) for a buffer of an array's data (copy=True to copy it)")
    assert "tuple(obj) if it holds a shape" in text


def test_the_fixes_the_constructor_names_work():
    a = np.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(np.asarray(hb.Buffer.from_host(a)), a)
    assert hb.Buffer(tuple(np.array([3, 4]))).shape == (3, 4)


@pytest.mark.parametrize("shape, expected", [(np.int64(3), (3,)), (np.array(3), (3,)), ([np.int64(2), 3], (2, 3)),
                                             ((np.uint8(2), np.array(5)), (2, 5))])
def test_integer_scalars_of_numpy_are_still_extents(shape, expected):
    assert hb.Buffer(shape).shape == expected


@pytest.mark.parametrize("values, entry_type", [([1.5, 2.5], "float"), ([[1, 2], [3, 4]], "list")])
def test_constructor_given_values_points_to_a_copy(values, entry_type):
    check(message(lambda: hb.Buffer(values), TypeError), "Buffer", f"shape entries must be ints, not {entry_type}",
          "Buffer.from_host(values, copy=True) for a buffer holding these values")
    np.testing.assert_array_equal(np.asarray(hb.Buffer.from_host(values, copy=True)), values)


# --- __getitem__: what indexes a Buffer ---------------------------------------------------------

MASK = np.array([True, False, True, False])


@pytest.mark.parametrize("key, name", [
    (MASK, "numpy.ndarray"),
    (np.ones((4, 6), bool), "numpy.ndarray"),
    (np.array([0, 1]), "numpy.ndarray"),
    (np.array(True), "numpy.ndarray"),
    (None, "NoneType"),
    ((0, None), "NoneType"),
    ((0, 0, None), "NoneType"),  # the type is wrong before the count is
    ([0, 1], "list"),
    ("a", "str"),
    (True, "bool"),
], ids=["1-d mask", "2-d mask", "int array", "0-d bool array", "None", "int and None", "too many with None",
        "list", "str", "bool"])
def test_numpys_other_indexes_point_to_the_ndarray(b, key, name):
    check(message(lambda: b[key], TypeError), "__getitem__",
          f"only ints, slices and '...' index a Buffer, not {name}",
          "for NumPy's other indexes (None, boolean masks, integer arrays) index the ndarray b.numpy() instead")


def test_the_ndarray_takes_the_mask(b):
    np.testing.assert_array_equal(b.numpy()[MASK], np.arange(24).reshape(4, 6)[MASK])


@pytest.mark.parametrize("key, shape", [(np.int64(1), (6,)), (np.array(1), (6,)), ((slice(np.int64(1), None), 0), (3,)),
                                        ((..., slice(None, None, np.int32(2))), (4, 3)), ((), (4, 6))])
def test_ints_of_numpy_and_slices_still_index(b, key, shape):
    assert b[key].shape == shape


@pytest.mark.parametrize("key, error, what, fix", [
    (slice(1.5, None), TypeError, "slice bounds and steps must be ints or None, not float", "pass e.g. b[1:3]"),
    (slice(None, None, "2"), TypeError, "slice bounds and steps must be ints or None, not str", "b[::2]"),
    (slice(None, None, 0), ValueError, "slice step cannot be zero", "use a nonzero step such as 1 or -1"),
    (4, IndexError, "index 4 is out of range for axis 0 with extent 4", "use -4 <= index < 4"),
    ((0, -7), IndexError, "index -7 is out of range for axis 1 with extent 6", "use -6 <= index < 6"),
    ((0, 0, 0), IndexError, "too many indices: 3 for 2 axes", "use at most one int or slice per axis"),
    ((..., 0, ...), IndexError, "an index can only have a single ellipsis ('...')", "remove the others"),
])
def test_index_errors_say_what_to_do(b, key, error, what, fix):
    check(message(lambda: b[key], error), "__getitem__", what, fix)


def test_an_empty_axis_has_no_index_in_range():
    check(message(lambda: hb.Buffer((0, 3))[0], IndexError), "__getitem__",
          "index 0 is out of range for axis 0 with extent 0", "the axis is empty: only a slice such as 0:0")
    assert hb.Buffer((0, 3))[0:0].shape == (0, 3)


# --- 0-d buffers have no axes -------------------------------------------------------------------

@pytest.mark.parametrize("call, error, entry, what, fix", [
    (lambda z: z.cropped(0, 0, 1), IndexError, "cropped", "a 0-d buffer has no axes to crop", "b.numpy()[()]"),
    (lambda z: z.sliced(0, 0), IndexError, "sliced", "a 0-d buffer has no axes to slice", "b.numpy()[()]"),
    (lambda z: z.transposed(0), ValueError, "transposed", "a 0-d buffer has no axes to transpose",
     "call b.transposed() without axes"),
    (lambda z: z[0], IndexError, "__getitem__", "a 0-d buffer has no axes to index", "b[()] is the buffer itself"),
], ids=["cropped", "sliced", "transposed", "index"])
def test_a_0d_buffer_has_no_axes(call, error, entry, what, fix):
    z = hb.Buffer((), "float32")
    text = message(lambda: call(z), error)
    check(text, entry, what, fix)
    assert "-0" not in text and "0..-1" not in text
    assert z.transposed().shape == z[()].shape == ()  # the fixes named


@pytest.mark.parametrize("call, error, entry, what, fix", [
    (lambda b: b.cropped(0, 1.5, 2), TypeError, "cropped", "min must be an int, not float", "pass an int"),
    (lambda b: b.cropped("0", 0, 1), TypeError, "cropped", "axis must be an int, not str", "pass an int"),
    (lambda b: b.cropped(0, 0, None), TypeError, "cropped", "extent must be an int, not NoneType", "pass an int"),
    (lambda b: b.cropped(2**40, 0, 1), IndexError, "cropped", "axis 1099511627776 is out of range for 2 axes",
     "use -2 <= axis < 2"),
    (lambda b: b.cropped(0, 2**70, 1), ValueError, "cropped", "min 1180591620717411303424 does not fit in 64 bits",
     "crop within the mins and extents shown by b.mins and b.shape"),
    (lambda b: b.sliced(0.0, 1), TypeError, "sliced", "axis must be an int, not float", "pass an int"),
    (lambda b: b.sliced(0, 2**70), ValueError, "sliced", "pos 1180591620717411303424 does not fit in 64 bits",
     "slice at a coordinate shown by b.mins and b.shape"),
], ids=["crop min float", "crop axis str", "crop extent None", "crop axis huge", "crop min huge",
        "slice axis float", "slice pos huge"])
def test_view_arguments_that_are_no_ints(b, call, error, entry, what, fix):
    check(message(lambda: call(b), error), entry, what, fix)
    assert b.cropped(np.int64(1), np.int32(1), 2).shape == (4, 2)


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


# --- other entry points: the fix is named --------------------------------------------------------

@pytest.mark.parametrize("call, error, entry, what, fix", [
    (lambda b: b.shares_storage_with(np.zeros(3)), TypeError, "shares_storage_with",
     "other must be a halide_buffer.Buffer, not numpy.ndarray", "numpy.shares_memory(b.numpy(), other)"),
    (lambda b: hb.from_dlpack([1, 2]), TypeError, "from_dlpack", "list has no __dlpack__",
     "Buffer.from_host(obj, copy=True) for other data"),
    (lambda b: hb.from_dlpack(b, copy="yes"), TypeError, "from_dlpack", "copy must be True, False or None, not 'yes'",
     "pass True to always copy"),
    (lambda b: b.__dlpack__(stream=5), BufferError, "__dlpack__", "stream must be None for data on the CPU, not 5",
     "pass stream=None"),
    (lambda b: b.transposed([np.array([0, 1])]), TypeError, "transposed", "axes must be ints, not numpy.ndarray",
     "pass e.g. b.transposed(1, 0)"),
], ids=["shares_storage_with", "from_dlpack list", "from_dlpack copy", "dlpack stream", "transposed array"])
def test_other_entry_points_name_the_fix(b, call, error, entry, what, fix):
    check(message(lambda: call(b), error), entry, what, fix)


@pytest.mark.parametrize("handle, error, what", [
    ("mem", TypeError, "handle must be a pyopencl.Buffer, or the address (int) of CUDA device memory, not str"),
    (np.array([1, 2]), TypeError, "handle must be a pyopencl.Buffer, or the address (int) of CUDA device memory, "
                                  "not numpy.ndarray"),
    (-1, ValueError, "handle -1 is no device address (0 to 2**64 - 1)"),
    (2**70, ValueError, "handle 1180591620717411303424 is no device address"),
], ids=["str", "array", "negative", "huge"])
def test_device_wrap_native_names_the_fix(dev, handle, error, what):
    b = hb.Buffer((4,), "float32")
    check(message(lambda: b.device_wrap_native(handle, device=dev), error), "device_wrap_native", what,
          "pass the device memory itself")
    assert not b.has_device_allocation()


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
