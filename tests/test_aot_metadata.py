"""hb.aot.load against libraries whose names or metadata Halide never generates.

A damaged or hand-written library can carry any metadata. The library here is plain C: its
`fake_metadata()` returns a table the test rewrites through ctypes before each load (the
loader opens the same library, so it reads the same table), and `fake_argv` returns 0 without
touching its arguments. Every case must be a clear error naming the library, the argument and
what is wrong: never a read past a table, a NULL dereference or an "unexpected internal error".
"""

import ctypes
import subprocess

import numpy as np
import pytest

import halide_buffer as hb

from pipelines import c_compiler

SOURCE = r"""
#include <stdint.h>
#include <stddef.h>

typedef struct { uint8_t code, bits; uint16_t lanes; } type_t;
typedef struct {
    const char *name;
    int32_t kind, dimensions;
    type_t type;
    const void *scalar_def, *scalar_min, *scalar_max, *scalar_estimate;
    const int64_t *const *buffer_estimates;
} argument_t;
typedef struct {
    int32_t version, num_arguments;
    const argument_t *arguments;
    const char *target, *name;
} metadata_t;

argument_t fake_arguments[2];
metadata_t fake_table = {1, 2, fake_arguments, "x86-64-linux", "fake"};

typedef void (*handler_t)(void *, const char *);
handler_t fake_handler;
int fake_result;             /* what a call returns */
const char *fake_message;    /* what it reports first, when it fails */

const metadata_t *fake_metadata(void) { return &fake_table; }
int fake_argv(void **args) {
    (void)args;
    if (fake_result && fake_handler && fake_message) fake_handler(NULL, fake_message);
    return fake_result;
}
handler_t halide_set_error_handler(handler_t h) {
    handler_t old = fake_handler;
    fake_handler = h;
    return old;
}
"""


