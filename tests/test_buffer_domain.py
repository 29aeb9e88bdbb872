"""Coordinates and layouts (docs/buffers.md): translated, set_min, contains, embedded,
add_dimension, make_with_shape_of, make_scalar, make_interleaved, Buffer(order=), and repr.

Each view is checked three ways: its geometry, the storage it shares, and the halide_buffer_t it
publishes (read here with ctypes, as a pipeline reads it). Where Halide has the same operation,
real Halide (hl.Buffer) is the reference for the coordinates and the strides."""

import array
import ctypes
import itertools
import threading

import numpy as np
import pytest

import halide_buffer as hb

from common import DEVICE_DIRTY, NONE, HalideBufferT, HalideDeviceInterface, Moves, halide_dims, raw_buffer

INT32_MIN, INT32_MAX = -2**31, 2**31 - 1


def dims_of(b):
    """halide_dims() of b's published halide_buffer_t. It is the view's own: b must stay alive
    while it is read, as it does here (not so in halide_dims(raw_buffer(b.translated(0, 1))))."""
    return halide_dims(raw_buffer(b))


def address(b):
    """Where b's element at index 0 of every axis lives."""
    return b.numpy().ctypes.data


def values(shape, dtype=np.int32):
    return np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)


# --- translated -----------------------------------------------------------------------------


def test_translated_moves_one_axis_coordinates_and_nothing_else():
    a = values((3, 4))
    b = hb.Buffer.from_host(a)
    t = b.translated(1, 5)
    assert t.mins == (0, 5) and b.mins == (0, 0)
    assert (t.shape, t.strides, t.dtype) == (b.shape, b.strides, b.dtype)
    assert t.shares_storage_with(b) and address(t) == address(b) == a.ctypes.data
    r = raw_buffer(t)
    assert r.host == a.ctypes.data
    assert halide_dims(r) == [(5, 4, 1), (0, 3, 4)]  # Halide's x is our last axis
    assert t.translated(-1, -7).translated(0, 2).mins == (2, -2)  # negative axes; deltas add up
    t.numpy(writable=True)[2, 3] = -1
    assert a[2, 3] == -1


def test_translated_with_one_delta_per_axis():
    b = hb.Buffer((2, 3, 4), "uint8")
    for deltas in ((1, -2, 3), [1, -2, 3], np.array([1, -2, 3]), (np.int16(1), -2, np.int64(3))):
        t = b.translated(deltas)
        assert t.mins == (1, -2, 3) and t.shares_storage_with(b)
    assert dims_of(b.translated((1, -2, 3))) == [(3, 4, 1), (-2, 3, 4), (1, 2, 12)]
    assert hb.Buffer(()).translated(()).mins == ()


def test_coordinates_of_a_translated_view_are_what_crop_and_slice_take():
    a = values((4, 5))
    t = hb.Buffer.from_host(a).translated((10, 20))
    np.testing.assert_array_equal(t.cropped(1, 21, 3).numpy(), a[:, 1:4])
    np.testing.assert_array_equal(t.sliced(0, 13).numpy(), a[3])
    with pytest.raises(IndexError, match=r"cropped\(\): \[0, 0 \+ 2\) is outside axis 0's coordinates \[10, 14\)"):
        t.cropped(0, 0, 2)


def test_translated_may_reach_the_ends_of_halides_int32_coordinates():
    b = hb.Buffer((3,), "uint8")
    assert b.translated(0, INT32_MAX - 2).mins == (INT32_MAX - 2,)  # its last coordinate is INT32_MAX
    assert b.translated(0, INT32_MIN).mins == (INT32_MIN,)
    assert hb.Buffer((0,)).translated(0, INT32_MAX).mins == (INT32_MAX,)  # no coordinate at all
    assert dims_of(b.translated(0, INT32_MIN)) == [(INT32_MIN, 3, 1)]


