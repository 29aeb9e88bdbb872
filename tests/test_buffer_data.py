"""Data operations (fill, all_equal, copy_from, __setitem__): values, Halide's coordinate rule,
and where each runs — on the device when the device copy is current, moving only what must move.

Device tests run on the default OpenCL device (PoCL on a machine without a GPU). Data put on a
device is read back with pyopencl (`on_device`), not through the buffer, so a test can tell
where an operation ran; transfer counts are exact (`Moves`)."""

import ml_dtypes
import numpy as np
import pytest

import halide_buffer as hb

import cuda_standin
import opencl_interposer
from common import ALL_DTYPES, NONE, Moves, bits_of, down, on_device, random_bits, up


def host(values, dtype=None):
    """A Buffer owning a copy of values."""
    a = np.asarray(values) if dtype is None else np.asarray(values).astype(hb.dtype(dtype).numpy)
    return hb.Buffer.from_host(a, copy=True)


def device_resident(values, dev, dtype=None):
    """A buffer whose current copy is on the device only: its host memory holds other bytes.

    Its host copy is overwritten behind its back after the upload, so any read of the host copy
    (rather than the device's) shows up as wrong data."""
    a = np.array(values) if dtype is None else np.array(values).astype(hb.dtype(dtype).numpy)
    b = hb.Buffer.from_host(a, external_writes=False)
    b.copy_to_device(dev)
    b.set_device_dirty(True)
    a.view(np.uint8)[...] = 0xA5  # stale host bytes
    return b


def on_device_current(values, dev, dtype=None):
    """A buffer whose host and device copies are both current (neither dirty)."""
    b = host(values, dtype)
    b.copy_to_device(dev)
    return b


def scalar_bytes(value, dtype):
    a = np.empty((), hb.dtype(dtype).numpy)
    a[...] = value
    return a


# --- fill -------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_fill_sets_every_element_as_numpy_assigns_the_value(dtype):
    b = hb.Buffer((3, 5), dtype)
    value = True if dtype == "bool" else 1
    b.fill(value)
    expected = np.full((3, 5), scalar_bytes(value, dtype))
    assert np.array_equal(bits_of(b.numpy()), bits_of(expected))
    assert b.all_equal(value)


def test_fill_of_a_view_leaves_every_other_element_alone():
    base = np.arange(60, dtype=np.int16).reshape(6, 10)
    for key in [np.s_[1:4, ::3], np.s_[::-2, 2], np.s_[..., ::-1]]:
        b = host(base)
        b[key].fill(-7)
        expected = base.copy()
        expected[key] = -7
        assert np.array_equal(b.numpy(), expected)
    b = host(base)
    b.transposed(1, 0)[2:5].fill(9)
    expected = base.copy()
    expected.T[2:5] = 9
    assert np.array_equal(b.numpy(), expected)


@pytest.mark.parametrize("dtype, value", [("uint8", 300), ("int8", -129), ("int32", float("nan")),
                                          ("uint16", -1)])
def test_fill_refuses_what_numpy_refuses_with_the_same_exception(dtype, value):
    with pytest.raises(Exception) as numpy_error:
        np.empty((), hb.dtype(dtype).numpy)[...] = value
    b = hb.Buffer(4, dtype)
    b.fill(3)
    with pytest.raises(type(numpy_error.value), match=r"^fill\(\): .*converting to " + dtype):
        b.fill(value)
    assert b.all_equal(3)


def test_fill_converts_to_exotic_dtypes_exactly():
    import ml_dtypes

    for dtype, value in [("bfloat16", 1 / 3), ("float8_e4m3fn", 0.3), ("float8_e5m2", -1e9),
                         ("int4", -8), ("float4_e2m1fn", 2.5)]:
        b = hb.Buffer(4, dtype)
        b.fill(value)
        expected = np.full(4, value).astype(getattr(ml_dtypes, dtype))
        assert np.array_equal(bits_of(b.numpy()), bits_of(expected)), dtype


def test_fill_refuses_arrays_and_read_only_memory():
    b = hb.Buffer(3, "float32")
    with pytest.raises(TypeError, match=r"^fill\(\): the value must be a scalar, not list; assign arrays"):
        b.fill([1, 2, 3])
    ro = np.zeros(3, np.float32)
    ro.flags.writeable = False
    with pytest.raises(BufferError, match=r"^fill\(\): the buffer wraps read-only memory"):
        hb.Buffer.from_host(ro).fill(1)
    assert not ro.any()


