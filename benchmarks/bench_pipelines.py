"""The AOT benchmarks' pipelines: ``out(x, y) = in(x, y) + 1`` (uint8 by default, float32 for
``bench_tvm_ffi.py``) and ``out(x, y) = in(x, y) + k`` with an int32 scalar ``k``, built for
``hb.aot.load`` and as the Python extension Halide generates for them (the peer), plus the compiler
helpers that build them and other extension modules (also used by ``bench_dask.py`` and
``bench_tvm_ffi.py``), on top of the tests' ``tests/pipelines.py``.

Every pipeline is compiled with ``Func.compile_to`` for the explicit target ``TARGET`` (Halide
21 mis-detects AVX-512 on some CPUs, so the host target is never used), into an object and
Halide's generated Python extension source (``OutputFileType.python_extension``). The object is
linked into a shared library for ``hb.aot.load``; the extension source is compiled with the C++
compiler against Python's and Halide's include directories and linked with the same object into
an importable module. Without a C++ compiler, or if that build fails, the extension is reported
unavailable (with the reason).
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path

# The targets and compilers are the tests' (tests/pipelines.py: one place builds real pipelines).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import pipelines  # noqa: E402
from pipelines import OPENCL_TARGET, TARGET  # noqa: E402,F401  (re-exported for the benchmarks)


class BuildError(Exception):
    pass


def compiler_command(variable, find):
    """$CC or $CXX as a command, else what tests/pipelines.py finds on PATH; None without one."""
    if os.environ.get(variable):
        return shlex.split(os.environ[variable])
    try:
        return [find()]
    except pipelines.NoCompiler:
        return None


def c_compiler():
    return compiler_command("CC", pipelines.c_compiler)


def cxx_compiler():
    return compiler_command("CXX", pipelines.cxx_compiler)


def run_tool(cmd, what):
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as e:
        raise BuildError(f"{what} failed: {e}") from e
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise BuildError(f"{what} failed (exit {proc.returncode})"
                         + (": " + " | ".join(tail) if tail else ""))


def import_from(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------------------------
# The pipelines, their shared libraries and Halide's generated extensions
# --------------------------------------------------------------------------------------------


def in_gpu_tiles(hl, out, gpu):
    """`out` scheduled in 8x8 GPU tiles when `gpu`."""
    if gpu:
        x, y = out.args()
        xo, yo, xi, yi = (hl.Var(n) for n in ("xo", "yo", "xi", "yi"))
        out.gpu_tile(x, y, xo, yo, xi, yi, 8, 8)
    return out


def add_one_func(hl, name, gpu, element=None):
    """out(x, y) = in(x, y) + 1 (the entry point ``name(in, out)``) on `element` (an hl.Type;
    uint8, wrapping, by default); in 8x8 GPU tiles when `gpu`."""
    element = element or hl.UInt(8)
    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(element, 2, "inp")
    out = hl.Func(name)
    out[x, y] = inp[x, y] + hl.cast(element, 1)
    return in_gpu_tiles(hl, out, gpu), [inp]


def add_k_func(hl, name, gpu, element=None):
    """out(x, y) = in(x, y) + k, k an int32 scalar (the entry point ``name(in, k, out)``), on
    `element` (an hl.Type; uint8, wrapping, by default); in 8x8 GPU tiles when `gpu`."""
    element = element or hl.UInt(8)
    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(element, 2, "inp")
    k = hl.Param(hl.Int(32), "k")
    out = hl.Func(name)
    out[x, y] = inp[x, y] + hl.cast(element, k)
    return in_gpu_tiles(hl, out, gpu), [inp, k]


class Built:
    """One pipeline: its shared library (for hb.aot and ctypes) and its generated extension."""

    def __init__(self, library, wrapper_source, extension, extension_reason):
        self.library = library                  # Path of lib<name>.so
        self.wrapper_source = wrapper_source    # the generated extension's C++ source (text)
        self.extension = extension              # the imported module, or None
        self.extension_reason = extension_reason


def build_pipeline(hl, workdir: Path, name, gpu, want_extension, define=add_one_func):
    """The pipeline `define(hl, name, gpu)` returns, as a shared library and (if
    `want_extension`) Halide's generated extension; BuildError if the library cannot be built."""
    cc = c_compiler()
    if not cc:
        raise BuildError("no C compiler (gcc, cc, clang or $CC) to link the pipeline")
    func, args = define(hl, name, gpu)
    obj, src = workdir / f"{name}.o", workdir / f"{name}.py.cpp"
    outputs = {hl.OutputFileType.object: str(obj)}
    if want_extension:
        outputs[hl.OutputFileType.python_extension] = str(src)
    try:
        func.compile_to(outputs, args, name, hl.Target(OPENCL_TARGET if gpu else TARGET))
    except Exception as e:  # noqa: BLE001 - Halide raises its own error types
        raise BuildError(f"Halide's compile_to failed: {type(e).__name__}: {e}") from e
    library = workdir / f"lib{name}.so"
    run_tool([*cc, "-shared", "-o", str(library), str(obj), "-lpthread", "-ldl", "-lm"],
             f"linking lib{name}.so")
    if not want_extension:
        return Built(library, "", None, "skipped (--no-peer)")
    wrapper = src.read_text() if src.is_file() else ""
    extension, reason = None, None
    try:
        extension = build_extension(hl, workdir, name, obj, src)
    except BuildError as e:
        reason = str(e)
    except Exception as e:  # noqa: BLE001 - any import failure means "peer unavailable"
        reason = f"importing the generated extension failed: {type(e).__name__}: {e}"
    return Built(library, wrapper, extension, reason)


