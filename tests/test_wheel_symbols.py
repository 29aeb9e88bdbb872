"""tools/symbol_versions.py, the check that a release wheel's extensions need no symbol version
newer than manylinux_2_28 allows (GLIBC 2.28, GLIBCXX 3.4.24, CXXABI 1.3.11, GCC 7.0.0).

It must be able to fail: on ELF files made here with given version needs, and on a development
build by GCC against a glibc of 2.34 or newer (Debian 12's g++ 12 needs GLIBC_2.34 for dlopen and
GLIBCXX_3.4.29 for std::__throw_bad_array_new_length). And it must pass on a release wheel: the
one HALIDE_BUFFER_WHEEL names, or the installed package when it was installed from a manylinux
wheel (tools/check_dist.sh runs this file against each wheel it checks).
"""

import glob
import importlib.metadata
import os
import pathlib
import re
import shutil
import struct
import subprocess
import sys

import pytest

import halide_buffer as hb

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import symbol_versions  # noqa: E402 (from tools/)

SHT_STRTAB = 3


def elf_needing(needs):
    """The bytes of a minimal 64-bit little-endian ELF file whose .gnu.version_r section needs
    the versions {library: [version, ...]}, read by the same rules as the loader's."""
    strings = bytearray(b"\0")

    def string(s):
        strings.extend(s.encode() + b"\0")
        return len(strings) - len(s) - 1

    verneed = bytearray()
    index = 2  # 0 and 1 are the local and global indices
    libraries = list(needs.items())
    for n, (library, versions) in enumerate(libraries):
        last = n == len(libraries) - 1
        verneed += struct.pack("<HHIII", 1, len(versions), string(library), 16,
                               0 if last else 16 + 16 * len(versions))
        for m, version in enumerate(versions):
            verneed += struct.pack("<IHHII", 0, 0, index, string(version),
                                   0 if m == len(versions) - 1 else 16)
            index += 1
    strtab_at = 64
    verneed_at = strtab_at + len(strings) + (-len(strings)) % 8
    sections_at = verneed_at + len(verneed)
    header = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    header += struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, sections_at, 0, 64, 0, 0, 64, 3, 0)
    section_headers = bytes(64)  # the null section
    section = "<IIQQQQIIQQ"  # name, type, flags, address, offset, size, link, info, align, entry size
    section_headers += struct.pack(section, 0, SHT_STRTAB, 0, 0, strtab_at, len(strings), 0, 0, 1, 0)
    section_headers += struct.pack(section, 0, symbol_versions.SHT_GNU_VERNEED, 0, 0, verneed_at,
                                   len(verneed), 1, len(libraries), 4, 0)
    data = header + bytes(strings) + bytes(verneed_at - strtab_at - len(strings)) + bytes(verneed)
    return data + section_headers


def flagged(needs):
    found = symbol_versions.needed_versions(elf_needing(needs))
    return [version for _, version, _ in symbol_versions.too_new(found)]


@pytest.mark.parametrize("library, version, allowed", [
    ("libc.so.6", "GLIBC_2.2.5", True),
    ("libc.so.6", "GLIBC_2.27", True),
    ("libc.so.6", "GLIBC_2.28", True),
    ("libc.so.6", "GLIBC_2.29", False),
    ("libc.so.6", "GLIBC_2.34", False),
    ("libc.so.6", "GLIBC_PRIVATE", False),
    ("libstdc++.so.6", "GLIBCXX_3.4.24", True),
    ("libstdc++.so.6", "GLIBCXX_3.4.25", False),
    ("libstdc++.so.6", "GLIBCXX_3.4.26", False),
    ("libstdc++.so.6", "GLIBCXX_3.4.29", False),
    ("libstdc++.so.6", "CXXABI_1.3.11", True),
    ("libstdc++.so.6", "CXXABI_1.3.12", False),
    ("libstdc++.so.6", "CXXABI_TM_1", True),
    ("libgcc_s.so.1", "GCC_7.0.0", True),
    ("libgcc_s.so.1", "GCC_12.0.0", False),
    ("libfoo.so.1", "FOO_9.9", True),  # another library's versions are not judged
])
def test_each_version_against_the_policy(library, version, allowed):
    assert flagged({library: [version]}) == ([] if allowed else [version])


def test_several_libraries_and_versions_are_all_read():
    needs = {"libc.so.6": ["GLIBC_2.2.5", "GLIBC_2.33", "GLIBC_2.14"],
             "libstdc++.so.6": ["GLIBCXX_3.4", "CXXABI_1.3.13"], "libm.so.6": ["GLIBC_2.29"]}
    found = symbol_versions.needed_versions(elf_needing(needs))
    assert set(found) == {(lib, v) for lib, versions in needs.items() for v in versions}
    assert flagged(needs) == ["CXXABI_1.3.13", "GLIBC_2.29", "GLIBC_2.33"]
    assert symbol_versions.newest(found) == {"GLIBC": "GLIBC_2.33", "GLIBCXX": "GLIBCXX_3.4",
                                             "CXXABI": "CXXABI_1.3.13"}


