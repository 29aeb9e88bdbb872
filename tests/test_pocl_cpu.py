"""pip's PoCL is given a CPU name its compiler knows (halide_buffer._pocl_cpu)."""

import ctypes
import json
import os
import platform
import re
import struct
import subprocess
import sys

import pytest

import halide_buffer as hb
from halide_buffer import _pocl_cpu

V2 = {"cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3"}
V3 = V2 | {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"}
V4 = V3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}


@pytest.mark.parametrize("flags, level", [
    (set(), "x86-64"),
    ({"sse2", "fpu"}, "x86-64"),
    (V2, "x86-64-v2"),
    (V3, "x86-64-v3"),
    (V4 | {"avx512_bf16"}, "x86-64-v4"),
    (V4 - {"avx512vl"}, "x86-64-v3"),
    (V4 - {"movbe"}, "x86-64-v2"),  # AVX-512 without a v3 flag is no v3 or v4
    (V4 - {"popcnt"}, "x86-64"),
])
def test_the_feature_level_needs_every_flag_of_it_and_the_levels_below(flags, level):
    assert _pocl_cpu.feature_level(flags) == level


@pytest.mark.parametrize("llvm_name, env_name, chosen", [
    ("generic", None, "x86-64-v3"),     # a CPU LLVM does not know: the feature level
    ("generic", "", "x86-64-v3"),       # an empty variable is no choice
    ("znver3", None, None),             # a CPU LLVM knows: PoCL is left as it is
    ("znver3", "x86-64-v2", "x86-64-v2"),  # the variable, as later PoCL releases read it
    ("generic", "skylake", "skylake"),
])
def test_the_variable_wins_and_a_generic_host_gets_its_feature_level(llvm_name, env_name, chosen):
    assert _pocl_cpu.chosen_name(llvm_name, env_name, V3) == chosen


def _needs_pips_pocl():
    """Skips the test where there is nothing for _pocl_cpu to change."""
    if not hb.opencl._bundled("libpocl*.so*") or platform.machine() != "x86_64":
        pytest.skip("pip's PoCL (pocl-binary-distribution beside pyopencl) on x86-64 is what "
                    "_pocl_cpu adjusts; this machine has neither")


def _target_cpu_of_a_build(env_name):
    """The -target-cpu PoCL compiles a kernel for, in a fresh process that opened OpenCL through
    halide_buffer (PoCL's build log, POCL_DEBUG=llvm, names it); and what _pocl_cpu applied."""
    _needs_pips_pocl()
    env = dict(os.environ, POCL_DEBUG="llvm")
    env.pop(_pocl_cpu.ENV_NAME, None)
    if env_name is not None:
        env[_pocl_cpu.ENV_NAME] = env_name
    code = (
        "import halide_buffer as hb, pyopencl as cl\n"
        "from halide_buffer import _pocl_cpu\n"
        "dev = hb.opencl.device()\n"
        "ctx = cl.Context.from_int_ptr(dev.context)\n"
        "cl.Program(ctx, '__kernel void k(__global int *a) { a[0] = 1; }').build()\n"
        "print('applied', _pocl_cpu.applied())\n"
    )
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    targets = set(re.findall(r"-target-cpu (\S+)", run.stderr + run.stdout))
    assert len(targets) == 1, (targets, run.stderr[-3000:])
    return targets.pop(), run.stdout.split("applied ")[1].strip()


def test_pocl_never_compiles_for_generic():
    target, applied = _target_cpu_of_a_build(None)
    assert target != "generic"
    if applied != "None":  # LLVM did not know this CPU: its feature level was given
        assert target == applied == _pocl_cpu.feature_level(_pocl_cpu.cpu_flags())


def test_the_variable_names_the_cpu_pocl_compiles_for():
    target, applied = _target_cpu_of_a_build("x86-64-v2")
    assert target == applied == "x86-64-v2"


# ---------------------------------------------------------------------------- a safe change

