"""A CPU name PoCL's compiler knows, on CPUs newer than PoCL's LLVM.

The PoCL that pip installs beside pyopencl (``pocl-binary-distribution`` 3.0, PoCL 3.0-rc2 built
with LLVM 14) compiles kernels for the CPU that LLVM names the host. LLVM 14 names a CPU it does
not know (AMD family 26, Zen 5, for one) ``generic``, and its own compiler then refuses that name
as a target ("unknown target CPU 'generic'"): no kernel builds, neither pyopencl's nor those of
Halide's OpenCL pipelines. Later PoCL releases read ``POCL_LLVM_CPU_NAME`` for this; this one
does not.

:func:`apply` gives that PoCL the same variable. Before PoCL sets up its devices it asks PoCL
for the name (``pocl_get_llvm_cpu_name``, which PoCL exports and calls for each device); where
``POCL_LLVM_CPU_NAME`` is set, or where the answer is ``generic`` on x86-64, that function is
made to return the chosen name: the variable's value, else the x86-64 feature level
(``x86-64-v4`` ... ``x86-64``) the CPU's flags allow, which LLVM 14 knows. PoCL's kernel library
is chosen from the CPU's flags apart from this name, so kernels run as PoCL built them to.
Anywhere else (another PoCL, a PoCL that reads the variable itself, a CPU LLVM knows, another OS
or architecture) nothing is touched, and ``HALIDE_BUFFER_NO_POCL_PATCH=1`` turns it all off.

The change is made only where it is known to be safe: the function's size in PoCL's own symbol
table (:func:`dynamic_symbol`) must hold the new code, the pages keep the protection
``/proc/self/maps`` gave them, and the function, asked again, must answer the chosen name, else
its bytes are put back. Each refusal warns once and leaves PoCL as it was (no kernel builds
where LLVM 14 calls the CPU ``generic``).
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
import threading
import warnings
from collections.abc import Mapping

ENV_NAME = "POCL_LLVM_CPU_NAME"  # PoCL's own variable, in the releases that read it
ENV_OFF = "HALIDE_BUFFER_NO_POCL_PATCH"  # set (not "0"): PoCL is never opened nor changed here
FUNCTION = "pocl_get_llvm_cpu_name"

# The x86-64 feature levels LLVM knows as CPU names, highest first, with the /proc/cpuinfo flags
# each needs beyond the level below it (the x86-64 psABI's levels; sse3 is "pni" there).
LEVELS = (
    ("x86-64-v4", {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}),
    ("x86-64-v3", {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"}),
    ("x86-64-v2", {"cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3"}),
)
BASELINE = "x86-64"

_lock = threading.Lock()
_done = False
_applied: str | None = None
_name_buffer = None  # the name handed to PoCL: it must outlive every call


def feature_level(flags: set[str]) -> str:
    """The highest x86-64 feature level whose flags (and those of every level below) are all in
    ``flags``."""
    for i, (name, _) in enumerate(LEVELS):
        if all(needed <= flags for _, needed in LEVELS[i:]):
            return name
    return BASELINE


def chosen_name(llvm_name: str, env_name: str | None, flags: set[str]) -> str | None:
    """The CPU name PoCL should use on an x86-64 host, or None to leave PoCL as it is:
    ``env_name`` when set; the feature level of ``flags`` when LLVM calls the host ``generic``."""
    if env_name:
        return env_name
    if llvm_name == "generic":
        return feature_level(flags)
    return None


def cpu_flags() -> set[str]:
    """The host CPU's flags as /proc/cpuinfo lists them (empty where there is none)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.partition(":")[2].split())
    except OSError:
        pass
    return set()


def switched_off(environ: Mapping[str, str]) -> bool:
    """True when ``environ`` sets ``HALIDE_BUFFER_NO_POCL_PATCH`` to anything but ``""`` or
    ``"0"``."""
    return environ.get(ENV_OFF, "") not in ("", "0")


# ---------------------------------------------------------------------------- the ELF file

