"""The symbol versions a shared library needs, checked against manylinux_2_28.

    python tools/symbol_versions.py FILE...   # .so files, or wheels (each extension inside)

A library needs a symbol version (GLIBC_2.34, GLIBCXX_3.4.29, ...) for each symbol it takes from
a versioned library; the dynamic loader refuses to load it where that library is older. This
reads the ELF file's version needs (the .gnu.version_r section, with .gnu.version and .dynsym for
the symbols that need each), in pure Python, so it runs anywhere Python does (the test suite uses
it, tests/test_wheel_symbols.py; tools/build_wheels.sh runs it on every wheel it makes).

The limits are auditwheel's manylinux_2_28 policy (auditwheel/policy/manylinux-policy.json):
GLIBC up to 2.28, GLIBCXX up to 3.4.24, CXXABI up to 1.3.11 (and CXXABI_TM_1, CXXABI_FLOAT128),
GCC up to 7.0.0. Versions of other libraries are listed but not judged.

Prints each file's newest version of each family; exit status 1 when a file needs a version the
policy does not allow (each listed with the symbols that need it), 0 otherwise.
"""

import os
import re
import struct
import sys
import zipfile

# auditwheel 6.8.2's manylinux_2_28 policy, x86_64: the newest numbered version of each family.
MANYLINUX_2_28 = {"GLIBC": (2, 28), "GLIBCXX": (3, 4, 24), "CXXABI": (1, 3, 11), "GCC": (7, 0, 0)}
# Unnumbered versions the policy also lists.
ALSO_ALLOWED = {"CXXABI_TM_1", "CXXABI_FLOAT128"}

SHT_DYNSYM = 11
SHT_GNU_VERNEED = 0x6FFFFFFE
SHT_GNU_VERSYM = 0x6FFFFFFF


class NotElf(ValueError):
    pass


def _sections(data):
    """(byte order, 64-bit?, [(type, offset, size, link, info, entsize)]) of an ELF file."""
    if data[:4] != b"\x7fELF":
        raise NotElf("not an ELF file")
    is64 = {1: False, 2: True}.get(data[4])
    order = {1: "<", 2: ">"}.get(data[5])
    if is64 is None or order is None:
        raise NotElf("an ELF file of an unknown class or byte order")
    if is64:
        shoff, = struct.unpack_from(order + "Q", data, 0x28)
        shentsize, shnum = struct.unpack_from(order + "HH", data, 0x3A)
        header = order + "IIQQQQIIQQ"
    else:
        shoff, = struct.unpack_from(order + "I", data, 0x20)
        shentsize, shnum = struct.unpack_from(order + "HH", data, 0x2E)
        header = order + "IIIIIIIIII"
    sections = []
    for i in range(shnum):
        _, sh_type, _, _, offset, size, link, info, _, entsize = struct.unpack_from(
            header, data, shoff + i * shentsize)
        sections.append((sh_type, offset, size, link, info, entsize))
    return order, is64, sections


def _string(data, sections, index, offset):
    start = sections[index][1] + offset
    return data[start:data.index(b"\0", start)].decode("utf-8", "replace")


def needed_versions(data):
    """{(library, version): sorted symbols needing it} for an ELF file's bytes. A version that no
    dynamic symbol names (the linker keeps those too) maps to an empty list."""
    order, is64, sections = _sections(data)
    needs = {}  # version index -> (library, version)
    for sh_type, offset, _, link, count, _ in sections:
        if sh_type != SHT_GNU_VERNEED:
            continue
        entry = offset
        for _ in range(count):
            _, aux_count, file_name, aux, next_entry = struct.unpack_from(
                order + "HHIII", data, entry)
            library = _string(data, sections, link, file_name)
            at = entry + aux
            for _ in range(aux_count):
                _, _, other, name, next_aux = struct.unpack_from(order + "IHHII", data, at)
                needs[other & 0x7FFF] = (library, _string(data, sections, link, name))
                at += next_aux
            entry += next_entry
    found = {need: set() for need in needs.values()}
    dynsym = next((s for s in sections if s[0] == SHT_DYNSYM), None)
    versym = next((s for s in sections if s[0] == SHT_GNU_VERSYM), None)
    if dynsym and versym and needs:
        _, sym_offset, sym_size, strtab, _, sym_entsize = dynsym
        for i in range(sym_size // sym_entsize):
            index, = struct.unpack_from(order + "H", data, versym[1] + 2 * i)
            if index & 0x7FFF in needs:
                name, = struct.unpack_from(order + "I", data, sym_offset + i * sym_entsize)
                found[needs[index & 0x7FFF]].add(_string(data, sections, strtab, name))
    return {need: sorted(symbols) for need, symbols in found.items()}


def split_version(version):
    """('GLIBC', (2, 34)) for 'GLIBC_2.34'; (name, None) when it carries no number."""
    m = re.fullmatch(r"([A-Z]+)_([0-9]+(?:\.[0-9]+)*)", version)
    if not m:
        return version.split("_")[0], None
    return m[1], tuple(int(part) for part in m[2].split("."))


def too_new(needs, limits=MANYLINUX_2_28):
    """The (library, version, symbols) of needs (needed_versions' result) that limits do not allow,
    oldest first."""
    bad = []
    for (library, version), symbols in needs.items():
        family, number = split_version(version)
        if family not in limits or version in ALSO_ALLOWED:
            continue
        if number is None or number > limits[family]:
            bad.append((library, version, symbols))
    return sorted(bad, key=lambda b: (split_version(b[1])[0], split_version(b[1])[1] or ()))


def newest(needs):
    """{family: newest version needed}, e.g. {'GLIBC': 'GLIBC_2.27'}."""
    best = {}
    for _, version in needs:
        family, number = split_version(version)
        if number is not None and (family not in best or number > split_version(best[family])[1]):
            best[family] = version
    return best


def elf_files(path):
    """(name, bytes) of path: itself, or each shared library inside a wheel."""
    if path.endswith(".whl"):
        with zipfile.ZipFile(path) as wheel:
            for name in wheel.namelist():
                if name.endswith(".so") or ".so." in name:
                    yield f"{os.path.basename(path)}:{name}", wheel.read(name)
    else:
        with open(path, "rb") as f:
            yield path, f.read()


def report(name, needs, limits=MANYLINUX_2_28):
    """The lines that describe name's needs; the second value is True when they pass."""
    best = newest(needs)
    summary = ", ".join(best[f] for f in sorted(best)) or "no symbol versions"
    bad = too_new(needs, limits)
    lines = [f"{name}: needs {summary}"]
    lines += [f"  too new for manylinux_2_28: {version} ({library}): {' '.join(symbols) or '-'}"
              for library, version, symbols in bad]
    return lines, not bad


def main(paths):
    if not paths:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    ok = True
    for path in paths:
        count = 0
        for name, data in elf_files(path):
            lines, passed = report(name, needed_versions(data))
            print("\n".join(lines))
            ok &= passed
            count += 1
        if count == 0:
            print(f"{path}: no shared library in it", file=sys.stderr)
            ok = False
    print("ok: nothing newer than manylinux_2_28 allows" if ok else
          "symbol_versions.py: a version newer than manylinux_2_28 allows")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
