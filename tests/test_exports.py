"""Host exports: the buffer protocol, __array__ and numpy(), for every dtype, with their leases."""

import ctypes
import gc

import numpy as np
import pytest

import halide_buffer as hb

from buffer_protocol import (PyBUF_C_CONTIGUOUS, PyBUF_F_CONTIGUOUS, PyBUF_FORMAT, PyBUF_ND, PyBUF_SIMPLE,
                             PyBUF_STRIDES, PyBUF_WRITABLE, release, request)
from common import ALL_DTYPES, bits_of, random_bits

WITH_FORMAT = [t.name for t in hb.dtypes() if t.format]
WITHOUT_FORMAT = [t.name for t in hb.dtypes() if not t.format]


def open_exports():
    """The buffer-protocol exports of our buffers open in this process now."""
    return hb._core._live_counts()["exports"]


@pytest.fixture
def exports_before():
    """The exports open when the test starts, garbage collected first: the garbage of earlier
    tests (a frame kept alive by its traceback, with its memoryviews) can hold some, and the
    collector may free them at any time. A test compares its end with this, not with 0."""
    gc.collect()
    return open_exports()


# --- buffer protocol ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", WITH_FORMAT)
def test_memoryview_carries_classic_dtypes_exactly(name):
    src = random_bits((3, 4), name, seed=7)
    b = hb.Buffer.from_host(src)
    m = memoryview(b)
    assert m.readonly and m.shape == (3, 4) and m.strides == src.strides
    assert m.format == hb.dtype(name).format and m.itemsize == src.itemsize
    np.testing.assert_array_equal(bits_of(np.asarray(m)), bits_of(src))


@pytest.mark.parametrize("name", WITHOUT_FORMAT)
def test_memoryview_of_exotic_dtype_names_the_dtype_and_the_alternative(name, exports_before):
    b = hb.Buffer((2,), name)
    with pytest.raises(BufferError, match=rf"__buffer__\(\): dtype {name} has no PEP 3118 format; "
                                          r"use numpy.asarray\(b\) or b.numpy\(\) .*b.bits\(\)"):
        memoryview(b)
    assert open_exports() == exports_before


def test_memoryview_of_strided_view_keeps_strides():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    m = memoryview(hb.Buffer.from_host(a)[::-1, ::2])
    assert m.strides == (-16, 8)
    np.testing.assert_array_equal(np.asarray(m), a[::-1, ::2])


def test_simple_request_describes_contiguous_bytes(exports_before):
    b = hb.Buffer.from_host(np.arange(12, dtype=np.uint16).reshape(3, 4))
    view = request(b, PyBUF_SIMPLE)
    try:
        assert (view.len, view.itemsize, view.ndim, view.readonly) == (24, 2, 1, 1)
        assert not view.shape and not view.strides and view.format is None
    finally:
        release(view)
    view = request(b, PyBUF_ND | PyBUF_FORMAT)
    try:
        assert view.format == b"H" and [view.shape[i] for i in range(2)] == [3, 4] and not view.strides
    finally:
        release(view)
    assert open_exports() == exports_before


@pytest.mark.parametrize("flags, message", [
    (PyBUF_SIMPLE, "the buffer is not C-contiguous and the consumer did not ask for strides"),
    (PyBUF_ND, "the buffer is not C-contiguous and the consumer did not ask for strides"),
    (PyBUF_C_CONTIGUOUS, "a C-contiguous buffer was requested"),
    (PyBUF_F_CONTIGUOUS, "a Fortran-contiguous buffer was requested"),
])
def test_consumer_that_cannot_take_strides_gets_a_clear_error(flags, message, exports_before):
    b = hb.Buffer.from_host(np.arange(12, dtype=np.uint8).reshape(3, 4))[:, ::2]
    with pytest.raises(BufferError, match=rf"__buffer__\(\): {message}"):
        request(b, flags)
    assert open_exports() == exports_before