def test_the_command_fails_on_a_version_too_new(tmp_path):
    old, new = tmp_path / "old.so", tmp_path / "new.so"
    old.write_bytes(elf_needing({"libc.so.6": ["GLIBC_2.27"]}))
    new.write_bytes(elf_needing({"libc.so.6": ["GLIBC_2.27", "GLIBC_2.34"]}))
    tool = [sys.executable, str(ROOT / "tools" / "symbol_versions.py")]
    passed = subprocess.run([*tool, str(old)], capture_output=True, text=True)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    failed = subprocess.run([*tool, str(old), str(new)], capture_output=True, text=True)
    assert failed.returncode == 1
    assert "too new for manylinux_2_28: GLIBC_2.34 (libc.so.6)" in failed.stdout


def extensions_of_the_package():
    where = pathlib.Path(hb._core.__file__).resolve().parent
    return sorted(glob.glob(str(where / "_core*.so")) + glob.glob(str(where / "_opencl_hooks*.so")))


@pytest.mark.skipif(shutil.which("readelf") is None, reason="no readelf (binutils) to compare with")
def test_the_version_needs_agree_with_readelf():
    for path in extensions_of_the_package():
        out = subprocess.run(["readelf", "-V", "-W", path], capture_output=True, text=True,
                             check=True, env={**os.environ, "LC_ALL": "C"}).stdout
        needs_part = out.partition(".gnu.version_r")[2]
        theirs = set(re.findall(r"Name: (\S+)\s+Flags", needs_part))
        needs = symbol_versions.needed_versions(pathlib.Path(path).read_bytes())
        ours = {version for _, version in needs}
        assert ours == theirs, path


def from_source_tree():
    """True when halide_buffer is imported from a checkout (an editable or in-place build)."""
    return (pathlib.Path(hb._core.__file__).resolve().parent.parent / "setup.py").exists()


def test_a_development_build_by_gcc_on_a_new_glibc_is_flagged():
    if not from_source_tree():
        pytest.skip("halide_buffer is installed from a wheel here, not built in a checkout")
    core = next(p for p in extensions_of_the_package() if "_core" in p)
    data = pathlib.Path(core).read_bytes()
    gcc = re.search(rb"GCC: \([^)]*\) (\d+)\.", data)  # the .comment section
    needs = symbol_versions.needed_versions(data)
    if gcc is None or b"clang" in data[gcc.start():gcc.start() + 200] or not any(
            lib == "libstdc++.so.6" for lib, _ in needs):
        pytest.skip("the development build was not made by GCC against libstdc++")
    glibc = tuple(int(x) for x in os.confstr("CS_GNU_LIBC_VERSION").split()[1].split(".")[:2])
    if glibc < (2, 34):
        pytest.skip(f"glibc {glibc[0]}.{glibc[1]} here: dlopen is not yet in libc (2.34)")
    bad = {version: symbols for _, version, symbols in symbol_versions.too_new(needs)}
    assert "dlopen" in bad.get("GLIBC_2.34", []), bad
    if int(gcc[1]) >= 11:  # new T[n] calls std::__throw_bad_array_new_length (GCC 11)
        assert "_ZSt28__throw_bad_array_new_lengthv" in bad.get("GLIBCXX_3.4.29", []), bad
    lines, passed = symbol_versions.report(core, needs)
    assert not passed and any("GLIBC_2.34" in line for line in lines)


def release_wheel_extensions():
    """(name, bytes) of the release wheel's extensions: HALIDE_BUFFER_WHEEL's, else those of the
    installed package when it came from a manylinux wheel; skips otherwise."""
    wheel = os.environ.get("HALIDE_BUFFER_WHEEL")
    if wheel:
        return list(symbol_versions.elf_files(wheel))
    if from_source_tree():
        pytest.skip("no wheel: set HALIDE_BUFFER_WHEEL to a wheel's path, or run against an "
                    "installed wheel (tools/check_dist.sh does)")
    tags = importlib.metadata.distribution("halide_buffer").read_text("WHEEL") or ""
    if "manylinux" not in tags:
        pytest.skip("halide_buffer was installed from a wheel built here (no manylinux tag)")
    return [(p, pathlib.Path(p).read_bytes()) for p in extensions_of_the_package()]


def test_the_release_wheel_needs_nothing_newer_than_manylinux_2_28():
    extensions = release_wheel_extensions()
    assert {re.sub(r"\..*", "", pathlib.Path(name).name) for name, _ in extensions} == {
        "_core", "_opencl_hooks"}
    for name, data in extensions:
        lines, passed = symbol_versions.report(name, symbol_versions.needed_versions(data))
        assert passed, "\n".join(lines)
