#!/usr/bin/env bash
# tests/gpu/run_checks.sh: the CUDA checks, on a machine with an NVIDIA GPU. Run from anywhere;
# it works in the repository root.
#
#   1. the machine: nvidia-smi -L, Python and the peers' versions;
#   2. builds the package, offline: pip install -e; else setup.py build_ext --inplace; else the
#      compiler directly on csrc/*.cpp (setuptools < 77 refuses pyproject.toml's license string);
#   3. python -m pytest tests/test_cuda.py (the rest of the suite needs pyopencl and halide);
#      HALIDE_BUFFER_GPU_ARTIFACTS (default build/gpu_artifacts, made by tests/gpu/prepare.py on a
#      machine with the halide wheel) holds the prebuilt CUDA pipelines; its pytest.zip is used
#      when this Python has no pytest;
#   4. python benchmarks/bench_cuda.py --repeat 5;
#   5. a summary. Exit status: 0 when the tests passed, 1 when one failed, 3 when the build failed.
#
# Logs, the JUnit XML and the benchmark's JSON go to the folder $OUT names when it is set, else
# to build/gpu_results. Every step has a time limit; the whole run is meant to
# stay well inside 5 minutes.
set -u
cd "$(dirname "$0")/../.." || exit 3
START=$SECONDS
PY=${PYTHON:-python}
RESULTS=${OUT:-build/gpu_results}
mkdir -p "$RESULTS"
ART=${HALIDE_BUFFER_GPU_ARTIFACTS:-build/gpu_artifacts}
[ -d "$ART" ] && ART=$(cd "$ART" && pwd)
export HALIDE_BUFFER_GPU_ARTIFACTS=$ART
export XLA_PYTHON_CLIENT_PREALLOCATE=false     # JAX would take 75% of the GPU's memory at start
export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1   # no network: fail at once, never retry
export HALIDE_BUFFER_BUILD_JOBS=${HALIDE_BUFFER_BUILD_JOBS:-$(nproc 2>/dev/null || echo 4)}
export PYTEST_DISABLE_PLUGIN_AUTOLOAD=1        # only pytest's own plugins: nothing else to warn
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}   # the package from here, however it was built

step() { printf '\n== %s (%ds)\n' "$1" $((SECONDS - START)); }

step "machine"
nvidia-smi -L 2>&1 || echo "nvidia-smi: not available"
timeout 60 "$PY" - <<'EOF' 2>&1
import importlib, platform, warnings
warnings.simplefilter("ignore")
print("python", platform.python_version(), platform.machine())
for name in ("numpy", "ml_dtypes", "pybind11", "setuptools", "pytest", "cupy", "torch", "jax", "jaxlib"):
    try:
        m = importlib.import_module(name)
        print(f"  {name} {getattr(m, '__version__', '?')}")
    except Exception as e:
        print(f"  {name}: not importable ({type(e).__name__}: {e})")
try:
    import torch
    print(f"  torch CUDA {torch.version.cuda}, available: {torch.cuda.is_available()}")
except Exception:
    pass
EOF
echo "HALIDE_BUFFER_GPU_ARTIFACTS=$HALIDE_BUFFER_GPU_ARTIFACTS"
ls -l "$HALIDE_BUFFER_GPU_ARTIFACTS" 2>&1 | sed 's/^/  /'

