"""Bad input gets a clear error naming the entry point and the fix; the buffer is unchanged."""

import ctypes

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

import halide_buffer as hb


def snapshot(b):
    return (b.shape, b.strides, b.mins, b.dtype.name, b.host_dirty(), b.device_dirty(),
            np.asarray(b.bits() if b.dtype.name != "complex128" else b).tobytes())


@pytest.fixture
def b():
    buf = hb.Buffer((4, 6), "int16")
    buf.numpy(writable=True)[...] = np.arange(24).reshape(4, 6)
    return buf


# --- construction ---------------------------------------------------------------------------

@pytest.mark.parametrize("shape, error, message", [
    ((-1, 2), ValueError, r"Buffer\(\): negative extent -1; every extent must be >= 0"),
    ((2**31,), ValueError, r"Buffer\(\): extent 2147483648 exceeds Halide's int32 limit \(2\*\*31 - 1\); split the axis"),
    ((2**31 - 1,) * 3, ValueError, r"Buffer\(\): the shape has more than 2\*\*63 elements; use a smaller shape"),
    ((2**31 - 1, 2**31 - 1, 2), ValueError, r"Buffer\(\): the shape needs more than 2\*\*63 bytes"),
    ((2**70,), ValueError, r"Buffer\(\): extent 1180591620717411303424 does not fit in 64 bits"),
    (2**70, ValueError, r"Buffer\(\): extent 1180591620717411303424 does not fit in 64 bits"),
    (b"\x02\x03", TypeError, r"Buffer\(\): shape must be an int or a sequence of ints, not bytes"),
    ((1,) * 65, ValueError, r"Buffer\(\): 65 axes is more than the 64 supported"),
    ("abc", TypeError, r"Buffer\(\): shape must be an int or a sequence of ints, not str; pass e.g. \(480, 640\)"),
    ((1.5, 2), TypeError, r"Buffer\(\): shape entries must be ints, not float"),
    (None, TypeError, r"Buffer\(\): shape must be an int or a sequence of ints, not NoneType"),
])
def test_bad_shapes(shape, error, message):
    with pytest.raises(error, match=message):
        hb.Buffer(shape, "float64")


def test_allocation_too_large_for_memory_is_a_memory_error_not_a_crash():
    with pytest.raises(MemoryError):
        hb.Buffer((2**31 - 1, 2**31 - 1), "uint8")


def test_unknown_dtype_name():
    with pytest.raises(TypeError, match=r"Buffer\(\): unknown dtype 'bfloat17'; use one of: bool, .*bfloat16"):
        hb.Buffer((2,), "bfloat17")


# --- wrapping -------------------------------------------------------------------------------

def test_strides_not_a_multiple_of_the_itemsize():
    raw = np.zeros(64, np.uint8)
    odd = as_strided(raw.view(np.int32)[:4], shape=(3,), strides=(6,))
    with pytest.raises(ValueError, match=r"Buffer.from_host\(\): stride 6 bytes is not a multiple of the "
                                         r"itemsize 4; pass copy=True for a contiguous copy"):
        hb.Buffer.from_host(odd)
    # ...and the fix it names works: a copy reads any strides.
    np.testing.assert_array_equal(np.asarray(hb.Buffer.from_host(odd, copy=True)), odd)
    field = np.zeros(5, [("a", "u1"), ("b", "<i4")])
    field["b"] = [1, 2, 3, 4, 5]
    np.testing.assert_array_equal(np.asarray(hb.Buffer.from_host(field["b"], copy=True)), [1, 2, 3, 4, 5])


def test_strides_past_halides_int32_element_strides():
    far = as_strided(np.zeros(2**33 + 1, np.uint8), shape=(2,), strides=(2**33,))
    with pytest.raises(ValueError, match=r"Buffer.from_host\(\): stride 8589934592 bytes exceeds Halide's "
                                         r"int32 element strides; pass copy=True"):
        hb.Buffer.from_host(far)
    np.testing.assert_array_equal(np.asarray(hb.Buffer.from_host(far, copy=True)), [0, 0])


