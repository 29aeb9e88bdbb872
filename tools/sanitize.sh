#!/usr/bin/env bash
# tools/sanitize.sh: the extension built with AddressSanitizer and UndefinedBehaviorSanitizer
# (gcc), and the test suite run against it. Run from anywhere, in the virtual environment of a
# development install (python -m pip install -e '.[test]' -c constraints.txt).
#
#   tools/sanitize.sh                          # build, then the whole suite
#   tools/sanitize.sh tests/test_dlpack.py -x  # build, then pytest with these arguments
#   tools/sanitize.sh --env                    # build, then print the environment to run under
#                                              # (eval "$(tools/sanitize.sh --env)")
#
# The sanitized extension is built into build/sanitize/ and never replaces the normal
# halide_buffer/_core*.so: the tests import the package's Python files from the tree through a
# staging folder, build/sanitize/pkg/halide_buffer/ (links to the tree's files, and the sanitized
# extension), first on PYTHONPATH.
#
# Exit status: pytest's when it fails; 1 when any process reported a sanitizer finding (an
# ASan error: reports are written to build/sanitize/reports/ and printed at the end; a UBSan
# runtime error: printed where it happens, and the process aborts), even when pytest passed;
# 2 when the build or the environment is not usable.
#
# Facts this relies on:
#   - libasan must be the first library of the process (LD_PRELOAD), and libstdc++ with it:
#     without libstdc++ preloaded, the first C++ exception aborts in __cxa_throw;
#   - under ASan the OpenCL ICD loader finds PoCL only with pyopencl's bundled libraries
#     (site-packages/pyopencl/.libs) on LD_LIBRARY_PATH;
#   - CPython leaks on purpose at exit: leak detection is off (detect_leaks=0);
#   - tests ask for allocations no machine has and expect MemoryError: ASan returns NULL for
#     them (allocator_may_return_null=1) instead of aborting;
#   - a thread that made an OpenCL context and queue makes ASan fail to unmap that thread's
#     memory when it ends ("AddressSanitizer failed to deallocate ... unable to unmap"; PoCL's,
#     seen with pyopencl alone): such a report is shown and is no finding;
#   - RSS under ASan measures its quarantine and shadow memory: the RSS-based leak tests skip
#     when HALIDE_BUFFER_SANITIZER is set.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD
PY=${PYTHON:-python}
OUTDIR=$ROOT/build/sanitize
JOBS=${HALIDE_BUFFER_BUILD_JOBS:-2}
FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -O1 -g"

die() { echo "sanitize.sh: $*" >&2; exit 2; }

command -v gcc >/dev/null || die "gcc is required"
# PYTHONSAFEPATH (3.11+) keeps the working directory off sys.path, in pytest and in every
# Python the tests start: from the repository root, halide_buffer/ would be the in-place build.
"$PY" -c "import sys; sys.exit(sys.version_info < (3, 11))" || die "needs Python 3.11 or newer (PYTHONSAFEPATH)"
"$PY" -c "import pybind11, setuptools" 2>/dev/null ||
    die "$PY lacks pybind11 or setuptools; install the test extra: python -m pip install -e '.[test]' -c constraints.txt"

ENV_ONLY=0
if [ "${1:-}" = "--env" ]; then ENV_ONLY=1; shift; fi

# --- build ------------------------------------------------------------------------------------
mkdir -p "$OUTDIR"
start=$SECONDS
echo "== building the sanitized extension into build/sanitize (jobs: $JOBS)" >&2
# build_ext (setup.py) builds nothing when no file of csrc/ is newer than the extension, else
# compiles again only the units whose source or included headers changed; flags that changed
# force a rebuild of every unit.
force=()
[ "$(cat "$OUTDIR/flags" 2>/dev/null)" = "$FLAGS" ] || force=(--force)
# CFLAGS for C and older setuptools, CXXFLAGS for C++ in newer ones (each replaces or follows
# Python's own -O3: the last -O wins).
if ! CC=gcc CXX=g++ CFLAGS="$FLAGS" CXXFLAGS="$FLAGS" LDFLAGS="-fsanitize=address,undefined" \
    HALIDE_BUFFER_BUILD_JOBS=$JOBS "$PY" setup.py -q build_ext "${force[@]}" \
    --build-temp "$OUTDIR/tmp" --build-lib "$OUTDIR/lib" >"$OUTDIR/build.log" 2>&1; then
    cat "$OUTDIR/build.log" >&2
    die "the build failed"
fi
so=$(ls "$OUTDIR"/lib/halide_buffer/_core*.so 2>/dev/null | head -1)
[ -n "$so" ] || die "the build made no halide_buffer/_core*.so under build/sanitize/lib"
case $(ldd "$so") in *libasan*) ;; *) die "$so is not linked with libasan" ;; esac
# Every object of ours was compiled with the sanitizers (gcc records its options in DWARF).
if command -v readelf >/dev/null; then
    producers=$(readelf --debug-dump=info "$so" 2>/dev/null | grep DW_AT_producer | grep -c 'C++17')
    sanitized=$(readelf --debug-dump=info "$so" 2>/dev/null | grep DW_AT_producer | grep 'C++17' |
        grep -c -- '-fsanitize=address,undefined')
    [ "$producers" -gt 0 ] && [ "$producers" = "$sanitized" ] ||
        die "$sanitized of $producers compilation units of $so were built with -fsanitize=address,undefined"