_ELF64_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
# name type flags addr offset size link info addralign entsize
_ELF64_SECTION = struct.Struct("<IIQQQQIIQQ")
_ELF64_SYMBOL = struct.Struct("<IBBHQQ")  # name info other shndx value size
_SHT_DYNSYM = 11


def dynamic_symbol(path: str, name: str) -> tuple[int, int] | None:
    """``(st_value, st_size)`` of ``name`` in the dynamic symbol table (``.dynsym``) of the
    64-bit little-endian ELF file at ``path``: its offset from the load address and its size in
    bytes, as the linker recorded them. None when the file is no such ELF or has no such symbol."""
    wanted = name.encode() + b"\0"
    try:
        with open(path, "rb") as f:
            header = f.read(_ELF64_HEADER.size)
            if len(header) < _ELF64_HEADER.size or header[:6] != b"\x7fELF\x02\x01":
                return None
            fields = _ELF64_HEADER.unpack(header)
            shoff, shentsize, shnum = fields[6], fields[11], fields[12]
            if shoff == 0 or shentsize < _ELF64_SECTION.size:
                return None
            f.seek(shoff)
            table = f.read(shentsize * shnum)
            sections = [_ELF64_SECTION.unpack_from(table, i * shentsize)
                        for i in range(len(table) // shentsize)]

            def contents(section: tuple[int, ...]) -> bytes:
                f.seek(section[4])
                return f.read(section[5])

            for section in sections:
                if section[1] != _SHT_DYNSYM or section[6] >= len(sections):
                    continue
                strings = contents(sections[section[6]])
                symbols = contents(section)
                entsize = section[9] or _ELF64_SYMBOL.size
                for at in range(0, len(symbols) - _ELF64_SYMBOL.size + 1, entsize):
                    st_name, _, _, _, value, size = _ELF64_SYMBOL.unpack_from(symbols, at)
                    if strings[st_name:st_name + len(wanted)] == wanted:
                        return value, size
    except (OSError, struct.error):
        pass
    return None


# ---------------------------------------------------------------------------- this process


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def _loaded_from(libc: ctypes.CDLL, address: int) -> tuple[str, int] | None:
    """The file of the library whose code holds ``address``, and its load address (dladdr)."""
    info = _DlInfo()
    libc.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
    if not libc.dladdr(ctypes.c_void_p(address), ctypes.byref(info)) or not info.dli_fname:
        return None
    return os.fsdecode(info.dli_fname), info.dli_fbase or 0


def page_protection(page: int) -> int | None:
    """The protection (``PROT_READ | PROT_WRITE | PROT_EXEC`` bits) of the page at ``page`` in
    this process, as /proc/self/maps lists it; None when no mapping holds it."""
    with open("/proc/self/maps", encoding="ascii", errors="replace") as f:
        for line in f:
            span, perms = line.split()[:2]
            start, _, end = span.partition("-")
            if int(start, 16) <= page < int(end, 16):
                return (1 if perms[0] == "r" else 0) | (2 if perms[1] == "w" else 0) | \
                       (4 if perms[2] == "x" else 0)
    return None


def _replacement(name: bytes, strdup: int) -> bytes:
    """x86-64 code that returns ``strdup(name)``: ``mov rdi, name; mov rax, strdup; jmp rax``
    (the caller frees the copy, as the callers of PoCL's own function do)."""
    global _name_buffer
    _name_buffer = ctypes.create_string_buffer(name)
    return (b"\x48\xbf" + struct.pack("<Q", ctypes.addressof(_name_buffer))
            + b"\x48\xb8" + struct.pack("<Q", strdup) + b"\xff\xe0")


def _answer(ask) -> str:
    """What the CPU name function answers now (it returns a copy for the caller to free)."""
    answer = ask()
    name = ctypes.string_at(answer).decode(errors="replace") if answer else ""
    ctypes.CDLL(None).free(ctypes.c_void_p(answer))
    return name


def _write_code(libc: ctypes.CDLL, address: int, code: bytes) -> str | None:
    """Writes ``code`` at ``address``: each page it covers made writable for the write, then
    given back the protection /proc/self/maps gave it. None when written, else why not."""
    page_size = os.sysconf("SC_PAGE_SIZE")
    first = address & ~(page_size - 1)
    pages = range(first, address + len(code), page_size)
    protections = [page_protection(p) for p in pages]
    if None in protections:
        return f"no mapping in /proc/self/maps holds {FUNCTION} at {address:#x}"
    if libc.mprotect(ctypes.c_void_p(first), len(pages) * page_size, 7) != 0:  # read, write, exec
        return f"its code cannot be made writable ({os.strerror(ctypes.get_errno())})"
    ctypes.memmove(address, code, len(code))
    for page, protection in zip(pages, protections):  # back to what each had (taking rights
        libc.mprotect(ctypes.c_void_p(page), page_size, protection)  # away does not fail)
    return None


def _replace_function(ask, name: str) -> str | None:
    """Makes ``ask`` (PoCL's ``pocl_get_llvm_cpu_name``) return ``name``. None when it now does,
    else why it was left as it was."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    address = ctypes.cast(ask, ctypes.c_void_p).value
    loaded = _loaded_from(libc, address) if address else None
    if loaded is None:
        return f"the library that holds {FUNCTION} is not known"
    path, base = loaded
    code = _replacement(name.encode(), ctypes.cast(libc.strdup, ctypes.c_void_p).value)
    symbol = dynamic_symbol(path, FUNCTION)
    if symbol is None or symbol[0] != address - base:
        return f"{path}'s symbol table does not list {FUNCTION} where it is loaded"
    if symbol[1] < len(code):
        return (f"{FUNCTION} is {symbol[1]} bytes long in {path}, less than the {len(code)} bytes "
                f"of the change")
    original = ctypes.string_at(address, len(code))
    why = _write_code(libc, address, code)
    if why is not None:
        return why
    answer = _answer(ask)
    if answer != name:
        undone = _write_code(libc, address, original)
        return (f"{FUNCTION} answered {answer!r} after the change, not {name!r}; its code was "
                + ("put back" if undone is None else f"not put back: {undone}"))
    return None


def apply(pocl_paths: list[str]) -> str | None:
    """Gives pip's PoCL (the first of ``pocl_paths``, the libpocl beside pyopencl) the CPU name
    :func:`chosen_name` picks, once per process, before PoCL's first use; returns that name, or
    None when PoCL is left as it is (a ``RuntimeWarning`` says why when a name was chosen)."""
    global _done, _applied
    with _lock:
        if _done:
            return _applied
        _done = True
        if switched_off(os.environ) or not pocl_paths:
            return None
        if platform.machine() != "x86_64":  # the replacement code is x86-64's
            return None
        try:  # RTLD_LOCAL: PoCL's symbols (LLVM 14's among them) stay out of the global scope;
            # the ICD loader, opening it by its soname later, gets this same copy
            pocl = ctypes.CDLL(pocl_paths[0], mode=os.RTLD_NOW | os.RTLD_LOCAL)
        except OSError:
            return None  # not loadable on its own: left to the loader, as it is
        ask = getattr(pocl, FUNCTION, None)
        if ask is None:
            return None
        ask.restype = ctypes.c_void_p
        llvm_name = _answer(ask)
        name = chosen_name(llvm_name, os.environ.get(ENV_NAME), cpu_flags())
        if name is None or name == llvm_name:
            return None
        why = _replace_function(ask, name)
        if why is not None:
            warnings.warn(f"halide_buffer: PoCL ({pocl_paths[0]}) still compiles for "
                          f"{llvm_name!r}, not {name!r}: {why}; where its LLVM refuses that name "
                          f"no OpenCL kernel builds (see 'PoCL on CPUs newer than its compiler' in "
                          f"docs/devices.md)", RuntimeWarning, stacklevel=2)
            return None
        _applied = name
        return name


def applied() -> str | None:
    """The CPU name :func:`apply` gave PoCL in this process, or None."""
    return _applied
