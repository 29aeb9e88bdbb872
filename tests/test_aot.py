"""hb.aot: Halide AOT pipelines loaded from their own metadata and called with Buffers.

Every pipeline here is generated with the ``halide`` wheel, compiled ahead of time for the
explicit x86-64 target of tests/pipelines.py (plus ``-opencl`` for the device pipelines, which
run on PoCL), linked into a shared library, and opened with ``hb.aot.load``. The last part builds
Halide's own generated Python extension and calls it with hb.Buffer arguments.

Halide makes Func names unique process-wide (a second Func "f" becomes "f$1"), so the names of
output arguments are taken from the Func objects, never spelled out.
"""

import gc
import importlib.util
import os
import re
import subprocess
import sys
import sysconfig

import halide as hl  # required test dependency: the test fails, not skips, without it
import ml_dtypes
import numpy as np
import pytest

import halide_buffer as hb

import opencl_interposer
from common import NONE, Moves, down
from pipelines import (OPENCL_TARGET, TARGET, affine_bf16_func, affine_offset_func, affine_u8_func,
                       brighter_opencl_func, build, c_compiler, compile_and_load, crop2, cxx_compiler,
                       expected_affine, expected_affine_bf16, expected_affine_u8, output_bounds_follow,
                       plus_and_half_pipeline, random_bf16, random_u8)

pytestmark = pytest.mark.needs_halide


# ---------------------------------------------------------------------------------------------
# Pipelines
# ---------------------------------------------------------------------------------------------


def scaled_f32_func():
    """out(x, y) = in(x, y) * gain + float(x), float32; Halide checks that -8 <= gain <= 8."""
    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(hl.Float(32), 2, "inp")
    gain = hl.Param(hl.Float(32), "gain")
    gain.set_range(-8.0, 8.0)
    out = hl.Func("scaled")
    out[x, y] = inp[x, y] * gain + hl.f32(x)
    out.vectorize(x, 8)
    output_bounds_follow(out, inp)
    return out, [inp, gain]


def pair_func():
    """A Func of two values: (in + 1 as uint8, in * 0.5 as float32), sized like the input."""
    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(hl.UInt(8), 2, "inp")
    out = hl.Func("pair")
    out[x, y] = (inp[x, y] + hl.u8(1), hl.f32(inp[x, y]) * 0.5)
    out.vectorize(x, 8)
    # Halide ties the other outputs of a tuple to the first one's bounds.
    for i in range(2):
        out.output_buffers()[0].dim(i).set_bounds(inp.dim(i).min(), inp.dim(i).extent())
    return out, [inp]


def unsigned_params_func():
    """out(x, y) = in(x, y) + small + uint8(medium >> 8) + uint8(large >> 24) (uint8, wrapping):
    Params of uint8, uint16 and uint32, sized like the input."""
    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(hl.UInt(8), 2, "inp")
    small, medium = hl.Param(hl.UInt(8), "small"), hl.Param(hl.UInt(16), "medium")
    large = hl.Param(hl.UInt(32), "large")
    out = hl.Func("unsigned_params")
    out[x, y] = inp[x, y] + small + hl.u8(medium >> 8) + hl.u8(large >> 24)
    out.vectorize(x, 16)
    output_bounds_follow(out, inp)
    return out, [inp, small, medium, large]


def shifted_func():
    """out(x, y) = in(x + shift, y) (uint8), shift an int32 Param without a default: the region of
    the input a bounds query names moves with the scalar."""
    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(hl.UInt(8), 2, "inp")
    shift = hl.Param(hl.Int(32), "shift")
    out = hl.Func("shifted")
    out[x, y] = inp[x + shift, y]
    return out, [inp, shift]


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """The host pipelines, each in its own library, and the names of their outputs."""
    directory = tmp_path_factory.mktemp("aot_host")
    cc = c_compiler()
    affine, affine_args = affine_offset_func()
    scaled, scaled_args = scaled_f32_func()
    unfixed, unfixed_args = affine_u8_func(True)
    bf16, bf16_args = affine_bf16_func()
    pair, pair_args = pair_func()
    two, two_args, (plus, half) = plus_and_half_pipeline()
    shifted, shifted_args = shifted_func()
    return {
        "affine": compile_and_load(directory, cc, affine, affine_args, "hb_aot_affine"),
        "affine_out": affine.name(),
        "scaled": compile_and_load(directory, cc, scaled, scaled_args, "hb_aot_scaled"),
        "scaled_out": scaled.name(),
        "unfixed": compile_and_load(directory, cc, unfixed, unfixed_args, "hb_aot_unfixed"),
        "unfixed_out": unfixed.name(),
        "bf16": compile_and_load(directory, cc, bf16, bf16_args, "hb_aot_bf16"),
        "bf16_out": bf16.name(),
        "pair": compile_and_load(directory, cc, pair, pair_args, "hb_aot_pair"),
        "pair_out": (pair.name() + ".0", pair.name() + ".1"),
        "two": compile_and_load(directory, cc, two, two_args, "hb_aot_two"),
        "two_out": (plus.name(), half.name()),
        "unsigned": compile_and_load(directory, cc, *unsigned_params_func(), "hb_aot_unsigned"),
        "shifted": compile_and_load(directory, cc, shifted, shifted_args, "hb_aot_shifted"),
        "shifted_out": shifted.name(),
        "directory": directory,
    }


@pytest.fixture(scope="module")
def device(tmp_path_factory):
    """The OpenCL pipeline twice, in two libraries (two Halide runtimes, two device interfaces)."""
    directory = tmp_path_factory.mktemp("aot_opencl")
    cc = c_compiler()
    return {
        name: compile_and_load(directory, cc, *brighter_opencl_func(), name, target=OPENCL_TARGET)
        for name in ("hb_aot_brighter", "hb_aot_brighter_b")
    }


@pytest.fixture(scope="module")
def brighter(device):
    return device["hb_aot_brighter"]


# ---------------------------------------------------------------------------------------------
# References
# ---------------------------------------------------------------------------------------------


def random_f32(rng, shape):
    """Eighths in [-128, 128): every product with the gains used and every sum below is exact,
    so a fused multiply-add gives the same bits as NumPy's two roundings."""
    return (rng.integers(-1024, 1024, size=shape) / 8).astype(np.float32)


def expected_scaled(a, gain, mins=(0, 0)):
    x = np.arange(mins[1], mins[1] + a.shape[1], dtype=np.float32)[None, :]
    return a * np.float32(gain) + x


