#!/usr/bin/env bash
# tools/check_dist.sh: checks the release files tools/build_wheels.sh made, the way a user meets
# them. Run from anywhere, in a clone of the repository (the sdist is compared with Git's list).
#
#   tools/check_dist.sh DIR     # DIR holds one sdist and the wheel for this Python
#
# 1. The sdist holds every file Git tracks (but the repository's own dotfiles: .ci/, .gitignore)
#    and no build products; its long description links only to absolute URLs.
# 2. In a fresh virtual environment outside the repository, the wheel for this Python with the
#    opencl extra (PoCL: a real OpenCL device on the CPU), pytest and hypothesis are installed;
#    from a temporary folder, `python -m halide_buffer` and `python -m halide_buffer demo` run,
#    and a smoke test: a buffer written through NumPy, copied to the OpenCL device and back.
# 3. The sdist, unpacked in a temporary folder, runs a subset of its own tests (those that need
#    no PyTorch, JAX or Halide) against that installed wheel, which pip built from the sdist.
#
# PYTHON names the interpreter (default: python). Exit status: 0 when all passed, 1 otherwise.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python}
if [ $# -ne 1 ] || [ ! -d "$1" ]; then
    echo "usage: tools/check_dist.sh DIR (one sdist and wheels)" >&2
    exit 1
fi
dist=$(cd "$1" && pwd)

# The tests of the subset: none imports PyTorch, JAX or Halide.
SUBSET=(tests/test_cli.py tests/test_stubs.py tests/test_exports.py tests/test_errors.py
    tests/test_messages.py tests/test_ownership.py tests/test_residency_host.py
    tests/test_residency_device.py tests/test_residency_model.py tests/test_opencl_device.py
    tests/test_device_errors.py tests/test_device_threads.py tests/test_dlpack_malformed.py
    tests/test_buffer_data.py tests/test_pickle.py tests/test_shared_memory.py)

sdists=("$dist"/*.tar.gz)
if [ ${#sdists[@]} -ne 1 ] || [ ! -f "${sdists[0]}" ]; then
    echo "check_dist.sh: want one sdist in $dist" >&2
    exit 1
fi
sdist=${sdists[0]}
tag=$("$PY" -c "import sys; print('cp%d%d' % sys.version_info[:2])")
wheels=("$dist"/*-"$tag"-"$tag"-manylinux*.whl)
[ -f "${wheels[0]}" ] || { echo "check_dist.sh: no manylinux wheel for $tag in $dist" >&2; exit 1; }
wheel=${wheels[0]}

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

echo "== 2. $(basename "$wheel") in a fresh environment"
"$PY" -m venv "$work/venv"
venv_py=$work/venv/bin/python
"$venv_py" -m pip install -q "${wheel}[opencl]" pytest hypothesis >"$work/pip.log" 2>&1 ||
    { cat "$work/pip.log" >&2; exit 1; }
mkdir "$work/elsewhere"
cd "$work/elsewhere"  # not the repository: its halide_buffer/ must not be the one imported
"$venv_py" -m halide_buffer
"$venv_py" -m halide_buffer demo >"$work/demo.log" 2>&1 || { cat "$work/demo.log" >&2; exit 1; }
echo "  python -m halide_buffer demo: $(wc -l <"$work/demo.log") lines, exit 0"
"$venv_py" - "$work/venv" <<'EOF'
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
b.copy_to_device(hb.opencl.device())  # PoCL's CPU device on a machine without a GPU
on_device = hb.opencl.as_array(b)     # pyopencl's view of the same device memory
on_device *= 2                        # a kernel writes it: the device copy is now the newer one
assert np.array_equal(np.asarray(b), 2 * values)
t = b.transfers
assert (t.to_device, t.to_host) == (1, 1), t
print(f"  smoke test passed: {hb.opencl.device()!r}, {t!r}")
EOF

echo "== 3. the sdist's own tests, against the installed wheel"
tar -xzf "$sdist" -C "$work"
trees=("$work"/halide_buffer-*)
tree=${trees[0]}
# Run from elsewhere, with the tree's configuration: the tree's halide_buffer/ (sources only)
# must not come first on sys.path, neither in pytest nor in the Pythons the tests start.
"$work/venv/bin/pytest" -q -p no:cacheprovider --rootdir "$tree" -c "$tree/pyproject.toml" \
    "${SUBSET[@]/#/$tree/}"
