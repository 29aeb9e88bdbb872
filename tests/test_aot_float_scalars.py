"""hb.aot: a float16 or bfloat16 Param takes a Python number rounded once to its type, as NumPy's
float16 and ml_dtypes' bfloat16 round it (to the nearest value, ties to even, straight from the
double: through float32 first would round twice and differ on ties).

Each pipeline writes its Param into every element of an output it is given, so the output's bits
are the Param's bits as the call converted them.
"""

import halide as hl  # required test dependency: the test fails, not skips, without it
import ml_dtypes
import numpy as np
import pytest

import halide_buffer as hb

from pipelines import c_compiler, compile_and_load

pytestmark = pytest.mark.needs_halide

# dtype name -> (Halide type, NumPy's type rounding a double as the call must).
TYPES = {
    "float16": (hl.Float(16), np.float16),
    "bfloat16": (hl.BFloat(16), ml_dtypes.bfloat16),
}


def constant_func(halide_type, name):
    """out(x) = k: the Param `k` of `halide_type` in every element."""
    x = hl.Var("x")
    k = hl.Param(halide_type, "k")
    out = hl.Func(name)
    out[x] = k
    return out, [k]


@pytest.fixture(scope="module")
def constants(tmp_path_factory):
    directory = tmp_path_factory.mktemp("aot_float_scalars")
    cc = c_compiler()
    return {dtype: compile_and_load(directory, cc, *constant_func(t, f"hb_const_{dtype}"), f"hb_const_{dtype}")
            for dtype, (t, _) in TYPES.items()}


def bits_of(values, numpy_type):
    with np.errstate(over="ignore"):  # beyond the largest finite value: infinity, as the call gives
        return np.array(values, dtype=np.float64).astype(numpy_type).view(np.uint16)


def edge_values(numpy_type):
    """Numbers where rounding to the type is decided: every tie between two neighbouring finite
    values (both signs), a hair either side of it, its subnormals and their ties, the largest
    finite value and the halfway point to infinity, zeros, infinities."""
    finite = np.arange(0, 0x7c00 if numpy_type is np.float16 else 0x7f80, 7, dtype=np.uint16).view(numpy_type)
    lo = finite.astype(np.float64)
    hi = np.nextafter(finite, np.array(np.inf, numpy_type)).astype(np.float64)
    ties = (lo + hi) / 2  # exact in a double: the formats keep at most 11 significant bits
    info = ml_dtypes.finfo(numpy_type)
    biggest = float(info.max)
    top_tie = biggest + (biggest - float(np.nextafter(info.max, np.array(0, numpy_type)))) / 2
    special = [0.0, -0.0, np.inf, -np.inf, biggest, top_tie, np.nextafter(top_tie, 0), 2.0**-1074,
               float(info.smallest_subnormal) / 2, float(info.smallest_subnormal) * 0.75, 1 + 2.0**-8 + 2.0**-30]
    values = np.concatenate([lo, ties, np.nextafter(ties, np.inf), np.nextafter(ties, -np.inf), special])
    return np.concatenate([values, -values])


@pytest.mark.parametrize("dtype", sorted(TYPES))
def test_a_16_bit_float_param_is_rounded_once_to_nearest_even(constants, dtype):
    p, numpy_type = constants[dtype], TYPES[dtype][1]
    assert p.arguments[0] == {"name": "k", "kind": "input_scalar", "dtype": dtype, "dimensions": 0}
    rng = np.random.default_rng(16)
    randoms = rng.standard_normal(300) * np.exp2(rng.integers(-30, 20, 300))
    values = np.concatenate([edge_values(numpy_type), randoms])
    out = hb.Buffer((1,), dtype)
    got = np.empty(len(values), np.uint16)
    for i, v in enumerate(values):
        p(float(v), out)
        got[i] = np.asarray(out).view(np.uint16)[0]
    expected = bits_of(values, numpy_type)
    wrong = np.flatnonzero(got != expected)
    assert wrong.size == 0, [(values[i], hex(got[i]), hex(expected[i])) for i in wrong[:5]]


@pytest.mark.parametrize("dtype", sorted(TYPES))
def test_nan_is_a_quiet_nan_of_its_sign_and_numpy_scalars_pass(constants, dtype):
    p, numpy_type = constants[dtype], TYPES[dtype][1]
    out = hb.Buffer((1,), dtype)
    for v in (np.nan, -np.nan):
        p(v, out)
        assert np.asarray(out).view(np.uint16)[0] == bits_of([v], numpy_type)[0]
    for v in (np.float32(0.1), np.float64(0.1), numpy_type(0.1), 3):
        p(v, out)
        assert np.asarray(out).view(np.uint16)[0] == bits_of([float(v)], numpy_type)[0]


@pytest.mark.parametrize("dtype", sorted(TYPES))
def test_a_16_bit_float_param_refuses_what_is_no_number(constants, dtype):
    out = hb.Buffer((1,), dtype)
    with pytest.raises(TypeError, match=rf"argument 'k': expected a number for {dtype}, not str; pass an int or a float"):
        constants[dtype]("0.5", out)
    with pytest.raises(TypeError, match=rf"argument 'k': expected a number for {dtype}, not bool"):
        constants[dtype](True, out)