# ---------------------------------------------------------------------------------------------
# Loading and describing
# ---------------------------------------------------------------------------------------------


def test_a_loaded_pipeline_describes_itself_from_its_metadata(host, brighter):
    p = host["affine"]
    assert isinstance(p, hb.aot.Pipeline) and hb.aot.Pipeline is hb._core.Pipeline
    assert p.name == "hb_aot_affine"
    assert p.target == hl.Target(TARGET).to_string()
    assert repr(p) == f"Pipeline(hb_aot_affine, target={p.target})"
    assert p.arguments == [  # __user_context is not an argument a caller passes
        {"name": "inp", "kind": "input_buffer", "dtype": "uint8", "dimensions": 2},
        {"name": "offset", "kind": "input_scalar", "dtype": "int16", "dimensions": 0},
        {"name": host["affine_out"], "kind": "output_buffer", "dtype": "uint8", "dimensions": 2},
    ]
    assert host["scaled"].arguments[1] == {"name": "gain", "kind": "input_scalar", "dtype": "float32",
                                           "dimensions": 0}
    assert [a["dtype"] for a in host["bf16"].arguments] == ["bfloat16", "bfloat16"]
    assert [(a["name"], a["kind"], a["dtype"]) for a in host["pair"].arguments] == [
        ("inp", "input_buffer", "uint8"),
        (host["pair_out"][0], "output_buffer", "uint8"),
        (host["pair_out"][1], "output_buffer", "float32"),
    ]
    assert brighter.target == hl.Target(OPENCL_TARGET).to_string() and "opencl" in brighter.target
    assert (p.device_api, brighter.device_api) == (None, "opencl")
    assert p.arguments is not p.arguments  # a fresh list each time: callers may edit theirs


def test_loading_the_same_library_twice_gives_working_pipelines(host):
    again = hb.aot.load(host["directory"] / "libhb_aot_affine.so", "hb_aot_affine")
    a = random_u8(np.random.default_rng(0), (4, 32))
    np.testing.assert_array_equal(np.asarray(again(a, 1)), np.asarray(host["affine"](a, 1)))


# ---------------------------------------------------------------------------------------------
# Host pipelines
# ---------------------------------------------------------------------------------------------


def test_uint8_by_position_with_given_output(host):
    rng = np.random.default_rng(1)
    a = random_u8(rng, (19, 48))
    out = hb.Buffer((19, 48), "uint8")
    result = host["affine"](hb.Buffer.from_host(a), -7, out)
    assert result is out  # a given output Buffer is what comes back
    np.testing.assert_array_equal(np.asarray(out), expected_affine(a, -7))


def test_uint8_by_name_and_mixed(host):
    p, out_name = host["affine"], host["affine_out"]
    rng = np.random.default_rng(2)
    a = random_u8(rng, (9, 40))
    expected = expected_affine(a, 300)
    # Everything by name, in any order; the output a NumPy array the pipeline writes into.
    target = np.zeros((9, 40), np.uint8)
    result = p(offset=300, **{out_name: target}, inp=a)
    assert result is target  # an output given as an ndarray comes back as it was given (NumPy's out=)
    np.testing.assert_array_equal(target, expected)
    # Mixed: the first by position, the rest by name; an output left out is allocated.
    np.testing.assert_array_equal(np.asarray(p(a, offset=300)), expected)
    out = hb.Buffer((9, 40), "uint8")
    assert p(a, 300, **{out_name: out}) is out
    np.testing.assert_array_equal(np.asarray(out), expected)


def test_ndarray_arguments_are_held_for_the_call_alone(host):
    # An input that is not a Buffer is wrapped for the call and let go when it returns (nothing
    # keeps a reference to it); an output is returned as a Buffer over it, which holds it.
    import sys

    p = host["affine"]
    rng = np.random.default_rng(3)
    a = random_u8(rng, (5, 33))
    target = np.zeros((5, 33), np.uint8)
    before = sys.getrefcount(a), sys.getrefcount(target)
    for offset in range(3):
        result = p(a, offset, target)
        np.testing.assert_array_equal(target, expected_affine(a, offset))
    assert sys.getrefcount(a) == before[0]
    assert sys.getrefcount(target) == before[1] + 1  # `result`, the last call's output
    assert np.shares_memory(np.asarray(result), target)
    del result
    assert sys.getrefcount(target) == before[1]


def test_float32_with_a_float_param_by_position_and_name(host):
    p = host["scaled"]
    rng = np.random.default_rng(3)
    a = random_f32(rng, (7, 40))
    for gain in (1.5, -0.25, 3):  # an int is a fine value for a float parameter
        got = p(a, gain)
        assert got.dtype.name == "float32"
        np.testing.assert_array_equal(np.asarray(got), expected_scaled(a, gain))
        np.testing.assert_array_equal(np.asarray(p(inp=a, gain=gain)), expected_scaled(a, gain))
    np.testing.assert_array_equal(np.asarray(p(a, np.float64(0.5))), expected_scaled(a, 0.5))
    with pytest.raises(TypeError, match=r"hb_aot_scaled\(\): argument 'gain': expected a number for float32, "
                                        r"not str; pass an int or a float$"):
        p(a, "1.5")
    # A Param of a Python-built pipeline has no default: leaving it out (or None) is an error.
    for call in (lambda: p(a), lambda: p(a, None)):
        with pytest.raises(TypeError, match=r"hb_aot_scaled\(\): argument 'gain' is missing; pass a value of type float32"):
            call()
    # Halide's own range check on the Param (set_range) is the pipeline's error, with its code.
    with pytest.raises(hb.PipelineError, match=r"hb_aot_scaled\(\): Parameter gain is 1.000000e\+02 but must "
                                               r"be at most 8.000000e\+00 \(Halide error -10\)") as info:
        p(a, 100.0)
    assert info.value.code == -10  # halide_error_code_param_too_large
    np.testing.assert_array_equal(np.asarray(p(a, 8)), expected_scaled(a, 8))


def scaled_f64_func():
    """out(x, y) = in(x, y) * gain, float64 with a float64 Param."""
    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(hl.Float(64), 2, "inp")
    gain = hl.Param(hl.Float(64), "gain")
    out = hl.Func("scaled64")
    out[x, y] = inp[x, y] * gain
    output_bounds_follow(out, inp)
    return out, [inp, gain]