def test_fill_on_a_host_only_buffer_stays_on_the_host():
    b = hb.Buffer((64,), "float32")
    moves = Moves(b)
    b.fill(2.5)
    assert moves() == NONE
    assert not b.has_device_allocation() and b.host_dirty()


def test_fill_on_the_device_when_its_copy_is_current_moves_nothing(dev):
    b = on_device_current(np.arange(32, dtype=np.float32).reshape(4, 8), dev)
    moves = Moves(b)
    b.fill(1.25)
    assert moves() == NONE
    assert b.device_dirty() and not b.host_dirty()
    assert np.array_equal(on_device(b), np.full((4, 8), 1.25, np.float32))
    assert np.array_equal(np.asarray(b), np.full((4, 8), 1.25, np.float32))
    assert moves() == down(4 * 8 * 4)


@pytest.mark.parametrize("key", [np.s_[1:3, 2:7], np.s_[:, ::3], np.s_[::-1, 5], np.s_[2], np.s_[2:3], np.s_[:, 5:6],
                                 np.s_[3:4, 6:7]])
@pytest.mark.parametrize("dtype", ["uint8", "bfloat16", "float32", "float64", "int4"])
def test_fill_of_a_device_view_fills_only_its_elements_on_the_device(dev, key, dtype):
    """Only the view's elements are filled, on the device; views with an axis of one element (one
    row, one column, one element) too: for an axis of extent 1 taken for an empty region."""
    values = random_bits((4, 8), dtype, seed=3)
    b = device_resident(values, dev)
    moves = Moves(b)
    b[key].fill(1)
    assert moves() == NONE
    expected = values.copy()
    expected[key] = 1
    assert np.array_equal(bits_of(on_device(b)), bits_of(expected))
    assert b.device_dirty()


def test_fill_of_no_element_changes_no_flag(dev):
    b = on_device_current(np.zeros((2, 3), np.float32), dev)
    b[:, 3:].fill(1)
    b[0:0] = 2
    assert not b.device_dirty() and not b.host_dirty()


def test_fill_of_a_host_dirty_device_buffer_writes_the_host(dev):
    b = hb.Buffer(16, "int32")
    b.copy_to_device(dev)
    b.numpy(writable=True)[0] = 5  # host newer
    moves = Moves(b)
    b[8:].fill(3)
    assert moves() == NONE
    assert b.host_dirty()
    assert list(b.numpy()) == [5] + [0] * 7 + [3] * 8


def interposer_counts():
    """The OpenCL calls made so far, as the interposer counted them (skips without it)."""
    if not opencl_interposer.active():
        pytest.skip(opencl_interposer.reason())
    return opencl_interposer.counts()


def calls_since(before):
    """The OpenCL calls made since `before` (interposer_counts()), the non-zero ones."""
    after = opencl_interposer.counts()
    return {k: after[k] - before[k] for k in after if after[k] != before[k]}


@pytest.mark.parametrize("dtype", ["uint8", "int16", "float32"])
def test_fill_of_a_whole_contiguous_device_buffer_is_one_fill_in_place(dev, dtype):
    """A dense buffer is one run of bytes: one clEnqueueFillBuffer over it, with no temporary
    buffer and no copy. For a contiguous axis (a stride of one element, or of one byte) not taken
    as the innermost, which makes the fill a rectangle of one-element rows filled through a
    temporary buffer."""
    b = on_device_current(np.arange(48).astype(dtype).reshape(6, 8), dev)
    moves, before = Moves(b), interposer_counts()
    b.fill(3)
    assert calls_since(before) == {"fills": 1, "finishes": 1}
    assert moves() == NONE and b.device_dirty()
    assert np.array_equal(on_device(b), np.full((6, 8), 3, dtype))


# A view with an element every other one along four axes: no two axes merge and no axis is
# contiguous, so a copy of it is rectangles of one-element rows, repeated over two more axes.
FOUR_AXES = (6, 4, 4, 4)
EVERY_OTHER = np.s_[::2, ::2, ::2, ::2]