def _elf_with_symbols(symbols, entsize=24):
    """A 64-bit little-endian ELF file's bytes: a header, a .dynstr and a .dynsym listing
    ``symbols`` (name, value, size), and their section table, as a linker lays them out; the
    .dynsym says its entries are ``entsize`` bytes (0: it does not say)."""
    strings = b"\0"
    entries = [bytes(24)]  # symbol 0 is the null symbol
    for name, value, size in symbols:
        entries.append(struct.pack("<IBBHQQ", len(strings), 0x12, 0, 8, value, size))  # FUNC GLOBAL
        strings += name.encode() + b"\0"
    dynsym = b"".join(entries)
    strings_at = 64
    dynsym_at = strings_at + len(strings) + (-len(strings)) % 8
    sections_at = dynsym_at + len(dynsym)
    sections = bytes(64)  # section 0 is the null section
    section = struct.Struct("<IIQQQQIIQQ")
    sections += section.pack(0, 3, 2, 0, strings_at, len(strings), 0, 0, 1, 0)  # STRTAB
    sections += section.pack(0, 11, 2, 0, dynsym_at, len(dynsym), 1, 1, 8, entsize)  # DYNSYM, link 1
    header = struct.pack("<16sHHIQQQIHHHHHH", b"\x7fELF\x02\x01\x01" + bytes(9), 3, 62, 1, 0, 0,
                         sections_at, 0, 64, 56, 0, 64, 3, 0)
    return (header + strings + bytes(dynsym_at - strings_at - len(strings)) + dynsym + sections)


def test_the_symbol_table_gives_a_function_s_offset_and_size(tmp_path):
    lib = tmp_path / "libfake.so"
    lib.write_bytes(_elf_with_symbols([("other_pocl_get_llvm_cpu_name", 0x100, 90),
                                       ("pocl_get_llvm_cpu_name", 0x7de1b0, 12)]))
    assert _pocl_cpu.dynamic_symbol(str(lib), "pocl_get_llvm_cpu_name") == (0x7de1b0, 12)
    assert _pocl_cpu.dynamic_symbol(str(lib), "other_pocl_get_llvm_cpu_name") == (0x100, 90)
    assert _pocl_cpu.dynamic_symbol(str(lib), "pocl_get_llvm") is None  # a prefix is no name
    (tmp_path / "text").write_bytes(b"not an ELF file at all")
    assert _pocl_cpu.dynamic_symbol(str(tmp_path / "text"), "pocl_get_llvm_cpu_name") is None
    assert _pocl_cpu.dynamic_symbol(str(tmp_path / "absent.so"), "pocl_get_llvm_cpu_name") is None


@pytest.mark.parametrize("prot", [0, 1, 3, 5], ids=["none", "read", "read-write", "read-exec"])
def test_a_pages_protection_is_read_from_the_maps_of_the_process(prot):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    page = libc.mmap(None, 4096, prot, 0x22, -1, 0)  # MAP_PRIVATE | MAP_ANONYMOUS
    assert page not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
    try:
        assert _pocl_cpu.page_protection(page) == prot
    finally:
        libc.munmap(page, 4096)


def test_a_symbol_table_that_does_not_say_its_entry_size_has_elf64s(tmp_path):
    lib = tmp_path / "libfake.so"
    lib.write_bytes(_elf_with_symbols([("other", 0x100, 90), ("pocl_get_llvm_cpu_name", 0x7de1b0, 12)], entsize=0))
    assert _pocl_cpu.dynamic_symbol(str(lib), "pocl_get_llvm_cpu_name") == (0x7de1b0, 12)


@pytest.mark.parametrize("value, off", [(None, False), ("", False), ("0", False), ("1", True),
                                        ("yes", True)])
def test_the_switch_is_off_unless_set_to_something_but_0(value, off):
    environ = {} if value is None else {_pocl_cpu.ENV_OFF: value}
    assert _pocl_cpu.switched_off(environ) is off


