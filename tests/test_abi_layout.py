"""Our declarations of Halide's C ABI (csrc/abi/halide_abi.h) against the real HalideRuntime.h.

A small program is compiled against the header shipped in the ``halide`` wheel. It prints
sizeof/offsetof of every field of the structs a pipeline reads, and the enum values we rely
on, under the same keys that ``halide_buffer._core._abi_layout()`` reports for our own
declarations. The two dictionaries must be identical. The structs and enums printed are those
of the tests' own table, common.HALIDE_ABI / HALIDE_ENUMS, which must match the header too; the
ctypes mirrors the other tests read a halide_buffer_t through are built from that table and
checked against it here.

halide_device_interface_impl_t has no public declaration; its size is read from the tables a
generated CUDA / OpenCL pipeline object embeds and compared with csrc/abi/halide_abi.h.
"""

import ctypes
import os
import shutil
import subprocess

import halide  # required test dependency: the test fails, not skips, without it
import pytest

from halide_buffer import _core

from common import HALIDE_ABI, HALIDE_ENUMS, MIRRORS, halide_abi_layout

pytestmark = pytest.mark.needs_halide

# The structs and enum values to print: those of the tests' one table (common.py).
STRUCTS = [(name, [field for field, _, _ in fields]) for name, (_, fields) in HALIDE_ABI.items()]
ENUMS = list(HALIDE_ENUMS)


def halide_include_dir():
    include = os.path.join(os.path.dirname(halide.__file__), "include")
    assert os.path.isfile(os.path.join(include, "HalideRuntime.h")), (
        f"the halide wheel at {os.path.dirname(halide.__file__)} ships no include/HalideRuntime.h"
    )
    return include


FIELD_SIZE_PREFIX = "fieldsize:"


def layout_program():
    """C source printing one `key=value` line per entry of the layout.

    Besides the keys of _abi_layout() it prints the size of every field under
    FIELD_SIZE_PREFIX, for the coverage test; those lines are not part of the comparison.
    """
    lines = [
        "#include <stddef.h>",
        "#include <stdio.h>",
        '#include "HalideRuntime.h"',
        "",
        "int main(void) {",
    ]

    def emit(key, expr):
        lines.append(f'    printf("%s=%llu\\n", "{key}", (unsigned long long)({expr}));')

    for key_name, fields in STRUCTS:
        c_type = f"struct {key_name}"  # a struct tag: valid C and C++
        emit(f"sizeof({key_name})", f"sizeof({c_type})")
        for field in fields:
            emit(f"offsetof({key_name}, {field})", f"offsetof({c_type}, {field})")
            emit(f"{FIELD_SIZE_PREFIX}{key_name}.{field}", f"sizeof((({c_type} *)0)->{field})")
    for name in ENUMS:
        emit(name, name)
    lines += ["    return 0;", "}", ""]
    return "\n".join(lines)


def find_compiler(language):
    names = {"c": ("gcc", "cc", "clang"), "c++": ("g++", "c++", "clang++")}[language]
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    return None