def test_fill_of_a_four_axis_strided_device_view_fills_its_elements_only(dev):
    """The commands of a fill repeated over two axes (an odometer over the axes around the
    rectangles): each combination once, none past them. For a repeat count not reset when its
    axis wraps (elements left unfilled, bytes between them filled, or commands past the buffer)."""
    values = random_bits(FOUR_AXES, "float32", seed=11)
    b = device_resident(values, dev)
    moves = Moves(b)
    b[EVERY_OTHER].fill(-2.5)
    assert moves() == NONE and b.device_dirty()
    expected = values.copy()
    expected[EVERY_OTHER] = -2.5
    assert np.array_equal(bits_of(on_device(b)), bits_of(expected))


@pytest.fixture(scope="module")
def cuda_dev():
    """The CUDA driver stand-in's first device (tests/drivers/cuda_standin.c)."""
    if not cuda_standin.active():
        pytest.skip(cuda_standin.why_inactive())
    return hb.cuda.device()


def test_fill_the_device_cannot_do_brings_a_newer_device_copy_home_first(cuda_dev):
    """CUDA's memsets repeat a word of 1, 2 or 4 bytes: a float64 1.5 is none, so the fill of a
    view runs on the host, which must first take in the device copy (newer), once and whole.
    For a host fill over the stale host copy (the rest of the buffer lost)."""
    values = np.arange(24, dtype=np.float64).reshape(4, 6)
    b = device_resident(values, cuda_dev)
    moves = Moves(b)
    b[1:3, 2:].fill(1.5)
    assert moves() == down(values.nbytes)
    assert b.host_dirty() and not b.device_dirty()
    expected = values.copy()
    expected[1:3, 2:] = 1.5
    assert np.array_equal(b.numpy(), expected)
    assert moves() == NONE


# --- all_equal --------------------------------------------------------------------------------

def test_all_equal_compares_values_in_the_buffers_dtype():
    b = host(np.full(5, 0.1, np.float32))
    assert b.all_equal(0.1)  # 0.1 converted to float32 first, as Halide's all_equal(T) does
    assert not b.all_equal(0.2)
    b[2] = np.nan
    assert not b.all_equal(np.nan)
    z = host(np.array([0.0, -0.0], np.float32))
    assert z.all_equal(0.0)
    assert hb.Buffer((0, 3), "uint8").all_equal(7)  # every element of none


def test_all_equal_reads_a_newer_device_copy_once(dev):
    b = device_resident(np.full(10, 4, np.uint16), dev)
    moves = Moves(b)
    assert b.all_equal(4)
    assert moves() == down(20)
    assert b.all_equal(4) and moves() == NONE


# --- copy_from: Halide's coordinate rule --------------------------------------------------------

def with_mins(b, *mins):
    """A view of b whose coordinates start at mins (cropped keeps coordinates; this moves them)."""
    moved = b
    for axis, m in enumerate(mins):
        moved = moved.translated(axis, m - moved.mins[axis])
    return moved


def expected_copy(dst, dst_mins, src, src_mins):
    """NumPy's answer: dst with src's elements at every shared coordinate."""
    out = dst.copy()
    dst_idx, src_idx = [], []
    for d0, dn, s0, sn in zip(dst_mins, dst.shape, src_mins, src.shape):
        lo, hi = max(d0, s0), min(d0 + dn, s0 + sn)
        if hi <= lo:
            return out
        dst_idx.append(slice(lo - d0, hi - d0))
        src_idx.append(slice(lo - s0, hi - s0))
    out[tuple(dst_idx)] = src[tuple(src_idx)]
    return out


@pytest.mark.parametrize("dst_mins, src_mins", [((0, 0), (0, 0)), ((0, 0), (2, 3)), ((5, -2), (3, 0)),
                                                ((0, 0), (10, 0)), ((-4, -4), (0, 0))])
def test_copy_from_copies_the_shared_coordinates(dst_mins, src_mins):
    dst_values = np.arange(20, dtype=np.int32).reshape(4, 5)
    src_values = -np.arange(16, dtype=np.int32).reshape(4, 4) - 1
    dst = with_mins(host(dst_values), *dst_mins)
    src = with_mins(host(src_values), *src_mins)
    dst.copy_from(src)
    assert np.array_equal(dst.numpy(), expected_copy(dst_values, dst_mins, src_values, src_mins))
    assert np.array_equal(src.numpy(), src_values)