step "build"
# Three ways, the first that works: pip (an editable install), setup.py in place, and the
# compiler directly (setuptools older than 77 refuses pyproject.toml's `license = "MIT"`, so both
# setuptools routes fail on such a machine; the extension itself needs only pybind11's headers).
direct_build() {
    local includes suffix objdir
    includes=$("$PY" -m pybind11 --includes) || return 1
    suffix=$("$PY" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))") || return 1
    objdir=build/direct_objects
    mkdir -p "$objdir"
    # shellcheck disable=SC2086  # $includes is a list of -I flags
    ls csrc/*.cpp | xargs -P "$HALIDE_BUFFER_BUILD_JOBS" -I{} sh -c \
        'c++ -std=c++17 -O3 -DNDEBUG -fPIC -fvisibility=hidden -g0 '"$includes"' -c {} -o '"$objdir"'/$(basename {} .cpp).o' \
        || return 1
    c++ -shared -o "halide_buffer/_core$suffix" "$objdir"/*.o -ldl -lpthread
}
if timeout 180 "$PY" -m pip install --no-build-isolation --no-deps -q -e . >"$RESULTS/build.log" 2>&1; then
    echo "pip install -e . --no-build-isolation: ok"
else
    echo "pip install -e failed (tail of build.log below); building in place instead"
    tail -3 "$RESULTS/build.log" | sed 's/^/  /'
    if timeout 180 "$PY" setup.py build_ext --inplace >>"$RESULTS/build.log" 2>&1; then
        echo "setup.py build_ext --inplace: ok"
    else
        echo "setup.py build_ext --inplace failed too (tail below); compiling csrc/*.cpp directly"
        grep -E "Error|error" "$RESULTS/build.log" | tail -3 | sed 's/^/  /'
        if direct_build >>"$RESULTS/build.log" 2>&1; then
            echo "direct compile into halide_buffer/: ok"
        else
            echo "BUILD FAILED"
            tail -40 "$RESULTS/build.log"
            exit 3
        fi
    fi
fi
"$PY" -c "import halide_buffer as hb; print('halide_buffer', hb.__version__, 'from', hb.__file__); \
print('CUDA available:', hb.cuda.is_available())" 2>&1 || { echo "IMPORT FAILED"; exit 3; }

if ! "$PY" -c "import pytest" >/dev/null 2>&1; then
    if [ -f "$HALIDE_BUFFER_GPU_ARTIFACTS/pytest.zip" ]; then
        export PYTHONPATH=$HALIDE_BUFFER_GPU_ARTIFACTS/pytest.zip:$PYTHONPATH
        echo "pytest: from $HALIDE_BUFFER_GPU_ARTIFACTS/pytest.zip"
    else
        echo "pytest: missing, and no pytest.zip in $HALIDE_BUFFER_GPU_ARTIFACTS (run tests/gpu/prepare.py)"
    fi
fi

step "tests"
timeout 210 "$PY" -m pytest -q -p no:cacheprovider tests/test_cuda.py -rs --durations=8 \
    --junitxml="$RESULTS/test_cuda.xml" 2>&1 | tee "$RESULTS/test_cuda.log"
TESTS_RC=${PIPESTATUS[0]}

step "benchmark"
timeout 100 "$PY" benchmarks/bench_cuda.py --repeat 5 --json "$RESULTS/bench_cuda.json" 2>&1 \
    | tee "$RESULTS/bench_cuda.log"
BENCH_RC=${PIPESTATUS[0]}

step "summary"
echo "tests: $(grep -E '(passed|failed|error)' "$RESULTS/test_cuda.log" | tail -1) (exit $TESTS_RC)"
grep -E '^(FAILED|ERROR) ' "$RESULTS/test_cuda.log" | head -30
echo "benchmark: exit $BENCH_RC"
if [ -f "$RESULTS/bench_cuda.json" ]; then
    "$PY" - "$RESULTS/bench_cuda.json" <<'EOF' 2>&1
import json, sys
r = json.load(open(sys.argv[1]))
for t in r["targets"]:
    print(f"  {t['what']}: {t['ratio']:.2f}x (target {t['target']}: {'met' if t['met'] else 'NOT met'})")
for key, c in r["copies"].items():
    print(f"  {key}: {c['gbps']:.1f} GB/s")
for key, e in r["export_ratios"].items():
    print(f"  {key} / {e['vs']}: {e['ratio']:.2f}x")
for p in r["problems"]:
    print(f"  WARNING: {p}")
EOF
fi
echo "results in $RESULTS; $((SECONDS - START)) s in all"
[ "$TESTS_RC" -eq 0 ] || exit 1
exit 0