# Run in a fresh process: PoCL is loaded; its function's first bytes, the protection
# /proc/self/maps gives the pages they lie on and the function's answer are read; apply() runs
# (after what replaces `# inject`); the same are read again, with the warnings apply() gave.
_APPLY = """
import ctypes, json, os, warnings
import halide_buffer as hb
from halide_buffer import _pocl_cpu

path = hb.opencl._bundled("libpocl*.so*")[0]
ask = ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL).pocl_get_llvm_cpu_name
ask.restype = ctypes.c_void_p
address = ctypes.cast(ask, ctypes.c_void_p).value
page_size = os.sysconf("SC_PAGE_SIZE")
pages = {address & ~(page_size - 1), (address + 31) & ~(page_size - 1)}

def state():
    perms = []
    for line in open("/proc/self/maps"):
        start, end = (int(x, 16) for x in line.split()[0].split("-"))
        perms += [line.split()[1] for p in sorted(pages) if start <= p < end]
    answer = ask()
    name = ctypes.string_at(answer).decode()
    ctypes.CDLL(None).free(ctypes.c_void_p(answer))
    return {"code": ctypes.string_at(address, 32).hex(), "perms": perms, "answer": name}

before = state()
# inject
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    applied = _pocl_cpu.apply([path])
print(json.dumps({"before": before, "after": state(), "applied": applied,
                  "warnings": [str(w.message) for w in caught]}))
"""


def _apply_in_a_fresh_process(inject="", **env):
    """What _APPLY prints, run with POCL_LLVM_CPU_NAME=x86-64-v2 (so that apply() changes pip's
    PoCL on any x86-64 CPU) and ``env``."""
    _needs_pips_pocl()
    environ = {k: v for k, v in os.environ.items() if k != _pocl_cpu.ENV_OFF}
    environ.update({_pocl_cpu.ENV_NAME: "x86-64-v2"}, **env)
    run = subprocess.run([sys.executable, "-c", _APPLY.replace("# inject", inject)], env=environ,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.splitlines()[-1])


def test_the_change_keeps_each_page_s_protection_and_answers_the_name():
    r = _apply_in_a_fresh_process()
    assert r["applied"] == r["after"]["answer"] == "x86-64-v2", r
    assert r["after"]["code"] != r["before"]["code"]
    assert r["after"]["perms"] == r["before"]["perms"], r  # as /proc/self/maps listed them
    assert all("w" not in p for p in r["after"]["perms"]), r
    assert r["warnings"] == []


def test_the_switch_leaves_pocl_as_it_is():
    r = _apply_in_a_fresh_process(**{_pocl_cpu.ENV_OFF: "1"})
    assert r["applied"] is None
    assert r["after"] == r["before"]
    assert r["after"]["answer"] != "x86-64-v2"  # PoCL 3.0 does not read the variable itself
    assert r["warnings"] == []  # a choice, not a failure


def test_a_function_too_small_for_the_change_is_left_as_it_is():
    # The symbol table, as read, says the function is 8 bytes long: the new code is 22.
    inject = ("real = _pocl_cpu.dynamic_symbol\n"
              "_pocl_cpu.dynamic_symbol = lambda p, n: (real(p, n)[0], 8)\n")
    r = _apply_in_a_fresh_process(inject)
    assert r["applied"] is None
    assert r["after"] == r["before"]
    assert len(r["warnings"]) == 1, r
    assert "is 8 bytes long" in r["warnings"][0] and "less than the 22 bytes" in r["warnings"][0]


def test_a_wrong_answer_after_the_change_puts_the_code_back():
    # The new code returns another name than the one chosen.
    inject = ("real = _pocl_cpu._replacement\n"
              "_pocl_cpu._replacement = lambda name, strdup: real(b'bogus', strdup)\n")
    r = _apply_in_a_fresh_process(inject)
    assert r["applied"] is None
    assert r["after"] == r["before"], r  # the bytes, the protection and the answer
    assert len(r["warnings"]) == 1, r
    assert "answered 'bogus' after the change, not 'x86-64-v2'" in r["warnings"][0]
