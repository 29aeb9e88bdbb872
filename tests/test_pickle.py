"""Pickling a Buffer: exact dtype and geometry for every protocol, protocol 5 out of band with no
copy, copy.copy/deepcopy, device copies downloaded once, damaged pickles refused."""

import copy
import pickle
import subprocess
import sys
import sysconfig

import numpy as np
import pyopencl as cl
import pytest

import halide_buffer as hb
from common import ALL_DTYPES, NONE, Moves, bits_of, filled
from halide_buffer import _core
from native_library import compiler

PROTOCOLS = range(0, pickle.HIGHEST_PROTOCOL + 1)


def out_of_band(b):
    """pickle protocol 5 with a buffer_callback: (pickle, the buffers handed out)."""
    buffers = []
    s = pickle.dumps(b, protocol=5, buffer_callback=buffers.append)
    return s, buffers


def same_buffer(c, b):
    """c has b's dtype, shape, mins, read-only flag and element bits."""
    assert c.dtype is b.dtype and c.shape == b.shape and c.mins == b.mins and c.readonly == b.readonly
    assert np.array_equal(bits_of(np.asarray(c)), bits_of(np.asarray(b)))


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_every_dtype_round_trips_exactly_in_band(dtype, protocol):  # protocols 0 and 1 too
    b, _ = filled((3, 5), dtype)
    c = pickle.loads(pickle.dumps(b.translated((-2, 7)), protocol=protocol))
    same_buffer(c, b.translated((-2, 7)))
    assert c.strides == b.strides and not c.shares_storage_with(b)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_every_dtype_round_trips_exactly_out_of_band(dtype):
    b, _ = filled((4, 3), dtype, seed=1)
    s, buffers = out_of_band(b)
    assert len(buffers) == 1 and len(s) < 300  # the elements are not in the pickle
    same_buffer(pickle.loads(s, buffers=buffers), b)


def test_out_of_band_pickling_hands_out_the_buffers_own_bytes_and_loads_aliases_them():
    b, _ = filled((64, 32), "float32")
    s, [handed] = out_of_band(b)
    raw = handed.raw()
    assert np.shares_memory(np.asarray(raw), b.numpy())
    assert np.frombuffer(raw, np.uint8).ctypes.data == b.numpy().ctypes.data  # the very bytes, no copy
    c = pickle.loads(s, buffers=[handed])
    assert np.asarray(c).ctypes.data == np.asarray(b).ctypes.data
    c[5, 6] = 1234.5  # a write through the unpickled buffer is a write into b
    assert np.asarray(b)[5, 6] == 1234.5


def test_in_band_pickles_arrive_as_owned_writable_copies():
    b, a = filled((8, 8), "int16")
    for protocol in PROTOCOLS:
        c = pickle.loads(pickle.dumps(b, protocol=protocol))
        c[0, 0] = 1
        assert not np.shares_memory(np.asarray(c), np.asarray(b)) and np.asarray(b)[0, 0] == a[0, 0]


def test_dense_views_keep_their_strides_and_views_with_gaps_are_compacted_in_memory_order():
    b, a = filled((4, 6, 5), "uint16")
    cases = {
        "permuted": b.transposed(2, 0, 1),                # dense, neither C nor F: as it lies
        "fortran": b.transposed(),                        # F-contiguous: as it lies
        "gaps": b[:, ::2, 1:4],                           # compacted, C order
        "negative": b[::-1, :, ::-2],                     # compacted, strides positive
        "transposed gaps": b[:, 1:5].transposed(2, 0, 1),  # compacted in its memory order
    }
    for name, v in cases.items():
        for protocol in (4, 5):
            c = pickle.loads(pickle.dumps(v, protocol=protocol))
            assert np.array_equal(np.asarray(c), np.asarray(v)), name
            assert all(s > 0 for s in c.strides), name
            expected_order = sorted(range(v.ndim), key=lambda i: -abs(v.strides[i]))
            assert sorted(range(c.ndim), key=lambda i: -c.strides[i]) == expected_order, name
    assert pickle.loads(pickle.dumps(cases["permuted"], 5)).strides == cases["permuted"].strides
    assert pickle.loads(pickle.dumps(cases["fortran"], 4)).strides == cases["fortran"].strides
    assert pickle.loads(pickle.dumps(cases["gaps"], 5)).strides == (18, 6, 2)


def test_a_compacted_view_is_copied_once_and_the_original_is_untouched():
    b, a = filled((6, 6), "float32")
    v = b[::2, ::-1]
    s, [handed] = out_of_band(v)
    assert not np.shares_memory(np.asarray(handed.raw()), b.numpy())
    pickle.loads(s, buffers=[handed])[0, 0] = -1
    assert np.array_equal(np.asarray(b), a)