def build_extension(hl, workdir, name, obj, src):
    """Compiles Halide's generated extension source and links it with the pipeline's object."""
    if not src.is_file():
        raise BuildError("compile_to wrote no python_extension source")
    return build_module(hl, workdir, name, [src, obj], f"compiling the generated extension {src.name}")


def build_module(hl, workdir, name, inputs, what, flags=()):
    """Compiles and links C++ sources and objects `inputs` against Python's and Halide's headers
    into the extension module `name` in `workdir`, and imports it; `flags` go to the compiler
    too (a ``-D`` that picks a variant). BuildError says why not."""
    cxx = cxx_compiler()
    if not cxx:
        raise BuildError(f"no C++ compiler (g++, c++, clang++ or $CXX): {what}")
    halide_include = Path(hl.__file__).resolve().parent / "include"
    if not (halide_include / "HalideRuntime.h").is_file():
        raise BuildError("HalideRuntime.h not found in the halide package's include directory")
    py_include = sysconfig.get_paths()["include"]
    target = workdir / (name + (sysconfig.get_config_var("EXT_SUFFIX") or ".so"))
    # -O3 -DNDEBUG: the optimisation level setuptools gives the halide_buffer extension.
    run_tool([*cxx, "-O3", "-DNDEBUG", "-std=c++17", "-shared", "-fPIC", *flags, f"-I{py_include}",
              f"-I{halide_include}", *map(str, inputs), "-o", str(target),
              "-lpthread", "-ldl", "-lm"],
             what)
    return import_from(target, name)


def opencl_prerequisites():
    """What an OpenCL pipeline benchmark needs, in this order: the ``halide`` wheel, the test
    suite's OpenCL interposer (it must go in before OpenCL is first opened) and a device. Returns
    (halide, interposer or None, why there is none, device), or None after saying on stderr what
    is missing (the caller exits with status 2)."""
    try:
        import halide as hl
    except ImportError as e:
        print(f"needs the halide wheel (pip install halide): {e}", file=sys.stderr)
        return None
    from bench_common import test_support

    interposer = test_support("opencl_interposer")
    installed = interposer.install()
    import halide_buffer as hb

    try:
        dev = hb.opencl.device()
    except Exception as e:  # noqa: BLE001 - no OpenCL means nothing to measure
        print(f"needs an OpenCL device: {type(e).__name__}: {e}", file=sys.stderr)
        return None
    return hl, (interposer if installed else None), (None if installed else interposer.reason()), dev