def test_copy_from_crops_use_their_coordinates():
    big = host(np.zeros((6, 6), np.uint8))
    patch = host(np.full((6, 6), 9, np.uint8))
    big.copy_from(patch.cropped(0, 2, 2).cropped(1, 1, 3))  # coordinates [2,4) x [1,4)
    expected = np.zeros((6, 6), np.uint8)
    expected[2:4, 1:4] = 9
    assert np.array_equal(big.numpy(), expected)


def test_copy_from_through_negative_strides_and_transposes():
    values = np.arange(30, dtype=np.float64).reshape(5, 6)
    dst = hb.Buffer((6, 5), "float64")
    dst.copy_from(host(values).transposed(1, 0))
    assert np.array_equal(dst.numpy(), values.T)
    dst2 = host(np.zeros((5, 6)))
    dst2[::-1, ::-1].copy_from(host(values)[:, :])
    assert np.array_equal(dst2.numpy(), values[::-1, ::-1])


def test_copy_from_within_one_storage_behaves_as_numpy_with_overlap():
    values = np.arange(10, dtype=np.int64)
    b = host(values)
    b[1:] = b[:-1]
    expected = values.copy()
    expected[1:] = expected[:-1]
    assert np.array_equal(b.numpy(), expected)


def test_copy_from_between_overlapping_strided_views_takes_the_source_as_it_was():
    """Every other element shifted on by one of them (and back): the views share bytes, and
    their elements are copied one at a time, so only a copy through a staging buffer gives
    NumPy's result. For overlapping views taken as disjoint (each element copied from one the
    copy already overwrote)."""
    values = np.arange(40, dtype=np.int32).reshape(2, 20)
    for dst_key, src_key in ((np.s_[:, 2::2], np.s_[:, :-2:2]), (np.s_[:, :-2:2], np.s_[:, 2::2])):
        b = host(values)
        b[dst_key].copy_from(b[src_key])
        expected = values.copy()
        expected[dst_key] = expected[src_key]
        assert np.array_equal(b.numpy(), expected), (dst_key, src_key)


def test_copy_from_refuses_mismatches_and_changes_nothing():
    dst = host(np.zeros((2, 3), np.float32))
    with pytest.raises(TypeError, match=r"^copy_from\(\): the source is float64, the buffer float32; convert"):
        dst.copy_from(host(np.ones((2, 3))))
    with pytest.raises(ValueError, match=r"^copy_from\(\): the source has 1 axes, the buffer 2; give both"):
        dst.copy_from(host(np.ones(3, np.float32)))
    with pytest.raises(TypeError, match=r"^copy_from\(\): the source must be a halide_buffer.Buffer, not "
                                        r"numpy.ndarray; wrap it"):
        dst.copy_from(np.ones((2, 3), np.float32))
    ro = np.zeros((2, 3), np.float32)
    ro.flags.writeable = False
    with pytest.raises(BufferError, match=r"^copy_from\(\): the buffer wraps read-only memory"):
        hb.Buffer.from_host(ro).copy_from(host(np.ones((2, 3), np.float32)))
    assert not dst.numpy().any() and not ro.any()


# --- copy_from: where it runs, what moves ---------------------------------------------------------

SHAPE = (6, 8)


def case_values(dtype, seed):
    return random_bits(SHAPE, dtype, seed=seed)


def make(kind, values, dev):
    """A buffer holding values whose current copy is where `kind` says."""
    if kind == "host":
        return host(values)
    if kind == "device":
        return device_resident(values, dev)
    return on_device_current(values, dev)  # "both"


def current(b, kind):
    """b's elements from its current copy, read without moving anything."""
    return on_device(b) if kind != "host" else b.numpy()


DTYPES = ["float32", "uint8", "bfloat16", "int4"]
SOURCES = [  # (name, view of the source buffer, its mins after the view)
    ("whole", lambda b: b),
    ("crop", lambda b: b.cropped(0, 1, 4).cropped(1, 2, 5)),
    ("reversed", lambda b: b[::-1]),
    ("transposed", lambda b: b.transposed(1, 0)[:6, :6]),
    ("one row", lambda b: b.cropped(0, 2, 1)),  # an axis of extent 1: one row of 8 elements
]