def real_header_output(tmp_path, language):
    """Everything the program compiled against HalideRuntime.h prints, as a dict."""
    compiler = find_compiler(language)
    if compiler is None:
        pytest.skip(f"no {language} compiler (looked for gcc/cc/clang or g++/c++/clang++) on PATH")
    source = tmp_path / ("layout.c" if language == "c" else "layout.cpp")
    source.write_text(layout_program())
    exe = tmp_path / "layout"
    build = subprocess.run(
        [compiler, "-std=c11" if language == "c" else "-std=c++17", "-Wall",
         "-I", halide_include_dir(), str(source), "-o", str(exe)],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, f"compiling against HalideRuntime.h failed:\n{build.stderr}"
    run = subprocess.run([str(exe)], capture_output=True, text=True)
    assert run.returncode == 0, f"layout program failed:\n{run.stderr}"
    printed = {}
    for line in run.stdout.splitlines():
        key, sep, value = line.partition("=")
        assert sep, f"unexpected output line {line!r}"
        assert key not in printed, f"key {key!r} printed twice"
        printed[key] = int(value)
    return printed


def real_layout(tmp_path, language):
    printed = real_header_output(tmp_path, language)
    return {k: v for k, v in printed.items() if not k.startswith(FIELD_SIZE_PREFIX)}


@pytest.mark.parametrize("language", ["c", "c++"])
def test_our_abi_layout_matches_real_halide_runtime_header(tmp_path, language):
    real = real_layout(tmp_path, language)
    ours = dict(_core._abi_layout())
    # A field declared on one side only must fail, not be silently left out of the comparison.
    assert set(ours) == set(real), (
        f"only in _abi_layout(): {sorted(set(ours) - set(real))}; "
        f"only in the real-header program: {sorted(set(real) - set(ours))}"
    )
    mismatches = {k: (ours[k], real[k]) for k in real if ours[k] != real[k]}
    assert not mismatches, f"(ours, Halide's) differ: {mismatches}"
    assert ours == real


def test_listed_fields_cover_every_byte_of_the_real_structs(tmp_path):
    # The comparison above only sees the fields both sides list. If Halide gained a field
    # (and halide_abi.h copied it but _abi_layout() forgot to report it) sizes would still
    # agree; so check that the listed fields tile each real struct exactly, with no hole and
    # nothing after the last one. Halide's structs have no padding on 64-bit targets.
    printed = real_header_output(tmp_path, "c")
    for key_name, fields in STRUCTS:
        spans = sorted(
            (printed[f"offsetof({key_name}, {f})"], printed[f"{FIELD_SIZE_PREFIX}{key_name}.{f}"], f)
            for f in fields
        )
        end = 0
        for offset, size, field in spans:
            assert offset == end, f"{key_name}: {offset - end} unlisted bytes before {field!r}"
            end = offset + size
        assert end == printed[f"sizeof({key_name})"], (
            f"{key_name}: {printed[f'sizeof({key_name})'] - end} unlisted bytes after the last field"
        )


def test_the_tests_table_matches_the_real_halide_runtime_header(tmp_path):
    # common.HALIDE_ABI is what every test that reads a halide_buffer_t goes by (the ctypes
    # mirrors are built from it): each offset, size and enum value as the header has it.
    printed = real_header_output(tmp_path, "c")
    real = {k: v for k, v in printed.items() if not k.startswith(FIELD_SIZE_PREFIX)}
    table = halide_abi_layout()
    mismatches = {k: (table.get(k), real.get(k)) for k in set(table) | set(real) if table.get(k) != real.get(k)}
    assert not mismatches, f"(common.HALIDE_ABI, Halide's) differ: {mismatches}"
    sizes = {f"{struct}.{field}": getattr(MIRRORS[struct], field).size
             for struct, (_, fields) in HALIDE_ABI.items() for field, _, _ in fields}
    wrong = {k: (size, printed[FIELD_SIZE_PREFIX + k]) for k, size in sizes.items()
             if size != printed[FIELD_SIZE_PREFIX + k]}
    assert not wrong, f"field sizes (the table's type, Halide's) differ: {wrong}"


@pytest.mark.parametrize("struct", list(HALIDE_ABI))
def test_the_ctypes_mirror_is_laid_out_as_the_table_says(struct):
    # The mirror takes its fields' types from the table; their offsets must come out as the
    # table writes them, or the tests reading through it would read the wrong bytes.
    size, fields = HALIDE_ABI[struct]
    mirror = MIRRORS[struct]
    assert [(f, getattr(mirror, f).offset) for f, _, _ in fields] == [(f, offset) for f, _, offset in fields]
    assert [name for name, _ in mirror._fields_] == [f for f, _, _ in fields]
    assert ctypes.sizeof(mirror) == size


# ---------------------------------------------------------------------------------------------
# Device interface tables as Halide's runtime defines them
# ---------------------------------------------------------------------------------------------
# halide_device_interface_impl_t is private to Halide's runtime (no public header declares
# it), so its size is taken from the tables a generated device pipeline embeds, and compared
# with what csrc/abi/halide_abi.h declares.

X86_TARGET = "x86-64-linux-avx-avx2-f16c-fma-sse41"  # explicit: Halide 21 mis-detects AVX-512
ABI_HEADER_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "csrc", "abi")