def test_a_float64_param_takes_the_full_double(tmp_path):
    # A float64 scalar is stored as a double (bug: only 32-bit floats were accepted, and a float64
    # Param was refused as unsupported). The gain is no float32: the low bits must arrive too.
    p = compile_and_load(tmp_path, c_compiler(), *scaled_f64_func(), "hb_aot_scaled64")
    assert p.arguments[1] == {"name": "gain", "kind": "input_scalar", "dtype": "float64", "dimensions": 0}
    a = np.arange(12, dtype=np.float64).reshape(3, 4) - 5
    gain = 1 + 2.0**-40
    for got in (p(a, gain), p(inp=a, gain=np.float64(gain)), p(a, 3)):
        assert got.dtype.name == "float64"
    np.testing.assert_array_equal(np.asarray(p(a, gain)), a * gain)
    np.testing.assert_array_equal(np.asarray(p(a, -3)), a * -3.0)
    assert (np.asarray(p(a, gain)) != a).sum() == 11  # every nonzero element moved by its low bits


@pytest.mark.parametrize("scalar", [np.float32, np.float16])
def test_a_float_param_takes_numpy_float_scalars(host, scalar):
    a = random_f32(np.random.default_rng(21), (2, 32))
    np.testing.assert_array_equal(np.asarray(host["scaled"](a, scalar(0.5))), expected_scaled(a, 0.5))


def test_bfloat16_bit_for_bit(host):
    p, out_name = host["bf16"], host["bf16_out"]
    rng = np.random.default_rng(4)
    a = random_bf16(rng, (11, 64))
    expected = expected_affine_bf16(a).view(np.uint16)
    out = hb.Buffer((11, 64), "bfloat16")
    assert p(hb.Buffer.from_host(a), out) is out
    assert np.asarray(out).dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(np.asarray(out).view(np.uint16), expected)
    # ml_dtypes arrays are wrapped as they are, by position or by name.
    target = np.zeros((11, 64), ml_dtypes.bfloat16)
    p(inp=a, **{out_name: target})
    np.testing.assert_array_equal(target.view(np.uint16), expected)


def test_int_param_is_range_checked_and_typed(host):
    p = host["affine"]
    a = random_u8(np.random.default_rng(5), (2, 32))
    for value in (-32768, 32767, np.int16(-5), np.uint8(200)):
        np.testing.assert_array_equal(np.asarray(p(a, value)), expected_affine(a, int(value)))
    for value in (32768, -32769, 2**70):
        with pytest.raises(ValueError, match=rf"hb_aot_affine\(\): argument 'offset': {value} is out of "
                                             r"range for int16; pass a value from -32768 to 32767$"):
            p(a, value)
    for value, kind in ((1.0, "float"), ("1", "str"), (True, "bool"), (np.float32(1), "numpy.float32")):
        with pytest.raises(TypeError, match=rf"argument 'offset': expected an int for int16, not {kind}; pass "
                                            r"an int \(int\(x\) converts a number, rounding toward zero\)$"):
            p(a, value)
    with pytest.raises(TypeError, match=r"argument 'offset' is missing"):
        p(a)  # no default: a Param without one must be given
    np.testing.assert_array_equal(np.asarray(p(a, 1)), expected_affine(a, 1))


UNSIGNED_PARAMS = [("small", "uint8", 8), ("medium", "uint16", 16), ("large", "uint32", 32)]


def expected_unsigned(a, small, medium, large):
    return ((a.astype(np.int64) + small + (medium >> 8) + (large >> 24)) % 256).astype(np.uint8)


def test_unsigned_params_are_range_checked(host):
    p = host["unsigned"]
    a = random_u8(np.random.default_rng(22), (2, 32))
    numpy_scalars = (np.uint8(7), np.uint16(0x1234), np.uint32(0x89abcdef))
    for values in ((0, 0, 0), (255, 65535, 2**32 - 1), numpy_scalars, (1, 256, 2**31)):
        np.testing.assert_array_equal(np.asarray(p(a, *values)), expected_unsigned(a, *(int(v) for v in values)))
    fine = {"small": 255, "medium": 65535, "large": 2**32 - 1}
    for name, dtype, bits in UNSIGNED_PARAMS:
        for value in (2**bits, -1, 2**70, -(2**70)):
            with pytest.raises(ValueError, match=rf"^hb_aot_unsigned\(\): argument '{name}': {value} is out of range "
                                                 rf"for {dtype}; pass a value from 0 to {2**bits - 1}$"):
                p(a, **dict(fine, **{name: value}))
    for value, kind in ((1.0, "float"), (True, "bool")):
        with pytest.raises(TypeError, match=rf"argument 'small': expected an int for uint8, not {kind}"):
            p(a, value, 0, 0)
    np.testing.assert_array_equal(np.asarray(p(a, **fine)), expected_unsigned(a, **fine))


def test_required_regions_passes_a_scalar_given_by_name_to_the_bounds_query(host):
    """A scalar without a default, given by name, is the value the bounds query computes with
    (a bug refused every scalar without a default as missing, even when given): the input region
    moves with it. Absent or None, it is missing."""
    p, out = host["shifted"], host["shifted_out"]
    asked = {out: ((2, 5), (4, 16))}
    assert p.required_regions({"shift": 3}, asked) == {"inp": ((2, 8), (4, 16)), out: ((2, 5), (4, 16))}
    assert p.required_regions({"shift": np.int32(-7)}, asked)["inp"] == ((2, -2), (4, 16))
    for scalars in ({}, {"shift": None}):
        with pytest.raises(TypeError, match=r"^hb_aot_shifted\(\): argument 'shift' is missing; pass a value of "
                                            r"type int32$"):
            p.required_regions(scalars, asked)
    with pytest.raises(ValueError, match=r"argument 'shift': 2147483648 is out of range for int32"):
        p.required_regions({"shift": 2**31}, asked)


def test_required_regions_refuses_regions_outside_halides_coordinates(host):
    p, out = host["shifted"], host["shifted_out"]
    with pytest.raises(ValueError, match=r"^hb_aot_shifted\(\): min 2147483647 of axis 0 \(extent 4\) leaves "):
        p.required_regions({"shift": 0}, {out: ((2**31 - 1, 0), (4, 16))})
    assert p.required_regions({"shift": 0}, {out: ((2**31 - 4, 0), (4, 16))})[out] == ((2**31 - 4, 0), (4, 16))


