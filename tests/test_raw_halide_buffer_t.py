"""The halide_buffer_t of ``Buffer._get_raw_halide_buffer_t()`` handed straight to real Halide
pipelines: owned and wrapped buffers, crops with non-zero mins, non-unit and negative strides,
bfloat16, and a constraint violation reported through the pipeline's error handler.

The pipelines (tests/pipelines.py) are compiled ahead of time, loaded with ctypes and called as
``int name(halide_buffer_t *in, halide_buffer_t *out)``; hb.aot is not involved.
"""

import halide  # noqa: F401 - required test dependency: the test fails, not skips, without it
import ml_dtypes
import numpy as np
import pytest

import halide_buffer as hb

from common import HALIDE_ENUMS, raw_buffer, raw_view
from pipelines import (affine_bf16_func, affine_u8_func, build, c_compiler, expected_affine_bf16, expected_affine_u8,
                       random_bf16, random_u8)

pytestmark = pytest.mark.needs_halide


@pytest.fixture(scope="session")
def pipelines(tmp_path_factory):
    directory = tmp_path_factory.mktemp("halide_pipelines")
    compiler = c_compiler()
    return {
        "u8": build(directory, compiler, *affine_u8_func(True), "hb_test_affine_u8"),
        "u8_dense": build(directory, compiler, *affine_u8_func(False), "hb_test_affine_u8_dense"),
        "bf16": build(directory, compiler, *affine_bf16_func(), "hb_test_affine_bf16"),
    }


def hb_filled(a, dtype):
    b = hb.Buffer(a.shape, dtype=dtype)
    b.numpy(writable=True)[...] = a
    return b


# ---------------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------------


def test_uint8_pipeline_on_owned_buffers_matches_numpy(pipelines):
    rng = np.random.default_rng(1)
    a = random_u8(rng, (37, 53))
    inp = hb_filled(a, "uint8")
    out = hb.Buffer((37, 53), dtype="uint8")
    for pipeline in (pipelines["u8"], pipelines["u8_dense"]):
        out.numpy(writable=True)[...] = 0
        pipeline.run(inp, out)
        np.testing.assert_array_equal(out.numpy(), expected_affine_u8(a))
    np.testing.assert_array_equal(inp.numpy(), a)  # the input is only read


def test_uint8_pipeline_writes_through_buffers_wrapping_numpy_arrays(pipelines):
    rng = np.random.default_rng(2)
    a = random_u8(rng, (24, 40))
    a_before = a.copy()
    result = np.zeros((24, 40), dtype=np.uint8)
    inp, out = hb.Buffer.from_host(a), hb.Buffer.from_host(result)
    pipelines["u8"].run(inp, out)
    # Zero-copy: the pipeline wrote straight into the wrapped NumPy array.
    np.testing.assert_array_equal(result, expected_affine_u8(a))
    np.testing.assert_array_equal(a, a_before)
    # A later write by the array's owner is what the next call reads.
    a[5, :] = 255
    pipelines["u8"].run(inp, out)
    np.testing.assert_array_equal(result, expected_affine_u8(a))


def test_bfloat16_pipeline_matches_ml_dtypes_bit_for_bit(pipelines):
    rng = np.random.default_rng(3)
    a = random_bf16(rng, (19, 64))
    inp = hb_filled(a, "bfloat16")
    out = hb.Buffer((19, 64), dtype="bfloat16")
    raw = raw_buffer(inp)
    assert (raw.type.code, raw.type.bits, raw.type.lanes) == (HALIDE_ENUMS["halide_type_bfloat"], 16, 1)
    pipelines["bf16"].run(inp, out)
    got = out.numpy()
    assert got.dtype == ml_dtypes.bfloat16
    expected = expected_affine_bf16(a)
    mismatch = got.view(np.uint16) != expected.view(np.uint16)
    assert not mismatch.any(), (
        f"{mismatch.sum()} elements differ; first inputs {a[mismatch][:5]}, "
        f"got {got[mismatch][:5]}, expected {expected[mismatch][:5]}"
    )


def test_bfloat16_pipeline_on_buffer_wrapping_ml_dtypes_array(pipelines):
    rng = np.random.default_rng(4)
    a = random_bf16(rng, (8, 32))
    result = np.zeros((8, 32), dtype=ml_dtypes.bfloat16)
    pipelines["bf16"].run(hb.Buffer.from_host(a), hb.Buffer.from_host(result))
    np.testing.assert_array_equal(result.view(np.uint16), expected_affine_bf16(a).view(np.uint16))