@pytest.mark.parametrize("call, error, message", [
    (lambda b: b.translated(0, INT32_MAX - 1), ValueError,
     r"translated\(\): moving axis 0 \(coordinates \[0, 3\)\) by 2147483646 leaves Halide's int32 coordinates "
     r"\[-2\*\*31, 2\*\*31 - 1\]; use a smaller delta"),
    (lambda b: b.translated(0, INT32_MIN - 1), ValueError, r"by -2147483649 leaves Halide's int32 coordinates"),
    (lambda b: b.translated(0, 1).translated(0, 2**63 - 1), ValueError,
     r"moving axis 0 \(coordinates \[1, 4\)\) by 9223372036854775807 leaves"),
    (lambda b: b.translated(0, 2**64), ValueError,
     r"translated\(\): delta 18446744073709551616 does not fit in 64 bits; use a smaller delta"),
    (lambda b: b.translated((2**64,)), ValueError, r"translated\(\): deltas 18446744073709551616 does not fit"),
    (lambda b: b.translated(1, 1), IndexError,
     r"translated\(\): axis 1 is out of range for 1 axes; use -1 <= axis < 1"),
    (lambda b: b.translated(0, 1.5), TypeError, r"translated\(\): delta must be an int, not float"),
    (lambda b: b.translated("0", 1), TypeError, r"translated\(\): axis must be an int, not str"),
    (lambda b: b.translated(3), TypeError,
     r"translated\(\): a lone argument must be a sequence of deltas, one per axis, not int; "
     r"pass translated\(axis, delta\) to move one axis"),
    (lambda b: b.translated("1"), TypeError, r"a lone argument must be a sequence of deltas, one per axis, not str"),
    (lambda b: b.translated((1, 2)), ValueError,
     r"translated\(\): 2 deltas for a 1-d buffer; pass translated\(axis, delta\), or a sequence of one delta "
     r"per axis"),
    (lambda b: b.translated(()), ValueError, r"translated\(\): 0 deltas for a 1-d buffer"),
    (lambda b: b.translated([None]), TypeError,
     r"translated\(\): deltas must be ints, not NoneType; pass one int per axis, as in b.translated\(\(1, 0\)\)"),
    (lambda b: hb.Buffer(()).translated(0, 1), IndexError, r"translated\(\): a 0-d buffer has no axes to translate"),
])
def test_translated_refuses_bad_input(call, error, message):
    b = hb.Buffer((3,), "uint8")
    with pytest.raises(error, match=message):
        call(b)
    assert b.mins == (0,)


# --- set_min --------------------------------------------------------------------------------


def test_set_min_changes_this_buffers_coordinates_in_place():
    a = values((3, 4))
    b = hb.Buffer.from_host(a)
    before = b[1:]
    assert b.set_min(7, -8) is None
    assert b.mins == (7, -8) and (b.shape, b.strides) == ((3, 4), (16, 4))
    assert address(b) == a.ctypes.data
    assert before.mins == (1, 0)  # views made before keep their coordinates
    assert b[1:].mins == (8, -8)  # views made after start from the new ones
    b.set_min((1, 2))
    assert b.mins == (1, 2)
    b.set_min([np.int8(-3), np.uint64(4)])
    assert b.mins == (-3, 4)
    s = hb.Buffer.make_scalar()
    s.set_min()
    s.set_min(())
    assert s.mins == ()


def test_set_min_updates_the_halide_buffer_t_already_handed_out():
    b = hb.Buffer((3, 4), "int16")
    address_before = b._get_raw_halide_buffer_t()
    r = HalideBufferT.from_address(address_before)
    assert halide_dims(r) == [(0, 4, 1), (0, 3, 4)]
    b.set_min(5, 6)
    assert halide_dims(r) == [(6, 4, 1), (5, 3, 4)]  # read where it is, without asking again
    assert b._get_raw_halide_buffer_t() == address_before  # the same struct, still this view's
    assert dims_of(b) == [(6, 4, 1), (5, 3, 4)]


def test_set_min_accepts_halides_whole_int32_range():
    b = hb.Buffer((3, 1), "uint8")
    b.set_min(INT32_MAX - 2, INT32_MIN)
    assert dims_of(b) == [(INT32_MIN, 1, 1), (INT32_MAX - 2, 3, 1)]


@pytest.mark.parametrize("mins, error, message", [
    ((1,), ValueError, r"^set_min\(\): 1 min for a 2-d buffer; pass one per axis, as in b.set_min\(\*b.mins\)$"),
    ((1, 2, 3), ValueError, r"^set_min\(\): 3 mins for a 2-d buffer"),
    (((1, 2, 3),), ValueError, r"^set_min\(\): 3 mins for a 2-d buffer"),
    ((), ValueError, r"^set_min\(\): 0 mins for a 2-d buffer"),
    ((1, INT32_MAX - 2), ValueError,
     r"^set_min\(\): min 2147483645 of axis 1 \(extent 4\) leaves Halide's int32 coordinates \[-2\*\*31, 2\*\*31 - 1\]; "
     r"pass mins with min \+ extent - 1 inside them$"),
    ((INT32_MIN - 1, 0), ValueError, r"^set_min\(\): min -2147483649 of axis 0 \(extent 3\) leaves"),
    ((2**70, 0), ValueError,
     r"^set_min\(\): mins 1180591620717411303424 does not fit in 64 bits; pass mins inside Halide's int32 "),
    ((1.0, 2), TypeError,
     r"^set_min\(\): mins must be ints, not float; pass one int per axis, as in b.set_min\(\*b.mins\)$"),
    (("12",), TypeError, r"^set_min\(\): mins must be ints, not str"),
])
def test_set_min_refuses_bad_mins_and_changes_nothing(mins, error, message):
    b = hb.Buffer((3, 4), "uint8").translated((1, 1))
    published = raw_buffer(b)
    with pytest.raises(error, match=message):
        b.set_min(*mins)
    assert b.mins == (1, 1)
    assert halide_dims(published) == [(1, 4, 1), (1, 3, 4)]