def element_bytes(shape, dtype):
    return int(np.prod(shape)) * hb.dtype(dtype).itemsize


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("src_kind, dst_kind", [("host", "host"), ("host", "device"), ("host", "both"),
                                                ("device", "host"), ("device", "device"), ("both", "device"),
                                                ("device", "both"), ("both", "host")])
@pytest.mark.parametrize("source", SOURCES, ids=[s[0] for s in SOURCES])
def test_copy_from_moves_only_the_overlap_once_and_device_to_device_nothing(dev, dtype, src_kind, dst_kind,
                                                                          source):
    src_values, dst_values = case_values(dtype, 1), case_values(dtype, 2)
    src_base, dst = make(src_kind, src_values, dev), make(dst_kind, dst_values, dev)
    src = source[1](src_base)
    src_view_values = source[1](host(src_values)).numpy()
    dst_moves, src_moves = Moves(dst), Moves(src_base)
    dst.copy_from(src)

    expected = expected_copy(dst_values, dst.mins, src_view_values, src.mins)
    overlap = [min(d + n, s + m) - max(d, s) for d, n, s, m in zip(dst.mins, dst.shape, src.mins, src.shape)]
    nbytes = element_bytes(overlap, dtype)
    writes_device = dst_kind != "host"
    reads_device = src_kind == "device" or (src_kind == "both" and writes_device)
    if writes_device:
        assert dst.device_dirty() and not dst.host_dirty()
        assert dst_moves() == (NONE if reads_device else up(nbytes))
    else:
        assert dst.host_dirty() and not dst.device_dirty()
        assert dst_moves() == NONE
    assert src_moves() == (down(nbytes) if src_kind == "device" and not writes_device else NONE)
    assert np.array_equal(bits_of(current(dst, "device" if writes_device else "host")), bits_of(expected))
    assert np.array_equal(bits_of(current(src_base, src_kind)), bits_of(src_values))


@pytest.fixture(scope="module")
def other_dev(ctx):
    """A second OpenCL device: PoCL's CPU device again, in a context of its own, so its memory
    is not the default device's (copies between the two go through the host)."""
    import pyopencl as cl

    return hb.opencl.device(cl.Context(ctx.devices))


@pytest.mark.parametrize("dst_kind", ["device", "both"])
def test_copy_from_between_two_devices_stages_only_the_overlap(dev, other_dev, dst_kind):
    src = device_resident(np.arange(12, dtype=np.int32), dev)
    dst = hb.Buffer.from_host(np.zeros(12, np.int32), copy=True)
    dst.copy_to_device(other_dev)
    if dst_kind == "device":
        dst.set_device_dirty(True)
    src_moves, dst_moves = Moves(src), Moves(dst)
    dst.copy_from(src.cropped(0, 4, 4))
    assert src_moves() == down(16) and dst_moves() == up(16)
    assert dst.device_dirty() and src.device_dirty()
    assert list(hb.opencl.as_array(dst, device=other_dev, writable=False).get()) == [0] * 4 + [4, 5, 6, 7] + [0] * 4


def test_copy_from_a_device_copy_to_another_devices_host_reads_only_the_overlap(dev, other_dev):
    src = device_resident(np.arange(12, dtype=np.int32), dev)
    dst = hb.Buffer(12, "int32")
    dst.copy_to_device(other_dev)
    dst.numpy(writable=True)[0] = 99  # host newer: the write goes to the host
    src_moves, dst_moves = Moves(src), Moves(dst)
    dst.copy_from(src.cropped(0, 8, 4))
    assert src_moves() == down(16) and dst_moves() == NONE
    assert list(dst.numpy()) == [99] + [0] * 7 + [8, 9, 10, 11]