@pytest.mark.parametrize("dtype", ["uint8", "bfloat16"])
def test_pipeline_on_cropped_views_writes_exactly_the_crop(pipelines, dtype):
    rng = np.random.default_rng(5)
    shape, (y0, ny), (x0, nx) = (40, 50), (7, 20), (11, 25)
    if dtype == "uint8":
        pipeline, make, expect = pipelines["u8"], random_u8, expected_affine_u8
    else:
        pipeline, make, expect = pipelines["bf16"], random_bf16, expected_affine_bf16
    a = make(rng, shape)
    sentinel = make(rng, shape)  # whatever the output held before must survive outside the crop
    parent_in, parent_out = hb_filled(a, dtype), hb_filled(sentinel, dtype)
    inp = parent_in.cropped(0, y0, ny).cropped(1, x0, nx)
    out = parent_out.cropped(0, y0, ny).cropped(1, x0, nx)

    # The test is about non-zero mins and an offset host pointer: make sure that is what
    # the pipeline receives.
    itemsize = parent_in.itemsize
    parent_host, _ = raw_view(parent_out)
    host, dims = raw_view(out)
    assert dims == [(x0, nx, 1), (y0, ny, shape[1])]
    assert host == parent_host + (y0 * shape[1] + x0) * itemsize
    assert raw_view(inp)[1] == dims

    pipeline.run(inp, out)
    expected = sentinel.copy()
    expected[y0:y0 + ny, x0:x0 + nx] = expect(a[y0:y0 + ny, x0:x0 + nx], mins=(y0, x0))
    got = parent_out.numpy()
    np.testing.assert_array_equal(got.view(f"u{itemsize}"), expected.view(f"u{itemsize}"))
    np.testing.assert_array_equal(parent_in.numpy().view(f"u{itemsize}"), a.view(f"u{itemsize}"))


STRIDED_VIEWS = {
    "reversed_columns": (lambda b: b[:, ::-1], lambda a: a[:, ::-1]),
    "reversed_rows": (lambda b: b[::-1, :], lambda a: a[::-1, :]),
    "reversed_both": (lambda b: b[::-1, ::-1], lambda a: a[::-1, ::-1]),
    "every_other_column": (lambda b: b[:, ::2], lambda a: a[:, ::2]),
    "every_third_row_reversed": (lambda b: b[::-3, :], lambda a: a[::-3, :]),
    "transposed": (lambda b: b.transposed(1, 0), lambda a: a.T),
}


@pytest.mark.parametrize("view", sorted(STRIDED_VIEWS))
def test_uint8_pipeline_reads_non_unit_and_negative_stride_inputs(pipelines, view):
    hb_view, np_view = STRIDED_VIEWS[view]
    rng = np.random.default_rng(6)
    a = random_u8(rng, (33, 48))
    parent = hb_filled(a, "uint8")
    inp = hb_view(parent)
    a_view = np_view(a)
    assert inp.shape == a_view.shape
    # The published strides are the NumPy view's, in elements, innermost first.
    _, dims = raw_view(inp)
    assert [d[2] for d in dims] == [s // a.itemsize for s in reversed(a_view.strides)]
    out = hb.Buffer(a_view.shape, dtype="uint8")
    pipelines["u8"].run(inp, out)
    np.testing.assert_array_equal(out.numpy(), expected_affine_u8(a_view, mins=inp.mins))


def test_pipeline_constraint_violation_is_reported_not_aborted(pipelines):
    # The dense pipeline requires stride 1 in dimension 0; a transposed input has stride h.
    # Halide must report that through our error handler (and return non-zero) instead of
    # writing anything.
    a = random_u8(np.random.default_rng(7), (20, 30))
    inp = hb_filled(a, "uint8").transposed(1, 0)
    out = hb.Buffer((30, 20), dtype="uint8")
    rc, errors = pipelines["u8_dense"].call(inp, out)
    assert rc != 0
    assert len(errors) == 1 and "stride" in errors[0], errors
    np.testing.assert_array_equal(out.numpy(), np.zeros((30, 20), dtype=np.uint8))
    # The same library still works afterwards.
    out = hb.Buffer((20, 30), dtype="uint8")
    pipelines["u8_dense"].run(hb_filled(a, "uint8"), out)
    np.testing.assert_array_equal(out.numpy(), expected_affine_u8(a))