class Type(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class Argument(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("kind", ctypes.c_int32), ("dimensions", ctypes.c_int32),
                ("type", Type), ("scalar_def", ctypes.c_void_p), ("scalar_min", ctypes.c_void_p),
                ("scalar_max", ctypes.c_void_p), ("scalar_estimate", ctypes.c_void_p),
                ("buffer_estimates", ctypes.c_void_p)]


class Metadata(ctypes.Structure):
    _fields_ = [("version", ctypes.c_int32), ("num_arguments", ctypes.c_int32),
                ("arguments", ctypes.c_void_p), ("target", ctypes.c_char_p), ("name", ctypes.c_char_p)]


NAMES = {name: ctypes.c_char_p(name.encode()) for name in ("input", "output")}  # alive for the process
BAD_NAMES = [ctypes.c_char_p(b"caf\xe9"), ctypes.c_char_p(b"\xed\xa0\x80")]  # Latin-1; a UTF-16 surrogate


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    """(path of the library, a function resetting its table to a well-formed one and returning it)."""
    directory = tmp_path_factory.mktemp("fake_aot")
    (directory / "fake.c").write_text(SOURCE)
    lib = directory / "libfake.so"
    built = subprocess.run([c_compiler(), "-shared", "-fPIC", "-o", str(lib), str(directory / "fake.c")],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    handle = ctypes.CDLL(str(lib))
    table = Metadata.in_dll(handle, "fake_table")
    arguments = (Argument * 2).in_dll(handle, "fake_arguments")
    target = ctypes.c_char_p(b"x86-64-linux")

    result = ctypes.c_int.in_dll(handle, "fake_result")
    message = ctypes.c_void_p.in_dll(handle, "fake_message")

    def reset():
        result.value, message.value = 0, None
        table.version, table.num_arguments = 1, 2
        table.arguments = ctypes.addressof(arguments)
        table.target = ctypes.cast(target, ctypes.c_void_p).value
        for a, name, kind in zip(arguments, ("input", "output"), (1, 2)):
            a.name = ctypes.cast(NAMES[name], ctypes.c_void_p).value
            a.kind, a.dimensions = kind, 1
            a.type.code, a.type.bits, a.type.lanes = 1, 8, 1  # uint8
        return table, arguments

    reset.fail = lambda code, text: (setattr(result, "value", code),
                                     setattr(message, "value", ctypes.cast(text, ctypes.c_void_p).value))
    yield lib, reset
    reset()


def test_the_well_formed_table_loads_and_runs(fake):
    lib, reset = fake
    reset()
    p = hb.aot.load(lib, "fake")
    assert [(a["name"], a["kind"], a["dtype"], a["dimensions"]) for a in p.arguments] == [
        ("input", "input_buffer", "uint8", 1), ("output", "output_buffer", "uint8", 1)]
    out = hb.Buffer((4,), "uint8")
    assert p(np.zeros(4, np.uint8), out) is out


def test_a_pipeline_with_no_output_runs(fake):
    """No output is not all outputs empty: a call of a pipeline declaring none runs it (here it
    fails, and says so), where a call whose outputs are all empty computes nothing."""
    lib, reset = fake
    table, arguments = reset()
    table.num_arguments = 1  # the input only
    p = hb.aot.load(lib, "fake")
    assert [a["kind"] for a in p.arguments] == ["input_buffer"]
    reset.fail(-7, b"the pipeline ran")
    with pytest.raises(hb.PipelineError, match="the pipeline ran") as caught:
        p(np.zeros(0, np.uint8))
    assert caught.value.code == -7
    reset()
    out = hb.Buffer((0,), "uint8")
    reset.fail(-7, b"the pipeline ran")
    assert hb.aot.load(lib, "fake")(np.zeros(0, np.uint8), out) is out  # all outputs empty: not run


@pytest.mark.parametrize("name", ["fake\0", "fake\0_metadata", "", "fake x", "../fake", "1fake", "fake()",
                                  "fak\u00e9"])
def test_a_name_that_is_no_c_identifier_is_refused_before_any_lookup(fake, name):
    lib, reset = fake
    reset()
    with pytest.raises(ValueError, match=r"^aot\.load\(\): the function name '.*' is not a C identifier; "
                                         r"pass the name the pipeline was compiled with"):
        hb.aot.load(lib, name)


@pytest.mark.parametrize("name, shown", [("fake\0", r"fake\\x00"), ("fake x", "fake x"), ("it's", r"it\\x27s"),
                                         ("~fake", "~fake"), ("fake\x7f", r"fake\\x7f")])
def test_a_name_is_shown_as_it_is_but_what_is_not_printable_ascii(fake, name, shown):
    lib, _ = fake
    with pytest.raises(ValueError, match=rf"the function name '{shown}' is not a C identifier"):
        hb.aot.load(lib, name)


def _set(field, value):
    def change(table, arguments):
        if field == "num_arguments":
            table.num_arguments = value
        elif field == "arguments":
            table.arguments = value
        elif field == "target":
            table.target = value
        elif field == "name":
            arguments[1].name = value
        elif field == "type":
            arguments[1].type.code, arguments[1].type.bits, arguments[1].type.lanes = value
        else:
            setattr(arguments[1], field, value)
    return change


DAMAGED = [
    ("kind-3", _set("kind", 3), ValueError, r"gives argument 'output' the unknown kind 3 \(0: scalar input, "
                                            r"1: buffer input, 2: buffer output\)"),
    ("kind-huge", _set("kind", 2**31 - 1), ValueError, r"gives argument 'output' the unknown kind 2147483647"),
    ("kind-negative", _set("kind", -1), ValueError, r"gives argument 'output' the unknown kind -1"),
    ("dimensions-negative", _set("dimensions", -3), ValueError,
     r"gives argument 'output' -3 dimensions \(0 to 64 are possible\)"),
    ("dimensions-huge", _set("dimensions", 2**31 - 1), ValueError, r"gives argument 'output' 2147483647 dimensions"),
    ("handle-buffer", _set("type", (3, 64, 1)), TypeError,
     r"argument 'output' of fake is a buffer of Halide type \(code 3, bits 64, lanes 1\), which no "
     r"halide_buffer dtype has; give the pipeline's buffers a numeric element type"),
    ("float-24-buffer", _set("type", (2, 24, 1)), TypeError, r"a buffer of Halide type \(code 2, bits 24, lanes 1\)"),
    ("lanes-0-buffer", _set("type", (1, 8, 0)), TypeError, r"a buffer of Halide type \(code 1, bits 8, lanes 0\)"),
    ("null-name", _set("name", None), ValueError, r"has no name for argument 1"),
    ("latin-1-name", _set("name", ctypes.cast(BAD_NAMES[0], ctypes.c_void_p).value), ValueError,
     r"names argument 1 'caf\\xe9', which is not UTF-8"),
    ("surrogate-name", _set("name", ctypes.cast(BAD_NAMES[1], ctypes.c_void_p).value),
     ValueError, r"names argument 1 '\\xed\\xa0\\x80', which is not UTF-8"),
    ("negative-count", _set("num_arguments", -1), ValueError, r"lists -1 arguments"),
    ("no-table", _set("arguments", None), ValueError, r"lists 2 arguments and no argument table"),
    ("no-target", _set("target", None), ValueError, r"has no target string"),
]


@pytest.mark.parametrize("change, error, message", [d[1:] for d in DAMAGED], ids=[d[0] for d in DAMAGED])
def test_damaged_metadata_is_a_clear_error_naming_library_and_argument(fake, change, error, message):
    lib, reset = fake
    change(*reset())
    with pytest.raises(error, match=r"^aot\.load\(\): .*libfake\.so: .*" + message):
        hb.aot.load(lib, "fake")
    reset()
    hb.aot.load(lib, "fake")  # nothing was left behind: the repaired table loads


KEPT = []  # C strings the library points to, alive for the process


def _c_text(raw):
    KEPT.append(ctypes.c_char_p(raw))
    return KEPT[-1]


def test_a_pipeline_message_that_is_not_utf8_is_shown_escaped(fake):
    lib, reset = fake
    reset()
    reset.fail(-1, _c_text(b"bad \xff byte"))
    p = hb.aot.load(lib, "fake")
    with pytest.raises(hb.PipelineError, match=r"^fake\(\): bad \\xff byte \(Halide error -1\)$") as info:
        p(np.zeros(4, np.uint8), hb.Buffer((4,), "uint8"))
    assert info.value.code == -1


def test_a_utf8_name_is_kept(fake):
    lib, reset = fake
    _, arguments = reset()
    arguments[1].name = ctypes.cast(_c_text("ausgabe_\u00e4".encode()), ctypes.c_void_p).value
    assert hb.aot.load(lib, "fake").arguments[1]["name"] == "ausgabe_\u00e4"


NOT_AN_ADDRESS = r"; pass the address as an int, or None for a null pointer$"


@pytest.mark.parametrize("value, error, message", [
    (-1, ValueError, r"-1 is out of range for an address; pass a value from 0 to 18446744073709551615$"),
    (2**64, ValueError, r"18446744073709551616 is out of range for an address; pass a value from 0 to "
                        r"18446744073709551615$"),
    (np.zeros(3), TypeError, r"expected an address \(int\) or None, not numpy.ndarray" + NOT_AN_ADDRESS),
    (True, TypeError, r"expected an address \(int\) or None, not bool" + NOT_AN_ADDRESS),
    ("0x10", TypeError, r"expected an address \(int\) or None, not str" + NOT_AN_ADDRESS),
])
def test_a_handle_scalar_takes_an_address(fake, value, error, message):
    lib, reset = fake
    table, arguments = reset()
    arguments[0].kind, arguments[0].dimensions = 0, 0
    arguments[0].type.code, arguments[0].type.bits, arguments[0].type.lanes = 3, 64, 1  # void *
    p = hb.aot.load(lib, "fake")
    with pytest.raises(error, match=r"^fake\(\): argument 'input': " + message):
        p(value, hb.Buffer((4,), "uint8"))
    assert p(2**64 - 1, hb.Buffer((4,), "uint8")).shape == (4,)


def test_a_bool_scalar_takes_a_bool(fake):
    lib, reset = fake
    table, arguments = reset()
    arguments[0].kind, arguments[0].dimensions = 0, 0
    arguments[0].type.code, arguments[0].type.bits, arguments[0].type.lanes = 1, 1, 1  # bool
    p = hb.aot.load(lib, "fake")
    with pytest.raises(TypeError, match=r"^fake\(\): argument 'input': expected a bool, not str; pass True or "
                                        r"False$"):
        p("yes", hb.Buffer((4,), "uint8"))
    assert p(True, hb.Buffer((4,), "uint8")).shape == (4,)


def test_a_keyword_with_a_nul_is_shown_whole(fake):
    lib, reset = fake
    reset()
    p = hb.aot.load(lib, "fake")
    with pytest.raises(TypeError, match=r"^fake\(\) got an unexpected keyword argument 'out\\x00put'; its "
                                        r"arguments are 'input', 'output'$"):
        p(np.zeros(4, np.uint8), **{"out\0put": hb.Buffer((4,), "uint8")})
