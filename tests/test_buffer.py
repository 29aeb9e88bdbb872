"""The host Buffer: construction, wrapping, geometry, views and copies, for every dtype."""

import ctypes
import mmap
import os
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.lib.stride_tricks import as_strided

import halide_buffer as hb

from buffer_protocol import PyBUF_C_CONTIGUOUS, PyBUF_F_CONTIGUOUS, release, request
from common import ALL_DTYPES, Moves, bits_of, random_bits, up

PyBUF_ANY_CONTIGUOUS = 0x98


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


@pytest.mark.parametrize("shape", [(), (1,), (2, 2, 2, 4), (63,), (64,), (65,), (4, 4, 5), (300,)])
def test_every_size_of_new_buffer_is_aligned_zero_filled_and_its_own(shape):
    # Small buffers live in their storage's own allocation, larger ones in a block of their own:
    # on both sides of the boundary (256 bytes for float32 at (64,)) every buffer is aligned,
    # zero-filled and apart from every other buffer's memory.
    made = [hb.Buffer(shape, "float32") for _ in range(3)]
    arrays = [b.numpy(writable=True) for b in made]
    for i, a in enumerate(arrays):
        assert a.ctypes.data % 128 == 0 and not a.any()
        a[...] = i + 1
    for i, a in enumerate(arrays):
        assert (a == i + 1).all()


def test_constructor_arguments_by_position_and_by_name():
    assert hb.Buffer((2, 3), "int16").dtype.name == "int16"
    assert hb.Buffer(shape=(2, 3), dtype="int16").shape == (2, 3)
    assert hb.Buffer((2, 3), dtype=np.float32).dtype.name == "float32"
    assert hb.Buffer((2, 3), "uint8", order="F").strides == (1, 2)
    assert hb.Buffer((2, 3), order=(1, 0)).strides == (8, 16)
    assert hb.Buffer((2, 3), "uint8", shared=np.bool_(True)).is_shared
    for no in (None, False, np.bool_(False)):
        assert not hb.Buffer((2, 3), "uint8", shared=no).is_shared
    assert hb.Buffer((2, 3), "uint8", order="C", shared=True).strides == (3, 1)
    with pytest.raises(TypeError, match=r"Buffer\(\): shared must be a bool, not str; pass shared=True"):
        hb.Buffer((2,), shared="yes")
    with pytest.raises(TypeError, match="at most 2 positional arguments"):
        hb.Buffer((2,), "uint8", "C")  # order is keyword-only
    with pytest.raises(TypeError, match="missing required argument 'shape'"):
        hb.Buffer()
    with pytest.raises(ValueError, match="order 'K' is not 'C', 'F' or a sequence of axes"):
        hb.Buffer((2,), order="K")


def test_dtype_names_resolve_to_their_own_rows_however_they_alternate():
    # A name resolved before is remembered: asking for others in turn must not return it.
    names = ["float32", "uint8", "float32", "bfloat16", "int4", "uint8", "float64"]
    assert [hb.Buffer((1,), n).dtype.name for n in names] == names
    built = "".join(["float", "16"])  # an equal str that is another object
    assert hb.Buffer((1,), built).dtype.name == "float16"
    with pytest.raises(TypeError, match="unknown dtype 'float33'"):
        hb.Buffer((1,), "float33")
    for unencodable in ("\ud800", "float32\udcff"):  # no UTF-8 form: no dtype's name
        with pytest.raises(TypeError, match=r"Buffer\(\): unknown dtype"):
            hb.Buffer((1,), unencodable)
    assert hb.Buffer((1,), "f4").dtype.name == "float32"  # NumPy's spellings after ours


def test_subclasses_construct_and_index_as_buffers():
    class Plain(hb.Buffer):
        pass

    class WithInit(hb.Buffer):
        def __init__(self, n):
            super().__init__((n, 2), "uint8")
            self.n = n

    p = Plain((3, 2), "int16")
    assert type(p) is Plain and p.shape == (3, 2) and p[1:].shape == (2, 2)
    w = WithInit(4)
    assert (w.n, w.shape, w[2].shape) == (4, (4, 2), (2,))


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


def test_from_host_copy_reads_values_as_numpy_does():
    b = hb.Buffer.from_host([[1, 2], [3, 4]], copy=True)
    assert (b.dtype.name, b.shape) == ("int64", (2, 2))
    np.testing.assert_array_equal(np.asarray(b), [[1, 2], [3, 4]])
    assert hb.Buffer.from_host(2.5, copy=True).numpy()[()] == 2.5
    assert hb.Buffer.from_host([True, False], copy=True).dtype.name == "bool"
    for text in (["a", "b"], [b"a"]):
        with pytest.raises(TypeError, match="which no buffer holds"):
            hb.Buffer.from_host(text, copy=True)