def test_copy_from_four_axis_strided_views_moves_each_element_once(dev):
    """Host to device, device to device and device to host through views repeated over two axes
    around their rectangles: every element in its place, nothing between them written. For a
    repeat count not reset when its axis wraps (elements skipped or bytes between them written,
    or commands past the buffer)."""
    src_values = random_bits((3, 2, 2, 2), "float32", seed=12)
    dst_values = random_bits(FOUR_AXES, "float32", seed=13)
    dst = on_device_current(dst_values, dev)
    moves = Moves(dst)
    dst[EVERY_OTHER].copy_from(host(src_values))
    assert moves() == up(src_values.nbytes) and dst.device_dirty()
    expected = dst_values.copy()
    expected[EVERY_OTHER] = src_values
    assert np.array_equal(bits_of(on_device(dst)), bits_of(expected))

    other_values = random_bits(FOUR_AXES, "float32", seed=14)
    other = on_device_current(other_values, dev)
    other_moves = Moves(other)
    other[EVERY_OTHER].copy_from(dst[EVERY_OTHER])
    assert moves() == NONE and other_moves() == NONE and other.device_dirty()
    other_expected = other_values.copy()
    other_expected[EVERY_OTHER] = src_values
    assert np.array_equal(bits_of(on_device(other)), bits_of(other_expected))

    back = host(np.zeros(FOUR_AXES, np.float32))
    back[EVERY_OTHER].copy_from(dst[EVERY_OTHER])
    assert moves() == down(src_values.nbytes)
    back_expected = np.zeros(FOUR_AXES, np.float32)
    back_expected[EVERY_OTHER] = src_values
    assert np.array_equal(bits_of(back.numpy()), bits_of(back_expected))


def test_copy_between_rows_of_different_pitches_on_a_cuda_device(cuda_dev):
    """Three rows of 4 elements into (and out of) the middle of an 8x8 device buffer: one
    rectangle whose rows are 32 bytes apart on the device and 16 in the host array. For a
    rectangle described with the host's pitch on the device side (the driver refuses a slice
    lower than its rows)."""
    b = hb.Buffer((8, 8), "float32")
    b.copy_to_device(cuda_dev)
    moves, rectangles = Moves(b), cuda_standin.calls("cuMemcpy3DAsync")
    values = np.arange(12, dtype=np.float32).reshape(3, 4) + 1
    b[1:4, 2:6] = values
    assert moves() == up(values.nbytes) and b.device_dirty()
    assert cuda_standin.calls("cuMemcpy3DAsync") == rectangles + 1
    back = with_mins(hb.Buffer((3, 4), "float32"), 1, 2)  # the coordinates of b[1:4, 2:6]
    back.copy_from(b)
    assert moves() == down(values.nbytes) and cuda_standin.calls("cuMemcpy3DAsync") == rectangles + 2
    assert np.array_equal(back.numpy(), values)
    expected = np.zeros((8, 8), np.float32)
    expected[1:4, 2:6] = values
    assert np.array_equal(b.numpy(), expected)


def test_device_copy_between_rows_of_different_pitches_on_a_cuda_device(cuda_dev):
    """Three dense rows of 4 elements into the middle of an 8x8 buffer, both on the device: one
    device-to-device rectangle whose rows are 16 bytes apart in the source and 32 in the
    destination, each side described with its own pitch."""
    values = np.arange(12, dtype=np.float32).reshape(3, 4) + 1
    src = with_mins(hb.Buffer.from_host(values, copy=True), 1, 2)
    src.copy_to_device(cuda_dev)
    b = hb.Buffer((8, 8), "float32")
    b.copy_to_device(cuda_dev)
    moves, rectangles = Moves(b), cuda_standin.calls("cuMemcpy3DAsync")
    b.copy_from(src)
    assert moves() == NONE and b.device_dirty()
    assert cuda_standin.calls("cuMemcpy3DAsync") == rectangles + 1
    expected = np.zeros((8, 8), np.float32)
    expected[1:4, 2:6] = values
    assert np.array_equal(b.numpy(), expected)


