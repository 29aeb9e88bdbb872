"""The dtype table: every row agrees with NumPy/ml_dtypes, and every spelling finds its row."""

import ml_dtypes
import numpy as np
import pytest

import halide_buffer as hb

from common import ALL_DTYPES

CLASSIC = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
           "float16", "float32", "float64", "complex64", "complex128"]
FLOAT8 = ["float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn", "float8_e4m3fnuz",
          "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu"]
EXOTIC = ["bfloat16", *FLOAT8, "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn",
          "int4", "uint4", "int2", "uint2"]


def test_table_has_every_row_of_the_design_once():
    assert sorted(ALL_DTYPES) == sorted(CLASSIC + EXOTIC)


@pytest.mark.parametrize("name", ALL_DTYPES)
def test_row_matches_numpy_and_ml_dtypes(name):
    t = hb.dtype(name)
    source = getattr(ml_dtypes, name) if name in EXOTIC else name
    expected = np.dtype(source)
    assert t.numpy == expected
    assert t.numpy.name == t.name == name
    assert t.itemsize == expected.itemsize
    # The CUDA array interface typestr is the NumPy dtype's own .str (float8_e5m2 says '<f1').
    assert t.typestr == expected.str


def test_every_typestr_but_v1_names_one_row():
    # hb.cuda.wrap() finds a dtype by the table's typestr column alone: '<V2' is bfloat16's (as
    # PyTorch writes it); only '<V1', the 1-byte exotic types, needs dtype=.
    rows = {}
    for t in hb.dtypes():
        rows.setdefault(t.typestr, []).append(t.name)
    assert rows["<V2"] == ["bfloat16"]
    assert {typestr for typestr, names in rows.items() if len(names) > 1} == {"<V1"}


@pytest.mark.parametrize("name", CLASSIC)
def test_pep3118_format_is_the_one_numpy_exports(name):
    t = hb.dtype(name)
    exported = memoryview(np.zeros(1, t.numpy)).format
    assert exported.lstrip("<=@") == t.format


@pytest.mark.parametrize("name", EXOTIC)
def test_exotic_rows_have_no_pep3118_format(name):
    assert hb.dtype(name).format is None


@pytest.mark.parametrize("name", ALL_DTYPES)
def test_halide_type_has_the_same_width_as_the_storage(name):
    t = hb.dtype(name)
    if t.halide_type is None:
        assert name == "complex128"  # Halide has no 128-bit type
        return
    code, bits, lanes = t.halide_type
    assert lanes == 1  # Halide 21 pipelines compare the whole type word
    assert (bits + 7) // 8 == t.itemsize


@pytest.mark.parametrize("name, code, bits", [
    ("bool", 6, 8), ("bfloat16", 4, 16), ("complex64", 5, 64), ("complex128", 5, 128),
    ("float8_e3m4", 7, 8), ("float8_e4m3", 8, 8), ("float8_e4m3b11fnuz", 9, 8),
    ("float8_e4m3fn", 10, 8), ("float8_e4m3fnuz", 11, 8), ("float8_e5m2", 12, 8),
    ("float8_e5m2fnuz", 13, 8), ("float8_e8m0fnu", 14, 8), ("float6_e2m3fn", 15, 6),
    ("float6_e3m2fn", 16, 6), ("float4_e2m1fn", 17, 4), ("int4", 0, 4), ("uint2", 1, 2),
])
def test_dlpack_codes_are_dlpack_1_1s(name, code, bits):
    t = hb.dtype(name)
    assert t.dlpack_type == (code, bits, 1)
    assert t.dlpack_padded == (bits < 8)


@pytest.mark.parametrize("name", ALL_DTYPES)
def test_every_spelling_finds_the_row(name):
    t = hb.dtype(name)
    assert hb.dtype(t) is t
    assert hb.dtype(t.numpy) is t
    assert hb.dtype(t.numpy.type) is t  # the scalar type: np.float32, ml_dtypes.bfloat16, ...
    assert t == name and t == t.numpy and hash(t) == hash(hb.dtype(name))


def test_numpy_spellings_and_python_types():
    assert hb.dtype("f4").name == "float32"
    assert hb.dtype("<i8").name == "int64"
    assert hb.dtype(bool).name == "bool"
    assert hb.dtype(np.uint16).name == "uint16"


def test_torch_dtypes_find_their_rows():
    import torch

    pairs = {torch.bool: "bool", torch.uint8: "uint8", torch.int64: "int64",
             torch.float16: "float16", torch.bfloat16: "bfloat16", torch.complex64: "complex64",
             torch.float8_e4m3fn: "float8_e4m3fn", torch.float8_e5m2: "float8_e5m2",
             torch.float8_e4m3fnuz: "float8_e4m3fnuz", torch.float8_e5m2fnuz: "float8_e5m2fnuz",
             torch.float8_e8m0fnu: "float8_e8m0fnu"}
    for torch_dtype, name in pairs.items():
        assert hb.dtype(torch_dtype).name == name


def test_torch_packed_float4_is_not_a_row():
    import torch

    with pytest.raises(TypeError, match=r"dtype\(\): unknown dtype torch.float4_e2m1fn_x2; use one of: bool"):
        hb.dtype(torch.float4_e2m1fn_x2)


def test_jax_dtypes_find_their_rows():
    import jax.numpy as jnp

    assert hb.dtype(jnp.bfloat16).name == "bfloat16"
    assert hb.dtype(jnp.float8_e4m3b11fnuz).name == "float8_e4m3b11fnuz"
    assert hb.dtype(jnp.float32).name == "float32"
    assert hb.dtype(jnp.zeros(2, jnp.float8_e5m2).dtype).name == "float8_e5m2"


@pytest.mark.parametrize("bad", ["float7", "bf16", object(), [1, 2], np.dtype([("a", "f4")]), None])
def test_unknown_dtype_lists_the_valid_names(bad):
    with pytest.raises(TypeError, match=r"dtype\(\): unknown dtype .*; use one of: bool, int8, .*float8_e4m3fn"):
        hb.dtype(bad)


def test_big_endian_dtype_is_refused_with_the_fix():
    with pytest.raises(ValueError, match=r"dtype\(\): >f4 is big-endian; convert the data to native byte order"):
        hb.dtype(np.dtype(">f4"))


def test_dtype_is_not_equal_to_garbage():
    assert hb.dtype("float32") != "float7"
    assert hb.dtype("float32") != hb.dtype("int32")
