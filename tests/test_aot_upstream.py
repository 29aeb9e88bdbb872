"""hb.aot against the scenarios of Halide's own ``halide.runtime`` tests.

Halide's standalone runtime package (python_bindings/halide-runtime/test: load_aot.py,
call_convention.py, gpu.py) loads AOT pipelines and calls them with NumPy arrays. Each scenario
is here in our API, with the same pipelines and argument names: ``runtimeadd`` (a 1-D add),
``callconv`` (a Param of every scalar type, three outputs of different types, one of them a
tuple) and its ``callconv_xor`` build, and ``gpuadd_opencl`` (the add in 8x8 OpenCL tiles, on
PoCL). Two behaviours differ on purpose: a read-only output is our ``ReadOnlyError`` (a
``BufferError``), and the stride and byte-order refusals are ``Buffer.from_host``'s messages.

Halide makes a Func name unique in a process (a second Func "output" is "output$1"), so every
pipeline here is compiled in a fresh process: its argument names are exactly Halide's.
"""

import ctypes
import gc
import re
import sys
from pathlib import Path

import halide as hl  # required test dependency: the test fails, not skips, without it
import numpy as np
import pytest

import halide_buffer as hb

import opencl_interposer
from common import HalideBufferT, counts, halide_dims
from pipelines import NO_RUNTIME_TARGET, OPENCL_TARGET, TARGET, c_compiler, compile_in_fresh_processes, link

pytestmark = pytest.mark.needs_halide

CAPSULE_NAME = "halide.halide_buffer_t.v21"
NON_NATIVE = ">" if sys.byteorder == "little" else "<"

