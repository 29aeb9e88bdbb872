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

- Targets: `TARGET` (x86-64 with AVX2), `OPENCL_TARGET` (the same plus ``-opencl``),
  `NO_RUNTIME_TARGET` (TARGET without Halide's runtime).
- Compilers: `find_compiler(names, purpose)`, `c_compiler()`, `cxx_compiler()`; with none on
  PATH they skip the calling test under pytest, and raise `NoCompiler` elsewhere.
- Building: `build(directory, compiler, func, args, name, target=TARGET)` links
  ``lib<name>.so`` and returns a ctypes `Pipeline` (``int name(halide_buffer_t *in,
  halide_buffer_t *out)``: `.call(inp, out)` gives (return code, Halide's messages), `.run`
  asserts success, `.lib` is the library); `compile_and_load(...)` does the same and returns
  ``hb.aot.load``'s pipeline; `compile_and_load_each(directory, made, prefix, target)` loads a
  dict of them.
- Pipelines whose names must be exactly the ones written (Halide makes a Func name unique in a
  process: a second Func "output" is "output$1"): `compile_in_fresh_processes(directory,
  processes)` compiles jobs, functions of this module making (func, arguments), to objects in
  fresh Python processes (all at once); `link(directory, compiler, objects, filename)` links
  objects into one shared library (several pipelines: compile all but the first for
  `NO_RUNTIME_TARGET`, since each object otherwise embeds a runtime of its own).
- `ERROR_HANDLER`, the ctypes type of ``halide_error_handler_t``. (The halide_buffer_t as C
  sees it is in common.py.)
- Funcs, each returning (func, [arguments]): `affine_u8_func(any_input_stride)`,
  `affine_bf16_func()`, `affine_offset_func()` (an int16 Param), `stencil_func()` (an asymmetric
  stencil), `brighter_func()` (in + 10 in 8x8 GPU tiles), `brighter_opencl_func()` (the same,
  sized like its input); and `output_bounds_follow(func, inp)`, which fixes an output's bounds to
  its input's.
- Generators as written, their outputs' bounds unset: `unsized_add_func(name, kind)` (inp + k),
  `unsized_blur_func(name, boundary, kind)` (a 3 x 3 box blur, boundary-free or over repeated
  edges), `upsample2_func(name)`, `gather_func(name)` (a lookup table no output region fits in
  when it is smaller than 256); and pairs of a forward and its gradient pipeline (HelloPyTorch's
  convention, from Halide's propagate_adjoints; compile them in fresh processes, since a
  gradient's output names must be exactly d_<input>): `product_func(gradient)`,
  `valid_blur_func(gradient)`; `bad_gradient_func(kind)`, backwards breaking the convention.
- The pipelines of Halide's own ``halide.runtime`` tests (python_bindings/halide-runtime/test),
  with their argument names: `runtimeadd_func()` (1-D uint8 ``input`` + int32 ``offset``),
  `gpuadd_func(gpu)` (the same in 2-D, in 8x8 GPU tiles when `gpu`), `callconv_pipeline(combine)`
  (a Param of every scalar type, outputs ``total``, ``scaled`` and the tuple ``packed.0`` /
  ``packed.1``; `combine` "add" or "xor"), `CALLCONV_SCALARS`, the Halide type of each of its
  Params.
- NumPy references and inputs: `expected_affine_u8`, `expected_affine_bf16`, `expected_affine`,
  `coordinates`, `random_u8`, `random_bf16`; `crop2(b, y0, ny, x0, nx)`, a 2-D crop keeping
  Halide coordinates.
"""

import ctypes
import json
import shutil
import subprocess
import sys
from pathlib import Path

import halide as hl
import ml_dtypes
import numpy as np

import halide_buffer as hb

TARGET = "x86-64-linux-avx-avx2-f16c-fma-sse41"
OPENCL_TARGET = TARGET + "-opencl"
# TARGET for every object but one linked into one library: Halide's runtime is in that one.
NO_RUNTIME_TARGET = TARGET + "-no_runtime"

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


def compile_and_load_each(directory, made, prefix, target=TARGET):
    """compile_and_load() for each (func, args) in the dict `made`, as pipelines named
    <prefix><key>; returns {key: pipeline}."""
    cc = c_compiler()
    return {key: compile_and_load(directory, cc, func, args, f"{prefix}{key}", target=target)
            for key, (func, args) in made.items()}


# What a fresh process runs: make each pipeline with a function of this module (once per maker
# and arguments), compile it.
_FRESH_COMPILE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import halide as hl
import pipelines
made = {}
for job in json.loads(sys.argv[2]):
    key = json.dumps([job["maker"], job["maker_args"]])
    if key not in made:
        made[key] = getattr(pipelines, job["maker"])(*job["maker_args"])
    func, args = made[key]
    func.compile_to_object(job["object"], args, job["name"], hl.Target(job["target"]))
"""


def compile_in_fresh_processes(directory, processes):
    """Compiles jobs to object files in Python processes of their own, all running at once;
    returns {stem: object path}.

    Each process is a list of jobs (maker, maker_args, name, target[, stem]): `maker` names a
    function of this module returning (func, arguments), called with `maker_args` (JSON values)
    once per process, however many jobs name it (the same pipeline for several targets); the
    pipeline's function is `name`, its object directory/<stem>.o (stem: name when not given). A
    fresh process has made no Func before, so the argument names are exactly those the makers
    write, as long as the makers of one process do not name a Func alike.
    """
    here = str(Path(__file__).resolve().parent)
    running = []
    objects = {}
    for jobs in processes:
        described = []
        for maker, maker_args, name, target, *stem in jobs:
            stem = stem[0] if stem else name
            objects[stem] = str(directory / f"{stem}.o")
            described.append({"maker": maker, "maker_args": list(maker_args), "name": name, "target": target,
                              "object": objects[stem]})
        running.append((described, subprocess.Popen([sys.executable, "-c", _FRESH_COMPILE, here, json.dumps(described)],
                                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
    for described, child in running:
        out, err = child.communicate(timeout=300)
        names = ", ".join(job["name"] for job in described)
        assert child.returncode == 0, f"compiling {names} in a fresh process failed:\n{out}{err}"
    return objects


def link(directory, compiler, objects, filename, extra=()):
    """Links `objects` (paths) into the shared library directory/`filename`; returns its path.
    `extra`: more linker arguments."""
    lib = directory / filename
    done = subprocess.run([compiler, "-shared", "-o", str(lib), *map(str, objects), *extra,
                           "-lpthread", "-ldl", "-lm"], capture_output=True, text=True)
    assert done.returncode == 0, f"linking {filename} failed:\n{done.stderr}"
    return lib


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


def plus_and_half_pipeline():
    """hl.Pipeline([plus, half]): the same two results as two Funcs of one function."""
    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(hl.UInt(8), 2, "inp")
    plus, half = hl.Func("plus"), hl.Func("half")
    plus[x, y] = inp[x, y] + hl.u8(1)
    half[x, y] = hl.f32(inp[x, y]) * 0.5
    for f in (plus, half):
        f.vectorize(x, 8)
        output_bounds_follow(f, inp)
    return hl.Pipeline([plus, half]), [inp], (plus, half)


def stencil_func():
    """out(x, y) = in(x - 1, y) + in(x + 2, y) + in(x, y + 1) (uint8, wrapping): an asymmetric
    stencil, whose bounds query asks for more input than the output region (x from its min - 1
    to its max + 2, y to its max + 1); the output's region is the caller's (the pipeline does not
    fix it)."""
    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(hl.UInt(8), 2, "inp")
    out = hl.Func("stencil")
    out[x, y] = inp[x - 1, y] + inp[x + 2, y] + inp[x, y + 1]
    return out, [inp]


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


def runtimeadd_func():
    """Halide's ``runtimeadd`` (load_aot.py): output(x) = uint8(input(x) + offset), wrapping
    modulo 256; input uint8 1-D, offset int32."""
    x = hl.Var("x")
    inp = hl.ImageParam(hl.UInt(8), 1, "input")
    offset = hl.Param(hl.Int(32), "offset")
    out = hl.Func("output")
    out[x] = hl.u8(hl.i32(inp[x]) + offset)
    return out, [inp, offset]


def gpuadd_func(gpu=True):
    """Halide's ``gpuadd`` (gpu.py), in uint8: output(x, y) = uint8(input(x, y) + offset), 2-D,
    offset int32; in 8x8 GPU tiles when `gpu` (compile it for a GPU target then). The output
    computes whatever region it is given: pass it."""
    x, y, xo, yo, xi, yi = (hl.Var(n) for n in ("x", "y", "xo", "yo", "xi", "yi"))
    inp = hl.ImageParam(hl.UInt(8), 2, "input")
    offset = hl.Param(hl.Int(32), "offset")
    out = hl.Func("output")
    out[x, y] = hl.u8(hl.i32(inp[x, y]) + offset)
    if gpu:
        out.gpu_tile(x, y, xo, yo, xi, yi, 8, 8)
    return out, [inp, offset]


# ---------------------------------------------------------------------------------------------
# Generators as written: outputs whose bounds nobody set (sized by aot_sizes.h's rule)
# ---------------------------------------------------------------------------------------------


def unsized_add_func(name="add_k", kind="float32"):
    """out(x, y) = inp(x, y) + k, inp and out in `kind` ("float32", "float64", "bfloat16"), k a
    float32 Param cast to it (a bfloat16 one for bfloat16, as a bfloat16 generator takes its
    scale), vectorized with a guarded tail: an elementwise output of the input's region."""
    x, y = hl.Var("x"), hl.Var("y")
    t = {"float32": hl.Float(32), "float64": hl.Float(64), "bfloat16": hl.BFloat(16)}[kind]
    inp = hl.ImageParam(t, 2, "inp")
    k = hl.Param(t if kind == "bfloat16" else hl.Float(32), "k")
    out = hl.Func(name)
    out[x, y] = inp[x, y] + hl.cast(t, k)
    out.vectorize(x, 8, hl.TailStrategy.GuardWithIf)
    return out, [inp, k]


def unsized_blur_func(name="blur3", boundary=False, kind="float32"):
    """A 3 x 3 box blur, out(x, y) = the mean of inp over x - 1..x + 1, y - 1..y + 1: boundary-free
    (its largest output lies 1 inside the input on every side), or over the input's edges
    repeated (`boundary`: the input's region)."""
    x, y = hl.Var("x"), hl.Var("y")
    t = {"float32": hl.Float(32), "float64": hl.Float(64)}[kind]
    inp = hl.ImageParam(t, 2, "inp")
    src = hl.BoundaryConditions.repeat_edge(inp) if boundary else inp
    out = hl.Func(name)
    out[x, y] = sum(src[x + dx, y + dy] for dy in (-1, 0, 1) for dx in (-1, 0, 1)) / 9
    return out, [inp]


def upsample2_func(name="upsample2"):
    """out(x, y) = inp(x / 2, y / 2) (float32, nearest neighbour): twice the input's size."""
    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(hl.Float(32), 2, "inp")
    out = hl.Func(name)
    out[x, y] = inp[x // 2, y // 2]
    return out, [inp]


def gather_func(name="gather"):
    """out(x) = lut(idx(x)), idx uint8, lut float32: every output element may read any of lut's
    256 entries, so a smaller lut holds no output region."""
    x = hl.Var("x")
    idx = hl.ImageParam(hl.UInt(8), 1, "idx")
    lut = hl.ImageParam(hl.Float(32), 1, "lut")
    out = hl.Func(name)
    out[x] = lut[hl.i32(idx[x])]
    return out, [idx, lut]


def _with_boundary(params):
    """Each input read through its edges repeated: a gradient pipeline reads the inputs around
    every element of its gradients, beyond the input where the adjoint is 0 anyway."""
    return [hl.BoundaryConditions.repeat_edge(p) for p in params]


def _gradients(func, params, d_out, wrt):
    """The gradient Funcs d_<p> of `func` for the params in `wrt` (Halide's propagate_adjoints),
    d_out the output's adjoint, 0 outside its own region."""
    bounds = [hl.Range(d_out.dim(i).min(), d_out.dim(i).extent()) for i in range(d_out.dimensions())]
    d = hl.propagate_adjoints(func, hl.BoundaryConditions.constant_exterior(d_out, 0), bounds)
    grads = []
    for p in wrt:
        g = hl.Func("d_" + p.name())
        g[hl._] = d[hl.Func(p)][hl._]
        grads.append(g)
    return grads


def product_func(gradient=False):
    """out(x, y) = a(x, y) * b(x, y) + c(x, y) * k (float64), outputs unsized; its `gradient`
    pipeline (HelloPyTorch's convention: a, b, c, k and d_out in; d_a and d_b out, c gets none)."""
    x, y = hl.Var("x"), hl.Var("y")
    a, b, c = (hl.ImageParam(hl.Float(64), 2, n) for n in ("a", "b", "c"))
    k = hl.Param(hl.Float(64), "k")
    sa, sb, sc = _with_boundary([a, b, c]) if gradient else (a, b, c)
    out = hl.Func("out")
    out[x, y] = sa[x, y] * sb[x, y] + sc[x, y] * k
    if not gradient:
        return out, [a, b, c, k]
    d_out = hl.ImageParam(hl.Float(64), 2, "d_out")
    return hl.Pipeline(_gradients(out, [a, b, c], d_out, [a, b])), [a, b, c, k, d_out]


def valid_blur_func(gradient=False):
    """out(x, y) = (img(x - 1, y) + 2 img(x, y) + img(x + 1, y) * img(x, y + 1)) / 4 (float64),
    boundary-free: the output lies inside the input (at mins (0, 1) in NumPy order, one column
    less on each side, one row less at the bottom); its `gradient` pipeline (img and d_blur in,
    d_img out), which reads d_blur at those mins."""
    x, y = hl.Var("x"), hl.Var("y")
    img = hl.ImageParam(hl.Float(64), 2, "img")
    (src,) = _with_boundary([img]) if gradient else (img,)
    out = hl.Func("blur")
    out[x, y] = (src[x - 1, y] + 2 * src[x, y] + src[x + 1, y] * src[x, y + 1]) / 4
    if not gradient:
        return out, [img]
    d_out = hl.ImageParam(hl.Float(64), 2, "d_blur")
    return _gradients(out, [img], d_out, [img])[0], [img, d_out]


def bad_gradient_func(kind):
    """A backward for product_func breaking HelloPyTorch's convention, as `kind` says:
    "no_d_out" (takes a and b, no d_out), "float32" (d_a of float32 where a is float64),
    "stranger" (takes z, which product_func does not)."""
    x, y = hl.Var("x"), hl.Var("y")
    a, b = hl.ImageParam(hl.Float(64), 2, "a"), hl.ImageParam(hl.Float(64), 2, "b")
    d_out = hl.ImageParam(hl.Float(64), 2, "d_out")
    d_a = hl.Func("d_a")
    if kind == "no_d_out":
        d_a[x, y] = a[x, y] * b[x, y]
        return d_a, [a, b]
    if kind == "float32":
        d_a[x, y] = hl.f32(d_out[x, y] * b[x, y])
        return d_a, [b, d_out]
    z = hl.ImageParam(hl.Float(64), 2, "z")
    d_a[x, y] = d_out[x, y] * z[x, y]
    return d_a, [z, d_out]


# Halide's ``callconv`` Params, in its order: every scalar type a pipeline can take.
CALLCONV_SCALARS = {
    "s_bool": hl.Bool(), "s_i8": hl.Int(8), "s_i16": hl.Int(16), "s_i32": hl.Int(32), "s_i64": hl.Int(64),
    "s_u8": hl.UInt(8), "s_u16": hl.UInt(16), "s_u32": hl.UInt(32), "s_u64": hl.UInt(64),
    "s_f32": hl.Float(32), "s_f64": hl.Float(64),
}


def callconv_pipeline(combine="add"):
    """Halide's ``callconv`` (call_convention.py): a 2-D uint8 ``input``, the Params of
    CALLCONV_SCALARS, and the outputs, in this order,
    ``total`` (int64) = int64(input) + (s_bool ? 1 : 0) + every integer scalar,
    ``scaled`` (float64) = float64(s_f32) * float64(input) + s_f64, and a tuple ``packed``:
    ``packed.0`` (uint8) = input + s_u8 (`combine` "add", wrapping) or input ^ s_u8 ("xor"),
    ``packed.1`` (int32) = int32(total), wrapping."""
    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(hl.UInt(8), 2, "input")
    s = {name: hl.Param(t, name) for name, t in CALLCONV_SCALARS.items()}
    total_value = hl.i64(inp[x, y]) + hl.select(s["s_bool"], hl.i64(1), hl.i64(0))
    for name, t in CALLCONV_SCALARS.items():
        if not t.is_float() and not t.is_bool():
            total_value = total_value + hl.i64(s[name])
    combined = {"add": lambda: inp[x, y] + s["s_u8"], "xor": lambda: inp[x, y] ^ s["s_u8"]}[combine]()
    total, scaled, packed = hl.Func("total"), hl.Func("scaled"), hl.Func("packed")
    total[x, y] = total_value
    scaled[x, y] = hl.f64(s["s_f32"]) * hl.f64(inp[x, y]) + s["s_f64"]
    packed[x, y] = (hl.u8(combined), hl.i32(total_value))
    return hl.Pipeline([total, scaled, packed]), [inp, *s.values()]


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
