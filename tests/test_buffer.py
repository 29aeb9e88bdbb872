"""The host Buffer: construction, wrapping, geometry, views and copies, for every dtype."""

import ctypes

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import halide_buffer as hb

from conftest import ALL_DTYPES, bits_of, random_bits


def test_the_public_names_import_and_runtime_buffer_makes_buffers():
    namespace = {}
    exec("from halide_buffer import *", namespace)  # every name of __all__ resolves
    assert set(hb.__all__) <= namespace.keys()
    b = namespace["Runtime"].Buffer((2, 3), "uint8")  # Halide's C++ spelling, Runtime::Buffer
    assert type(b) is hb.Buffer and (b.shape, b.dtype.name) == ((2, 3), "uint8")


@pytest.mark.parametrize("name", ALL_DTYPES)
def test_new_buffer_is_zero_filled_aligned_and_c_contiguous(name):
    b = hb.Buffer((3, 5), dtype=name)
    t = hb.dtype(name)
    assert b.dtype is t
    assert (b.shape, b.ndim, b.size, b.itemsize) == ((3, 5), 2, 15, t.itemsize)
    assert b.strides == (5 * t.itemsize, t.itemsize)
    assert b.nbytes == 15 * t.itemsize
    assert b.mins == (0, 0) and b.is_c_contiguous and not b.readonly
    a = b.numpy()
    assert a.dtype == t.numpy
    assert not bits_of(a).any()
    assert a.ctypes.data % 128 == 0


def test_shape_spellings_and_default_dtype():
    assert hb.Buffer(7).shape == (7,)
    assert hb.Buffer(()).shape == () and hb.Buffer(()).size == 1
    assert hb.Buffer([2, np.int64(3)]).shape == (2, 3)
    assert hb.Buffer((0, 4), "uint8").size == 0
    assert hb.Buffer((2,)).dtype.name == "float64"  # NumPy's default


@pytest.mark.parametrize("name", ALL_DTYPES)
def test_from_host_wraps_every_dtype_without_copying(name):
    src = random_bits((4, 6), name, seed=1)
    b = hb.Buffer.from_host(src)
    assert b.dtype.name == name and b.shape == src.shape and b.strides == src.strides
    out = np.asarray(b)
    assert out.ctypes.data == src.ctypes.data
    np.testing.assert_array_equal(bits_of(out), bits_of(src))
    if name != "complex128":  # no 16-byte unsigned integer
        np.testing.assert_array_equal(bits_of(np.asarray(b.bits())), bits_of(src))


@pytest.mark.parametrize("name", ALL_DTYPES)
def test_from_host_copy_is_independent(name):
    src = random_bits((3, 4), name, seed=2)
    b = hb.Buffer.from_host(src[:, ::-1], copy=True)
    assert b.is_c_contiguous and b.numpy().ctypes.data != src.ctypes.data
    np.testing.assert_array_equal(bits_of(b.numpy()), bits_of(src[:, ::-1]))
    src[...] = random_bits((3, 4), name, seed=3)
    assert not np.array_equal(bits_of(b.numpy()), bits_of(src[:, ::-1]))


def test_from_host_writes_reach_the_source():
    src = np.zeros((2, 3), np.float32)
    b = hb.Buffer.from_host(src)
    b.numpy(writable=True)[1, 2] = 5
    assert src[1, 2] == 5


def test_from_host_negative_and_zero_strides():
    base = np.arange(24, dtype=np.int16).reshape(4, 6)
    for view in (base[::-1, ::-2], base.T, np.broadcast_to(base[0], (3, 6))):
        b = hb.Buffer.from_host(view)
        assert b.strides == view.strides
        np.testing.assert_array_equal(np.asarray(b), view)