def test_fortran_requests_follow_the_real_layout(exports_before):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = hb.Buffer.from_host(a)
    with pytest.raises(BufferError, match=r"__buffer__\(\): a Fortran-contiguous buffer was requested"):
        request(b, PyBUF_F_CONTIGUOUS)
    with pytest.raises(BufferError, match=r"a Fortran-contiguous buffer was requested"):
        request(hb.Buffer((6,), "float32")[::2], PyBUF_F_CONTIGUOUS)  # strided 1-D is neither
    for fortran in (b.transposed(), hb.Buffer((1, 5), "float32"), hb.Buffer((5,), "float32")):
        view = request(fortran, PyBUF_F_CONTIGUOUS)
        try:
            assert ctypes.pythonapi.PyBuffer_IsContiguous(ctypes.byref(view), ctypes.c_char(b"F"))
        finally:
            release(view)
    view = request(b.transposed(), 0x98)  # PyBUF_ANY_CONTIGUOUS | PyBUF_STRIDES
    release(view)
    assert open_exports() == exports_before


def test_request_without_nd_describes_one_run_of_bytes():
    b = hb.Buffer((3, 4), "int16")
    view = request(b, PyBUF_SIMPLE)
    try:
        assert view.ndim == 1 and not view.shape and view.len == 24
        # CPython's own helpers must be able to read the description.
        assert ctypes.pythonapi.PyBuffer_IsContiguous(ctypes.byref(view), ctypes.c_char(b"C"))
        assert ctypes.pythonapi.PyBuffer_IsContiguous(ctypes.byref(view), ctypes.c_char(b"F"))
    finally:
        release(view)


def test_bytes_of_a_strided_view_are_its_elements_in_order():
    a = np.arange(12, dtype=np.uint8).reshape(3, 4)
    assert bytes(hb.Buffer.from_host(a)[:, ::2]) == a[:, ::2].tobytes()


def test_writable_buffer_request_is_a_lease_and_writes_land():
    b = hb.Buffer((4,), "int32")
    b.set_host_dirty(False)
    release(request(b, PyBUF_SIMPLE))
    assert not b.host_dirty()
    view = request(b, PyBUF_WRITABLE | PyBUF_STRIDES | PyBUF_FORMAT)
    assert b.host_dirty() and view.readonly == 0
    ctypes.c_int32.from_address(view.buf + 8).value = 42
    release(view)
    np.testing.assert_array_equal(np.asarray(b), [0, 0, 42, 0])
    mv = memoryview(b)  # read-only
    with pytest.raises(TypeError):
        mv[0] = 1


def test_asarray_is_read_only_and_writes_through_it_raise():
    b = hb.Buffer((2, 2), "float32")
    a = np.asarray(b)
    assert not a.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        a[0, 0] = 1.0


def test_asarray_of_float32_is_zero_copy_and_independent_of_size():
    b = hb.Buffer((64, 64), "float32")
    w = b.numpy(writable=True)
    w[3, 5] = 2.5
    a = np.asarray(b)
    assert a.ctypes.data == w.ctypes.data and a[3, 5] == 2.5


# --- __array__ and numpy() ----------------------------------------------------------------------

@pytest.mark.parametrize("name", ALL_DTYPES)
def test_asarray_returns_the_exact_dtype_zero_copy(name):
    src = random_bits((5, 3), name, seed=8)
    b = hb.Buffer.from_host(src)
    for a in (np.asarray(b), b.__array__(), b.numpy(), np.array(b, copy=False)):
        assert a.dtype == src.dtype and a.ctypes.data == src.ctypes.data and not a.flags.writeable
        np.testing.assert_array_equal(bits_of(a), bits_of(src))


@pytest.mark.parametrize("name", ALL_DTYPES)
def test_written_bits_read_back_exactly(name):
    b = hb.Buffer((4, 4), name)
    src = random_bits((4, 4), name, seed=9)
    b.numpy(writable=True)[...] = src
    np.testing.assert_array_equal(bits_of(np.asarray(b)), bits_of(src))