def test_a_pipeline_taking_a_user_context_is_given_a_null_one(tmp_path):
    """A target with the user_context feature adds __user_context as the first argument: hb.aot
    passes a null one, and the caller does not see it."""
    func, args = affine_offset_func()
    p = compile_and_load(tmp_path, c_compiler(), func, args, "hb_aot_user_context", target=TARGET + "-user_context")
    assert [a["name"] for a in p.arguments] == ["inp", "offset", func.name()]
    a = random_u8(np.random.default_rng(30), (4, 32))
    np.testing.assert_array_equal(np.asarray(p(a, 3)), expected_affine(a, 3))
    np.testing.assert_array_equal(np.asarray(p(inp=a, offset=-2)), expected_affine(a, -2))


def test_allocated_output_takes_the_inputs_coordinates(host):
    rng = np.random.default_rng(6)
    a = random_u8(rng, (30, 70))
    parent = hb.Buffer.from_host(a)
    inp = crop2(parent, 3, 20, 5, 40)
    assert inp.mins == (3, 5)
    got = host["affine"](inp, 2)
    assert isinstance(got, hb.Buffer) and not got.shares_storage_with(parent)
    assert got.shape == (20, 40) and got.mins == (3, 5) and got.dtype.name == "uint8"
    np.testing.assert_array_equal(np.asarray(got), expected_affine(a[3:23, 5:45], 2, mins=(3, 5)))
    # float32 too, and the allocated buffer is an ordinary one: it feeds the next call.
    f = random_f32(rng, (12, 48))
    finp = crop2(hb.Buffer.from_host(f), 2, 8, 8, 32)
    once = host["scaled"](finp, 0.5)
    assert once.mins == (2, 8) and once.shape == (8, 32)
    first = expected_scaled(f[2:10, 8:40], 0.5, mins=(2, 8))
    twice = host["scaled"](once, 2)
    assert twice.mins == (2, 8)
    np.testing.assert_array_equal(np.asarray(twice), expected_scaled(first, 2, mins=(2, 8)))


def test_an_output_the_pipeline_does_not_size_gets_the_largest_region_within_its_input(host):
    """Vectorized by 16, shifting its last vector inwards: any region at least 16 wide reads only
    itself. The call gives it the input's region (aot_sizes.h); an input narrower than one vector
    holds no region, and the call asks for the output."""
    p = host["unfixed"]
    a = random_u8(np.random.default_rng(7), (6, 32))
    inp = hb.Buffer.from_host(a)
    got = p(inp)
    assert (got.shape, got.mins) == ((6, 32), (0, 0))
    np.testing.assert_array_equal(np.asarray(got), expected_affine_u8(a))
    out_name = re.escape(host["unfixed_out"])  # "affine_u8$1" once another test made an affine_u8
    narrow = hb.Buffer.from_host(a[:, :10])
    with pytest.raises(ValueError, match=rf"^hb_aot_unfixed\(\): output '{out_name}': no region of it lies within "
                                         r"the inputs .* needs input 'inp' over shape \(1, 16\) .*; pass an output "
                                         r"buffer$"):
        p(narrow)
    out = hb.Buffer((6, 10), "uint8")
    with pytest.raises(hb.PipelineError):  # given, Halide's own check: one vector reads 16 columns
        p(narrow, out)
    out = hb.Buffer((6, 32), "uint8")
    assert p(inp, out) is out  # given, it runs
    np.testing.assert_array_equal(np.asarray(out), expected_affine_u8(a))


@pytest.mark.parametrize("which", ["affine", "pair"])
def test_none_for_an_output_allocates_it(host, which):
    a = random_u8(np.random.default_rng(19), (4, 32))
    if which == "affine":
        np.testing.assert_array_equal(np.asarray(host["affine"](a, 5, None)), expected_affine(a, 5))
    else:
        first, second = host["pair_out"]
        r1, r2 = host["pair"](a, **{first: None, second: None})
        np.testing.assert_array_equal(np.asarray(r1), (a + np.uint8(1)).astype(np.uint8))


# ---------------------------------------------------------------------------------------------
# Two outputs
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["pair", "two"])
def test_two_outputs_come_back_as_a_tuple(host, which):
    p, (first, second) = host[which], host[which + "_out"]
    rng = np.random.default_rng(8)
    a = random_u8(rng, (10, 40))
    plus, half = (a + np.uint8(1)).astype(np.uint8), a.astype(np.float32) * np.float32(0.5)
    result = p(a)
    assert isinstance(result, tuple) and len(result) == 2
    assert [r.dtype.name for r in result] == ["uint8", "float32"]
    np.testing.assert_array_equal(np.asarray(result[0]), plus)
    np.testing.assert_array_equal(np.asarray(result[1]), half)
    # Given by position, by name, or one given and one allocated (non-zero mins carried over).
    o1, o2 = hb.Buffer((10, 40), "uint8"), hb.Buffer((10, 40), "float32")
    assert p(a, o1, o2) == (o1, o2)
    r1, r2 = p(inp=a, **{second: o2})
    assert r2 is o2 and r1 is not o1
    np.testing.assert_array_equal(np.asarray(r1), plus)
    crop = crop2(hb.Buffer.from_host(a), 2, 6, 4, 32)
    given = crop2(hb.Buffer((10, 40), "float32"), 2, 6, 4, 32)
    c1, c2 = p(crop, **{second: given})
    assert c2 is given and c1.mins == (2, 4) and c1.shape == (6, 32)
    np.testing.assert_array_equal(np.asarray(c1), plus[2:8, 4:36])
    np.testing.assert_array_equal(np.asarray(c2), half[2:8, 4:36])
    # Output names carry Halide's counter ("plus$14") when an earlier test made a Func of that name.
    with pytest.raises(TypeError, match=rf"{p.name}\(\) got an unexpected keyword argument '{re.escape(first)}x'"):
        p(a, **{first + "x": o1})
    np.testing.assert_array_equal(np.asarray(o1), plus)
    np.testing.assert_array_equal(np.asarray(o2), half)


# ---------------------------------------------------------------------------------------------
# Errors: each raised in this process, none aborting it; the buffers stay usable
# ---------------------------------------------------------------------------------------------


