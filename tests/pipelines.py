"""Real Halide pipelines for the tests (and anything else that wants one): plain functions, no
fixtures, nothing of pytest's at import time.

Every pipeline is generated with the ``halide`` wheel, compiled ahead of time for an explicit
x86-64 target (Halide 21 mis-detects AVX-512 on some CPUs, so the host target is never used),
linked into a shared library with the C compiler, and then either loaded with ctypes
(`build`, a `Pipeline` called with ``Buffer._get_raw_halide_buffer_t()``) or with
``hb.aot.load`` (`compile_and_load`).

NumPy axis order is reversed into Halide dimensions: for a NumPy shape (h, w), Halide's x
(dimension 0) runs along the last NumPy axis with extent w, and y along the first.

What it offers:

- Targets: `TARGET` (x86-64 with AVX2), `OPENCL_TARGET` (the same plus ``-opencl``).
- Compilers: `find_compiler(names, purpose)`, `c_compiler()`, `cxx_compiler()`; with none on
  PATH they skip the calling test under pytest, and raise `NoCompiler` elsewhere.
- Building: `build(directory, compiler, func, args, name, target=TARGET)` links
  ``lib<name>.so`` and returns a ctypes `Pipeline` (``int name(halide_buffer_t *in,
  halide_buffer_t *out)``: `.call(inp, out)` gives (return code, Halide's messages), `.run`
  asserts success, `.lib` is the library); `compile_and_load(...)` does the same and returns
  ``hb.aot.load``'s pipeline.
- `ERROR_HANDLER`, the ctypes type of ``halide_error_handler_t``. (The halide_buffer_t as C
  sees it is in common.py.)
- Funcs, each returning (func, [arguments]): `affine_u8_func(any_input_stride)`,
  `affine_bf16_func()`, `affine_offset_func()` (an int16 Param), `brighter_func()` (in + 10 in
  8x8 GPU tiles), `brighter_opencl_func()` (the same, sized like its input); and
  `output_bounds_follow(func, inp)`, which fixes an output's bounds to its input's.
- NumPy references and inputs: `expected_affine_u8`, `expected_affine_bf16`, `expected_affine`,
  `coordinates`, `random_u8`, `random_bf16`; `crop2(b, y0, ny, x0, nx)`, a 2-D crop keeping
  Halide coordinates.
"""

import ctypes
import shutil
import subprocess
import sys

import halide as hl
import ml_dtypes
import numpy as np

import halide_buffer as hb

TARGET = "x86-64-linux-avx-avx2-f16c-fma-sse41"
OPENCL_TARGET = TARGET + "-opencl"

# void (*halide_error_handler_t)(void *user_context, const char *message)
ERROR_HANDLER = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p)


# ---------------------------------------------------------------------------------------------
# Compiling, linking, loading
# ---------------------------------------------------------------------------------------------


class NoCompiler(RuntimeError):
    """No compiler of the kind asked for is on PATH (outside pytest; under it the test skips)."""


class Pipeline:
    """A generated pipeline in its own shared library (with its own Halide runtime), called
    through ctypes with two buffers."""

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
    """The first of `names` on PATH. With none: under pytest the calling test skips, saying so;
    elsewhere NoCompiler is raised."""
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    message = f"no compiler ({', '.join(names)}) on PATH to {purpose}"
    if "pytest" in sys.modules:
        import pytest

        pytest.skip(message)
    raise NoCompiler(message)


def c_compiler():
    return find_compiler(("gcc", "cc", "clang"), "link the Halide pipelines")


def cxx_compiler():
    return find_compiler(("g++", "c++", "clang++"), "build Halide's Python extension")


def build(directory, compiler, func, args, name, target=TARGET):
    """Compiles `func` (a Func or an hl.Pipeline) for `target` and links it into
    directory/lib<name>.so; returns it as a ctypes Pipeline."""
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


def compile_and_load(directory, compiler, func, args, name, target=TARGET):
    """Builds `func` (a Func or an hl.Pipeline) into lib<name>.so and loads it with hb.aot."""
    build(directory, compiler, func, args, name, target=target)
    return hb.aot.load(directory / f"lib{name}.so", name)


# ---------------------------------------------------------------------------------------------
# Funcs
# ---------------------------------------------------------------------------------------------


def output_bounds_follow(func, inp):
    """The output's min and extent in each dimension are the input's: the bounds query fixes them."""
    for i in range(inp.dimensions()):
        func.output_buffer().dim(i).set_bounds(inp.dim(i).min(), inp.dim(i).extent())


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


def affine_offset_func():
    """out(x, y) = uint8(int32(in(x, y)) * 2 + x + 3 * y + offset), offset an int16 Param;
    the output covers the input's coordinates. Dimension 0 of the input must be dense."""
    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(hl.UInt(8), 2, "inp")
    offset = hl.Param(hl.Int(16), "offset")
    out = hl.Func("affine")
    out[x, y] = hl.u8(hl.i32(inp[x, y]) * 2 + x + 3 * y + hl.i32(offset))
    out.vectorize(x, 16)
    output_bounds_follow(out, inp)
    return out, [inp, offset]


def brighter_func():
    """out(x, y) = in(x, y) + 10 (uint8, wrapping), computed on the GPU target in 8x8 tiles."""
    x, y, xo, yo, xi, yi = (hl.Var(n) for n in ("x", "y", "xo", "yo", "xi", "yi"))
    inp = hl.ImageParam(hl.UInt(8), 2, "inp")
    out = hl.Func("brighter")
    out[x, y] = inp[x, y] + hl.u8(10)
    out.gpu_tile(x, y, xo, yo, xi, yi, 8, 8)
    return out, [inp]


def brighter_opencl_func():
    """brighter_func, sized like its input (for hb.aot, which allocates outputs it is not given)."""
    out, args = brighter_func()
    output_bounds_follow(out, args[0])
    return out, args


# ---------------------------------------------------------------------------------------------
# NumPy references and inputs
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


def expected_affine(a, offset, mins=(0, 0)):
    """affine_offset_func's result."""
    return ((expected_affine_u8(a, mins).astype(np.int64) + offset) % 256).astype(np.uint8)


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


def crop2(b, y0, ny, x0, nx):
    """A crop keeping Halide coordinates: its mins are (y0, x0)."""
    return b.cropped(0, y0, ny).cropped(1, x0, nx)
