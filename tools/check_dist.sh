#!/usr/bin/env bash
# tools/check_dist.sh: checks the release files tools/build_wheels.sh made, the way a user meets
# them. Run from anywhere, in a clone of the repository (the sdist is compared with Git's list).
#
#   tools/check_dist.sh DIR                     # the sdist, and each wheel in DIR under its Python
#   tools/check_dist.sh DIR python3.12 python   # the sdist, and the wheels of these interpreters
#   tools/check_dist.sh --all-tests DIR python  # the sdist's whole suite against this Python's wheel
#
# 1. The sdist holds every file Git tracks (but the repository's own dotfiles: .ci/, .gitignore)
#    and no build products; its long description links only to absolute URLs.
# 2. For each wheel (without interpreters named: every wheel in DIR, under the python3.X of its
#    tag, found as tools/build_wheels.sh finds them), in a fresh virtual environment of that
#    Python outside the repository: the wheel with the opencl extra (PoCL: a real OpenCL device
#    on the CPU), pytest, hypothesis and the `halide` wheel, pinned by constraints.txt (but on
#    3.10, which lacks many of its releases: the newest that 3.10 has); PyTorch 2.13.0
#    and JAX too on the Pythons in CHECK_DIST_TORCH (default 3.11: PyTorch's CPU wheel is on
#    this project's machines; for another Python pip would download gigabytes of CUDA). From a
#    temporary folder, `python -m halide_buffer` and `python -m halide_buffer demo` run, and a
#    smoke test: a buffer written through NumPy, copied to the OpenCL device and back.
# 3. The sdist, unpacked in a temporary folder, runs a subset of its own tests against that
#    installed wheel (which pip built from the sdist): SUBSET below under every Python, and
#    WITH_TORCH too where PyTorch and JAX are. With --all-tests: the whole suite, with the test
#    extra (`.[test]`, pinned) installed.
#
# CHECK_DIST_JOBS wheels are checked at once (default 2).
# Exit status: 0 when all passed, 1 otherwise.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
all_tests=""
if [ "${1:-}" = "--all-tests" ]; then all_tests=1; shift; fi
if [ $# -lt 1 ] || [ ! -d "$1" ]; then
    echo "usage: tools/check_dist.sh [--all-tests] DIR [PYTHON...] (DIR: one sdist and wheels)" >&2
    exit 1
fi
dist=$(cd "$1" && pwd)
shift
TORCH_PYTHONS=${CHECK_DIST_TORCH:-3.11}

# The tests of the subset, under every Python: none imports PyTorch or JAX. Together they cover
# what the extension offers Python (the buffer protocol and the exports, DLPack's capsules,
# pickle and shared memory, Halide AOT pipelines and halide_buffer_t, Halide's own buffers,
# residency on the host and on PoCL's device, threads, errors) and the wheel's symbol versions.
SUBSET=(tests/test_cli.py tests/test_stubs.py tests/test_exports.py tests/test_errors.py
    tests/test_messages.py tests/test_ownership.py tests/test_residency_host.py
    tests/test_residency_device.py tests/test_opencl_device.py tests/test_device_errors.py
    tests/test_device_threads.py tests/test_dlpack_malformed.py tests/test_buffer_data.py
    tests/test_pickle.py tests/test_shared_memory.py tests/test_aot_loading.py
    tests/test_aot_metadata.py tests/test_aot_pickle.py tests/test_raw_halide_buffer_t.py
    tests/test_halide_bridge.py tests/test_wheel_symbols.py)
# And under the Pythons with PyTorch and JAX: DLPack both ways, every dtype, and the long tests
# of code that is the same C++ under every Python: the AOT tests that build many pipelines (every
# argument kind, tensors among them; Halide's own runtime's scenarios) and
# the residency model's random operations (the quick hypothesis profile's counts: CI runs CI's
# counts once, on the development build).
WITH_TORCH=(tests/test_dlpack.py tests/test_aot.py tests/test_aot_outputs.py
    tests/test_aot_arguments.py tests/test_aot_upstream.py tests/test_residency_model.py)
# The Pythons whose environment is not pinned: many of constraints.txt's releases need 3.11 or
# newer (numpy 2.4.6, hypothesis 6.170.17, scipy, jax, ...); pip takes the newest each has.
UNPINNED_PYTHONS="3.10"

if command -v pyenv >/dev/null; then
    PYENV_VERSION=$(pyenv version-name):$(pyenv versions --bare | paste -sd: -)  # current first
    export PYENV_VERSION
fi

sdists=("$dist"/*.tar.gz)
if [ ${#sdists[@]} -ne 1 ] || [ ! -f "${sdists[0]}" ]; then
    echo "check_dist.sh: want one sdist in $dist" >&2
    exit 1
fi
sdist=${sdists[0]}
pythons=("$@")
if [ ${#pythons[@]} -eq 0 ]; then  # each wheel's own Python, from its tag (cp312: python3.12)
    for w in "$dist"/*-manylinux*.whl; do
        [ -f "$w" ] || continue
        tag=$(basename "$w" | cut -d- -f3)
        pythons+=("python3.${tag#cp3}")
    done
    [ ${#pythons[@]} -gt 0 ] || { echo "check_dist.sh: no manylinux wheel in $dist" >&2; exit 1; }
fi
PY=${pythons[0]}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== 1. $(basename "$sdist"): contents and long description"
git -C "$ROOT" ls-files >"$work/tracked"
"$PY" - "$sdist" "$work/tracked" <<'EOF'
import email.parser
import re
import sys
import tarfile

sdist, tracked_list = sys.argv[1], sys.argv[2]
with tarfile.open(sdist) as tar:
    members = {m.name.partition("/")[2]: m for m in tar.getmembers()}
    pkg_info = tar.extractfile(members["PKG-INFO"]).read().decode()
shipped = {name for name, m in members.items() if m.isfile()}
# The repository's own files (CI, Git's settings) start with a dot; everything else ships.
tracked = {p for p in open(tracked_list).read().splitlines() if not p.startswith(".")}
problems = [f"tracked but not in the sdist: {p}" for p in sorted(tracked - shipped)]
problems += [f"a build product in the sdist: {p}" for p in sorted(shipped)
             if re.search(r"(\.so|\.o|\.pyc)$|__pycache__/", p)]

description = email.parser.Parser().parsestr(pkg_info).get_payload()
targets = re.findall(r"\]\(([^)\s]+)", description)                   # [text](target)
targets += re.findall(r"^\s*\[[^\]]+\]:\s*(\S+)", description, re.M)  # [label]: target
targets += re.findall(r"""(?:href|src)=["']([^"']+)""", description)   # HTML
problems += [f"a link the package index cannot follow: {t}" for t in targets
             if not re.match(r"https?://|#", t)]
for p in problems:
    print("  " + p)
if problems:
    sys.exit(f"check_dist.sh: {len(problems)} problem(s) with {sdist}")
print(f"  {len(shipped)} files, every tracked one; {len(targets)} links, all absolute")
EOF

tar -xzf "$sdist" -C "$work"
trees=("$work"/halide_buffer-*)
tree=${trees[0]}

check_wheel() {  # PYTHON: steps 2 and 3 for the wheel of that interpreter
    local py=$1 version tag wheels wheel venv venv_py constraints requirements tests
    version=$("$py" -c "import sys; print('%d.%d' % sys.version_info[:2])")
    tag=cp${version/./}
    wheels=("$dist"/*-"$tag"-"$tag"-manylinux*.whl)
    [ -f "${wheels[0]}" ] || { echo "check_dist.sh: no manylinux wheel for $tag in $dist" >&2; return 1; }
    wheel=${wheels[0]}
    venv=$work/venv-$version
    venv_py=$venv/bin/python
    echo "== 2. $(basename "$wheel") in a fresh environment of Python $version ($py)"
    "$py" -m venv "$venv"
    constraints=$work/constraints-$version.txt
    if [[ " $UNPINNED_PYTHONS " == *" $version "* ]]; then
        : >"$constraints"
    else
        cp "$tree/constraints.txt" "$constraints"
    fi
    tests=("${SUBSET[@]}")
    if [ -n "$all_tests" ]; then
        requirements=("${wheel}[opencl,test]")
        tests=(tests)
    else
        requirements=("${wheel}[opencl]" pytest hypothesis halide)
        if [[ " $TORCH_PYTHONS " == *" $version "* ]]; then
            requirements+=(torch jax)
            tests+=("${WITH_TORCH[@]}")
        fi
    fi
    "$venv_py" -m pip install -q "${requirements[@]}" -c "$constraints" >"$work/pip-$version.log" 2>&1 ||
        { cat "$work/pip-$version.log" >&2; return 1; }
    "$venv_py" -m pip list --format=freeze 2>/dev/null |
        grep -iE "^(numpy|ml.dtypes|halide|pyopencl|pocl-binary-distribution|torch|jax)==" | paste -sd' ' |
        sed 's/^/  with: /'
    mkdir -p "$work/elsewhere-$version"
    cd "$work/elsewhere-$version"  # not the repository: its halide_buffer/ must not be imported
    "$venv_py" -m halide_buffer >"$work/about-$version.log"  # the version, dtypes, devices, peers
    echo "  python -m halide_buffer: $(head -1 "$work/about-$version.log");" \
        "$(grep -m1 "OpenCL:" "$work/about-$version.log" | sed 's/^ *//')"
    "$venv_py" -m halide_buffer demo >"$work/demo-$version.log" 2>&1 ||
        { cat "$work/demo-$version.log" >&2; return 1; }
    echo "  python -m halide_buffer demo: $(wc -l <"$work/demo-$version.log") lines, exit 0"
    "$venv_py" - "$venv" <<'EOF' || return 1
import pathlib
import sys

import numpy as np

import halide_buffer as hb

venv = pathlib.Path(sys.argv[1]).resolve()
where = pathlib.Path(hb._core.__file__).resolve()
assert where.is_relative_to(venv), f"halide_buffer._core imported from {where}, not from {venv}"

values = np.arange(12, dtype=np.float32).reshape(3, 4)
b = hb.Buffer((3, 4), "float32")
b.numpy(writable=True)[...] = values
device = hb.opencl.device()          # PoCL's CPU device on a machine without a GPU
b.copy_to_device(device)
on_device = hb.opencl.as_array(b)     # pyopencl's view of the same device memory
on_device *= 2                        # a kernel writes it: the device copy is now the newer one
assert np.array_equal(np.asarray(b), 2 * values)
t = b.transfers
# A device sharing the host's memory maps (no byte moves); any other copies, once each way.
moved = (t.maps_to_device, t.maps_to_host) if device.zero_copy else (t.to_device, t.to_host)
assert moved == (1, 1), t
print(f"  smoke test passed: {device!r}, {t!r}")
EOF

    echo "== 3. the sdist's own tests under Python $version, against the installed wheel"
    echo "   ${tests[*]#tests/}"
    # Run from elsewhere, with the tree's configuration: the tree's halide_buffer/ (sources only)
    # must not come first on sys.path, neither in pytest nor in the Pythons the tests start.
    "$venv/bin/pytest" -q -p no:cacheprovider --rootdir "$tree" -c "$tree/pyproject.toml" \
        "${tests[@]/#/$tree/}"
}

# CHECK_DIST_JOBS wheels at once (default 2: much of a check is waiting for pip and for
# subprocesses), each in the background, so that `set -e` holds inside (a function called as a
# condition runs without it), its output shown when it ends.
jobs=${CHECK_DIST_JOBS:-2}
failed=()
for ((i = 0; i < ${#pythons[@]}; i += jobs)); do
    batch=("${pythons[@]:i:jobs}")
    pids=()
    start=$SECONDS
    for py in "${batch[@]}"; do
        check_wheel "$py" >"$work/check-${py//\//_}.log" 2>&1 &
        pids+=($!)
    done
    for k in "${!batch[@]}"; do
        py=${batch[$k]}
        if wait "${pids[$k]}"; then result="passed"; else result="FAILED"; failed+=("$py"); fi
        cat "$work/check-${py//\//_}.log"
        echo "   $py: $result ($((SECONDS - start)) s since its batch began)"
    done
done
[ ${#failed[@]} -eq 0 ] || { echo "check_dist.sh: failed under ${failed[*]}" >&2; exit 1; }
