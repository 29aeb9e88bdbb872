"""Real Halide AOT pipelines called on halide_buffer.Buffer objects.

Each pipeline is generated here with the ``halide`` wheel, compiled ahead of time for an
explicit x86-64 target (Halide 21 mis-detects AVX-512 on some CPUs, so the host target is
never used), linked into a shared library with the C compiler, loaded with ctypes, and called
with the addresses from ``Buffer._get_raw_halide_buffer_t()``. The generated function is
``int name(halide_buffer_t *in, halide_buffer_t *out)``.

NumPy axis order is reversed into Halide dimensions: for a NumPy shape (h, w), Halide's x
(dimension 0) runs along the last NumPy axis with extent w, and y along the first.
"""

import ctypes
import shutil
import subprocess

import halide as hl  # required test dependency: the test fails, not skips, without it
import ml_dtypes
import numpy as np
import pytest

import halide_buffer as hb

pytestmark = pytest.mark.needs_halide

TARGET = "x86-64-linux-avx-avx2-f16c-fma-sse41"

# void (*halide_error_handler_t)(void *user_context, const char *message)
ERROR_HANDLER = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p)


class HalideDimension(ctypes.Structure):
    _fields_ = [
        ("min", ctypes.c_int32),
        ("extent", ctypes.c_int32),
        ("stride", ctypes.c_int32),
        ("flags", ctypes.c_uint32),
    ]


class HalideBufferT(ctypes.Structure):
    """Read-only peek at a published halide_buffer_t, to prove what a test really passes."""

    _fields_ = [
        ("device", ctypes.c_uint64),
        ("device_interface", ctypes.c_void_p),
        ("host", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("type_code", ctypes.c_uint8),
        ("type_bits", ctypes.c_uint8),
        ("type_lanes", ctypes.c_uint16),
        ("dimensions", ctypes.c_int32),
        ("dim", ctypes.POINTER(HalideDimension)),
        ("padding", ctypes.c_void_p),
    ]


def raw_view(b):
    """(host address, [(min, extent, stride) for each Halide dimension]) of b's halide_buffer_t."""
    raw = HalideBufferT.from_address(b._get_raw_halide_buffer_t())
    dims = [(raw.dim[i].min, raw.dim[i].extent, raw.dim[i].stride) for i in range(raw.dimensions)]
    return raw.host, dims


class Pipeline:
    """A generated pipeline in its own shared library (with its own Halide runtime)."""

    def __init__(self, library_path, name):
        self.lib = ctypes.CDLL(str(library_path))
        self.fn = self.lib[name]
        self.fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        self.fn.restype = ctypes.c_int
        self.errors = []
        # Halide's default handler calls abort(); ours records the message instead. The
        # callback object must outlive every call, so the pipeline keeps it.
        self._handler = ERROR_HANDLER(self._on_error)
        set_handler = self.lib.halide_set_error_handler
        set_handler.argtypes = [ERROR_HANDLER]
        set_handler.restype = ctypes.c_void_p
        set_handler(self._handler)

    def _on_error(self, user_context, message):
        self.errors.append(message.decode(errors="replace"))

    def call(self, inp, out):
        """Runs the pipeline; returns (return code, Halide's error messages of this call)."""
        del self.errors[:]
        rc = self.fn(
            ctypes.c_void_p(inp._get_raw_halide_buffer_t()),
            ctypes.c_void_p(out._get_raw_halide_buffer_t()),
        )
        return rc, list(self.errors)

    def run(self, inp, out):
        rc, errors = self.call(inp, out)
        assert rc == 0, f"pipeline returned {rc}: {errors}"
        assert errors == []


def find_compiler(names, purpose):
    """The first of `names` on PATH; the test skips, saying so, when there is none."""
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    pytest.skip(f"no compiler ({', '.join(names)}) on PATH to {purpose}")


def c_compiler():
    return find_compiler(("gcc", "cc", "clang"), "link the Halide pipelines")


def build(directory, compiler, func, args, name, target=TARGET):
    obj = directory / f"{name}.o"
    func.compile_to_object(str(obj), args, name, hl.Target(target))
    lib = directory / f"lib{name}.so"
    link = subprocess.run(
        [compiler, "-shared", "-o", str(lib), str(obj), "-lpthread", "-ldl", "-lm"],
        capture_output=True,
        text=True,
    )
    assert link.returncode == 0, f"linking {name} failed:\n{link.stderr}"
    return Pipeline(lib, name)


def affine_u8_func(any_input_stride):
    """out(x, y) = uint8(int32(in(x, y)) * 2 + x + 3 * y): wraps modulo 256."""
    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(hl.UInt(8), 2, "inp")
    if any_input_stride:
        # Halide assumes a dense innermost dimension unless told otherwise.
        inp.dim(0).set_stride(hl.Expr())
    out = hl.Func("affine_u8")
    out[x, y] = hl.u8(hl.i32(inp[x, y]) * 2 + x + 3 * y)
    out.vectorize(x, 16)
    return out, [inp]


def affine_bf16_func():
    """out(x, y) = bfloat16(float(in(x, y)) * 3 + float(x) * 0.25): one rounding to bfloat16."""
    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(hl.BFloat(16), 2, "inp")
    out = hl.Func("affine_bf16")
    out[x, y] = hl.cast(hl.BFloat(16), hl.f32(inp[x, y]) * 3 + hl.f32(x) * 0.25)
    out.vectorize(x, 8)
    return out, [inp]


@pytest.fixture(scope="session")
def pipelines(tmp_path_factory):
    directory = tmp_path_factory.mktemp("halide_pipelines")
    compiler = c_compiler()
    return {
        "u8": build(directory, compiler, *affine_u8_func(True), "hb_test_affine_u8"),
        "u8_dense": build(directory, compiler, *affine_u8_func(False), "hb_test_affine_u8_dense"),
        "bf16": build(directory, compiler, *affine_bf16_func(), "hb_test_affine_bf16"),
    }


# ---------------------------------------------------------------------------------------------
# NumPy references
# ---------------------------------------------------------------------------------------------


def coordinates(shape, mins):
    """Halide (x, y) coordinate grids, broadcastable to a NumPy (h, w) array."""
    (y0, x0), (h, w) = mins, shape
    return np.arange(x0, x0 + w)[None, :], np.arange(y0, y0 + h)[:, None]


def expected_affine_u8(a, mins=(0, 0)):
    x, y = coordinates(a.shape, mins)
    return ((a.astype(np.int64) * 2 + x + 3 * y) % 256).astype(np.uint8)


def expected_affine_bf16(a, mins=(0, 0)):
    x, _ = coordinates(a.shape, mins)
    f32 = np.float32
    return (a.astype(f32) * f32(3) + x.astype(f32) * f32(0.25)).astype(ml_dtypes.bfloat16)


def random_u8(rng, shape):
    return rng.integers(0, 256, size=shape, dtype=np.uint8)


def random_bf16(rng, shape):
    """Finite normal bfloat16 values of both signs, every mantissa pattern, plus zeros."""
    sign = rng.integers(0, 2, size=shape, dtype=np.uint16) << 15
    exponent = rng.integers(127 - 20, 127 + 20, size=shape, dtype=np.uint16) << 7
    mantissa = rng.integers(0, 128, size=shape, dtype=np.uint16)
    bits = sign | exponent | mantissa
    bits[rng.random(shape) < 0.05] = 0
    return bits.view(ml_dtypes.bfloat16)


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
    raw = HalideBufferT.from_address(inp._get_raw_halide_buffer_t())
    assert (raw.type_code, raw.type_bits, raw.type_lanes) == (4, 16, 1)  # halide_type_bfloat
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
