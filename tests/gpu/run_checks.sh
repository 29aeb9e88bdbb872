#!/usr/bin/env bash
# tests/gpu/run_checks.sh: every CUDA check in one command, on a machine with an NVIDIA GPU.
# Run from anywhere (it works in the repository root): bash tests/gpu/run_checks.sh
# Nothing needs the network. PYTHON names the interpreter (default: python3).
#
# Steps, each with its own time limit; the limits add up to 555 s, so the worst case (every
# step running to its limit) ends within 10 minutes:
#   1. machine     20 s  nvidia-smi, Python and the peers' versions.
#   2. peers       90 s  where a package index answers within 5 s: pip installs what is missing of
#                        CuPy (cupy-cudaNNx for the driver's CUDA major), PyTorch, JAX
#                        (jax[cudaNN]), the halide wheel and pytest. Without an index it says so
#                        and goes on at once; a peer that is still missing only skips its tests.
#   3. build      120 s  setup.py build_ext --inplace (incremental), else pip install -e, else the
#                        compiler directly on csrc/*.cpp (setuptools < 77 refuses pyproject.toml's
#                        license string); the three share the limit.
#   4. pipelines   40 s  the prebuilt Halide CUDA pipelines in $HALIDE_BUFFER_GPU_ARTIFACTS
#                        (default build/gpu_artifacts, carried from a machine that ran
#                        tests/gpu/prepare.py); when it has no manifest.json and the halide wheel
#                        is importable, prepare.py makes them here. Its pytest.zip stands in for a
#                        missing pytest.
#   5. tests      210 s  pytest on every test that needs a GPU (GPU_TESTS below), with the real
#                        driver: HALIDE_BUFFER_CUDA_LIBRARY=libcuda.so.1.
#   6. benchmark   60 s  benchmarks/bench_cuda.py --repeat 5.
#   7. summary     15 s  one table: passed / failed / skipped per area (from the JUnit XML), then
#                        the bandwidth and export ratios against CuPy.
# Exit status: 0 when the tests passed, 1 when one failed (or the run stopped at its limit),
# 3 when the build failed. Logs, the JUnit XML and the benchmark's JSON go to the folder $OUT
# names when it is set, else to build/gpu_results.
set -u
cd "$(dirname "$0")/../.." || exit 3
START=$SECONDS
PY=${PYTHON:-python3}
command -v "$PY" >/dev/null 2>&1 || PY=python
RESULTS=${OUT:-build/gpu_results}
mkdir -p "$RESULTS"
ART=${HALIDE_BUFFER_GPU_ARTIFACTS:-build/gpu_artifacts}
export XLA_PYTHON_CLIENT_PREALLOCATE=false     # JAX would take 75% of the GPU's memory at start
export PIP_DISABLE_PIP_VERSION_CHECK=1
export HALIDE_BUFFER_BUILD_JOBS=${HALIDE_BUFFER_BUILD_JOBS:-$(nproc 2>/dev/null || echo 4)}
export PYTEST_DISABLE_PLUGIN_AUTOLOAD=1        # only pytest's own plugins: nothing else to warn
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}   # the package from here, however it was built
# The real driver: the test suite otherwise loads a CPU stand-in of it.
export HALIDE_BUFFER_CUDA_LIBRARY=libcuda.so.1

STEP_END=0
step() {  # NAME LIMIT: starts a step that must end within LIMIT seconds
    STEP_END=$((SECONDS + $2))
    printf '\n== %s (at %d s; limit %d s)\n' "$1" $((SECONDS - START)) "$2"
}
left() {  # seconds left of the current step's limit, at least 1
    local n=$((STEP_END - SECONDS))
    echo $((n > 1 ? n : 1))
}
within() {  # N: N seconds, or what is left of the step when less
    local n
    n=$(left)
    echo $((n < $1 ? n : $1))
}
importable() { timeout "$(left)" "$PY" -c "import $1" >/dev/null 2>&1; }