def test_array_copy_true_returns_an_independent_writable_array():
    b = hb.Buffer((3,), "bfloat16")
    c = b.__array__(copy=True)
    assert c.flags.writeable and c.flags.owndata
    c[0] = 1
    assert np.asarray(b)[0] == 0
    assert np.array(b).flags.writeable  # np.array copies by default


def test_array_dtype_conversion_copies_unless_forbidden():
    b = hb.Buffer((3,), "bfloat16")
    b.numpy(writable=True)[...] = [1.5, 2.5, -3]
    f = np.asarray(b, dtype=np.float32)
    np.testing.assert_array_equal(f, [1.5, 2.5, -3])
    assert b.__array__(dtype=hb.dtype("bfloat16").numpy, copy=False).dtype.name == "bfloat16"
    with pytest.raises(ValueError, match=r"__array__\(\): converting bfloat16 to float32 needs a copy; "
                                         r"call with copy=None or copy=True"):
        b.__array__(dtype=np.float32, copy=False)


def test_numpy_writable_marks_host_dirty_and_readonly_does_not():
    b = hb.Buffer((2,), "float8_e4m3fn")
    b.set_host_dirty(False)
    b.numpy()
    np.asarray(b)
    assert not b.host_dirty()
    b.numpy(writable=True)
    assert b.host_dirty()


def test_writable_exports_of_read_only_memory_are_refused():
    b = hb.Buffer.from_host(b"abcd")
    with pytest.raises(BufferError, match=r"numpy\(\): the buffer wraps read-only memory; use "
                                          r"Buffer.from_host\(obj, copy=True\) for a writable copy"):
        b.numpy(writable=True)
    with pytest.raises(BufferError, match=r"__buffer__\(\): the buffer wraps read-only memory"):
        request(b, PyBUF_WRITABLE)
    ro = np.arange(3, dtype=np.int16)
    ro.setflags(write=False)
    with pytest.raises(BufferError, match="read-only"):
        hb.Buffer.from_host(ro).numpy(writable=True)
    np.testing.assert_array_equal(np.asarray(hb.Buffer.from_host(ro)), ro)
    assert hb.Buffer.from_host(ro, copy=True).numpy(writable=True).flags.writeable


# --- NumPy's canonical dtype for every row --------------------------------------------------------

def _canonical(name):
    """The dtype NumPy's own arrays of this row have (int64 is numpy.int64, never numpy.longlong)."""
    return np.dtype(hb.dtype(name).numpy)


@pytest.mark.parametrize("name", ALL_DTYPES)
def test_every_host_export_gives_numpys_own_dtype_type(name):
    b = hb.Buffer((3,), name)
    expected = _canonical(name)
    for how, array in [("__array__", np.asarray(b)), ("numpy()", b.numpy()),
                       ("numpy(writable=True)", b.numpy(writable=True))]:
        assert array.dtype == expected and array.dtype.type is expected.type, how
    if hb.dtype(name).format:
        via_buffer = np.asarray(memoryview(b))
        assert via_buffer.dtype.type is expected.type, "buffer protocol"


@pytest.mark.parametrize("name", ["int64", "uint64"])
def test_64_bit_integers_reach_torch_through_the_buffer_protocol(name):
    torch = pytest.importorskip("torch")
    b = hb.Buffer.from_host(np.arange(3, dtype=name))
    t = torch.from_numpy(np.array(memoryview(b)))  # a copy keeps the type the exported format gave
    assert t.dtype == getattr(torch, name) and t.tolist() == [0, 1, 2]


@pytest.mark.parametrize("name", [n for n in ALL_DTYPES if hb.dtype(n).numpy.type.__module__ == "numpy"])
def test_dlpack_to_numpy_gives_numpys_own_dtype_type(name):
    b = hb.Buffer((3,), name)
    assert np.from_dlpack(b).dtype.type is _canonical(name).type