def test_errors_of_every_kind_leave_buffers_usable(host):
    p, unfixed = host["affine"], host["unfixed"]
    rng = np.random.default_rng(9)
    a = random_u8(rng, (8, 32))
    inp, out = hb.Buffer.from_host(a, copy=True), hb.Buffer((8, 32), "uint8")

    def still_fine():
        out.numpy(writable=True)[...] = 0
        assert p(inp, 3, out) is out
        np.testing.assert_array_equal(np.asarray(out), expected_affine(a, 3))
        np.testing.assert_array_equal(np.asarray(inp), a)
        assert unfixed(inp, out) is out
        np.testing.assert_array_equal(np.asarray(out), expected_affine_u8(a))

    cases = [
        (TypeError, r"hb_aot_affine\(\): argument 'inp': a int8 buffer where the pipeline takes uint8; pass "
                    r"a buffer of that type \(b.bits\(\) reinterprets same-size ones\)",
         lambda: p(hb.Buffer((8, 32), "int8"), 3, out)),
        (TypeError, r"argument '.*': a float32 buffer where the pipeline takes uint8",
         lambda: p(inp, 3, hb.Buffer((8, 32), "float32"))),
        (TypeError, r"argument 'inp': a bfloat16 buffer where the pipeline takes uint8",
         lambda: p(np.zeros((8, 32), ml_dtypes.bfloat16), 3)),
        (ValueError, r"^hb_aot_affine\(\): argument 'inp': 1 axes where the pipeline takes 2; pass a buffer of "
                     r"2 axes$",
         lambda: p(inp[0], 3, out)),
        (ValueError, r"argument 'inp': 3 axes where the pipeline takes 2; pass a buffer of 2 axes$",
         lambda: p(np.zeros((2, 8, 32), np.uint8), 3)),
        (TypeError, r"hb_aot_affine\(\): argument 'inp' is missing; pass a uint8 buffer of 2 axes",
         lambda: p(offset=3)),
        (TypeError, r"hb_aot_affine\(\): argument 'offset' is missing; pass a value of type int16",
         lambda: p(inp)),
        (TypeError, r"^hb_aot_affine\(\) got an unexpected keyword argument 'gain'; its arguments are 'inp', "
                    r"'offset', 'affine(\$\d+)?'$",
         lambda: p(inp, 3, gain=1)),
        (TypeError, r"^hb_aot_affine\(\) got multiple values for argument 'inp'; pass it by position or by "
                    r"name, not both$",
         lambda: p(inp, 3, inp=inp)),
        (TypeError, r"^hb_aot_affine\(\) takes 3 arguments, 4 given; pass at most 3 \('inp', 'offset', "
                    r"'affine(\$\d+)?'\)$",
         lambda: p(inp, 3, out, out)),
        (ValueError, r"argument 'offset': 40000 is out of range for int16; pass a value from -32768 to 32767$",
         lambda: p(inp, 40000, out)),
        (TypeError, r"argument 'offset': expected an int for int16, not float; pass an int", lambda: p(inp, 0.5, out)),
        (BufferError, r"hb_aot_unfixed\(\): argument 'affine_u8(\$\d+)?': the output's memory is read-only, and the "
                      r"pipeline writes it; pass writable memory",
         lambda: unfixed(inp, np.frombuffer(bytes(8 * 32), np.uint8).reshape(8, 32))),
        (hb.PipelineError, r"hb_aot_unfixed\(\): Input buffer inp is accessed at 11, which is beyond the max",
         lambda: unfixed(inp, hb.Buffer((12, 32), "uint8"))),
        (hb.PipelineError, r"hb_aot_affine\(\): Constraint violated: inp.stride.0",
         lambda: p(hb.Buffer((32, 8), "uint8").transposed(1, 0), 3)),  # its allocated output dies too
    ]
    still_fine()
    gc.collect()  # storages of earlier tests that only garbage (old tracebacks) still holds
    storages = hb._core._live_counts()["storages"]
    for error, message, call in cases:
        with pytest.raises(error, match=message):
            call()
        still_fine()
    gc.collect()  # the tracebacks pytest.raises kept
    assert hb._core._live_counts()["storages"] == storages  # nothing an error path made is left


def test_halide_runtime_errors_raise_pipeline_error_with_code(host):
    unfixed, p = host["unfixed"], host["affine"]
    rng = np.random.default_rng(10)
    a = random_u8(rng, (8, 32))
    inp = hb.Buffer.from_host(a, copy=True)
    big = hb.Buffer((12, 32), "uint8")  # larger than the input it reads
    with pytest.raises(hb.PipelineError) as info:
        unfixed(inp, big)
    e = info.value
    assert isinstance(e, RuntimeError) and hb.PipelineError is hb.aot.PipelineError
    assert e.code == -4  # halide_error_code_access_out_of_bounds
    assert str(e) == ("hb_aot_unfixed(): Input buffer inp is accessed at 11, which is beyond the max (7) "
                      "in dimension 1 (Halide error -4)")
    # The same buffers work with a right-sized partner.
    b = random_u8(rng, (12, 32))
    assert unfixed(b, big) is big
    np.testing.assert_array_equal(np.asarray(big), expected_affine_u8(b))
    small = hb.Buffer((8, 32), "uint8")
    unfixed(inp, small)
    np.testing.assert_array_equal(np.asarray(small), expected_affine_u8(a))

    # A constraint of the pipeline: the input's dimension 0 must be dense (stride 1).
    transposed = hb.Buffer.from_host(random_u8(rng, (32, 16)), copy=True).transposed(1, 0)
    with pytest.raises(hb.PipelineError, match=r"hb_aot_affine\(\): Constraint violated: inp.stride.0 "
                                               r"\(16\) == 1 \(1\) \(Halide error -8\)") as info:
        p(transposed, 1)
    assert info.value.code == -8  # halide_error_code_constraint_violated
    # The transposed input works once copied densely.
    dense = hb.Buffer.from_host(np.ascontiguousarray(np.asarray(transposed)))
    np.testing.assert_array_equal(np.asarray(p(dense, 1)), expected_affine(np.asarray(transposed), 1))


def test_no_such_library_or_function(host, tmp_path):
    missing = tmp_path / "libnothing_here.so"
    with pytest.raises(ValueError, match=r"aot.load\(\): cannot load .*libnothing_here.so: .*; pass the path "
                                         r"of a shared library built from Halide's compile_to_object output"):
        hb.aot.load(missing, "nothing_here")
    not_a_library = tmp_path / "libnot_elf.so"
    not_a_library.write_bytes(b"not an ELF file")
    with pytest.raises(ValueError, match=r"cannot load .*libnot_elf.so"):
        hb.aot.load(str(not_a_library), "x")
    library = host["directory"] / "libhb_aot_affine.so"
    with pytest.raises(ValueError, match=r"aot.load\(\): .*libhb_aot_affine.so has no hb_aot_nope_argv / "
                                         r"hb_aot_nope_metadata; check the function name"):
        hb.aot.load(library, "hb_aot_nope")
    # The library loaded before keeps working.
    a = random_u8(np.random.default_rng(11), (2, 32))
    np.testing.assert_array_equal(np.asarray(host["affine"](a, 0)), expected_affine(a, 0))