def test_from_host_buffer_protocol_objects():
    b = hb.Buffer.from_host(bytearray(b"\x01\x02\x03"))
    assert b.dtype.name == "uint8" and not b.readonly
    np.testing.assert_array_equal(np.asarray(b), [1, 2, 3])
    r = hb.Buffer.from_host(b"xyz")
    assert r.readonly
    m = memoryview(np.arange(6, dtype=np.int64).reshape(2, 3)[:, 1:])
    w = hb.Buffer.from_host(m)
    assert w.dtype.name == "int64" and w.shape == (2, 2)
    np.testing.assert_array_equal(np.asarray(w), [[1, 2], [4, 5]])
    c = (ctypes.c_double * 3)(1.5, 2.5, 3.5)
    np.testing.assert_array_equal(np.asarray(hb.Buffer.from_host(c)), [1.5, 2.5, 3.5])


def test_from_host_array_protocol_objects():
    class OnlyArray:
        def __init__(self):
            self.a = np.arange(4, dtype=np.uint32)

        def __array__(self, dtype=None, copy=None):
            return self.a

    obj = OnlyArray()
    b = hb.Buffer.from_host(obj)
    np.testing.assert_array_equal(np.asarray(b), obj.a)
    assert np.asarray(b).ctypes.data == obj.a.ctypes.data


def test_from_host_of_a_buffer_is_a_view():
    b = hb.Buffer((2, 2), "int32")
    v = hb.Buffer.from_host(b)
    assert v.shares_storage_with(b)
    c = hb.Buffer.from_host(b, copy=True)
    assert not c.shares_storage_with(b)


def test_from_host_of_torch_and_jax_arrays():
    import jax.numpy as jnp
    import torch

    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    np.testing.assert_array_equal(np.asarray(hb.Buffer.from_host(t)), t.numpy())
    j = jnp.arange(4, dtype=jnp.bfloat16)
    assert hb.Buffer.from_host(j).dtype.name == "bfloat16"
    np.testing.assert_array_equal(np.asarray(hb.Buffer.from_host(j)).astype(np.float32), np.arange(4))


# --- views ------------------------------------------------------------------------------------

def test_cropped_uses_coordinates_and_keeps_mins():
    a = np.arange(30, dtype=np.float32).reshape(5, 6)
    b = hb.Buffer.from_host(a)
    c = b.cropped(1, 2, 3)
    assert c.mins == (0, 2) and c.shape == (5, 3)
    np.testing.assert_array_equal(np.asarray(c), a[:, 2:5])
    cc = c.cropped(1, 3, 2).cropped(0, 1, 2)  # coordinates, not positions
    assert cc.mins == (1, 3)
    np.testing.assert_array_equal(np.asarray(cc), a[1:3, 3:5])
    assert c.cropped(-1, 4, 0).shape == (5, 0)


def test_sliced_uses_coordinates():
    a = np.arange(30, dtype=np.uint16).reshape(5, 6)
    b = hb.Buffer.from_host(a).cropped(0, 2, 3)
    s = b.sliced(0, 3)
    assert s.shape == (6,) and s.mins == (0,)
    np.testing.assert_array_equal(np.asarray(s), a[3])
    np.testing.assert_array_equal(np.asarray(b.sliced(1, 5)), a[2:5, 5])


def test_transposed_permutes_shape_strides_and_mins():
    a = np.arange(24, dtype=np.int8).reshape(2, 3, 4)
    b = hb.Buffer.from_host(a).cropped(2, 1, 3)
    t = b.transposed(2, 0, 1)
    assert t.mins == (1, 0, 0)
    np.testing.assert_array_equal(np.asarray(t), a[:, :, 1:].transpose(2, 0, 1))
    np.testing.assert_array_equal(np.asarray(b.transposed()), a[:, :, 1:].T)
    np.testing.assert_array_equal(np.asarray(b.transposed([1, 0, 2])), a[:, :, 1:].transpose(1, 0, 2))