def test_a_view_with_gaps_goes_out_of_band_where_numpy_keeps_it_in_band():
    """Where we differ from NumPy (docs/processes.md): NumPy pickles a non-contiguous array's
    elements in band, a copy inside the pickle; we hand the compacted copy out of band, so a
    consumer (Dask, Ray) moves it as it moves any other buffer."""
    b, a = filled((60, 60), "float32")
    handed_by_numpy = []
    numpy_pickle = pickle.dumps(a[::2, ::-1], protocol=5, buffer_callback=handed_by_numpy.append)
    assert handed_by_numpy == [] and len(numpy_pickle) > a[::2, ::-1].nbytes
    s, [handed] = out_of_band(b[::2, ::-1])
    assert handed.raw().nbytes == a[::2, ::-1].nbytes and len(s) < a[::2, ::-1].nbytes
    assert np.array_equal(bits_of(np.asarray(pickle.loads(s, buffers=[handed]))), bits_of(a[::2, ::-1]))


def test_the_read_only_flag_travels():
    data = np.arange(12, dtype=np.float32)
    data.flags.writeable = False
    b = hb.Buffer.from_host(data)
    assert b.readonly
    for protocol in PROTOCOLS:
        c = pickle.loads(pickle.dumps(b, protocol=protocol))
        assert c.readonly and np.asarray(c).tolist() == list(range(12))
        with pytest.raises(BufferError):
            c.numpy(writable=True)
    s, buffers = out_of_band(b)
    assert buffers[0].raw().readonly and pickle.loads(s, buffers=buffers).readonly
    writable = [bytearray(buffers[0].raw())]  # a consumer handing back writable memory
    assert pickle.loads(s, buffers=writable).readonly


def test_writable_data_handed_back_read_only_is_copied_once():
    b, a = filled((5,), "int32")
    s, [handed] = out_of_band(b)
    c = pickle.loads(s, buffers=[bytes(handed.raw())])  # a consumer that kept only bytes
    assert not c.readonly and np.array_equal(np.asarray(c), a)
    c[0] = 7  # its own copy
    assert np.asarray(b)[0] == a[0]


# An exporter as the buffer protocol allows one to be: it lends its memory writable only to a
# consumer that asks for PyBUF_WRITABLE, read-only otherwise, and counts the requests of each kind.
LENDER_SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

typedef struct {
    PyObject_HEAD
    PyObject *base;
    Py_ssize_t writable_requests, plain_requests;
} Lender;

static int lender_init(Lender *self, PyObject *args, PyObject *kwargs) {
    PyObject *base;
    if (!PyArg_ParseTuple(args, "O", &base)) return -1;
    Py_INCREF(base);
    Py_XSETREF(self->base, base);
    return 0;
}

static void lender_dealloc(Lender *self) {
    Py_XDECREF(self->base);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int lender_getbuffer(Lender *self, Py_buffer *view, int flags) {
    if (PyObject_GetBuffer(self->base, view, flags) != 0) return -1;
    if (flags & PyBUF_WRITABLE) {
        self->writable_requests++;
    } else {
        self->plain_requests++;
        view->readonly = 1;
    }
    return 0;
}

static PyBufferProcs lender_as_buffer = {(getbufferproc)lender_getbuffer, NULL};

static PyMemberDef lender_members[] = {
    {"writable_requests", T_PYSSIZET, offsetof(Lender, writable_requests), READONLY, NULL},
    {"plain_requests", T_PYSSIZET, offsetof(Lender, plain_requests), READONLY, NULL},
    {NULL},
};

static PyTypeObject LenderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pickle_lender.Lender",
    .tp_basicsize = sizeof(Lender),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)lender_init,
    .tp_dealloc = (destructor)lender_dealloc,
    .tp_as_buffer = &lender_as_buffer,
    .tp_members = lender_members,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "pickle_lender", NULL, -1, NULL};

