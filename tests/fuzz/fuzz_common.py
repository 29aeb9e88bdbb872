"""What the fuzz harnesses share: decoding fuzz bytes into fields, the exceptions a malformed
input may raise, findings, and known bugs that a run may step over.

A harness raises `Finding` (or lets any unexpected exception escape) for a bug: atheris then
prints the traceback, writes the input as a crash-* file and stops. Exceptions the library
raises to refuse an input are fine; a RuntimeError that is not one of the library's own
(DeviceError, PipelineError) is a finding: "halide_buffer: unexpected internal error" is what
an escaped C++ exception becomes.

HALIDE_BUFFER_FUZZ_KNOWN (comma-separated names) lists bugs a run steps over: inputs that
would hit them are skipped, and the checks that would report them are not made, so that a run
goes on past bugs already reported. Each harness names its own kinds in its docstring.
"""

import os
import sys

import numpy as np

import halide_buffer as hb

KNOWN = frozenset(k.strip() for k in os.environ.get("HALIDE_BUFFER_FUZZ_KNOWN", "").split(",") if k.strip())

# What the library may raise to refuse an input.
EXPECTED = (BufferError, TypeError, ValueError, OverflowError, IndexError, MemoryError,
            UnicodeDecodeError, hb.DeviceError, hb.PipelineError)

# Reads (copies, comparisons) happen only for buffers of at most this many bytes.
READ_LIMIT = 1 << 16


# Words of libstdc++'s exception messages (std::length_error and the like): the library's own
# messages never hold them.
CPP_WORDS = ("std::", "basic_string", "max_size()", "vector::", "_M_", "bad_alloc", "bad_array_new_length")


class Finding(AssertionError):
    """A bug found by a harness: the library accepted what it must refuse, or got it wrong."""


def known(kind):
    """Whether the run steps over bugs of this kind (HALIDE_BUFFER_FUZZ_KNOWN)."""
    return kind in KNOWN


def check(kind, condition, message):
    """Raises Finding(kind: message) unless `condition` holds or the kind is known."""
    if not condition and kind not in KNOWN:
        raise Finding(f"[{kind}] {message}")


def refused(error, entry=None, foreign=()):
    """Whether an exception is a refusal the library may give (else re-raised: a finding).
    With `entry`, the message must name it ("<entry>(): ..."), as the library's own messages
    do, unless it is one of the `foreign` messages (the input's own exceptions)."""
    if isinstance(error, RuntimeError) and not isinstance(error, (hb.DeviceError, hb.PipelineError)):
        raise Finding(f"[internal-error] {type(error).__name__}: {error}") from error
    if not isinstance(error, EXPECTED):
        raise error
    text = str(error)
    check("message", not any(w in text for w in CPP_WORDS),
          f"a C++ exception's message reached Python: {type(error).__name__}: {text}")
    entries = (entry,) if isinstance(entry, str) else tuple(entry or ())
    if (entries and not any(e + "()" in text for e in entries) and text not in foreign and
            not isinstance(error, (hb.DeviceError, MemoryError))):
        check("message", False, f"a refusal that does not come from {'/'.join(entries)}(): "
              f"{type(error).__name__}: {text}")
    return True