# call_convention.py's scalars: every width and signedness; the int64 sum never overflows.
SCALARS = {
    "s_bool": True, "s_i8": -5, "s_i16": 300, "s_i32": -70000, "s_i64": 5_000_000_000,
    "s_u8": 7, "s_u16": 40000, "s_u32": 3_000_000_000, "s_u64": 10_000_000_000,
    "s_f32": 1.5, "s_f64": 2.25,  # exact in float32 and float64
}
# What `total` adds to the input: 1 (s_bool) - 5 + 300 - 70000 + 5e9 + 7 + 40000 + 3e9 + 1e10.
SCALAR_SUM = 17_999_970_303
CALLCONV_NAMES = ["input", *SCALARS, "total", "scaled", "packed.0", "packed.1"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Every library of the module, by file name; the objects compiled in fresh processes."""
    directory = tmp_path_factory.mktemp("aot_upstream")
    cc = c_compiler()
    objects = compile_in_fresh_processes(directory, [
        [("runtimeadd_func", (), "runtimeadd", TARGET), ("callconv_pipeline", ("add",), "callconv", TARGET)],
        [("callconv_pipeline", ("xor",), "callconv_xor", TARGET),
         ("callconv_pipeline", ("xor",), "callconv_xor", NO_RUNTIME_TARGET, "callconv_xor_no_runtime")],
        [("gpuadd_func", (True,), "gpuadd_opencl", OPENCL_TARGET)],  # its Func is "output" too
    ])
    libraries = {filename: link(directory, cc, [objects[name]], filename) for name, filename in [
        ("runtimeadd", "libruntimeadd.so"), ("callconv", "libcallconv.so"), ("callconv_xor", "libcallconv_xor.so"),
        ("gpuadd_opencl", "libgpuadd_opencl.so"),
        ("runtimeadd", "libsomething_else.so"),  # the file's name is not the pipeline's
    ]}
    # Two pipelines in one library, with one runtime (the first object's).
    libraries["libtwo.so"] = link(directory, cc, [objects["callconv"], objects["callconv_xor_no_runtime"]], "libtwo.so")
    # A library that exports no pipeline (runtimeadd_argv hidden), named like a versioned one.
    script = directory / "hide_argv.map"
    script.write_text("{ global: runtimeadd; runtimeadd_metadata; halide_*; local: *; };\n")
    libraries["libruntimeadd.so.1"] = link(directory, cc, [objects["runtimeadd"]], "libruntimeadd.so.1",
                                           extra=[f"-Wl,--version-script={script}"])
    return libraries


@pytest.fixture(scope="module")
def runtimeadd(built):
    return hb.aot.load(built["libruntimeadd.so"], "runtimeadd")


@pytest.fixture(scope="module")
def callconv(built):
    return hb.aot.load(built["libcallconv.so"], "callconv")


def capsule_name(capsule):
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    return get_name(capsule).decode()


def capsule_pointer(capsule):
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype, get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return get_pointer(capsule, CAPSULE_NAME.encode())


def added(a, offset):
    return ((a.astype(np.int64) + offset) % 256).astype(np.uint8)


# ---------------------------------------------------------------------------------------------
# load_aot.py: runtimeadd
# ---------------------------------------------------------------------------------------------


def test_runtimeadd_loads_with_its_name_or_without(built):
    named = hb.aot.load(Path(built["libruntimeadd.so"]), "runtimeadd")
    unnamed = hb.aot.load(built["libruntimeadd.so"])  # the library's only pipeline
    for p in (named, unnamed):
        assert p.name == "runtimeadd"
        assert p.argument_names == ["input", "offset", "output"]
        assert p.argument_names == [a["name"] for a in p.arguments]
        assert [a["kind"] for a in p.arguments] == ["input_buffer", "input_scalar", "output_buffer"]
    # The name comes from what the library exports, not from its file's name.
    assert hb.aot.load(built["libsomething_else.so"]).name == "runtimeadd"


def test_runtimeadd_by_position_fills_the_output(runtimeadd):
    rng = np.arange(0, 256, dtype=np.uint8)
    out = np.zeros_like(rng)
    runtimeadd(rng, np.int32(5), out)
    np.testing.assert_array_equal(out, added(rng, 5))
    np.testing.assert_array_equal(rng, np.arange(0, 256, dtype=np.uint8))  # the input is left alone


def test_runtimeadd_by_keyword_and_position_mixed(runtimeadd):
    rng = np.arange(0, 256, dtype=np.uint8)
    out2 = np.zeros_like(rng)
    runtimeadd(rng, output=out2, offset=200)
    np.testing.assert_array_equal(out2, added(rng, 200))


def test_a_buffer_over_an_ndarray_is_zero_copy_and_offers_the_typed_capsule():
    grid = np.arange(6, dtype=np.uint8).reshape(2, 3)
    buf = hb.Buffer.from_host(grid)
    assert buf.ndim == 2 and buf.dtype == "uint8" and buf.shape == (2, 3)
    capsule = buf._get_halide_buffer_t_capsule()
    assert type(capsule).__name__ == "PyCapsule" and capsule_name(capsule) == CAPSULE_NAME
    raw = HalideBufferT.from_address(capsule_pointer(capsule))
    assert capsule_pointer(capsule) == buf._get_raw_halide_buffer_t()
    assert [extent for _, extent, _ in halide_dims(raw)] == [3, 2]  # Halide's x first
    assert raw.host == grid.ctypes.data
    view = np.asarray(buf)
    np.testing.assert_array_equal(view, grid)
    assert np.shares_memory(view, grid)
    buf.numpy(writable=True)[0, 0] = 42
    assert grid[0, 0] == 42  # a view of its source, not a copy


def test_runtimeadd_takes_buffers_wrapping_ndarrays(runtimeadd):
    rng = np.arange(0, 256, dtype=np.uint8)
    out3 = np.zeros_like(rng)
    out = hb.Buffer.from_host(out3)
    assert runtimeadd(hb.Buffer.from_host(rng), np.int32(7), out) is out
    np.testing.assert_array_equal(out3, added(rng, 7))  # a host pipeline wrote the array itself


def test_an_exception_of_the_capsule_protocol_propagates_unchanged(runtimeadd):
    class CapsuleError(Exception):
        pass

    raised = CapsuleError("capsule failure")

    class BrokenCapsuleProvider:
        def _get_halide_buffer_t_capsule(self):
            raise raised

        def __array__(self, dtype=None, copy=None):  # a fallback that must not be tried
            raise AssertionError("the buffer protocol was tried after the capsule failed")

    with pytest.raises(CapsuleError) as info:
        runtimeadd(BrokenCapsuleProvider(), 1, bytearray(1))
    assert info.value is raised and str(info.value) == "capsule failure"


def test_a_read_only_output_is_refused(runtimeadd):
    with pytest.raises(hb.ReadOnlyError, match=r"^runtimeadd\(\): argument 'output': the output's memory is "
                                                r"read-only, and the pipeline writes it; pass writable memory") as info:
        runtimeadd(bytearray(1), 1, bytes(1))
    assert isinstance(info.value, BufferError)


def test_a_byte_stride_of_part_of_an_element_is_refused():
    overlapping = np.ndarray((2,), dtype=np.int32, buffer=bytearray(8), strides=(1,))
    with pytest.raises(ValueError, match=r"stride 1 bytes is not a multiple of the itemsize 4"):
        hb.Buffer.from_host(overlapping)


def test_a_non_native_byte_order_is_refused():
    with pytest.raises(ValueError, match=r"the array is big-endian; convert it with a.astype"):
        hb.Buffer.from_host(np.zeros(1, dtype=NON_NATIVE + "i4"))


# ---------------------------------------------------------------------------------------------
# call_convention.py: callconv and callconv_xor
# ---------------------------------------------------------------------------------------------


def call_from_metadata(p, shape, input_buf):
    """Calls `p` by keyword with a value for every argument, driven by p.arguments; returns them."""
    call_args = {}
    for a in p.arguments:
        if a["kind"] == "input_buffer":
            call_args[a["name"]] = input_buf
        elif a["kind"] == "output_buffer":
            call_args[a["name"]] = np.zeros(shape, dtype=hb.dtype(a["dtype"]).numpy)
        else:
            call_args[a["name"]] = SCALARS[a["name"]]
    p(**call_args)  # "packed.0" is no identifier, but ** takes any string key
    return call_args


def callconv_input():
    return np.arange(12, dtype=np.uint8).reshape(3, 4)


def test_callconv_describes_its_calling_convention(callconv):
    assert callconv.argument_names == CALLCONV_NAMES
    args = {a["name"]: a for a in callconv.arguments}
    assert args["input"] == {"name": "input", "kind": "input_buffer", "dtype": "uint8", "dimensions": 2}
    for name, t in [("s_bool", "bool"), ("s_i8", "int8"), ("s_i16", "int16"), ("s_i32", "int32"),
                    ("s_i64", "int64"), ("s_u8", "uint8"), ("s_u16", "uint16"), ("s_u32", "uint32"),
                    ("s_u64", "uint64"), ("s_f32", "float32"), ("s_f64", "float64")]:
        assert args[name] == {"name": name, "kind": "input_scalar", "dtype": t, "dimensions": 0}
    # The tuple output is two output buffers.
    for name, t in [("total", "int64"), ("scaled", "float64"), ("packed.0", "uint8"), ("packed.1", "int32")]:
        assert args[name] == {"name": name, "kind": "output_buffer", "dtype": t, "dimensions": 2}


def test_callconv_computes_every_output_from_every_scalar(callconv):
    input_buf = callconv_input()
    got = call_from_metadata(callconv, input_buf.shape, input_buf)
    in64 = input_buf.astype(np.int64)
    expected_total = in64 + SCALAR_SUM
    np.testing.assert_array_equal(got["total"], expected_total)
    np.testing.assert_array_equal(got["scaled"], np.float64(np.float32(1.5)) * in64.astype(np.float64) + 2.25)
    np.testing.assert_array_equal(got["packed.0"], (input_buf + np.uint8(7)).astype(np.uint8))
    np.testing.assert_array_equal(got["packed.1"], expected_total.astype(np.int32))  # wraps as int32


@pytest.mark.parametrize("output, bad, message", [
    ("total", lambda shape: np.zeros(shape, dtype=NON_NATIVE + "i8"), r"the array is big-endian"),
    ("packed.1", lambda shape: np.ndarray(shape, dtype=np.int32, buffer=bytearray(32), strides=(1, 1)),
     r"stride 1 bytes is not a multiple of the itemsize 4"),
], ids=["non-native byte order", "stride of part of an element"])
def test_callconv_refuses_an_output_it_cannot_write_and_writes_nothing(callconv, output, bad, message):
    input_buf = callconv_input()
    call_args = call_from_metadata(callconv, input_buf.shape, input_buf)
    for name in ("total", "scaled", "packed.0", "packed.1"):
        call_args[name] = np.zeros(input_buf.shape, dtype=call_args[name].dtype)
    call_args[output] = bad(input_buf.shape)
    with pytest.raises(ValueError, match=rf"^callconv\(\): argument '{re.escape(output)}': {message}"):
        callconv(**call_args)
    for name in {"total", "scaled", "packed.0", "packed.1"} - {output}:  # refused before anything ran
        assert not call_args[name].any(), name


def test_the_xor_build_has_the_same_convention_and_its_own_packed_0(built):
    xor = hb.aot.load(built["libcallconv_xor.so"])
    assert xor.name == "callconv_xor"
    assert xor.argument_names == CALLCONV_NAMES
    input_buf = callconv_input()
    got = call_from_metadata(xor, input_buf.shape, input_buf)
    np.testing.assert_array_equal(got["packed.0"], input_buf ^ np.uint8(7))
    np.testing.assert_array_equal(got["total"], input_buf.astype(np.int64) + SCALAR_SUM)  # the rest is the same


# ---------------------------------------------------------------------------------------------
# Which pipeline of a library: load() without a name
# ---------------------------------------------------------------------------------------------


def test_a_library_of_two_pipelines_needs_the_name(built):
    path = str(built["libtwo.so"])
    with pytest.raises(ValueError, match=rf"^aot.load\(\): {path} holds 2 pipelines \(callconv, callconv_xor\); "
                                         rf"pass the one you want: aot.load\('{path}', 'callconv'\)$"):
        hb.aot.load(path)
    # Both are there, sharing one runtime, and each computes its own packed.0.
    input_buf = callconv_input()
    for name, expected in [("callconv", input_buf + np.uint8(7)), ("callconv_xor", input_buf ^ np.uint8(7))]:
        p = hb.aot.load(path, name)
        assert p.argument_names == CALLCONV_NAMES
        np.testing.assert_array_equal(call_from_metadata(p, input_buf.shape, input_buf)["packed.0"], expected)


def test_without_a_pipeline_to_find_the_name_is_the_file_name(built):
    """A library exporting no pipeline (no <name>_argv): the name is the file's, up to its first
    dot, without 'lib'; the loader then says that function is not there."""
    path = str(built["libruntimeadd.so.1"])
    with pytest.raises(ValueError, match=r"has no runtimeadd_argv / runtimeadd_metadata"):
        hb.aot.load(path)
    # A bare name that is no file goes to the system's search, named the same way.
    with pytest.raises(ValueError, match=r"^aot.load\(\): libm.so.6 has no m_argv / m_metadata; "):
        hb.aot.load("libm.so.6")


# ---------------------------------------------------------------------------------------------
# gpu.py: gpuadd on OpenCL
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("result", ["not bound", "deleted"])
def test_gpuadd_leaves_its_result_in_the_ndarray_with_one_download(built, result):
    p = hb.aot.load(built["libgpuadd_opencl.so"])
    assert p.name == "gpuadd_opencl" and p.device_api == "opencl" and "opencl" in p.target
    assert p.argument_names == ["input", "offset", "output"]
    inp = np.arange(64, dtype=np.uint8).reshape(8, 8)
    out = np.zeros_like(inp)
    before = hb.transfers()
    process_before = opencl_interposer.counts() if opencl_interposer.active() else None
    if result == "not bound":
        p(inp, np.int32(3), out)
    else:
        returned = p(inp, np.int32(3), out)
        del returned
        gc.collect()
    # The input went up once, the result came down once, into `out`, before the call returned.
    assert counts(hb.transfers() - before) == (1, 64, 1, 64)
    if process_before is not None:  # the process's own copies (every runtime's), as the interposer saw them
        now = opencl_interposer.counts()
        assert [now[k] - process_before[k] for k in ("write_bytes", "read_bytes")] == [64, 64]
    np.testing.assert_array_equal(out, (inp.astype(np.int64) + 3).astype(np.uint8))