def test_strides_of_single_element_axes_do_not_matter():
    # NumPy calls such arrays contiguous; the stride never addresses memory.
    a = np.arange(4, dtype=np.int32)
    odd = as_strided(a, shape=(1, 4), strides=(3, 4))
    b = hb.Buffer.from_host(odd)
    assert b.strides == (4, 4) and b.is_c_contiguous
    np.testing.assert_array_equal(np.asarray(b), odd)
    step = hb.Buffer((10,), "int16")[5::2**31]
    assert step.shape == (1,) and step.strides == (2,)
    huge = hb.Buffer((10,), "int16")[5::2**62]
    assert huge.shape == (1,)


def test_step_whose_stride_halide_cannot_describe_is_refused():
    sparse = hb.Buffer.from_host(as_strided(np.zeros(1, np.uint8), shape=(2**13,), strides=(2**20,)))
    with pytest.raises(ValueError, match=r"__getitem__\(\): stride 4294967296 bytes exceeds Halide's int32 "
                                         r"element strides; use a smaller step"):
        sparse[::2**12]


def test_allocation_whose_strides_halide_cannot_describe_is_refused():
    # (2, 2, 2**30) uint8: the outer stride is 2**31 elements, past Halide's int32.
    with pytest.raises(ValueError, match=r"Buffer\(\): stride 2147483648 bytes exceeds Halide's int32 "
                                         r"element strides; use a smaller shape"):
        hb.Buffer((2, 2, 2**30), "uint8")


def test_extents_past_halides_int32_limit():
    huge = as_strided(np.zeros(1, np.uint8), shape=(2**31,), strides=(0,))
    with pytest.raises(ValueError, match=r"Buffer.from_host\(\): extent 2147483648 exceeds Halide's int32 limit"):
        hb.Buffer.from_host(huge)


@pytest.mark.parametrize("obj", [object(), 3, "text", None, [1, 2]])
def test_objects_that_export_nothing_are_not_wrapped(obj):
    with pytest.raises(TypeError, match=r"Buffer.from_host\(\): \w+ holds no memory to wrap \(it exports neither "
                                        r"the buffer protocol nor __array__\); pass copy=True to copy its values"):
        hb.Buffer.from_host(obj)


@pytest.mark.parametrize("obj, kind", [(object(), "object"), ("text", "<U4"), (None, "object"),
                                       ([1, None], "object"), ({"a": 1}, "object")])
def test_copies_of_values_no_buffer_holds_are_refused(obj, kind):
    with pytest.raises(TypeError, match=rf"Buffer.from_host\(\): numpy.asarray\(\) reads \w+ as dtype {kind}, "
                                        r"which no buffer holds; pass numbers"):
        hb.Buffer.from_host(obj, copy=True)


def test_unsupported_element_types():
    with pytest.raises(TypeError, match=r"Buffer.from_host\(\): unknown dtype dtype\('O'\); use one of"):
        hb.Buffer.from_host(np.array([None, 1], dtype=object))
    with pytest.raises(ValueError, match=r"Buffer.from_host\(\): the array is big-endian; convert it with"):
        hb.Buffer.from_host(np.zeros(2, ">f8"))
    class Pair(ctypes.Structure):
        _fields_ = [("x", ctypes.c_int16), ("y", ctypes.c_int16)]

    with pytest.raises(TypeError, match=r"Buffer.from_host\(\): buffer format 'T\{<h:x:<h:y:\}' with "
                                        r"itemsize 4 is not supported; supported dtypes: bool, "):
        hb.Buffer.from_host((Pair * 2)())


def test_array_producer_returning_garbage():
    class Liar:
        def __array__(self, dtype=None, copy=None):
            return [1, 2, 3]

    with pytest.raises(TypeError, match=r"Buffer.from_host\(\): Liar.__array__\(\) returned list, not an ndarray"):
        hb.Buffer.from_host(Liar())


def test_array_producer_refusing_copy_false_is_passed_on():
    class MustCopy:
        def __array__(self, dtype=None, copy=None):
            if copy is False:
                raise ValueError("MustCopy cannot share its memory")
            return np.arange(3)

    with pytest.raises(ValueError, match="MustCopy cannot share its memory"):
        hb.Buffer.from_host(MustCopy())
    np.testing.assert_array_equal(np.asarray(hb.Buffer.from_host(MustCopy(), copy=True)), [0, 1, 2])


class BadIndex:
    def __index__(self):
        raise ZeroDivisionError("no index here")