def test_from_host_takes_an_export_of_64_axes_and_no_more():
    m = memoryview(bytearray(1)).cast("B", [1] * 64)  # the buffer protocol's own limit
    b = hb.Buffer.from_host(m)
    assert b.ndim == 64 and b.numpy()[(0,) * 64] == 0


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


def test_transposed_of_a_1d_buffer_is_the_buffer_as_it_is():
    """A 1-d buffer has one permutation, (0,): taking it (or no axes) must not be refused as if
    the buffer had no axes (that refusal is for 0-d buffers only)."""
    a = np.arange(5, dtype=np.int16)
    b = hb.Buffer.from_host(a).translated(0, 3)
    for t in (b.transposed(0), b.transposed(), b.transposed((0,)), b.transposed(-1)):
        assert (t.shape, t.strides, t.mins) == ((5,), (2,), (3,)) and t.shares_storage_with(b)
        np.testing.assert_array_equal(np.asarray(t), a)


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


def test_getitem_step_whose_stride_overflows_gives_one_element_the_itemsize_stride():
    """A slice that keeps one element with a step so large that stride * step overflows int64:
    the axis gets the itemsize as its stride, not the wrapped product of the overflow (24 for the
    first key, which is what NumPy shows)."""
    a = np.arange(5, dtype=np.float64)
    b = hb.Buffer.from_host(a)
    for key in (slice(0, 1, 2**61 + 3), slice(2, None, 2**61 + 3), slice(-1, None, -(2**61 + 3))):
        v = b[key]
        assert (v.shape, v.strides, v.mins) == ((1,), (8,), (0,))
        np.testing.assert_array_equal(np.asarray(v), a[key])
    v = hb.Buffer.from_host(a.reshape(1, 5))[0:1:2**62 + 1, 1:4]  # 40 * (2**62 + 1) wraps to 40
    assert (v.shape, v.strides) == ((1, 3), (8, 8))
    np.testing.assert_array_equal(np.asarray(v), [[1, 2, 3]])


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


# --- contiguity as buffer-protocol consumers ask for it ---------------------------------------

def granted(b, flags):
    """Whether a C consumer's request with these PyBUF_* flags is granted (it is released again)."""
    try:
        view = request(b, flags)
    except BufferError:
        return False
    release(view)
    return True


def test_fortran_contiguous_requests_are_refused_for_c_ordered_buffers():
    """A Fortran-contiguous request is granted for an F-ordered buffer and refused, naming the fix,
    for C-ordered ones (a first axis that is not empty does not make a buffer F-contiguous)."""
    f = hb.Buffer((2, 3), "float32", order="F")
    assert granted(f, PyBUF_F_CONTIGUOUS) and granted(f, PyBUF_ANY_CONTIGUOUS)
    assert not granted(f, PyBUF_C_CONTIGUOUS)
    for c in (hb.Buffer((2, 3), "float32"), hb.Buffer.from_host(np.zeros((4, 3), np.int16)[::2])):
        with pytest.raises(BufferError, match=r"__buffer__\(\): a Fortran-contiguous buffer was requested; "
                                              r"use b.transposed\(\).copy\(\).transposed\(\)"):
            request(c, PyBUF_F_CONTIGUOUS)
    assert granted(hb.Buffer((2, 3), "float32"), PyBUF_ANY_CONTIGUOUS)


def test_fortran_contiguity_ignores_the_strides_of_axes_of_extent_one():
    """An axis of extent 1 is never stepped along, so its stride does not decide contiguity; the
    extent that lets a stride be ignored is the axis's own, not its neighbour's."""
    row = hb.Buffer((1, 3), "float32")  # C order, strides (12, 4): one row is F-contiguous too
    assert row.strides == (12, 4) and granted(row, PyBUF_F_CONTIGUOUS)
    src = np.arange(12, dtype=np.float32)
    gappy = hb.Buffer.from_host(as_strided(src, (3, 1), (8, 12)))  # every other element of src
    assert gappy.strides == (8, 12) and not gappy.is_c_contiguous
    for flags in (PyBUF_F_CONTIGUOUS, PyBUF_C_CONTIGUOUS):
        assert not granted(gappy, flags)
    with pytest.raises(BufferError, match=r"__buffer__\(\): a contiguous buffer was requested; call b.copy\(\) first"):
        request(gappy, PyBUF_ANY_CONTIGUOUS)


def test_a_buffer_empty_along_its_first_axis_is_fortran_contiguous_whatever_its_strides():
    """No element, no gap: a buffer whose first axis is empty is granted a Fortran-contiguous
    request even when that axis's stride is not the itemsize."""
    for b in (hb.Buffer((0, 3), "float32"), hb.Buffer((0, 2, 3), "uint16"),
              hb.Buffer.from_host(np.zeros((4, 6), np.float32)[0:0, ::2])):
        assert b.size == 0 and b.strides[0] != b.itemsize
        assert granted(b, PyBUF_F_CONTIGUOUS) and granted(b, PyBUF_ANY_CONTIGUOUS)


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