step "machine" 20
timeout "$(within 10)" nvidia-smi -L 2>&1 || echo "nvidia-smi: not available"
timeout "$(left)" "$PY" - <<'EOF' 2>&1
import importlib, platform, warnings
warnings.simplefilter("ignore")
print("python", platform.python_version(), platform.machine())
for name in ("numpy", "ml_dtypes", "pybind11", "setuptools", "pytest", "cupy", "torch", "jax", "halide"):
    try:
        m = importlib.import_module(name)
        print(f"  {name} {getattr(m, '__version__', '?')}")
    except Exception as e:
        print(f"  {name}: not importable ({type(e).__name__}: {e})")
EOF

step "peers" 90
# What to install, one "install REQUIREMENT" or "note TEXT" a line: a peer that cannot be
# imported, and JAX's GPU plugin (CuPy and JAX matched to the driver's CUDA major).
PEERS=$(timeout "$(left)" "$PY" -u - <<'EOF' 2>/dev/null
import ctypes, importlib, warnings
warnings.simplefilter("ignore")
try:
    version = ctypes.c_int()
    ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(version))
    major = version.value // 1000
except OSError:
    print("note no CUDA driver (libcuda.so.1): no peer to install")
    raise SystemExit
def module(name):
    try:
        return importlib.import_module(name)
    except Exception:
        return None
def usable(check):
    try:
        return bool(check())
    except Exception:
        return False
for name, requirement in (("pytest", "pytest"), ("cupy", f"cupy-cuda{major}x"), ("halide", "halide>=21,<22"),
                          ("jax", f"jax[cuda{major}]"), ("torch", "torch")):
    m = module(name)
    if m is None or (name == "jax" and not usable(lambda: m.devices("gpu"))):
        print("install", requirement)
    elif name == "torch" and not m.cuda.is_available():
        print(f"note torch {m.__version__} has no CUDA: not replaced (its tests skip)")
EOF
)
sed -n 's/^note /  /p' <<<"$PEERS"
MISSING=$(sed -n 's/^install //p' <<<"$PEERS")
if [ -z "$MISSING" ]; then
    echo "nothing to install"