# A halide_device_interface_t whose copy_to_host and device_free are Python functions: a
# published view showing device memory of it is a pipeline runtime's allocation for a part of
# the storage, which the next residency operation brings home through those two calls, holding
# the storage's lock while they run.
DEVICE_CALL = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(HalideBufferT))


class FakeRuntime:
    """A pipeline runtime's device interface, its copy_to_host running `during_copy`."""

    def __init__(self, during_copy=lambda: None):
        def copy_to_host(user_context, buf):
            during_copy()
            return 0

        def device_free(user_context, buf):
            buf.contents.device = 0
            buf.contents.device_interface = None
            return 0

        self.calls = [DEVICE_CALL(copy_to_host), DEVICE_CALL(device_free)]  # alive as long as the table
        self.table = HalideDeviceInterface(copy_to_host=ctypes.cast(self.calls[0], ctypes.c_void_p).value,
                                           device_free=ctypes.cast(self.calls[1], ctypes.c_void_p).value)

    def allocate_for(self, view):
        """What a pipeline's runtime does to a view's halide_buffer_t when it allocates for it."""
        r = raw_buffer(view)
        r.device = 0xD0
        r.device_interface = ctypes.addressof(self.table)


def test_set_min_refuses_while_another_thread_holds_the_storage():
    inside, done = threading.Event(), threading.Event()
    errors = []
    hang = 300  # seconds: the waits end on the events; this only bounds a hang

    def hold_the_lock():  # runs in the other thread, under the storage's lock
        inside.set()
        done.wait(hang)  # holds the lock until the main thread has checked, however slow the machine

    runtime = FakeRuntime(during_copy=hold_the_lock)
    b = hb.Buffer((4, 4), "uint8")
    published = raw_buffer(b)  # before the runtime's allocation: this operation would bring it home
    part = b[1:3]
    runtime.allocate_for(part)

    def operation():
        try:
            part.host_dirty()  # brings the runtime's allocation home: copy_to_host, then device_free
        except BaseException as e:  # reported below
            errors.append(e)

    other = threading.Thread(target=operation)
    other.start()
    try:
        assert inside.wait(hang)
        with pytest.raises(BufferError, match=r"^set_min\(\): another thread is using this buffer's storage "
                                              r"\(a residency operation, or a pipeline being handed a view of it\); "
                                              r"call set_min\(\) when it is done, or use b.translated\(\) for a view "
                                              r"with other mins$"):
            b.set_min(1, 1)
        assert b.mins == (0, 0) and halide_dims(published) == [(0, 4, 1), (0, 4, 4)]
        assert b.translated((1, 1)).mins == (1, 1)  # a view never needs the lock
    finally:
        done.set()
        other.join()
    assert errors == []
    b.set_min(1, 1)  # free again
    assert b.mins == (1, 1) and halide_dims(published) == [(1, 4, 1), (1, 4, 4)]


# --- contains -------------------------------------------------------------------------------


def test_contains_checks_coordinates_against_mins_and_extents():
    b = hb.Buffer((3, 4), "uint8").translated((10, -2))
    inside = [(y, x) for y in range(8, 15) for x in range(-4, 4) if 10 <= y < 13 and -2 <= x < 2]
    for y, x in itertools.product(range(8, 15), range(-4, 4)):
        assert b.contains(y, x) == ((y, x) in inside), (y, x)
    assert len(inside) == 12
    assert b.contains((10, -2)) and b.contains([12, 1]) and b.contains(np.array([11, 0]))
    assert b.contains(np.int64(10), np.uint8(1)) and not b.contains(np.int64(13), np.uint8(1))
    assert not b.contains(2**70, 0) and not b.contains(-2**70, 0) and not b.contains(10, 2**64)
    assert hb.Buffer.make_scalar().contains() and hb.Buffer.make_scalar().contains(())
    assert not hb.Buffer((0, 3)).contains(0, 0)  # an empty buffer contains nothing