@pytest.fixture(scope="module")
def runtime_table_sizes(tmp_path_factory):
    """{demangled symbol: size in bytes} of every device interface table in CUDA and OpenCL
    pipeline objects (which compile without any GPU present)."""
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("no nm (binutils) on PATH to read symbol sizes from a Halide object")
    directory = tmp_path_factory.mktemp("device_tables")
    x, y, xo, yo, xi, yi = (halide.Var(n) for n in ("x", "y", "xo", "yo", "xi", "yi"))
    inp = halide.ImageParam(halide.Float(32), 2, "inp")
    f = halide.Func("twice")
    f[x, y] = inp[x, y] * 2
    f.gpu_tile(x, y, xo, yo, xi, yi, 8, 8)
    sizes = {}
    for api in ("cuda", "opencl"):
        obj = directory / f"twice_{api}.o"
        f.compile_to_object(str(obj), [inp], f"twice_{api}", halide.Target(f"{X86_TARGET}-{api}"))
        listing = subprocess.run(
            [nm, "-S", "-C", "--defined-only", str(obj)], capture_output=True, text=True, check=True
        ).stdout
        for line in listing.splitlines():
            parts = line.split(maxsplit=3)
            # Data objects only (the runtime's tables are weak objects, kind 'V').
            if len(parts) == 4 and parts[2] in ("V", "D", "d", "R", "r") and (
                parts[3].endswith("device_interface") or parts[3].endswith("device_interface_impl")
            ):
                sizes[parts[3]] = int(parts[1], 16)
    assert any(k.endswith("cuda_device_interface_impl") for k in sizes), sorted(sizes)
    assert any(k.endswith("opencl_device_interface_impl") for k in sizes), sorted(sizes)
    return sizes


@pytest.fixture(scope="module")
def our_table_sizes(tmp_path_factory):
    """sizeof of our two device interface structs, compiled from csrc/abi/halide_abi.h."""
    compiler = find_compiler("c++")
    if compiler is None:
        pytest.skip("no C++ compiler (g++, c++ or clang++) on PATH to compile csrc/abi/halide_abi.h")
    directory = tmp_path_factory.mktemp("our_tables")
    source = directory / "tables.cpp"
    source.write_text(
        '#include <cstdio>\n#include "halide_abi.h"\n'
        "int main() {\n"
        '    std::printf("%zu %zu\\n", sizeof(halide_device_interface_t),\n'
        "                sizeof(halide_device_interface_impl_t));\n"
        "    return 0;\n}\n"
    )
    exe = directory / "tables"
    build = subprocess.run(
        [compiler, "-std=c++17", "-I", ABI_HEADER_DIR, str(source), "-o", str(exe)],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, f"compiling csrc/abi/halide_abi.h failed:\n{build.stderr}"
    public, impl = map(int, subprocess.run([str(exe)], capture_output=True, text=True,
                                           check=True).stdout.split())
    return {"public": public, "impl": impl}


def test_runtime_public_device_tables_have_our_size(runtime_table_sizes, our_table_sizes):
    public = {k: v for k, v in runtime_table_sizes.items() if k.endswith("device_interface")}
    assert public, sorted(runtime_table_sizes)
    assert public == {k: our_table_sizes["public"] for k in public}
    assert our_table_sizes["public"] == _core._abi_layout()["sizeof(halide_device_interface_t)"]


def test_runtime_private_device_tables_have_our_impl_size(runtime_table_sizes, our_table_sizes):
    impl = {k: v for k, v in runtime_table_sizes.items() if k.endswith("device_interface_impl")}
    assert impl, sorted(runtime_table_sizes)
    assert impl == {k: our_table_sizes["impl"] for k in impl}