def test_both_dirty_cannot_be_built_through_the_api(brighter):
    """Halide's halide_error_code_host_and_device_dirty (-37) needs a buffer flagged host- and
    device-dirty at once; the API refuses to make one, so a pipeline never sees it."""
    out = brighter(np.zeros((8, 8), np.uint8))
    assert out.device_dirty()
    with pytest.raises(ValueError, match=r"set_host_dirty\(\): the device copy is newer"):
        out.set_host_dirty()
    mine = hb.Buffer((8, 8), "uint8")
    mine.copy_to_device()
    mine.set_host_dirty()
    with pytest.raises(ValueError, match=r"set_device_dirty\(\): the host copy is newer"):
        mine.set_device_dirty()
    assert not (out.host_dirty() and out.device_dirty())
    np.testing.assert_array_equal(np.asarray(brighter(out)), np.full((8, 8), 20, np.uint8))



# ---------------------------------------------------------------------------------------------
# OpenCL pipelines (PoCL): outputs stay on the pipeline's device until read
# ---------------------------------------------------------------------------------------------


def test_device_output_stays_on_the_device_until_read(brighter, dev):
    src = random_u8(np.random.default_rng(12), (24, 32))
    expected = (src + np.uint8(10)).astype(np.uint8)
    out = brighter(src)
    moves = Moves(out)
    assert out.device_dirty() and out.has_device_allocation()
    assert out.device is dev  # allocated by us, computed in by the pipeline's runtime
    assert out.transfers.to_host == out.transfers.to_device == 0
    first = np.asarray(out)
    assert moves() == down(24 * 32)
    np.testing.assert_array_equal(first, expected)
    np.testing.assert_array_equal(np.asarray(out), expected)
    assert moves() == NONE
    assert not out.device_dirty() and out.has_device_allocation()


def test_chained_device_calls_move_nothing_between_them(brighter):
    src = random_u8(np.random.default_rng(13), (16, 40))
    one = brighter(src)
    two = brighter(one)
    three = brighter(two)
    moves = [Moves(b) for b in (one, two, three)]
    assert [m() for m in moves] == [NONE] * 3
    assert all(b.device_dirty() for b in (one, two, three))
    np.testing.assert_array_equal(np.asarray(three), (src + np.uint8(30)).astype(np.uint8))
    assert [m() for m in moves] == [NONE, NONE, down(16 * 40)]
    np.testing.assert_array_equal(np.asarray(one), (src + np.uint8(10)).astype(np.uint8))
    assert moves[0]() == down(16 * 40) and moves[1]() == NONE
    # A given output of the same library keeps the runtime's allocation too.
    out = hb.Buffer((16, 40), "uint8")
    assert brighter(two, out) is out
    assert out.device_dirty() and Moves(two)() == NONE
    np.testing.assert_array_equal(np.asarray(out), (src + np.uint8(30)).astype(np.uint8))


def test_a_crop_of_a_device_output_reads_correctly(brighter):
    src = random_u8(np.random.default_rng(14), (24, 40))
    expected = (src + np.uint8(10)).astype(np.uint8)
    out = brighter(src)
    moves = Moves(out)
    crop = out[5:17, 3:29]
    assert crop.mins == (5, 3)
    np.testing.assert_array_equal(np.asarray(crop), expected[5:17, 3:29])
    assert moves() == down(24 * 40)  # one copy of the whole storage
    np.testing.assert_array_equal(np.asarray(out), expected)
    assert moves() == NONE


def test_a_crop_of_a_device_output_feeds_the_next_call(brighter):
    src = random_u8(np.random.default_rng(20), (24, 40))
    again = brighter(brighter(src)[4:20, 8:32])
    assert again.mins == (4, 8)
    np.testing.assert_array_equal(np.asarray(again), (src[4:20, 8:32] + np.uint8(20)).astype(np.uint8))


def test_an_input_on_our_device_is_read_there_by_the_pipeline(brighter, dev):
    b = hb.Buffer((16, 16), "uint8")
    b.copy_to_device()
    assert b.device is dev
    written = hb.opencl.as_array(b)
    written.fill(7)
    written.queue.finish()
    del written
    assert b.device_dirty()
    moves = Moves(b)
    out = brighter(b)
    assert moves() == NONE  # the runtime computes in our memory: nothing comes home, nothing goes up
    assert b.device is dev and b.device_dirty()
    np.testing.assert_array_equal(np.asarray(b), np.full((16, 16), 7, np.uint8))
    assert moves() == down(16 * 16)
    assert out.device_dirty() and out.device is dev


@pytest.mark.parametrize("how", ["released_by_the_call", "released_before"])
def test_an_input_brought_home_from_our_device_gives_the_right_result(brighter, how):
    b = hb.Buffer((16, 16), "uint8")
    b.copy_to_device()
    written = hb.opencl.as_array(b)
    written.fill(7)
    written.queue.finish()
    del written
    if how == "released_before":  # the same state by hand: host current, no device copy
        b.copy_to_host()
        b.device_free()
        assert not (b.host_dirty() or b.device_dirty() or b.has_device_allocation())
    np.testing.assert_array_equal(np.asarray(brighter(b)), np.full((16, 16), 17, np.uint8))


def test_a_device_output_feeds_a_pipeline_of_another_library(device):
    a, b = device["hb_aot_brighter"], device["hb_aot_brighter_b"]
    src = random_u8(np.random.default_rng(15), (16, 16))
    one = a(src)
    moves = Moves(one)
    two = b(one)
    assert moves() == NONE  # both runtimes compute in our memory: the next one takes it as it is
    assert one.device is two.device is hb.opencl.device()
    np.testing.assert_array_equal(np.asarray(two), (src + np.uint8(20)).astype(np.uint8))


def test_host_writes_reach_a_device_pipeline(brighter):
    """Halide's runtime uploads an input only when it is flagged host-dirty: a fresh Buffer, a
    host write after an upload, and an array its owner writes to all reach it so."""
    b = hb.Buffer((16, 16), "uint8")
    b.numpy(writable=True)[...] = 4
    assert b.host_dirty()
    np.testing.assert_array_equal(np.asarray(brighter(b)), np.full((16, 16), 14, np.uint8))
    # A host write after the runtime uploaded it goes up again on the next call.
    b.numpy(writable=True)[...] = 5
    np.testing.assert_array_equal(np.asarray(brighter(b)), np.full((16, 16), 15, np.uint8))
    # An array wrapped with external writes: the owner's writes reach the device on each call.
    a = np.zeros((16, 16), np.uint8)
    w = hb.Buffer.from_host(a)
    np.testing.assert_array_equal(np.asarray(brighter(w)), np.full((16, 16), 10, np.uint8))
    a[...] = 6
    np.testing.assert_array_equal(np.asarray(brighter(w)), np.full((16, 16), 16, np.uint8))


