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
Anywhere else (another PoCL, a CPU LLVM knows, another OS or architecture) nothing is touched.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
import threading

ENV_NAME = "POCL_LLVM_CPU_NAME"  # PoCL's own variable, in the releases that read it

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


def _replace_function(address: int, name: bytes) -> bool:
    """Makes the function at ``address`` return ``strdup(name)``: its first bytes become
    ``mov rdi, name; mov rax, strdup; jmp rax`` (the caller frees the copy, as PoCL's own
    function's callers do). False when the code page cannot be made writable."""
    global _name_buffer
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    _name_buffer = ctypes.create_string_buffer(name)
    strdup = ctypes.cast(libc.strdup, ctypes.c_void_p).value
    code = (b"\x48\xbf" + struct.pack("<Q", ctypes.addressof(_name_buffer))
            + b"\x48\xb8" + struct.pack("<Q", strdup) + b"\xff\xe0")
    page_size = os.sysconf("SC_PAGE_SIZE")
    first = address & ~(page_size - 1)
    length = address + len(code) - first
    read_write_exec, read_exec = 7, 5
    if libc.mprotect(first, length, read_write_exec) != 0:
        return False
    ctypes.memmove(address, code, len(code))
    libc.mprotect(first, length, read_exec)
    return True


def apply(pocl_paths: list[str]) -> str | None:
    """Gives pip's PoCL (the first of ``pocl_paths``, the libpocl beside pyopencl) the CPU name
    :func:`chosen_name` picks, once per process, before PoCL's first use; returns that name, or
    None when PoCL is left as it is."""
    global _done, _applied
    with _lock:
        if _done:
            return _applied
        _done = True
        if not pocl_paths or platform.machine() != "x86_64":  # the replacement code is x86-64's
            return None
        try:  # the copy the ICD loader opens later
            pocl = ctypes.CDLL(pocl_paths[0], mode=os.RTLD_NOW | ctypes.RTLD_GLOBAL)
        except OSError:
            return None  # not loadable on its own: left to the loader, as it is
        ask = getattr(pocl, "pocl_get_llvm_cpu_name", None)
        if ask is None:
            return None
        ask.restype = ctypes.c_void_p
        answer = ask()
        llvm_name = ctypes.string_at(answer).decode() if answer else ""
        ctypes.CDLL(None).free(ctypes.c_void_p(answer))
        name = chosen_name(llvm_name, os.environ.get(ENV_NAME), cpu_flags())
        if name is None or name == llvm_name:
            return None
        address = ctypes.cast(ask, ctypes.c_void_p).value
        if address is None or not _replace_function(address, name.encode()):
            return None
        _applied = name
        return name


def applied() -> str | None:
    """The CPU name :func:`apply` gave PoCL in this process, or None."""
    return _applied