# --- views: errors leave the buffer as it was ------------------------------------------------

@pytest.mark.parametrize("call, error, message", [
    (lambda b: b.cropped(2, 0, 1), IndexError, r"cropped\(\): axis 2 is out of range for 2 axes; use -2 <= axis < 2"),
    (lambda b: b.cropped(1, 4, 3), IndexError, r"cropped\(\): \[4, 4 \+ 3\) is outside axis 1's coordinates \[0, 6\)"),
    (lambda b: b.cropped(0, -1, 2), IndexError, r"cropped\(\): \[-1, -1 \+ 2\) is outside axis 0's coordinates"),
    (lambda b: b.cropped(0, 1, -1), ValueError, r"cropped\(\): negative extent -1; extent must be >= 0"),
    (lambda b: b.sliced(0, 4), IndexError, r"sliced\(\): coordinate 4 is outside axis 0's coordinates \[0, 4\)"),
    (lambda b: b.sliced(-3, 0), IndexError, r"sliced\(\): axis -3 is out of range for 2 axes"),
    (lambda b: b.cropped(1, 2, 2).sliced(1, 1), IndexError, r"sliced\(\): coordinate 1 is outside axis 1's coordinates \[2, 4\)"),
    (lambda b: b.transposed(0, 0), ValueError, r"transposed\(\): axes must be a permutation of 0..1; pass each axis exactly once"),
    (lambda b: b.transposed(0, 1, 2), ValueError, r"transposed\(\): axes must be a permutation"),
    (lambda b: b[4], IndexError, r"__getitem__\(\): index 4 is out of range for axis 0 with extent 4"),
    (lambda b: b[0, -7], IndexError, r"__getitem__\(\): index -7 is out of range for axis 1 with extent 6"),
    (lambda b: b[0, 0, 0], IndexError, r"__getitem__\(\): too many indices: 3 for 2 axes"),
    (lambda b: b[..., 0, ...], IndexError, r"__getitem__\(\): an index can only have a single ellipsis"),
    (lambda b: b[1.5], TypeError, r"__getitem__\(\): only ints, slices and '...' index a Buffer, not float; "
                                  r"for NumPy's other indexes \(None, boolean masks, integer arrays\) index the "
                                  r"ndarray b.numpy\(\) instead"),
    (lambda b: b[[0, 1]], TypeError, r"__getitem__\(\): only ints, slices and '...' index a Buffer, not list"),
    (lambda b: b[None], TypeError, r"__getitem__\(\): only ints, slices and '...' index a Buffer, not NoneType"),
    (lambda b: b[::0], ValueError, r"__getitem__\(\): slice step cannot be zero; use a nonzero step"),
    (lambda b: b[2**70], IndexError, r"__getitem__\(\): index 1180591620717411303424 is out of range for axis 0"),
    (lambda b: b[BadIndex()], ZeroDivisionError, r"no index here"),
    (lambda b: b.transposed(1.5, 0), TypeError, r"transposed\(\): axes must be ints, not float"),
    (lambda b: b.transposed("10"), TypeError, r"transposed\(\): axes must be ints, not str"),
    (lambda b: b.transposed(2**40, 0), ValueError, r"transposed\(\): axes must be a permutation of 0..1"),
    (lambda b: b.transposed(2**70, 0), ValueError, r"transposed\(\): axis 1180591620717411303424 does not fit"),
    (lambda b: hb.Buffer((2,), "complex128").bits(), TypeError,
     r"bits\(\): complex128 has no unsigned integer of 16 bytes; use b.numpy\(\).view\(numpy.uint64\)"),
])
def test_bad_view_arguments(b, call, error, message):
    before = snapshot(b)
    with pytest.raises(error, match=message):
        call(b)
    assert snapshot(b) == before


def test_transposing_a_0d_buffer_by_axes_says_it_has_none():
    """A 0-d buffer given axes to transpose is told it has none and that b.transposed() without
    axes returns it as it is; a 1-d buffer's single axis is no such error."""
    zero = hb.Buffer((), "float32")
    before = snapshot(zero)
    for axes in ((0,), (0, 0), (-1,)):
        with pytest.raises(ValueError, match=r"^transposed\(\): a 0-d buffer has no axes to transpose; call "
                                             r"b.transposed\(\) without axes, which returns the buffer as it is$"):
            zero.transposed(*axes)
    assert snapshot(zero) == before
    assert zero.transposed().shape == () and zero.transposed(()).shape == ()
    assert hb.Buffer((3,), "float32").transposed(0).shape == (3,)