fi
echo "$FLAGS" >"$OUTDIR/flags"
echo "== built in $((SECONDS - start)) s: ${so#"$ROOT"/}" >&2

# The package as the tree has it, with the sanitized extension.
stage=$OUTDIR/pkg/halide_buffer
rm -rf "$OUTDIR/pkg"
mkdir -p "$stage"
for f in "$ROOT"/halide_buffer/*; do
    case $(basename "$f") in _core*.so | __pycache__) continue ;; esac
    ln -s "$f" "$stage/" || die "cannot stage $f"
done
ln -s "$so" "$stage/" || die "cannot stage $so"

# --- environment ------------------------------------------------------------------------------
asan=$(gcc -print-file-name=libasan.so)
stdcxx=$(gcc -print-file-name=libstdc++.so.6)
[ -f "$asan" ] || die "gcc has no libasan.so"
reports=$OUTDIR/reports
rm -rf "$reports"
mkdir -p "$reports"
cl_libs=$("$PY" -c "import os, pyopencl; print(os.path.join(os.path.dirname(pyopencl.__file__), '.libs'))" 2>/dev/null)

# abort_on_error: a finding raises SIGABRT, which a fuzzer catches to save the input.
asan_options=detect_leaks=0:allocator_may_return_null=1:abort_on_error=1${ASAN_OPTIONS_EXTRA:+:$ASAN_OPTIONS_EXTRA}
ubsan_options=print_stacktrace=1:halt_on_error=1:abort_on_error=1
run_env=(
    "LD_PRELOAD=$asan $stdcxx"
    "LD_LIBRARY_PATH=$cl_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    "PYTHONPATH=$OUTDIR/pkg${PYTHONPATH:+:$PYTHONPATH}"
    "PYTHONSAFEPATH=1"
    "HALIDE_BUFFER_SANITIZER=address,undefined"
)
if [ "$ENV_ONLY" = 1 ]; then  # reports on stderr
    for kv in "${run_env[@]}" "ASAN_OPTIONS=$asan_options" "UBSAN_OPTIONS=$ubsan_options"; do
        printf 'export %q\n' "$kv"
    done
    exit 0
fi
# In the suite, each process's ASan reports go to a file: a child process's too, whatever its
# parent does with its output. UBSan writes to stderr whatever log_path says (with ASan in the
# same runtime): pytest captures only Python's sys.stderr (--capture=sys), so a report of the
# pytest process reaches this script's stderr; a child's reaches its parent test, whose run
# then fails.
run_env+=("ASAN_OPTIONS=$asan_options:log_path=$reports/asan" "UBSAN_OPTIONS=$ubsan_options")

# The import must find the sanitized extension, not the in-place one.
found=$(env "${run_env[@]}" "$PY" -c "import halide_buffer._core as c; print(c.__file__)") ||
    die "importing halide_buffer under ASan failed (see $reports)"
[ "$found" = "$stage/$(basename "$so")" ] || die "python imported $found, not the sanitized extension"

# --- the tests --------------------------------------------------------------------------------
echo "== pytest ${*:-(the whole suite)} under ASan+UBSan" >&2
start=$SECONDS
env "${run_env[@]}" "$PY" -m pytest --capture=sys "$@"
status=$?
echo "== pytest exited $status after $((SECONDS - start)) s" >&2
died=0
if [ "$status" -gt 128 ]; then  # abort_on_error: a finding in the pytest process itself
    died=1
    echo "== pytest died of signal $((status - 128)): a sanitizer finding (its report is above)" >&2
fi

shopt -s nullglob
findings=0
for r in "$reports"/*; do
    # ASan's warnings (a NULL returned for an impossible allocation, makecontext) are no
    # findings; nor is ASan failing to unmap a thread's memory when the thread that made an
    # OpenCL context and queue ends (PoCL's, with pyopencl alone: not this library's code).
    if grep -v -e 'AddressSanitizer failed to deallocate' -e 'unable to unmap' "$r" |
        grep -q -e 'ERROR: ' -e 'runtime error: ' -e 'CHECK failed'; then
        findings=$((findings + 1))
        echo "--- finding: ${r#"$ROOT"/}" >&2
    else
        echo "--- no finding (warnings, or PoCL's thread teardown): ${r#"$ROOT"/}" >&2
    fi
    cat "$r" >&2
done
if [ "$findings" -gt 0 ]; then
    echo "== $findings process(es) with sanitizer findings (reports above)" >&2
    exit 1
fi
[ "$died" = 1 ] && exit 1
echo "== no sanitizer findings" >&2
exit $status