@pytest.mark.parametrize("rows", ["leading", "middle"])
def test_a_device_output_of_some_rows_leaves_the_others_intact(brighter, dev, rows):
    """A crop of the leading rows starts where the storage's device memory starts: the runtime
    computes in it in place (a sub-buffer at offset 0), the storage uploaded first so that the
    other rows are current there too. The middle rows start 16 bytes in, where no sub-buffer can
    (PoCL aligns them to 128 bytes): the runtime's allocation is for the crop only, and comes
    home."""
    y0 = 0 if rows == "leading" else 2
    src = random_u8(np.random.default_rng(23), (12, 8))
    out = hb.Buffer.from_host(np.full((12, 8), 77, np.uint8), copy=True)
    crop = out[y0:y0 + 8]
    assert (crop.mins, crop.shape) == ((y0, 0), (8, 8))
    assert brighter(hb.Buffer.from_host(src)[y0:y0 + 8], crop) is crop  # the output's mins are the input's
    expected = np.full((12, 8), 77, np.uint8)
    expected[y0:y0 + 8] = src[y0:y0 + 8] + np.uint8(10)
    in_place = rows == "leading"
    assert out.device_dirty() == in_place and (out.device is dev) == in_place
    np.testing.assert_array_equal(np.asarray(out), expected)
    out.device_free()  # the crop's allocation came home and was freed; or ours, now read
    np.testing.assert_array_equal(np.asarray(crop), expected[y0:y0 + 8])
    # On our device the whole storage goes up, the other rows with it.
    out.copy_to_device(dev)
    np.testing.assert_array_equal(hb.opencl.as_array(out, writable=False).get(), expected)
    # Again, the storage's device copy ours this time: the runtime's allocation is still the crop's.
    again = brighter(crop, crop)
    expected[y0:y0 + 8] += np.uint8(10)
    np.testing.assert_array_equal(np.asarray(again), expected[y0:y0 + 8])
    np.testing.assert_array_equal(np.asarray(out), expected)
    out.copy_to_device(dev)
    np.testing.assert_array_equal(hb.opencl.as_array(out, writable=False).get(), expected)


@pytest.mark.parametrize("made", ["owned", "wrapped"])
def test_a_device_pipeline_does_not_upload_the_outputs_it_overwrites(brighter, made):
    """An output a device pipeline writes whole is only allocated on the device: its host data,
    host-dirty as it is, does not go up first. The input does, once."""
    if not opencl_interposer.active():
        pytest.skip(f"the OpenCL interposer counts the runtime's copies: {opencl_interposer.reason()}")
    src = random_u8(np.random.default_rng(24), (16, 24))
    inp = hb.Buffer.from_host(src, copy=True)
    if made == "owned":
        out = hb.Buffer((16, 24), "uint8")
        out.numpy(writable=True)[...] = 99
    else:
        out = hb.Buffer.from_host(np.full((16, 24), 99, np.uint8))  # its owner may write: always host-dirty
    assert out.host_dirty() and inp.host_dirty()
    before = opencl_interposer.counts()
    assert brighter(inp, out) is out
    after = opencl_interposer.counts()
    written = {k: after[k] - before[k] for k in ("writes", "write_bytes")}
    assert written == {"writes": 1, "write_bytes": 16 * 24}  # the input, and nothing of the output
    assert out.device_dirty()
    np.testing.assert_array_equal(np.asarray(out), (src + np.uint8(10)).astype(np.uint8))


def test_device_pipeline_errors_leave_buffers_usable(brighter):
    src = random_u8(np.random.default_rng(16), (16, 16))
    inp = hb.Buffer.from_host(src, copy=True)
    wrong = hb.Buffer((16, 24), "uint8")  # the pipeline fixes its output to the input's size
    with pytest.raises(hb.PipelineError, match=r"hb_aot_brighter\(\): Constraint violated: \S+.extent.0 \(24\) "
                                               r"== inp.extent.0 \(16\) \(Halide error -8\)$") as info:
        brighter(inp, wrong)
    assert info.value.code == -8  # halide_error_code_constraint_violated
    out = brighter(inp)
    np.testing.assert_array_equal(np.asarray(out), (src + np.uint8(10)).astype(np.uint8))
    right = brighter(hb.Buffer.from_host(np.zeros((16, 24), np.uint8)), wrong)
    assert right is wrong
    np.testing.assert_array_equal(np.asarray(wrong), np.full((16, 24), 10, np.uint8))


# ---------------------------------------------------------------------------------------------
# Halide's generated Python extension, called with hb.Buffer
# ---------------------------------------------------------------------------------------------