# --- residency and exports -------------------------------------------------------------------

def test_writable_requests_on_read_only_sources(b):
    ro = hb.Buffer.from_host(b"\x01\x02")
    before = snapshot(ro)
    with pytest.raises(BufferError, match=r"numpy\(\): the buffer wraps read-only memory; use "
                                          r"Buffer.from_host\(obj, copy=True\) for a writable copy"):
        ro.numpy(writable=True)
    assert snapshot(ro) == before


def test_set_device_dirty_without_device_leaves_flags(b):
    before = snapshot(b)
    with pytest.raises(ValueError, match=r"set_device_dirty\(\): the buffer has no device allocation"):
        b.set_device_dirty()
    assert snapshot(b) == before


def test_uninitialised_buffer_object_is_refused():
    class Sub(hb.Buffer):
        def __init__(self):  # never calls Buffer.__init__
            pass

    with pytest.raises(TypeError, match=r"Buffer.__init__\(\) must be called when overriding __init__"):
        Sub()
    bare = hb.Buffer.__new__(hb.Buffer)
    never = r"Buffer: the object was never initialised; construct it with halide_buffer.Buffer\(shape, dtype\)"
    for use in (memoryview, np.asarray, repr, lambda x: x.ndim, lambda x: x.shape, lambda x: x.numpy(),
                lambda x: x._get_raw_halide_buffer_t(), lambda x: x[0], lambda x: x.cropped(0, 0, 1),
                lambda x: hb.Buffer.from_host(x), lambda x: hb.Buffer((1,)).shares_storage_with(x)):
        with pytest.raises(TypeError, match=never):
            use(bare)


@pytest.mark.parametrize("method", ["numpy", "__array__", "copy", "host_dirty", "_get_raw_halide_buffer_t"])
def test_buffer_methods_refuse_other_objects(method):
    with pytest.raises(TypeError, match=r"Buffer: expected a halide_buffer.Buffer, not (object|numpy.ndarray); "
                                        r"call the method on a Buffer"):
        getattr(hb.Buffer, method)(object())
    with pytest.raises(TypeError, match=r"Buffer: expected a halide_buffer.Buffer, not numpy.ndarray"):
        getattr(hb.Buffer, method)(np.zeros(3))


def test_big_endian_error_names_the_entry_point():
    with pytest.raises(ValueError, match=r"Buffer\(\): >f4 is big-endian; convert the data to native byte order"):
        hb.Buffer(3, ">f4")


class _Described:
    """Memory described through __array_interface__ alone: an address, a shape and byte strides,
    none of it read (the description is the describer's word)."""

    def __init__(self, address, shape, strides, typestr="|u1"):
        self.__array_interface__ = dict(version=3, shape=shape, typestr=typestr, data=(address, False),
                                        strides=strides)


def test_memory_whose_lowest_byte_is_address_0_is_in_the_address_space_and_one_below_is_not():
    # The bound is inclusive: a view walking backwards from address 4096 reaches address 0 with
    # 4097 bytes (wrapped without reading them), one more byte would wrap below 0 (bug: `base <= -lo`
    # refused the lowest address itself).
    b = hb.Buffer.from_host(np.asarray(_Described(4096, (4097,), (-1,))))
    assert b.shape == (4097,) and b.strides == (-1,) and not b.readonly
    for copy in (False, True):
        with pytest.raises(BufferError, match=r"^Buffer.from_host\(\): data and strides reach beyond the address "
                                              r"space; the memory's description is broken"):
            hb.Buffer.from_host(np.asarray(_Described(4095, (4097,), (-1,))), copy=copy)
    # Two axes and wider elements: the element at index (0, 0) at 44, the lowest byte at 0.
    two_axes = np.asarray(_Described(44, (3, 4), (-16, -4), "<i4"))
    assert hb.Buffer.from_host(two_axes).shape == (3, 4)
    with pytest.raises(BufferError, match=r"data and strides reach beyond the address space"):
        hb.Buffer.from_host(np.asarray(_Described(40, (3, 4), (-16, -4), "<i4")))