else
    INDEX=${PIP_INDEX_URL:-$(timeout "$(within 5)" "$PY" -m pip config get global.index-url 2>/dev/null)}
    INDEX=${INDEX:-https://pypi.org/simple}
    if [ -n "${PIP_NO_INDEX:-}" ] || ! timeout "$(within 6)" "$PY" -c "import sys, urllib.request; \
urllib.request.urlopen(sys.argv[1], timeout=5).close()" "$INDEX/pip/" >/dev/null 2>&1; then
        echo "no package index answers ($INDEX): not installing $(echo "$MISSING" | tr '\n' ' ')"
        echo "(their tests skip, saying which peer is missing)"
    else
        while read -r requirement; do
            # A throwaway machine: pip may install over a distribution's own Python.
            if PIP_BREAK_SYSTEM_PACKAGES=1 timeout "$(left)" "$PY" -m pip install -q --prefer-binary \
                "$requirement" >"$RESULTS/pip.log" 2>&1; then
                echo "installed $requirement"
            else
                echo "could not install $requirement ($(tail -1 "$RESULTS/pip.log"))"
            fi
        done <<<"$MISSING"
    fi
fi

step "build" 120
# Three ways, the first that works: setup.py in place (incremental), pip (an editable install),
# and the compiler directly (setuptools older than 77 refuses pyproject.toml's `license = "MIT"`,
# so both setuptools routes fail on such a machine; the extension needs only pybind11's headers).
direct_build() {
    local includes suffix objdir
    includes=$("$PY" -m pybind11 --includes) || return 1
    suffix=$("$PY" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))") || return 1
    objdir=build/direct_objects
    mkdir -p "$objdir"
    # shellcheck disable=SC2016  # $(basename ...) is expanded by the sh that xargs runs
    find csrc -name '*.cpp' | timeout "$(left)" xargs -P "$HALIDE_BUFFER_BUILD_JOBS" -I{} sh -c \
        'c++ -std=c++17 -O3 -DNDEBUG -fPIC -fvisibility=hidden -g0 -Icsrc '"$includes"' -c {} -o '"$objdir"'/$(basename {} .cpp).o' \
        || return 1
    timeout "$(left)" c++ -shared -o "halide_buffer/_core$suffix" "$objdir"/*.o -ldl -lpthread
}
if PIP_NO_INDEX=1 timeout "$(left)" "$PY" setup.py -q build_ext --inplace >"$RESULTS/build.log" 2>&1; then
    echo "setup.py build_ext --inplace: ok"
else
    echo "setup.py build_ext --inplace failed (tail of build.log below); trying pip install -e"
    tail -3 "$RESULTS/build.log" | sed 's/^/  /'
    if PIP_NO_INDEX=1 timeout "$(left)" "$PY" -m pip install --no-build-isolation --no-deps -q -e . \
        >>"$RESULTS/build.log" 2>&1; then
        echo "pip install -e . --no-build-isolation: ok"
    else
        echo "pip install -e failed too (tail below); compiling csrc/*.cpp directly"
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
timeout "$(left)" "$PY" -c "import halide_buffer as hb; \
print('halide_buffer', hb.__version__, 'from', hb.__file__); \
print('CUDA available:', hb.cuda.is_available(), '(' + str(hb.cuda.loaded_library()) + ')')" 2>&1 \
    || { echo "IMPORT FAILED"; exit 3; }

step "pipelines" 40
if [ -f "$ART/manifest.json" ]; then
    echo "prebuilt CUDA pipelines: $ART (carried)"
elif importable halide; then
    if timeout "$(left)" "$PY" tests/gpu/prepare.py "$ART" >"$RESULTS/prepare.log" 2>&1; then
        echo "prebuilt CUDA pipelines: made here by tests/gpu/prepare.py in $ART"
    else
        echo "tests/gpu/prepare.py failed (the pipeline tests skip):"
        tail -5 "$RESULTS/prepare.log" | sed 's/^/  /'
    fi
else
    echo "no $ART/manifest.json and no halide wheel to make one: the pipeline tests skip"
    echo "(run python tests/gpu/prepare.py on a machine with the wheel and carry $ART)"
fi
[ -d "$ART" ] && ART=$(cd "$ART" && pwd)
export HALIDE_BUFFER_GPU_ARTIFACTS=$ART
if ! importable pytest; then
    if [ -f "$ART/pytest.zip" ]; then
        export PYTHONPATH=$ART/pytest.zip:$PYTHONPATH
        echo "pytest: from $ART/pytest.zip"
    else
        echo "pytest: missing, and no pytest.zip in $ART (run tests/gpu/prepare.py)"
    fi
fi

step "tests" 210
# Every test that needs a GPU: test_cuda.py, the glue's (these build a pipeline: with the halide
# wheel only), and the tests of other files that take another path with a driver.
GPU_TESTS=(tests/test_cuda.py
           "tests/test_dlpack_malformed.py::test_a_cuda_tensor_is_taken_and_a_device_refusal_deletes_it_once")
if importable halide; then
    GPU_TESTS+=(tests/test_cuda_glue.py)
else
    echo "tests/test_cuda_glue.py: not run (it builds its pipeline with the halide wheel, missing here;"
    echo "the prebuilt *_glue libraries of test_cuda.py run the same glue)"
fi
# hb.torch.op on CUDA tensors, on torch's current stream, and an op with its gradient pipeline (they build their pipelines with the halide
# wheel; skips without a CUDA build of torch).
if importable halide && importable torch; then
    GPU_TESTS+=("tests/test_torch_op.py::test_a_cuda_pipeline_on_cuda_tensors")
    GPU_TESTS+=("tests/test_torch_gradients.py::test_gradients_on_cuda_tensors")
fi
rm -f "$RESULTS/gpu_tests.xml"
# At the limit pytest is interrupted (SIGINT), so that it still writes the XML of what ran.
timeout -s INT -k 10 $(($(left) - 10)) "$PY" -m pytest -q -p no:cacheprovider "${GPU_TESTS[@]}" -rfE --durations=8 \
    --junitxml="$RESULTS/gpu_tests.xml" >"$RESULTS/gpu_tests.log" 2>&1
TESTS_RC=$?
tail -30 "$RESULTS/gpu_tests.log"
[ "$TESTS_RC" -eq 124 ] && echo "TESTS STOPPED at their limit"

step "benchmark" 60
timeout "$(left)" "$PY" benchmarks/bench_cuda.py --repeat 5 --json "$RESULTS/bench_cuda.json" \
    >"$RESULTS/bench_cuda.log" 2>&1
BENCH_RC=$?
cat "$RESULTS/bench_cuda.log"

step "summary" 15
timeout "$(left)" "$PY" - "$RESULTS" "$TESTS_RC" "$BENCH_RC" <<'EOF'
"""The summary table: tests per area from the JUnit XML, then the benchmark's ratios."""
import json, os, re, sys
import xml.etree.ElementTree as ET
from collections import Counter

results, tests_rc, bench_rc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
# (area, file or None for any, pattern of the test's name): the first match wins.
AREAS = [
    ("no driver, argument checks", None, r"without_a_driver|missing_driver|every_cpu_feature|bad_device_arguments"
                                         r"|refuses_an_object|checks_the_interface|host_only|of_a_host_buffer"),
    ("glue (halide_buffer_cuda.c)", "test_cuda_glue", r""),
    ("DLPack checks", "test_dlpack_malformed", r""),
    ("pipelines (hb.aot)", None, r"pipeline|runtime"),
    ("device out of memory", None, r"out_of_device_memory|larger_than_the_gpu"),
    ("JAX", None, r"jax"),
    ("streams", None, r"stream|waits_for"),
    ("DLPack / PyTorch", None, r"torch"),
    ("lifetimes, collection", None, r"collected|alive|outlive|keeps_it_after|detach"),
    ("interface / CuPy", None, r"cupy|interface|wrap"),
    ("device, residency, DLPack", None, r""),
]

def area_of(module, name):
    for area, file, pattern in AREAS:
        if (file is None or module.endswith(file)) and re.search(pattern, name):
            return area
    return AREAS[-1][0]

counts = {area: Counter() for area, _, _ in AREAS}
reasons, failed = Counter(), []
xml = os.path.join(results, "gpu_tests.xml")
if os.path.isfile(xml):
    for case in ET.parse(xml).iter("testcase"):
        module, name = case.get("classname", ""), case.get("name", "")
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
                failed.append(f"{module.rsplit('.', 1)[-1]}::{name}")
                break
            if child.tag == "skipped":
                outcome = "skipped"
                reasons[child.get("message", "")[:120]] += 1
        counts[area_of(module, name)][outcome] += 1
else:
    print(f"no JUnit XML ({xml}): pytest did not run to the end (exit {tests_rc})")

width = max(len(a) for a in counts)
print(f"{'area':<{width}}  {'passed':>6}  {'failed':>6}  {'skipped':>7}")
print(f"{'-' * width}  ------  ------  -------")
total = Counter()
for area, c in counts.items():
    if sum(c.values()):
        print(f"{area:<{width}}  {c['passed']:>6}  {c['failed']:>6}  {c['skipped']:>7}")
        total += c
print(f"{'all':<{width}}  {total['passed']:>6}  {total['failed']:>6}  {total['skipped']:>7}   (pytest exit {tests_rc})")
for reason, n in reasons.most_common(6):
    print(f"  skipped {n:>3}x: {reason}")
for name in failed[:20]:
    print(f"  FAILED {name}")

print()
bench = os.path.join(results, "bench_cuda.json")
if os.path.isfile(bench):
    r = json.load(open(bench))
    print(f"benchmark (exit {bench_rc}) on {r['environment'].get('device', '?')}: ratios against CuPy")
    for t in r["targets"]:
        print(f"  {t['what']}: {t['ratio']:.2f}x (target {t['target']}: {'met' if t['met'] else 'NOT met'})")
    for key, c in r["copies"].items():
        print(f"  {key}: {c['gbps']:.1f} GB/s, {c['bandwidth_vs_pinned']:.2f}x CuPy pinned")
    for key, e in r["export_ratios"].items():
        print(f"  {key} / {e['vs']}: {e['ratio']:.2f}x the time")
    for p in r["problems"]:
        print(f"  WARNING: {p}")
else:
    log = os.path.join(results, "bench_cuda.log")
    last = open(log).read().strip().splitlines()[-1:] if os.path.isfile(log) else []
    print(f"benchmark (exit {bench_rc}): no figures ({last[0] if last else 'no output'})")
EOF
echo "results in $RESULTS; $((SECONDS - START)) s in all"
[ "$TESTS_RC" -eq 0 ] || exit 1
exit 0
