"""The names a shared library exports, read from its ELF dynamic symbol table (``.dynsym``).

``hb.aot.load(path)`` without a function name looks here for the library's pipelines: each
pipeline Halide compiles exports ``<name>_argv`` and ``<name>_metadata``. Only what the file
says is read (no loading, no ``nm``); a file that is not a 64- or 32-bit little-endian ELF
shared object gives no names, and the caller falls back to the file's name.
"""

from __future__ import annotations

import os
import struct

# ELF facts (the System V ABI): the identification bytes, the section type of the dynamic
# symbol table, and a symbol's "undefined" section index.
_MAGIC = b"\x7fELF"
_CLASS_32, _CLASS_64 = 1, 2
_LITTLE_ENDIAN = 1
_SHT_DYNSYM = 11
_SHN_UNDEF = 0

# Per class: the header fields read (section header offset, entry size, count), the section
# header (type, offset, size, link, entry size) and a symbol's (name offset, section index).
_LAYOUT = {
    _CLASS_64: {"header": "<40xQ10xHH", "section": "<4xI16xQQI4x8xQ", "symbol": "<I2xH16x"},
    _CLASS_32: {"header": "<32xI10xHH", "section": "<4xI8xIII4x4xI", "symbol": "<I8x2xH"},
}


def exported_names(path: str | os.PathLike[str]) -> list[str]:
    """The defined symbols of the library's dynamic symbol table, in table order; [] when the
    file is not an ELF file this reader knows, or cannot be read."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return []
    if len(data) < 64 or data[:4] != _MAGIC or data[5] != _LITTLE_ENDIAN or data[4] not in _LAYOUT:
        return []
    layout = _LAYOUT[data[4]]
    try:
        return _dynamic_symbols(data, layout)
    except (struct.error, IndexError, UnicodeDecodeError):
        return []  # a damaged table: no names rather than a wrong one


def _dynamic_symbols(data: bytes, layout: dict) -> list[str]:
    section_offset, section_size, count = struct.unpack_from(layout["header"], data)
    sections = [struct.unpack_from(layout["section"], data, section_offset + i * section_size)
                for i in range(count)]
    symbol_size = struct.calcsize(layout["symbol"])
    names = []
    for kind, offset, size, link, entry_size in sections:
        if kind != _SHT_DYNSYM:
            continue
        strings_offset = sections[link][1]
        for at in range(offset + symbol_size, offset + size, entry_size or symbol_size):  # entry 0 is null
            name_at, section_index = struct.unpack_from(layout["symbol"], data, at)
            if section_index == _SHN_UNDEF:
                continue
            end = data.index(b"\0", strings_offset + name_at)
            names.append(data[strings_offset + name_at:end].decode())
    return names