@pytest.mark.parametrize("shape", [(6, 9, 16), (5, 11, 16)], ids=["more-outer", "more-inner"])
def test_rectangles_take_the_longer_of_two_axes_as_rows_on_a_cuda_device(cuda_dev, shape):
    """Half rows of every other row: two axes either of which can be a rectangle's rows, but
    neither the other's slices (its pitch is no whole number of the other's pitches, or is
    lower than its rows): the rows are the longer axis, whichever it is, and the loop around
    the rectangles runs over the shorter one (5 commands each way). For an axis taken as rows
    without counting its elements as the best so far (the last fitting axis won: 6 commands)."""
    b = hb.Buffer(shape, "uint8")
    b.copy_to_device(cuda_dev)
    v = b[:, ::2, :8]
    assert sorted(v.shape[:2]) == [5, 6]
    values = np.arange(v.size, dtype=np.uint8).reshape(v.shape) + 1
    moves, rectangles = Moves(b), cuda_standin.calls("cuMemcpy3DAsync")
    v[...] = values
    assert moves() == up(values.nbytes) and b.device_dirty()
    assert cuda_standin.calls("cuMemcpy3DAsync") == rectangles + 5
    back = hb.Buffer(v.shape, "uint8")
    back.copy_from(v)
    assert moves() == down(values.nbytes) and cuda_standin.calls("cuMemcpy3DAsync") == rectangles + 10
    assert np.array_equal(back.numpy(), values)
    expected = np.zeros(shape, np.uint8)
    expected[:, ::2, :8] = values
    assert np.array_equal(b.numpy(), expected)


@pytest.mark.parametrize("shape, key", [((5, 3, 16), np.s_[:, :2, :8]), ((2, 6, 16), np.s_[:, :5, :8])],
                         ids=["2-rows-5-slices", "5-rows-2-slices"])
def test_rows_and_slices_apart_are_one_rectangle_on_a_cuda_device(cuda_dev, shape, key):
    """Half rows of some rows of each plane: the rows (16 bytes apart) and the planes (a whole
    number of rows apart, past the last row taken) cannot merge, but they are the rows and
    slices of one 3-D rectangle, each way. For slices checked against the extent of another axis
    than the rows (taken as overlapping them: a loop of 2-D rectangles instead)."""
    b = hb.Buffer(shape, "uint8")
    b.copy_to_device(cuda_dev)
    v = b[key]
    values = np.arange(v.size, dtype=np.uint8).reshape(v.shape) + 1
    moves, rectangles = Moves(b), cuda_standin.calls("cuMemcpy3DAsync")
    v[...] = values
    assert moves() == up(values.nbytes) and cuda_standin.calls("cuMemcpy3DAsync") == rectangles + 1
    back = hb.Buffer(v.shape, "uint8")
    back.copy_from(v)
    assert moves() == down(values.nbytes) and cuda_standin.calls("cuMemcpy3DAsync") == rectangles + 2
    assert np.array_equal(back.numpy(), values)
    expected = np.zeros(shape, np.uint8)
    expected[key] = values
    assert np.array_equal(b.numpy(), expected)


# --- __setitem__ --------------------------------------------------------------------------------

@pytest.mark.parametrize("key", [0, -1, (1, 2), np.s_[1:3], np.s_[:, ::2], np.s_[::-1, 1:], np.s_[...],
                                 np.s_[..., 3], (slice(None), -2)])
@pytest.mark.parametrize("value", [7, -1.5, np.arange(5), np.float32(2.5), [[1], [2], [3], [4]]],
                         ids=["int", "float", "row", "np_scalar", "column"])
def test_setitem_assigns_as_numpy_does(key, value):
    values = np.arange(20, dtype=np.float32).reshape(4, 5)
    expected = values.copy()
    try:
        expected[key] = value
    except ValueError as numpy_error:  # a shape NumPy cannot broadcast
        b = host(values)
        with pytest.raises(ValueError, match=r"^__setitem__\(\): .* \(converting to float32"):
            b[key] = value
        assert np.array_equal(b.numpy(), values), numpy_error
        return
    b = host(values)
    b[key] = value
    assert np.array_equal(b.numpy(), expected)