PyMODINIT_FUNC PyInit_pickle_lender(void) {
    if (PyType_Ready(&LenderType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&LenderType);
    if (PyModule_AddObject(m, "Lender", (PyObject *)&LenderType) < 0) return NULL;
    return m;
}
"""


@pytest.fixture(scope="module")
def lender(tmp_path_factory):
    """pickle_lender.Lender(memory): LENDER_SOURCE built as a CPython extension."""
    directory = tmp_path_factory.mktemp("lender")
    source = directory / "pickle_lender.c"
    source.write_text(LENDER_SOURCE)
    out = directory / ("pickle_lender" + sysconfig.get_config_var("EXT_SUFFIX"))
    built = subprocess.run([*compiler(), "-shared", "-fPIC", "-I" + sysconfig.get_paths()["include"], str(source),
                            "-o", str(out)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    sys.path.insert(0, str(directory))
    try:
        import pickle_lender
    finally:
        sys.path.remove(str(directory))
    return pickle_lender.Lender


def test_writable_data_is_asked_for_writable_memory_and_used_in_place(lender):
    # An exporter may hand read-only memory to a consumer that does not ask to write: loading a
    # writable buffer must ask, and then aliases the memory (bug: the request asked for writable
    # memory only for read-only buffers, so the writable one got a copy and a read-only one asked
    # to write).
    b, a = filled((6,), "int32")
    s, [handed] = out_of_band(b)
    memory = bytearray(handed.raw())
    lent = lender(memory)
    c = pickle.loads(s, buffers=[lent])
    assert not c.readonly and np.array_equal(np.asarray(c), a)
    assert (lent.writable_requests, lent.plain_requests) == (1, 0)
    c[2] = 77  # a write into the lent memory, not into a copy
    assert np.frombuffer(memory, np.int32)[2] == 77
    # A read-only buffer asks for no write access, and stays read-only over writable memory.
    data = np.arange(5, dtype=np.int16)
    data.flags.writeable = False
    s, [handed] = out_of_band(hb.Buffer.from_host(data))
    lent = lender(bytearray(handed.raw()))
    c = pickle.loads(s, buffers=[lent])
    assert c.readonly and np.asarray(c).tolist() == list(range(5))
    assert lent.writable_requests == 0 and lent.plain_requests >= 1


def test_pickling_a_device_resident_buffer_downloads_once_and_sends_host_data(dev, queue):
    b = hb.Buffer((256,), "float32")
    b.copy_to_device(dev)
    a = hb.opencl.as_array(b)
    a.fill(np.float32(3))
    queue.finish()
    assert b.device_dirty()
    moves = Moves(b)
    c = pickle.loads(pickle.dumps(b, protocol=4))
    assert moves() == (0, 0, 1, 1024)
    pickle.dumps(b, protocol=4)
    assert moves() == NONE  # the host copy is current now
    assert not c.has_device_allocation() and np.asarray(c).tolist() == [3.0] * 256
    assert b.has_device_allocation() and not b.device_dirty()


def test_a_device_copy_that_cannot_come_home_refuses_pickling_and_keeps_the_buffer(dev, ctx, queue):
    mem = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.HOST_NO_ACCESS, 16)
    cl.enqueue_fill_buffer(queue, mem, np.float32(7), 0, 16).wait()
    b = hb.Buffer((4,), "float32")
    b.device_wrap_native(mem)
    for protocol in (4, 5):
        with pytest.raises(hb.DeviceError, match=r"copying to the host failed with CL_INVALID_OPERATION "
                                                 r".*the device copy is kept"):
            pickle.dumps(b, protocol=protocol)
        assert b.device_dirty() and b.has_device_allocation() and b.transfers.to_host == 0
    b.set_device_dirty(False)
    b.device_free()


def test_copy_and_deepcopy_are_independent_host_copies_keeping_layout_and_mins(dev):
    b, a = filled((4, 6), "bfloat16")
    v = b[1:, ::2].transposed().translated((10, -3))
    for make in (copy.copy, copy.deepcopy):
        c = make(v)
        assert c.shape == v.shape and c.mins == v.mins and c.dtype is v.dtype
        assert c.strides == (2, 6)  # dense in v's memory order (NumPy's order 'K')
        assert not c.shares_storage_with(v) and not c.readonly and not c.is_shared
        assert np.array_equal(bits_of(np.asarray(c)), bits_of(np.asarray(v)))
        c[...] = 0
        assert np.array_equal(bits_of(np.asarray(b)), bits_of(a))
    ro = hb.Buffer.from_host(bytes(8))
    assert not copy.deepcopy(ro).readonly  # as NumPy: a copy is writable
    b.copy_to_device(dev)
    assert not copy.deepcopy(b).has_device_allocation()  # device state never travels
    nested = copy.deepcopy({"x": [b, b]})
    assert nested["x"][0] is nested["x"][1]  # the memo: one copy per buffer


DAMAGED = [
    (("nope",), {}, ValueError, r"pickle.loads\(\): the pickled Buffer's dtype 'nope' is not one this "
                                r"halide_buffer knows \(.*bfloat16.*\); unpickle with the version"),
    ((None,), {}, ValueError, r"dtype None is not one"),
    ((), {"shape": (3, 5)}, ValueError, r"pickle.loads\(\): the pickled Buffer's shape \(3, 5\) \(float32\) and "
                                        r"strides \(16, 4\) do not describe its 48 bytes of data; the pickle is "
                                        r"damaged"),
    ((), {"shape": (-1, 12)}, ValueError, r"pickle.loads\(\): negative extent -1"),
    ((), {"strides": (48, 4)}, ValueError, r"do not describe its 48 bytes"),
    ((), {"strides": (-16, 4)}, ValueError, r"do not describe its 48 bytes"),
    ((), {"strides": (2**62, 4)}, ValueError, r"do not describe its 48 bytes"),
    ((), {"strides": (16,)}, ValueError, r"2 extents, 1 strides and 2 mins; the pickle is damaged"),
    ((), {"mins": [0, 0]}, ValueError, r"mins is a list, not a tuple of ints"),
    ((), {"shape": (3, "4")}, ValueError, r"shape holds something other than 64-bit ints"),
    ((), {"shape": (3, 2**70)}, ValueError, r"shape holds something other than 64-bit ints"),
    ((), {"mins": (0, 2**31)}, ValueError, r"pickle.loads\(\): min 2147483648 of axis 1 \(extent 4\) leaves "
                                           r"Halide's int32 coordinates"),
    ((), {"shape": (1,) * 65, "strides": (4,) * 65, "mins": (0,) * 65}, ValueError, r"65 axes"),
]


@pytest.mark.parametrize("dtype_args, fields, error, message", DAMAGED)
def test_a_damaged_pickle_is_refused_with_a_clear_error(dtype_args, fields, error, message):
    state = {"data": bytearray(48), "dtype": "float32", "shape": (3, 4), "strides": (16, 4), "mins": (0, 0)}
    if dtype_args:
        state["dtype"] = dtype_args[0]
    state.update(fields)
    with pytest.raises(error, match=message):
        _core._rebuild_buffer(state["data"], state["dtype"], state["shape"], state["strides"], state["mins"],
                              False)


# What a damaged pickle may raise: pickle's own errors and our refusals (ValueError, TypeError).
# Anything else (RuntimeError, SystemError, MemoryError, an AssertionError) is an internal error.
REFUSALS = (pickle.UnpicklingError, EOFError, ImportError, AttributeError, KeyError, IndexError, ValueError,
            TypeError, OverflowError)


def test_a_damaged_pickle_stream_never_crashes():
    b, a = filled((3, 4), "float32")
    s = pickle.dumps(b, protocol=4)
    same_buffer(pickle.loads(s), b)
    refused = 0
    for i in range(len(s)):  # flip each byte of the pickle in turn
        damaged = bytearray(s)
        damaged[i] ^= 0x55
        try:
            c = pickle.loads(bytes(damaged))
        except REFUSALS:
            refused += 1
            continue
        if not isinstance(c, hb.Buffer):
            continue  # pickle made something else of it: not ours to check
        # A surviving buffer is b with at most the flipped byte changed: one element's bits, or a
        # min (any int is a valid min); its dtype, geometry and flags are b's.
        assert (c.dtype, c.shape, c.strides, c.readonly) == (b.dtype, b.shape, b.strides, b.readonly), i
        changed = np.count_nonzero(bits_of(np.asarray(c)) != bits_of(a)) + sum(m != 0 for m in c.mins)
        assert changed <= 1, (i, c.mins)
    assert refused > 0


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_dtype_pickles_by_name_and_process_bound_objects_are_refused(dev, protocol):
    for t in hb.dtypes():
        assert pickle.loads(pickle.dumps(t, protocol=protocol)) is t
    # Without a rule of their own, protocols 0 and 1 aborted the interpreter on these.
    with pytest.raises(TypeError, match=r"pickle: a halide_buffer.OpenCLDevice belongs to this process; in the "
                                        r"receiving process use its own device \(halide_buffer.opencl.device\(\)"):
        pickle.dumps(dev, protocol=protocol)
    with pytest.raises(TypeError, match=r"pickle: a halide_buffer.Transfers belongs to this process; send its "
                                        r"counts: \(t.to_device, "):
        pickle.dumps(hb.transfers(), protocol=protocol)


@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2)])
def test_scalar_and_empty_buffers_round_trip(shape):
    b = hb.Buffer(shape, "float8_e4m3fn").translated((4,) * len(shape))
    for protocol in PROTOCOLS:
        c = pickle.loads(pickle.dumps(b, protocol=protocol))
        assert (c.shape, c.mins, c.dtype) == (b.shape, b.mins, b.dtype)
    s, buffers = out_of_band(b)
    assert pickle.loads(s, buffers=buffers).shape == shape