# --- pickling: the elements as one dense run --------------------------------------------------

@pytest.mark.parametrize("protocol", [4, 5])
def test_pickle_round_trip_keeps_dtype_shape_and_values(protocol):
    """A dense buffer is pickled as its bytes (one byte per element of the run, not one item)."""
    a = np.arange(12, dtype=np.float32).reshape(3, 4) - 5.5
    for b in (hb.Buffer.from_host(a), hb.Buffer.from_host(a.T), hb.Buffer.from_host(a).translated((2, -1))):
        back = pickle.loads(pickle.dumps(b, protocol=protocol))
        assert (back.dtype.name, back.shape, back.mins) == ("float32", b.shape, b.mins)
        np.testing.assert_array_equal(np.asarray(back), np.asarray(b))


@pytest.mark.parametrize("protocol", [4, 5])
def test_pickle_of_a_view_with_gaps_copies_its_elements(protocol):
    """Views that are not one dense run are pickled as a copy of their elements: a gap between
    the elements of an axis whose neighbour has extent 1, and more axes than a short sort handles
    (17, 18) all stepping over the same memory with one stride."""
    src = np.arange(18, dtype=np.float32)
    gappy = src[:6].reshape(6, 1)[::2]  # shape (3, 1), strides (8, 4)
    same = as_strided(src, (2,) * 17, (4,) * 17)  # 17 axes over the same 18 elements: sum of the indices
    broadcast = np.broadcast_to(np.float32(7), (2,) * 18)
    for view in (gappy, gappy.T, same, broadcast):
        back = pickle.loads(pickle.dumps(hb.Buffer.from_host(view), protocol=protocol))
        assert back.shape == view.shape
        np.testing.assert_array_equal(np.asarray(back), view)


# --- large allocations: huge pages ------------------------------------------------------------

def mappings():
    """This process's mappings, from /proc/self/smaps: [(start, end, name, VmFlags)]."""
    out = []
    with open("/proc/self/smaps") as f:
        for line in f:
            fields = line.split()
            if fields and fields[0] == "VmFlags:":
                out[-1][3].update(fields[1:])
            elif fields and "-" in fields[0] and ":" not in fields[0]:
                lo, hi = (int(x, 16) for x in fields[0].split("-"))
                out.append((lo, hi, fields[5] if len(fields) > 5 else "", set()))
    return out


@pytest.mark.skipif(not (os.path.exists("/proc/self/smaps") and os.path.exists("/sys/kernel/mm/transparent_hugepage")),
                    reason="needs Linux with transparent huge pages")
def test_large_allocations_ask_for_huge_pages_on_all_their_pages_and_no_others():
    """A block of 4 MiB or more is advised MADV_HUGEPAGE (as NumPy does): every page of it, up to
    its last, whatever the parity of its end's page number (blocks of odd page counts, mapped one
    below another), and no mapping outside it (the stack above it keeps its flags)."""
    assert [m for m in mappings() if m[2] == "[stack]"]
    assert not any("hg" in m[3] for m in mappings() if m[2] == "[stack]")
    page = mmap.PAGESIZE
    blocks = [hb.Buffer(((4 << 20) + (2 * k + 1) * page,), "uint8") for k in range(4)]
    spans = [(np.asarray(b).ctypes.data, np.asarray(b).ctypes.data + b.nbytes) for b in blocks]
    maps = mappings()
    for lo, hi in spans:
        assert lo % page == 0 and hi % page == 0
        covering = sorted(m for m in maps if m[0] < hi and m[1] > lo)
        assert covering[0][0] <= lo and covering[-1][1] >= hi
        assert all(a[1] == b[0] for a, b in zip(covering, covering[1:]))  # no hole
        assert all("hg" in m[3] for m in covering), [(hex(m[0]), hex(m[1]), m[3]) for m in covering]
    assert not any("hg" in m[3] for m in maps if m[2] == "[stack]")


# --- a dtype Halide has no type for, on a device ------------------------------------------------

def test_complex128_moves_to_the_device_and_back_as_its_own_bytes(dev):
    """complex128's storage is bytes to Halide (no 16-byte type): one upload and one download
    move exactly its nbytes, and the values come back."""
    a = (np.arange(6) + 1j * np.arange(6, 12)).astype(np.complex128).reshape(2, 3)
    b = hb.Buffer.from_host(a.copy(), external_writes=False)
    moves = Moves(b)
    b.copy_to_device(dev)
    assert moves() == up(a.nbytes)
    b.set_device_dirty()
    np.testing.assert_array_equal(np.asarray(b), a)
    assert moves() == (0, 0, 1, a.nbytes)