class Fields:
    """Fuzz bytes as structured fields: mostly values from pools of edge cases, sometimes any
    value of the field's width."""

    def __init__(self, data, atheris):
        self.fdp = atheris.FuzzedDataProvider(data)

    def left(self):
        return self.fdp.remaining_bytes()

    def pick(self, pool):
        return pool[self.fdp.ConsumeIntInRange(0, len(pool) - 1)]

    def flag(self):
        return self.fdp.ConsumeBool()

    def small(self, lo, hi):
        return self.fdp.ConsumeIntInRange(lo, hi)

    def int(self, bits, signed, pool=()):
        """A `bits`-wide integer: from `pool` or the edges of the width most of the time."""
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
        edges = [0, 1, 2, 3, hi, hi - 1, (hi + 1) // 2] + ([lo, lo + 1, -1, -2] if signed else [])
        choice = self.fdp.ConsumeIntInRange(0, 3)
        if choice <= 1 and pool:
            return self.pick(list(pool))
        if choice == 2:
            return self.pick(edges)
        return self.fdp.ConsumeIntInRange(lo, hi)

    def bytes(self, n):
        return self.fdp.ConsumeBytes(n)


def numpy_view(b):
    """np.asarray(b), or None for an empty buffer whose other extents overflow NumPy's sizes
    (NumPy refuses such a shape; nothing is there to read)."""
    try:
        return np.asarray(b)
    except ValueError as e:
        if "too big" in str(e) and b.size == 0:
            return None
        raise


def setup_atheris():
    """atheris, imported, or a clear exit when it is not installed."""
    try:
        import atheris
    except ImportError:
        sys.exit("this harness needs atheris: python -m pip install atheris")
    return atheris


def element_range(first, shape, strides, unit):
    """[lo, hi) in the same unit as `first` of every element of a geometry (strides and `unit`,
    an element's size, in one unit), exact; None when it has no elements."""
    if any(n == 0 for n in shape):
        return None
    lo = hi = first
    for n, s in zip(shape, strides):
        reach = (n - 1) * s
        if reach < 0:
            lo += reach
        else:
            hi += reach
    return lo, hi + unit


def instrument(namespace, atheris):
    """Python coverage for the harness's own functions and methods (the branches that follow
    the library's answers), without instrumenting NumPy and the rest of the process."""
    name = namespace["__name__"]
    for value in list(namespace.values()):
        targets = [value]
        if isinstance(value, type) and value.__module__ == name:
            targets = list(vars(value).values())
        for f in targets:
            if callable(f) and getattr(f, "__module__", None) == name and hasattr(f, "__code__"):
                atheris.instrument_func(f)


def build_library(source, name, python_extension=False):
    """Compiles a C file of this folder into build/fuzz/ (again only when the source is newer):
    a CPython extension module named `name`, or a plain shared library lib<name>.so. Returns
    the path of what it built."""
    import shutil
    import subprocess
    import sysconfig

    here = os.path.dirname(os.path.abspath(__file__))
    out_dir = os.path.join(here, "..", "..", "build", "fuzz")
    os.makedirs(out_dir, exist_ok=True)
    src = os.path.join(here, source)
    suffix = sysconfig.get_config_var("EXT_SUFFIX") if python_extension else ".so"
    out = os.path.abspath(os.path.join(out_dir, (name if python_extension else "lib" + name) + suffix))
    if os.path.exists(out) and os.path.getmtime(out) >= os.path.getmtime(src):
        return out
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if not cc:
        sys.exit(f"a C compiler is needed to build {source} (set CC)")
    command = [cc, "-shared", "-fPIC", "-O1", "-g", "-Wall", src, "-o", out + ".tmp"]
    if python_extension:
        command[1:1] = ["-I" + sysconfig.get_paths()["include"]]
    # Compiled without the sanitizer runtime the process may have preloaded.
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    made = subprocess.run(command, capture_output=True, text=True, env=env)
    if made.returncode != 0:
        sys.exit(f"building {source} failed:\n{' '.join(command)}\n{made.stderr}")
    os.replace(out + ".tmp", out)
    return out


def fuzz(namespace, atheris, make_case, skip, run, describe, what):
    """A harness's main: each input becomes make_case(Fields(...)); a case skip() names a known
    bug of is stepped over; a Finding is reported with describe(case), labelled `what`."""
    def test_one_input(data):
        case = make_case(Fields(data, atheris))
        if skip(case):
            return
        try:
            run(case)
        except Finding as e:
            raise Finding(f"{e}\n  {what}: {describe(case)}") from None

    instrument(namespace, atheris)
    instrument(globals(), atheris)
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


def check_values(b, expected):
    """Every way of reading an accepted buffer gives the bytes the producer described: its copy,
    its buffer-protocol view, a DLPack round trip; and a writable view can be taken and written."""
    check("values", np.asarray(b.copy()).tobytes() == expected, "b.copy() holds other values")
    try:
        m = memoryview(b)
    except (BufferError, TypeError, ValueError, NotImplementedError):
        pass
    else:
        check("values", m.tobytes() == expected, "memoryview(b) holds other values")
        m.release()
    again = hb.from_dlpack(b.__dlpack__(max_version=(1, 3)))
    check("values", np.asarray(again).tobytes() == expected, "a DLPack round trip changed the values")
    del again
    if not b.readonly:
        w = b.numpy(writable=True)
        w[(0,) * w.ndim] = w[(0,) * w.ndim]
        del w