def _index_strategy(shape):
    def axis(n):
        ints = st.integers(-n, n - 1) if n else st.nothing()
        bound = st.none() | st.integers(-n - 2, n + 2) | st.integers(-2**70, 2**70)
        step = (st.none() | st.integers(-3, 3).filter(lambda s: s != 0)
                | st.integers(-2**62, 2**62).filter(lambda s: s != 0))
        return ints | st.builds(slice, bound, bound, step)
    return st.lists(st.one_of(*[axis(n) for n in shape]), max_size=len(shape)).flatmap(
        lambda items: st.integers(0, len(items)).map(
            lambda k: tuple(items[:k]) + (Ellipsis,) + tuple(items[k:])) | st.just(tuple(items)))


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_getitem_matches_numpy(data):
    shape = data.draw(st.lists(st.integers(0, 5), min_size=1, max_size=3))
    a = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    key = data.draw(_index_strategy(shape))
    try:
        expected = a[key]
    except IndexError:
        with pytest.raises(IndexError):
            hb.Buffer.from_host(a)[key]
        return
    got = hb.Buffer.from_host(a)[key]
    assert got.shape == np.shape(expected)
    np.testing.assert_array_equal(np.asarray(got), expected)


def test_getitem_unit_step_keeps_coordinates_strided_restarts_them():
    b = hb.Buffer((6, 8), "uint8").cropped(1, 2, 6)
    assert b[1:4, 2:].mins == (1, 4)
    assert b[::2, 1:].mins == (0, 3)
    assert b[...].mins == b.mins
    assert b[2, 3].shape == () and b[2, 3].ndim == 0


@pytest.mark.parametrize("name", ALL_DTYPES)
def test_views_of_every_dtype_share_storage(name):
    src = random_bits((4, 5), name, seed=4)
    b = hb.Buffer.from_host(src)
    for view, ref in [(b.cropped(0, 1, 2), src[1:3]), (b.sliced(1, 3), src[:, 3]),
                      (b.transposed(), src.T), (b[::-1, 1::2], src[::-1, 1::2])]:
        assert view.shares_storage_with(b) and view.dtype is b.dtype
        np.testing.assert_array_equal(bits_of(np.asarray(view)), bits_of(ref))


def test_write_through_a_view_is_seen_by_parent_and_siblings():
    b = hb.Buffer((4, 4), "float32")
    b[1:3, 1:3].numpy(writable=True)[...] = 7
    sibling = b.cropped(0, 2, 2)
    np.testing.assert_array_equal(np.asarray(sibling)[0], [0, 7, 7, 0])
    np.testing.assert_array_equal(np.asarray(b).sum(), 28)


# --- bits, copies, repr ---------------------------------------------------------------------

@pytest.mark.parametrize("name", [n for n in ALL_DTYPES if n != "complex128"])
def test_bits_is_the_same_memory_as_unsigned_integers(name):
    src = random_bits((3, 3), name, seed=5)
    u = hb.Buffer.from_host(src).bits()
    assert u.dtype.name == f"uint{8 * src.itemsize}"
    np.testing.assert_array_equal(np.asarray(u), src.view(u.dtype.numpy))


def test_copy_is_contiguous_and_owned():
    a = np.arange(20, dtype=np.float64).reshape(4, 5)
    c = hb.Buffer.from_host(a)[::2, ::-1].copy()
    assert c.is_c_contiguous and c.mins == (0, 0)
    np.testing.assert_array_equal(np.asarray(c), a[::2, ::-1])


def test_repr_shows_shape_dtype_and_where_the_data_lives():
    assert repr(hb.Buffer((480, 640), "bfloat16")) == "Buffer(shape=(480, 640), dtype=bfloat16, data=host, memory=owned)"
    assert repr(hb.Buffer.from_host(b"ab")) == "Buffer(shape=(2,), dtype=uint8, data=host, memory=wraps bytes, readonly)"


def test_len():
    assert len(hb.Buffer((3, 2))) == 3
    with pytest.raises(TypeError, match=r"len\(\): a 0-d buffer has no length; use b.size"):
        len(hb.Buffer(()))