def values_in_range(dtype, n=12):
    """n values that dtype holds without overflow or an invalid cast, as the source of a write.

    Integers (ml_dtypes' sub-byte ones too): exact values of dtype from its lowest to its highest.
    Floating point: float64 values for the buffer to convert, its lowest and highest finite values
    and a ramp over [-3, 3] cut to what dtype reaches (float8_e8m0fnu has no sign and no zero).
    """
    t = hb.dtype(dtype).numpy
    if dtype == "bool":
        return np.linspace(-3, 3, n) > 0
    if dtype.startswith(("int", "uint")):
        info = ml_dtypes.iinfo(t)
        lo, hi = int(info.min), int(info.max)
        return np.array([lo + (hi - lo) * k // (n - 1) for k in range(n)], dtype=object).astype(t)
    info = ml_dtypes.finfo(t)
    lo, hi = float(info.min), float(info.max)
    return np.concatenate([[lo, hi], np.linspace(max(lo, -3.0), min(hi, 3.0), n - 2)])


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_setitem_converts_to_every_dtype_exactly(dtype):
    t = hb.dtype(dtype).numpy
    source = values_in_range(dtype).reshape(3, 4)
    expected = np.zeros((3, 4), t)
    expected[...] = source
    b = hb.Buffer((3, 4), dtype)
    b[...] = source
    assert np.array_equal(bits_of(b.numpy()), bits_of(expected))


def test_setitem_from_a_buffer_is_by_position_not_coordinate():
    dst = host(np.zeros((4, 4), np.int8))
    src = with_mins(host(np.ones((2, 2), np.int8)), 100, 100)
    dst[1:3, 2:] = src
    expected = np.zeros((4, 4), np.int8)
    expected[1:3, 2:] = 1
    assert np.array_equal(dst.numpy(), expected)


def test_setitem_of_a_device_view_from_a_device_buffer_stays_on_the_device(dev):
    dst = on_device_current(np.zeros((4, 4), np.float32), dev)
    src = device_resident(np.full((2, 4), 3, np.float32), dev)
    moves = Moves(dst)
    dst[2:] = src
    assert moves() == NONE and dst.device_dirty()
    expected = np.zeros((4, 4), np.float32)
    expected[2:] = 3
    assert np.array_equal(on_device(dst), expected)


def test_setitem_of_an_array_into_a_device_buffer_uploads_just_those_elements(dev):
    dst = on_device_current(np.zeros((8, 8), np.uint8), dev)
    moves = Moves(dst)
    dst[1:3, 4:6] = np.array([[1, 2], [3, 4]])
    assert moves() == up(4)
    expected = np.zeros((8, 8), np.uint8)
    expected[1:3, 4:6] = [[1, 2], [3, 4]]
    assert np.array_equal(on_device(dst), expected)


@pytest.mark.parametrize("write", ["__setitem__", "fill", "copy_from", "numpy"])
def test_a_write_into_read_only_memory_is_a_value_error_as_numpy_s(write):
    """NumPy raises ValueError for a write into a read-only array; ours is halide_buffer's
    ReadOnlyError, a BufferError and a ValueError both, so code catching either works."""
    ro = np.frombuffer(bytes(24), np.float32).reshape(2, 3)  # read-only memory, as bytes are
    b = hb.Buffer.from_host(ro)
    ours = {"__setitem__": lambda: b.__setitem__((0, 0), 1), "fill": lambda: b.fill(1),
            "copy_from": lambda: b.copy_from(hb.Buffer((2, 3), "float32")),
            "numpy": lambda: b.numpy(writable=True)}[write]
    with pytest.raises(ValueError):  # NumPy's own, for the same write
        {"__setitem__": lambda: ro.__setitem__((0, 0), 1), "fill": lambda: ro.fill(1),
         "copy_from": lambda: np.copyto(ro, np.zeros((2, 3), np.float32)),
         "numpy": lambda: setattr(ro.flags, "writeable", True)}[write]()
    with pytest.raises(hb.ReadOnlyError, match=rf"^{write}\(\): the buffer wraps read-only memory") as caught:
        ours()
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, BufferError)
    assert not ro.any()


def test_setitem_refuses_read_only_memory_and_bad_indexes():
    ro = np.zeros(3, np.float32)
    ro.flags.writeable = False
    with pytest.raises(BufferError, match=r"^__setitem__\(\): the buffer wraps read-only memory"):
        hb.Buffer.from_host(ro)[0] = 1
    b = hb.Buffer(3, "float32")
    with pytest.raises(IndexError, match="out of range"):
        b[3] = 1
    with pytest.raises(TypeError, match="only ints, slices and '...' index a Buffer"):
        b[[0, 1]] = 1
    assert not b.numpy().any() and not ro.any()