def python_extension(directory, func, args, name):
    """Halide's python_extension output for `func`, built into an importable module `name`;
    returns its function."""
    source, obj = directory / f"{name}.py.cpp", directory / f"{name}.o"
    func.compile_to({hl.OutputFileType.python_extension: str(source), hl.OutputFileType.object: str(obj)},
                    args, name, hl.Target(TARGET))
    module_path = directory / (name + sysconfig.get_config_var("EXT_SUFFIX"))
    halide_include = os.path.join(os.path.dirname(hl.__file__), "include")
    command = [cxx_compiler(), "-std=c++17", "-O1", "-fPIC", "-shared",
               "-I", sysconfig.get_paths()["include"], "-I", halide_include,
               str(source), str(obj), "-o", str(module_path), "-lpthread", "-ldl", "-lm"]
    made = subprocess.run(command, capture_output=True, text=True)
    assert made.returncode == 0, f"building the {name} extension failed:\n{made.stderr}"
    spec = importlib.util.spec_from_file_location(name, module_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules.setdefault(name, module)
    return getattr(module, name)


@pytest.fixture(scope="module")
def extensions(tmp_path_factory):
    directory = tmp_path_factory.mktemp("aot_python_extension")
    return {
        "u8": python_extension(directory, *affine_u8_func(True), "hb_ext_affine_u8"),
        "bf16": python_extension(directory, *affine_bf16_func(), "hb_ext_affine_bf16"),
    }


def test_halide_python_extension_takes_our_uint8_buffers(extensions):
    rng = np.random.default_rng(17)
    a = random_u8(rng, (30, 64))
    parent, out_parent = hb.Buffer.from_host(a, copy=True), hb.Buffer((30, 64), "uint8")
    assert extensions["u8"](parent, out_parent) is None
    np.testing.assert_array_equal(np.asarray(out_parent), expected_affine_u8(a))
    # Crops with non-zero mins: only the halide_buffer_t (not the buffer protocol) carries mins,
    # so a right answer shows the extension took _get_raw_halide_buffer_t().
    inp, out = crop2(parent, 4, 20, 16, 40), crop2(out_parent, 4, 20, 16, 40)
    extensions["u8"](inp, out)
    np.testing.assert_array_equal(np.asarray(out), expected_affine_u8(a[4:24, 16:56], mins=(4, 16)))
    # Halide's errors come back as the extension's RuntimeError, and the buffers stay usable.
    with pytest.raises(RuntimeError, match=r"Halide Runtime Error: -3"):  # halide_error_code_bad_type
        extensions["u8"](hb.Buffer((30, 64), "int8"), out_parent)
    extensions["u8"](parent, out_parent)
    np.testing.assert_array_equal(np.asarray(out_parent), expected_affine_u8(a))


def test_halide_python_extension_takes_our_bfloat16_buffers(extensions):
    rng = np.random.default_rng(18)
    a = random_bf16(rng, (9, 64))
    inp, out = hb.Buffer.from_host(a), hb.Buffer((9, 64), "bfloat16")
    extensions["bf16"](inp, out)
    np.testing.assert_array_equal(np.asarray(out).view(np.uint16), expected_affine_bf16(a).view(np.uint16))
    # An ml_dtypes array has no buffer-protocol format Halide's extension knows; wrapped in a
    # Buffer it goes through as a halide_buffer_t.
    target = np.zeros((9, 64), ml_dtypes.bfloat16)
    extensions["bf16"](hb.Buffer.from_host(a), hb.Buffer.from_host(target))
    np.testing.assert_array_equal(target.view(np.uint16), expected_affine_bf16(a).view(np.uint16))


NO_DEVICE = """
import sys
import numpy as np
import halide_buffer as hb
try:
    hb.opencl.device()  # opens the loader process-wide; finds no platform
except hb.DeviceError as e:
    print("opencl.device:", e.name)
p = hb.aot.load(sys.argv[1], "hb_aot_no_device")
src = hb.Buffer.from_host(np.ones((16, 16), np.uint8))
try:
    p(src, hb.Buffer((16, 16), "uint8"))
except hb.DeviceError as e:
    print("DeviceError", e.name)
    print(e)
print(np.asarray(src).sum())  # the process lives on, its buffers intact
"""


def test_no_opencl_device_is_an_error_naming_the_pipeline_not_an_abort(tmp_path):
    build(tmp_path, c_compiler(), *brighter_opencl_func(), "hb_aot_no_device", target=OPENCL_TARGET)
    env = dict(os.environ, OCL_ICD_VENDORS="/nonexistent-vendors", PYOPENCL_HOME="/nonexistent")
    run = subprocess.run([sys.executable, "-c", NO_DEVICE, str(tmp_path / "libhb_aot_no_device.so")],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == "opencl.device: CL_PLATFORM_NOT_FOUND_KHR"
    assert lines[1] == "DeviceError CL_PLATFORM_NOT_FOUND_KHR"  # the call's device, before the pipeline runs
    assert lines[2].startswith("hb_aot_no_device(): no OpenCL device to run on: opencl.device(): "
                               "clGetPlatformIDs failed with CL_PLATFORM_NOT_FOUND_KHR")
    assert lines[-1] == "256"


def test_a_call_made_while_converting_an_argument_does_not_disturb_the_outer_call(host):
    p = host["affine"]
    a = np.full((8, 32), 5, np.uint8)

    class CallsThePipeline:
        """An argument whose conversion runs the same pipeline (nested calls share a thread)."""

        def __array__(self, dtype=None, copy=None):
            inner = p(np.zeros((8, 32), np.uint8), 1, hb.Buffer((8, 32), "uint8"))
            np.testing.assert_array_equal(np.asarray(inner), expected_affine(np.zeros((8, 32), np.uint8), 1))
            return a

    out = p(CallsThePipeline(), 3, hb.Buffer((8, 32), "uint8"))
    np.testing.assert_array_equal(np.asarray(out), expected_affine(a, 3))


@pytest.mark.parametrize("shape", [(12, 32), (300, 400)])  # a direct call; one lending its structs (> 64 KiB)
def test_an_output_made_with_the_shape_of_a_translated_buffer_is_computed_at_its_mins(host, shape):
    # make_with_shape_of() makes a storage whose own halide_buffer_t has the view's mins: the
    # struct a call lends for a view covering its storage is that one.
    a = (np.arange(shape[0] * shape[1]) % 251).astype(np.uint8).reshape(shape)
    inp = hb.Buffer.from_host(a).translated((5, 7))
    out = hb.Buffer.make_with_shape_of(inp)
    assert out.mins == (5, 7)
    assert host["unfixed"](inp, out) is out
    np.testing.assert_array_equal(np.asarray(out), expected_affine_u8(a, mins=(5, 7)))


def test_output_regions_of_an_output_smaller_than_its_input(tmp_path):
    # The region a call allocates is the output's own, from the bounds query: not the input's,
    # however the arguments are ordered (input, scalar, output here).
    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(hl.UInt(8), 2, "inp")
    k = hl.Param(hl.UInt(8), "k")
    out = hl.Func("shrunk")
    out[x, y] = inp[x, y] + inp[x + 2, y + 1] + k
    out.output_buffer().dim(0).set_bounds(inp.dim(0).min(), inp.dim(0).extent() - 2)
    out.output_buffer().dim(1).set_bounds(inp.dim(1).min(), inp.dim(1).extent() - 1)
    p = compile_and_load(tmp_path, c_compiler(), out, [inp, k], "hb_aot_shrunk")
    assert p.output_regions({"k": 1}, {"inp": ((3, 5), (10, 20))}) == {"shrunk": ((3, 5), (9, 18))}
    a = np.arange(200, dtype=np.uint8).reshape(10, 20)
    got = p(hb.Buffer.from_host(a).translated((3, 5)), 1)
    assert (got.mins, got.shape) == ((3, 5), (9, 18))
    np.testing.assert_array_equal(np.asarray(got), a[:9, :18] + a[1:, 2:] + np.uint8(1))
