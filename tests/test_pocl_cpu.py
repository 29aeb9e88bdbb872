"""pip's PoCL is given a CPU name its compiler knows (halide_buffer._pocl_cpu)."""

import os
import platform
import re
import subprocess
import sys

import pytest

import halide_buffer as hb
from halide_buffer import _pocl_cpu

V2 = {"cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3"}
V3 = V2 | {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"}
V4 = V3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}


@pytest.mark.parametrize("flags, level", [
    (set(), "x86-64"),
    ({"sse2", "fpu"}, "x86-64"),
    (V2, "x86-64-v2"),
    (V3, "x86-64-v3"),
    (V4 | {"avx512_bf16"}, "x86-64-v4"),
    (V4 - {"avx512vl"}, "x86-64-v3"),
    (V4 - {"movbe"}, "x86-64-v2"),  # AVX-512 without a v3 flag is no v3 or v4
    (V4 - {"popcnt"}, "x86-64"),
])
def test_the_feature_level_needs_every_flag_of_it_and_the_levels_below(flags, level):
    assert _pocl_cpu.feature_level(flags) == level


@pytest.mark.parametrize("llvm_name, env_name, chosen", [
    ("generic", None, "x86-64-v3"),     # a CPU LLVM does not know: the feature level
    ("generic", "", "x86-64-v3"),       # an empty variable is no choice
    ("znver3", None, None),             # a CPU LLVM knows: PoCL is left as it is
    ("znver3", "x86-64-v2", "x86-64-v2"),  # the variable, as later PoCL releases read it
    ("generic", "skylake", "skylake"),
])
def test_the_variable_wins_and_a_generic_host_gets_its_feature_level(llvm_name, env_name, chosen):
    assert _pocl_cpu.chosen_name(llvm_name, env_name, V3) == chosen


def _target_cpu_of_a_build(env_name):
    """The -target-cpu PoCL compiles a kernel for, in a fresh process that opened OpenCL through
    halide_buffer (PoCL's build log, POCL_DEBUG=llvm, names it); and what _pocl_cpu applied."""
    if not hb.opencl._bundled("libpocl*.so*") or platform.machine() != "x86_64":
        pytest.skip("pip's PoCL (pocl-binary-distribution beside pyopencl) on x86-64 is what "
                    "_pocl_cpu adjusts; this machine has neither")
    env = dict(os.environ, POCL_DEBUG="llvm")
    env.pop(_pocl_cpu.ENV_NAME, None)
    if env_name is not None:
        env[_pocl_cpu.ENV_NAME] = env_name
    code = (
        "import halide_buffer as hb, pyopencl as cl\n"
        "from halide_buffer import _pocl_cpu\n"
        "dev = hb.opencl.device()\n"
        "ctx = cl.Context.from_int_ptr(dev.context)\n"
        "cl.Program(ctx, '__kernel void k(__global int *a) { a[0] = 1; }').build()\n"
        "print('applied', _pocl_cpu.applied())\n"
    )
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    targets = set(re.findall(r"-target-cpu (\S+)", run.stderr + run.stdout))
    assert len(targets) == 1, (targets, run.stderr[-3000:])
    return targets.pop(), run.stdout.split("applied ")[1].strip()


def test_pocl_never_compiles_for_generic():
    target, applied = _target_cpu_of_a_build(None)
    assert target != "generic"
    if applied != "None":  # LLVM did not know this CPU: its feature level was given
        assert target == applied == _pocl_cpu.feature_level(_pocl_cpu.cpu_flags())


def test_the_variable_names_the_cpu_pocl_compiles_for():
    target, applied = _target_cpu_of_a_build("x86-64-v2")
    assert target == applied == "x86-64-v2"
