"""Builds, on a machine with the ``halide`` wheel, what tests/test_cuda.py needs on a GPU machine
that has none: Halide AOT pipelines compiled for a ``-cuda`` target, and a manifest.

Run from the repository root:  python tests/gpu/prepare.py [OUT_DIR]   (default build/gpu_artifacts)

Halide compiles CUDA code without a GPU or the CUDA toolkit, so the libraries are built here and
carried over; on the GPU machine ``HALIDE_BUFFER_GPU_ARTIFACTS=OUT_DIR`` points the tests at them.
Every pipeline uses the explicit target of the other Halide tests plus ``-cuda`` (one also
``-cuda_capability_80``) and a ``gpu_tile`` schedule, and is linked twice (the sm_80 one once):

* ``lib<name>.so``: the object alone. ``hb.aot.load`` installs its handlers in the pipeline's
  Halide runtime (primary context, the call device's stream).
* ``lib<name>_glue.so``: the object with ``halide_buffer/include/halide_buffer_cuda.c``, whose
  strong hooks replace the runtime's (primary context, legacy default stream).

``manifest.json`` lists each library: function, argument names, shape and dtype of the input
and output (NumPy axis order), and the formula the output follows (``formula`` is the key
tests/test_cuda.py computes it by; ``expected`` says it in words).

Unless ``--no-pytest`` is given, ``pytest.zip`` is added: pytest and the pure-Python packages it
imports (pluggy, iniconfig, packaging, pygments), zipped, for a GPU machine whose Python has no
pytest (tests/gpu/run_checks.sh puts it on PYTHONPATH only then).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(TESTS), str(TESTS.parent)]  # the Halide tests' helpers; the package, however built

import halide as hl  # noqa: E402 - after the path: this script needs the wheel, not a skip
import pytest  # noqa: E402

import halide_buffer as hb  # noqa: E402

from pipelines import TARGET, brighter_func, c_compiler, output_bounds_follow  # noqa: E402

CUDA_TARGET = TARGET + "-cuda"
GLUE = Path(hb.get_include()) / "halide_buffer_cuda.c"

# The distributions pytest imports (pytest 9: pygments too, at import time).
PYTEST_DISTRIBUTIONS = ("pytest", "pluggy", "iniconfig", "packaging", "pygments")


def scale_func():
    """out(x, y) = in(x, y) * 2 + 1 on float32, in 16x16 GPU tiles."""
    x, y, xo, yo, xi, yi = (hl.Var(n) for n in ("x", "y", "xo", "yo", "xi", "yi"))
    inp = hl.ImageParam(hl.Float(32), 2, "inp")
    out = hl.Func("scale_f32")
    out[x, y] = inp[x, y] * 2.0 + 1.0
    out.gpu_tile(x, y, xo, yo, xi, yi, 16, 16)
    return out, [inp]


# (function name, Func factory, target, NumPy shape, dtype, formula key, words). Shapes are not
# multiples of the tile on purpose: the edge tiles run too. Halide's PTX for a bare "-cuda" target
# says ".target sm_20", which the driver JIT-compiles for the GPU at hand; the _sm80 variant
# (cuda_capability_80) tells a failure of that apart from one of ours.
PIPELINES = [
    ("hb_gpu_brighter_u8", brighter_func, CUDA_TARGET, (300, 517), "uint8", "add10_u8",
     "out = uint8(in + 10), wrapping modulo 256"),
    ("hb_gpu_scale_f32", scale_func, CUDA_TARGET, (123, 250), "float32", "scale2_plus1_f32",
     "out = in * 2 + 1 in float32"),
    ("hb_gpu_brighter_u8_sm80", brighter_func, CUDA_TARGET + "-cuda_capability_80", (64, 96), "uint8",
     "add10_u8", "out = uint8(in + 10), wrapping modulo 256"),
]


def run(command):
    done = subprocess.run([str(c) for c in command], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"prepare.py: {' '.join(map(str, command))} failed:\n{done.stdout}{done.stderr}")


def build(out_dir: Path, cc: str):
    entries = []
    for name, factory, target, shape, dtype, formula, words in PIPELINES:
        func, args = factory()
        output_bounds_follow(func, args[0])  # the output covers the input's coordinates
        obj = out_dir / f"{name}.o"
        func.compile_to_object(str(obj), args, name, hl.Target(target))
        for glue in (False, True) if target == CUDA_TARGET else (False,):
            lib = out_dir / f"lib{name}{'_glue' if glue else ''}.so"
            run([cc, "-shared", "-fPIC", "-O2", "-o", lib, obj, *([GLUE] if glue else []),
                 "-lpthread", "-ldl", "-lm"])
            entries.append({
                "function": name,
                "library": lib.name,
                "linked_with_glue": glue,
                "target": target,
                "arguments": [a.name() for a in args] + [func.name()],
                "shape": list(shape),
                "input_dtype": dtype,
                "output_dtype": dtype,
                "formula": formula,
                "expected": words,
            })
        obj.unlink()  # only the libraries travel
    return entries


def zip_pytest(out_dir: Path):
    """pytest.zip: the distributions pytest needs, every file their RECORD lists (packages,
    single modules such as pytest's py.py, metadata), as this interpreter has them installed."""
    path = out_dir / "pytest.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name in PYTEST_DISTRIBUTIONS:
            dist = metadata.distribution(name)
            for f in dist.files or []:
                local = Path(dist.locate_file(f))
                if f.parts[0] in ("..", "/") or "__pycache__" in f.parts or not local.is_file():
                    continue  # scripts in bin/, caches
                z.write(local, str(f))
    return path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", nargs="?", default="build/gpu_artifacts")
    ap.add_argument("--no-pytest", action="store_true", help="do not add pytest.zip")
    args = ap.parse_args(argv)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        cc = c_compiler()
    except pytest.skip.Exception as e:  # the shared lookup skips a test; here it is fatal
        sys.exit(f"prepare.py: {e}")
    entries = build(out_dir, cc)
    manifest = {
        "halide": metadata.version("halide"),
        "halide_buffer": hb.__version__,
        "target": CUDA_TARGET,
        "pipelines": entries,
    }
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    made = [out_dir / e["library"] for e in entries] + [out_dir / "manifest.json"]
    if not args.no_pytest:
        made.append(zip_pytest(out_dir))
    total = sum(os.path.getsize(p) for p in made)
    for p in made:
        print(f"{os.path.getsize(p):>10}  {p}")
    print(f"{total:>10}  bytes in all, in {out_dir}")


if __name__ == "__main__":
    main()