@pytest.mark.parametrize("coords, error, message", [
    ((1,), ValueError,
     r"^contains\(\): 1 coordinate for a 2-d buffer; pass one per axis, as in b.contains\(\*b.mins\)$"),
    ((1, 2, 3), ValueError, r"^contains\(\): 3 coordinates for a 2-d buffer"),
    (((1, 2, 3),), ValueError, r"^contains\(\): 3 coordinates for a 2-d buffer"),
    ((), ValueError, r"^contains\(\): 0 coordinates for a 2-d buffer"),
    ((1.5, 2), TypeError,
     r"^contains\(\): coordinates must be ints, not float; pass one int per axis, as in b.contains\(\*b.mins\)$"),
    (("ab",), TypeError, r"^contains\(\): coordinates must be ints, not str"),
    (((1, None),), TypeError, r"^contains\(\): coordinates must be ints, not NoneType"),
])
def test_contains_refuses_bad_coordinates(coords, error, message):
    with pytest.raises(error, match=message):
        hb.Buffer((3, 4)).contains(*coords)


# --- embedded, add_dimension ----------------------------------------------------------------


@pytest.mark.parametrize("axis", [-3, -2, -1, 0, 1, 2])
def test_embedded_inserts_an_axis_as_numpy_expand_dims_does(axis):
    a = values((3, 4))
    b = hb.Buffer.from_host(a).translated((5, 6))
    e = b.embedded(axis, 9)
    expected = np.expand_dims(a, axis)
    assert (e.shape, e.strides) == (expected.shape, expected.strides)
    k = axis % 3
    assert e.mins == (5, 6)[:k] + (9,) + (5, 6)[k:]
    assert e.is_c_contiguous and e.numpy().flags.c_contiguous
    assert e.shares_storage_with(b) and address(e) == a.ctypes.data
    np.testing.assert_array_equal(e.numpy(), expected)
    r = raw_buffer(e)
    assert r.host == a.ctypes.data and r.dimensions == 3
    assert halide_dims(r) == [(m, n, s // 4) for m, n, s in zip(e.mins, e.shape, e.strides)][::-1]
    assert b.mins == (5, 6) and b.ndim == 2  # the original is untouched


def test_embedded_keeps_an_f_contiguous_buffer_f_contiguous_and_defaults_pos_to_0():
    b = hb.Buffer((3, 4), "float32", order="F")
    for axis in range(3):
        e = b.embedded(axis)
        assert e.mins == (0, 0, 0) and e.numpy().flags.f_contiguous and e.shares_storage_with(b)


def test_embedded_of_a_0d_buffer_and_a_reversed_one():
    s = hb.Buffer.make_scalar("int16")
    assert (s.embedded(0, 3).shape, s.embedded(-1).strides, s.embedded(0, 3).mins) == ((1,), (2,), (3,))
    a = values((5,))
    r = hb.Buffer.from_host(a)[::-1]
    assert r.embedded(0).strides == np.expand_dims(a[::-1], 0).strides == (-20, -4)
    np.testing.assert_array_equal(r.embedded(1).numpy()[:, 0], a[::-1])


def test_an_embedded_axis_stride_halide_cannot_hold_becomes_the_itemsize():
    base = np.zeros(4, np.uint8)
    # Two rows 2**30 bytes apart: numpy.expand_dims would give the new axis 2**31 (beyond int32).
    far = np.lib.stride_tricks.as_strided(base, shape=(2, 3), strides=(2**30, 1))
    e = hb.Buffer.from_host(far, external_writes=False).embedded(0)
    assert e.shape == (1, 2, 3) and e.strides == (1, 2**30, 1)


def test_add_dimension_adds_halides_last_dimension_as_our_first_axis():
    a = values((3, 4))
    b = hb.Buffer.from_host(a).translated((1, 2))
    d = b.add_dimension()
    assert (d.shape, d.strides, d.mins) == ((1, 3, 4), (48, 16, 4), (0, 1, 2))
    assert d.shares_storage_with(b) and address(d) == a.ctypes.data and b.ndim == 2
    assert dims_of(d) == [(2, 4, 1), (1, 3, 4), (0, 1, 12)]
    assert hb.Buffer.make_scalar("uint8").add_dimension().shape == (1,)


@pytest.mark.parametrize("call, error, message", [
    (lambda b: b.embedded(3), IndexError,
     r"^embedded\(\): axis 3 is out of range for the new axis of a 2-d buffer; use -3 <= axis <= 2 "
     r"\(numpy.expand_dims' numbering\)$"),
    (lambda b: b.embedded(-4), IndexError, r"^embedded\(\): axis -4 is out of range"),
    (lambda b: b.embedded(2**70), ValueError, r"^embedded\(\): axis 1180591620717411303424 does not fit in 64 bits"),
    (lambda b: b.embedded(0, INT32_MAX + 1), ValueError,
     r"^embedded\(\): pos 2147483648 is outside Halide's int32 coordinates \[-2\*\*31, 2\*\*31 - 1\]; "
     r"pass a pos inside them$"),
    (lambda b: b.embedded(0, INT32_MIN - 1), ValueError, r"^embedded\(\): pos -2147483649 is outside"),
    (lambda b: b.embedded(0.0), TypeError, r"^embedded\(\): axis must be an int, not float"),
    (lambda b: b.embedded(0, "1"), TypeError, r"^embedded\(\): pos must be an int, not str"),
    (lambda b: hb.Buffer((1,) * 64).embedded(0), ValueError,
     r"^embedded\(\): the buffer has 64 axes, the most supported; slice or reshape it first$"),
    (lambda b: hb.Buffer((1,) * 64).add_dimension(), ValueError, r"^add_dimension\(\): the buffer has 64 axes"),
])
def test_embedded_and_add_dimension_refuse_bad_input(call, error, message):
    with pytest.raises(error, match=message):
        call(hb.Buffer((3, 4)))


def test_embedded_takes_halides_whole_int32_range_for_pos():
    b = hb.Buffer((2,), "uint8")
    assert dims_of(b.embedded(0, INT32_MAX)) == [(0, 2, 1), (INT32_MAX, 1, 2)]
    assert b.embedded(1, INT32_MIN).mins == (0, INT32_MIN)


# --- Buffer(order=), make_interleaved, make_with_shape_of, make_scalar ----------------------


def dense_strides(shape, itemsize, order):
    """Byte strides of a dense array whose axes lie in memory in `order`, outermost first: the
    strides NumPy gives the C-contiguous array of the axes in that order, put back."""
    c = np.empty([shape[a] for a in order], np.dtype(f"V{itemsize}"))
    strides = [0] * len(shape)
    for k, a in enumerate(order):
        strides[a] = c.strides[k]
    return tuple(strides)


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
def test_buffer_order_lays_the_axes_out_outermost_first(order):
    shape = (2, 3, 5)
    b = hb.Buffer(shape, "float32", order=order)
    assert b.shape == shape and b.mins == (0, 0, 0)
    assert b.strides == dense_strides(shape, 4, order)
    assert b.transposed(*order).is_c_contiguous
    assert np.asarray(b.transposed(*order)).flags.c_contiguous
    assert not np.asarray(b).any()  # zero-filled
    assert hb.Buffer(shape, "float32", order=[a - 3 for a in order]).strides == b.strides  # negative axes


def test_buffer_order_c_and_f_are_numpys():
    for order in ("C", "F"):
        assert hb.Buffer((2, 3, 5), "int16", order=order).strides == np.zeros((2, 3, 5), np.int16, order=order).strides
    assert hb.Buffer((2, 3)).strides == (24, 8)  # C by default
    assert hb.Buffer((), order="F").shape == () and hb.Buffer((), order=()).shape == ()


@pytest.mark.parametrize("order, error, message", [
    ("K", ValueError,
     r"^Buffer\(\): order 'K' is not 'C', 'F' or a sequence of axes; pass 'C' \(the last axis innermost in memory\), "
     r"'F' \(the first axis innermost\), or the axes from outermost to innermost in memory, e.g. \(1, 2, 0\)$"),
    ("c", ValueError, r"^Buffer\(\): order 'c' is not 'C', 'F' or a sequence of axes"),
    (1, TypeError, r"^Buffer\(\): order must be 'C', 'F' or a sequence of axes, not int; "
                   r"pass e.g. order='F' or order=\(1, 2, 0\)$"),
    (None, TypeError, r"^Buffer\(\): order must be 'C', 'F' or a sequence of axes, not NoneType"),
    ((0, 0), ValueError,
     r"^Buffer\(\): order must be a permutation of 0..1; pass 'C', 'F' or each axis once, outermost in memory first$"),
    ((0,), ValueError, r"^Buffer\(\): order must be a permutation of 0..1"),
    ((0, 2), ValueError, r"^Buffer\(\): order must be a permutation of 0..1"),
    ((1, 0, 2), ValueError, r"^Buffer\(\): order must be a permutation of 0..1"),
    ((0, -3), ValueError, r"^Buffer\(\): order must be a permutation of 0..1"),
    ((0, 2**70), ValueError, r"^Buffer\(\): axis 1180591620717411303424 does not fit in 64 bits"),
    ((0, 1.0), TypeError, r"^Buffer\(\): the axes of order must be ints, not float; pass e.g. order=\(1, 2, 0\)$"),
])
def test_buffer_order_refuses_what_is_not_an_order(order, error, message):
    with pytest.raises(error, match=message):
        hb.Buffer((2, 3), "uint8", order=order)


def test_buffer_order_of_a_0d_shape_is_empty():
    with pytest.raises(ValueError, match=r"^Buffer\(\): order must be a permutation of no axes, \(\);"):
        hb.Buffer((), order=(0,))


def test_buffer_order_is_keyword_only():
    with pytest.raises(TypeError):
        hb.Buffer((2, 3), "uint8", "F")


def test_make_interleaved_puts_the_channels_first_in_shape_and_innermost_in_memory():
    b = hb.Buffer.make_interleaved((3, 480, 640), "uint8")
    assert b.shape == (3, 480, 640) and b.strides == (1, 640 * 3, 3) and b.mins == (0, 0, 0)
    hwc = b.transposed(1, 2, 0)
    assert hwc.shape == (480, 640, 3) and hwc.is_c_contiguous and np.asarray(hwc).flags.c_contiguous
    assert dims_of(b) == [(0, 640, 3), (0, 480, 1920), (0, 3, 1)]  # x, y, c as Halide has them
    assert hb.Buffer.make_interleaved((4, 2, 3), "float32").strides == dense_strides((4, 2, 3), 4, (1, 2, 0))
    assert hb.Buffer.make_interleaved((4, 5), "int16").strides == (2, 8)
    assert hb.Buffer.make_interleaved((4,)).strides == (8,)  # float64 by default
    assert not np.asarray(b).any()


@pytest.mark.parametrize("call, error, message", [
    (lambda: hb.Buffer.make_interleaved(()), ValueError,
     r"^Buffer.make_interleaved\(\): a 0-d shape has no channel axis; pass the channels first, "
     r"as in \(channels, height, width\)$"),
    (lambda: hb.Buffer.make_interleaved((3, -1)), ValueError, r"^Buffer.make_interleaved\(\): negative extent -1"),
    (lambda: hb.Buffer.make_interleaved("ab"), TypeError, r"^Buffer.make_interleaved\(\): shape must be an int"),
    (lambda: hb.Buffer.make_interleaved((3, 4), "nope"), TypeError, r"^Buffer.make_interleaved\(\): "),
    (lambda: hb.Buffer.make_scalar("nope"), TypeError, r"^Buffer.make_scalar\(\): "),
])
def test_make_interleaved_and_make_scalar_refuse_bad_input(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_make_scalar_is_one_owned_zero():
    s = hb.Buffer.make_scalar("int32")
    assert (s.shape, s.ndim, s.size, s.mins, s.dtype.name) == ((), 0, 1, (), "int32")
    assert s.numpy()[()] == 0 and raw_buffer(s).dimensions == 0
    assert hb.Buffer.make_scalar().dtype.name == "float64"
    assert repr(s) == "Buffer(shape=(), dtype=int32, data=host, memory=owned)"


@pytest.mark.parametrize("make", [
    lambda: hb.Buffer((2, 3, 5), "int16"),
    lambda: hb.Buffer((2, 3, 5), "int16", order="F"),
    lambda: hb.Buffer.make_interleaved((3, 4, 5), "int16").translated((1, -2, 3)),
    lambda: hb.Buffer.from_host(values((4, 6, 5), np.int16)[::-1, 1::2, 1:]),  # negative, strided, cropped
    lambda: hb.Buffer.from_host(values((2, 3, 5), np.int16)).transposed(2, 0, 1).translated(1, 7),
    lambda: hb.Buffer.from_host(np.zeros((5, 1, 3), np.int16)[:, :, ::2]),
])
def test_make_with_shape_of_copies_shape_mins_and_memory_order(make):
    other = make()
    w = hb.Buffer.make_with_shape_of(other)
    assert (w.shape, w.mins, w.dtype) == (other.shape, other.mins, other.dtype)
    order = sorted(range(3), key=lambda a: -abs(other.strides[a]))  # outermost first, ties in axis order
    assert w.strides == dense_strides(w.shape, 2, order)
    assert np.asarray(w.transposed(*order)).flags.c_contiguous
    assert not w.shares_storage_with(other) and not np.asarray(w).any()
    assert repr(w).endswith("memory=owned)")
    assert dims_of(w) == [(m, n, s // 2) for m, n, s in zip(w.mins, w.shape, w.strides)][::-1]


def test_make_with_shape_of_may_change_the_dtype():
    other = hb.Buffer.make_interleaved((3, 4, 5), "uint8").translated(0, 2)
    w = hb.Buffer.make_with_shape_of(other, "float32")
    assert (w.shape, w.mins, w.dtype.name, w.strides) == ((3, 4, 5), (2, 0, 0), "float32", (4, 60, 12))
    assert hb.Buffer.make_with_shape_of(other, np.int16).strides == (2, 30, 6)


@pytest.mark.parametrize("other, error, message", [
    (np.zeros((2, 3)), TypeError,
     r"^Buffer.make_with_shape_of\(\): other must be a halide_buffer.Buffer, not numpy.ndarray; pass "
     r"Buffer.from_host\(a\) for an array \(a view: nothing is copied\)$"),
    ((2, 3), TypeError, r"^Buffer.make_with_shape_of\(\): other must be a halide_buffer.Buffer, not tuple"),
])
def test_make_with_shape_of_wants_a_buffer(other, error, message):
    with pytest.raises(error, match=message):
        hb.Buffer.make_with_shape_of(other)
    with pytest.raises(TypeError, match=r"^Buffer.make_with_shape_of\(\): "):
        hb.Buffer.make_with_shape_of(hb.Buffer((2,)), "nope")


# --- on a device: nothing moves -------------------------------------------------------------


def test_coordinate_operations_move_nothing_on_a_device_resident_buffer(dev):
    a = values((4, 6))
    b = hb.Buffer.from_host(a.copy(), external_writes=False)
    b.copy_to_device(dev)
    b.set_device_dirty()  # the device copy is the current one: any host read would download it
    moves = Moves(b)
    views = [b.translated(1, 3), b.translated((2, 2)), b.embedded(1, 5), b.add_dimension()]
    b.set_min(-1, -2)
    assert b.contains(-1, -2) and not b.contains(3, 0)
    w = hb.Buffer.make_with_shape_of(b)
    text = repr(b)
    for v in views:
        r = raw_buffer(v)  # published: our OpenCL memory shows through at the view's offset
        assert r.device != 0 and r.flags == DEVICE_DIRTY and v.shares_storage_with(b)
    assert dims_of(views[0]) == [(3, 6, 1), (0, 4, 6)]
    assert dims_of(b) == [(-2, 6, 1), (-1, 4, 6)]
    assert moves() == NONE and b.device_dirty()
    assert not w.has_device_allocation() and w.transfers.to_device == 0
    assert text == (f"Buffer(shape=(4, 6), dtype=int32, mins=(-1, -2), data=device (host copy stale), "
                    f"device={dev.name} ({dev.platform}), memory=wraps numpy.ndarray, device_memory=owned)")
    np.testing.assert_array_equal(np.asarray(views[2])[:, 0], a)  # now it comes home, once
    assert moves() == (0, 0, 1, a.nbytes)


# --- repr -----------------------------------------------------------------------------------


class Images:
    class Frame(np.ndarray):
        """An ndarray subclass nested in a class: repr names it by its qualified name."""


def test_repr_names_where_the_data_is_and_whose_the_memory_is(dev, ctx):
    import pyopencl as cl

    assert repr(hb.Buffer((2, 3), "uint8")) == "Buffer(shape=(2, 3), dtype=uint8, data=host, memory=owned)"
    assert repr(hb.Buffer((2, 3), "uint8").translated(1, 4)) == (
        "Buffer(shape=(2, 3), dtype=uint8, mins=(0, 4), data=host, memory=owned)")
    assert repr(hb.Buffer.from_host(np.zeros(3, np.float32))) == (
        "Buffer(shape=(3,), dtype=float32, data=host, memory=wraps numpy.ndarray)")
    assert repr(hb.Buffer.from_host(b"abc")) == "Buffer(shape=(3,), dtype=uint8, data=host, memory=wraps bytes, readonly)"
    assert repr(hb.Buffer.from_host(bytearray(2))) == "Buffer(shape=(2,), dtype=uint8, data=host, memory=wraps bytearray)"
    assert repr(hb.Buffer.from_host(array.array("i", [1, 2]))).endswith("memory=wraps array.array)")
    assert repr(hb.Buffer.from_host(np.zeros(2).view(Images.Frame))).endswith(
        f"memory=wraps {__name__}.Images.Frame)")
    on = f"device={dev.name} ({dev.platform})"
    b = hb.Buffer((4,), "float32")
    b.copy_to_device(dev)
    assert repr(b) == f"Buffer(shape=(4,), dtype=float32, data=host and device, {on}, memory=owned, device_memory=owned)"
    b.numpy(writable=True)
    assert repr(b) == (f"Buffer(shape=(4,), dtype=float32, data=host (device copy stale), {on}, memory=owned, "
                       f"device_memory=owned)")
    mem = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 16)
    w = hb.opencl.wrap(mem, shape=(4,), dtype="int32")
    assert repr(w) == (f"Buffer(shape=(4,), dtype=int32, data=device (host copy stale), {on}, memory=owned, "
                       f"device_memory=wrapped)")


def test_repr_of_a_pipeline_runtimes_allocation():
    runtime = FakeRuntime()
    b = hb.Buffer((2, 2), "uint8")
    runtime.allocate_for(b)  # for the whole storage: it becomes the storage's device copy
    raw_buffer(b).flags = DEVICE_DIRTY  # written on the device
    assert repr(b) == ("Buffer(shape=(2, 2), dtype=uint8, data=device (host copy stale), memory=owned, "
                       "device_memory=a pipeline runtime's)")
    b.device_free()  # home through the runtime's copy_to_host, then its device_free
    assert repr(b) == "Buffer(shape=(2, 2), dtype=uint8, data=host, memory=owned)"


# --- against Halide's own Buffer -----------------------------------------------------------


def hl_dims(h):
    return [(h.dim(i).min(), h.dim(i).extent(), h.dim(i).stride()) for i in range(h.dimensions())]


@pytest.mark.needs_halide
def test_halide_agrees_on_orders_interleaving_and_shapes_of_others():
    import halide as hl

    shape = (2, 3, 5)
    for order in itertools.permutations(range(3)):
        # Halide lists sizes and the storage order innermost first, in its own dimension numbers.
        storage = [2 - a for a in reversed(order)]
        h = hl.Buffer(hl.UInt(16), list(reversed(shape)), storage)
        assert dims_of(hb.Buffer(shape, "uint16", order=order)) == hl_dims(h)
        # make_with_shape_of keeps the order: the same layout again, at other's mins. (Halide's
        # own make_with_shape_of sorts strides with passes that miss a swap for some orders of
        # three dimensions, such as these strides (6, 1, 3): it is not the reference here.)
        h.set_min([4, -5, 6])
        other = hb.Buffer(shape, "uint16", order=order)
        other.set_min(6, -5, 4)
        assert dims_of(hb.Buffer.make_with_shape_of(other)) == hl_dims(h)
    assert dims_of(hb.Buffer.make_interleaved((3, 48, 64), "uint8")) == hl_dims(
        hl.Buffer.make_interleaved(hl.UInt(8), 64, 48, 3))


@pytest.mark.needs_halide
def test_halide_agrees_on_translated_set_min_contains_and_embedded_coordinates():
    import halide as hl

    h = hl.Buffer(hl.Int(32), [4, 3])  # our shape (3, 4)
    b = hb.Buffer((3, 4), "int32")
    assert dims_of(b.translated((2, -1))) == hl_dims(h.translated([-1, 2]))
    assert dims_of(b.translated(0, 7)) == hl_dims(h.translated(1, 7))
    h.set_min([-1, 2])
    b.set_min(2, -1)
    assert dims_of(b) == hl_dims(h)
    for y, x in itertools.product(range(0, 7), range(-3, 5)):
        assert b.contains(y, x) == h.contains([x, y]), (y, x)
    # Halide picks another stride for the new axis (extent 1: it addresses nothing); the
    # coordinates agree: our axis k of the result is Halide's dimension ndim - k.
    for axis in range(3):
        ours = [d[:2] for d in dims_of(b.embedded(axis, 9))]
        assert ours == [d[:2] for d in hl_dims(h.embedded(2 - axis, 9))]
    h.add_dimension()
    assert [d[:2] for d in dims_of(b.add_dimension())] == [d[:2] for d in hl_dims(h)]


# --- views on both sides of four axes (a view keeps up to four in place, more on the heap) ----


@pytest.mark.parametrize("ndim", range(1, 10))
def test_views_of_one_to_nine_axes_match_numpy(ndim):
    shape = tuple(2 + (i % 2) for i in range(ndim))
    a = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    b = hb.Buffer.from_host(a.copy(), copy=True)
    pairs = [
        (b.embedded(ndim // 2), np.expand_dims(a, ndim // 2)),      # one axis more
        (b.add_dimension(), a[np.newaxis]),
        (b.embedded(0).embedded(0), a[np.newaxis, np.newaxis]),     # two more: 5 and 6 from 4
        (b.transposed(), a.transpose()),
        (b[..., ::-1], a[..., ::-1]),
        (b[0] if ndim > 1 else b[0:1], a[0] if ndim > 1 else a[0:1]),  # one axis fewer
        (b.cropped(0, 1, 1), a[1:2]),
        (b.sliced(ndim // 2, 1), a[(slice(None),) * (ndim // 2) + (1,)]),  # an inner axis goes
        (b.sliced(ndim - 1, 0), a[..., 0]),
    ]
    def stepping(strides, shape):  # an axis of extent 1 steps nowhere: its stride is free
        return [s for s, n in zip(strides, shape) if n > 1]

    for view, expected in pairs:
        assert view.shape == expected.shape
        assert stepping(view.strides, view.shape) == stepping(expected.strides, expected.shape)
        np.testing.assert_array_equal(np.asarray(view), expected)
        again = view.copy()  # a new storage of the view's geometry
        assert again.shape == expected.shape
        np.testing.assert_array_equal(np.asarray(again), expected)
    grown = b.embedded(0)
    assert grown.mins == (0,) * (ndim + 1) and b.embedded(0, 7).mins == (7,) + (0,) * ndim
    assert b.translated((1,) * ndim).mins == (1,) * ndim
