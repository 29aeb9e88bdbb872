"""Builds the test tree's small C libraries (tests/drivers/*.c) into shared libraries, once.

A library is compiled with the C compiler on PATH (``CC`` names another) into a folder named
after a hash of its source and flags, so a changed source builds again and an unchanged one is
reused, by every process of the run (pytest's subprocesses and benchmarks included). The folder
is ``HALIDE_BUFFER_TEST_BUILD`` when set, else ``build/test_libraries`` beside ``tests/`` when
writable, else one under the system's temporary folder.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCES = HERE / "drivers"
FLAGS = ["-std=c11", "-O1", "-g", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror"]


class BuildError(RuntimeError):
    """No compiler, or the compile failed (the compiler's output is in the message)."""


def compiler() -> list[str]:
    """The C compiler's command, or BuildError naming what to install."""
    named = os.environ.get("CC")
    if named:
        return shlex.split(named)
    for name in ("gcc", "cc", "clang"):
        path = shutil.which(name)
        if path:
            return [path]
    raise BuildError("no C compiler (gcc, cc or clang) on PATH: install one, or name it in CC")


def _build_root() -> Path:
    explicit = os.environ.get("HALIDE_BUFFER_TEST_BUILD")
    if explicit:
        return Path(explicit)
    beside = HERE.parent / "build" / "test_libraries"
    try:
        beside.mkdir(parents=True, exist_ok=True)
        if os.access(beside, os.W_OK):
            return beside
    except OSError:
        pass
    return Path(tempfile.gettempdir()) / f"halide_buffer_test_libraries_{os.getuid()}"


def build(name: str, libraries: tuple[str, ...] = ("-ldl", "-lpthread")) -> Path:
    """The shared library built from tests/drivers/<name>.c (built now when missing)."""
    source = SOURCES / f"{name}.c"
    cc = compiler()
    command_tail = [*FLAGS, str(source), *libraries]
    key = hashlib.sha256(source.read_bytes() + "\0".join(cc + command_tail).encode()).hexdigest()[:16]
    folder = _build_root() / f"{name}-{key}"
    library = folder / f"lib{name}.so"
    if library.exists():
        return library
    folder.mkdir(parents=True, exist_ok=True)
    # Built under a name of this process's own, then renamed: processes racing to build the
    # same library never load a half-written file.
    partial = folder / f".lib{name}.{os.getpid()}.so"
    proc = subprocess.run([*cc, "-o", str(partial), *command_tail], capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"compiling {source.name} failed (exit {proc.returncode}):\n{proc.stderr.strip()}")
    os.replace(partial, library)
    return library
