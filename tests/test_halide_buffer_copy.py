"""Halide's own halide_buffer_copy on our buffers' halide_buffer_t's (PoCL as the device).

The function comes from the Halide runtime embedded in a real OpenCL AOT pipeline library
(built with the ``halide`` wheel for an explicit target), called through ctypes with the
addresses from ``Buffer._get_raw_halide_buffer_t()``. Halide's runtime decides the direction
from the flags and interfaces and calls our interface's buffer_copy, which copies the elements
both buffers cover (the overlap of their domains, at the same coordinates) from the source's
current copy: host to device and device to host as one transfer of exactly those bytes, device
to device without the host. The bytes between elements, and the rest of each storage, stay as
they were.

To tell a device read from a host read, some buffers get a device copy that differs from their
host memory: the test writes the wrapped array behind the buffer's back after the upload (the
buffer promised ``external_writes=False``, so it does not know) and declares the device copy
the current one.
"""

import ctypes

import numpy as np
import pytest

import halide_buffer as hb

import opencl_interposer
from common import (DEVICE_DIRTY, HOST_DIRTY, NONE, HalideBufferT, HalideDimension, Moves, bits_of, down,
                    opencl_handle, random_bits, raw_buffer, up)
from pipelines import TARGET, brighter_func, build, c_compiler

pytestmark = pytest.mark.needs_halide

DTYPES = ["float32", "uint8", "bfloat16", "int4"]


class Runtime:
    """halide_buffer_copy of one pipeline library's runtime, with the errors it reports."""

    def __init__(self, pipeline):
        self.pipeline = pipeline
        self.fn = pipeline.lib.halide_buffer_copy
        self.fn.argtypes = [ctypes.c_void_p] * 4
        self.fn.restype = ctypes.c_int

    def copy(self, src, dst, to_device):
        """halide_buffer_copy(NULL, src, dst's interface (to_device) or NULL, dst): the return
        code, dst's flags as Halide left them in its halide_buffer_t, and Halide's errors."""
        del self.pipeline.errors[:]
        raw_dst = raw_buffer(dst)
        interface = raw_dst.device_interface if to_device else None
        assert interface or not to_device, "the destination must be on the device already"
        rc = self.fn(None, src._get_raw_halide_buffer_t(), interface, ctypes.addressof(raw_dst))
        return rc, raw_dst.flags, list(self.pipeline.errors)


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    hb.opencl.device()  # opens the OpenCL loader process-wide, where the pipeline's runtime looks
    directory = tmp_path_factory.mktemp("halide_buffer_copy")
    return build(directory, c_compiler(), *brighter_func(), "hb_test_buffer_copy", target=TARGET + "-opencl")


@pytest.fixture(scope="module")
def runtime(pipeline):
    return Runtime(pipeline)


def common(src, dst):
    """The NumPy index of src's and of dst's elements at the coordinates both cover."""
    src_index, dst_index = [], []
    for smin, sext, dmin, dext in zip(src.mins, src.shape, dst.mins, dst.shape):
        lo, hi = max(smin, dmin), max(min(smin + sext, dmin + dext), max(smin, dmin))
        src_index.append(slice(lo - smin, hi - smin))
        dst_index.append(slice(lo - dmin, hi - dmin))
    return tuple(src_index), tuple(dst_index)


def box_bytes(src, dst):
    _, index = common(src, dst)
    return int(np.prod([s.stop - s.start for s in index])) * dst.itemsize


def in_sync(array):
    """A buffer over `array`, uploaded to the default OpenCL device: both copies current."""
    b = hb.Buffer.from_host(array, external_writes=False)
    b.copy_to_device()
    return b


def device_newer(array, device_values, host_values):
    """A buffer over `array` whose current copy is its device copy, holding `device_values`;
    the host memory holds `host_values`, stale, written behind the buffer's back."""
    array[...] = device_values
    b = in_sync(array)
    array[...] = host_values
    b.set_device_dirty(True)
    return b


@pytest.mark.parametrize("dtype", DTYPES)
def test_host_to_device_writes_the_common_box_and_moves_its_bytes_only(runtime, dtype):
    src_values = random_bits((9, 11), dtype, seed=1)
    dst_values = random_bits((10, 12), dtype, seed=2)
    parent = in_sync(dst_values.copy())
    # src covers rows [2, 8) and columns [1, 9); dst rows [4, 9) and columns [3, 12).
    src = hb.Buffer.from_host(src_values.copy(), external_writes=False).cropped(0, 2, 6).cropped(1, 1, 8)
    dst = parent.cropped(0, 4, 5).cropped(1, 3, 9)
    assert src.mins == (2, 1) and dst.mins == (4, 3) and not src.has_device_allocation()
    moves, totals = Moves(parent), Moves()
    rc, flags, errors = runtime.copy(src, dst, to_device=True)
    assert (rc, errors) == (0, [])
    assert flags == DEVICE_DIRTY  # Halide's: the destination's device copy is the newer one
    nbytes = box_bytes(src, dst)
    assert nbytes == 4 * 6 * parent.itemsize
    assert moves() == up(nbytes) and totals() == up(nbytes)  # the box, not the storage
    assert parent.device_dirty() and not parent.host_dirty()
    expected = dst_values.copy()
    src_index, dst_index = common(src, dst)
    expected[4:, 3:][dst_index] = src_values[2:8, 1:9][src_index]
    assert np.array_equal(bits_of(np.asarray(parent)), bits_of(expected))
    assert moves() == down(parent.nbytes)


@pytest.mark.parametrize("dtype", DTYPES)
def test_device_to_host_reads_the_common_box_from_the_device(runtime, dtype):
    on_device = random_bits((8, 10), dtype, seed=3)
    stale = random_bits((8, 10), dtype, seed=4)
    src_parent = device_newer(np.empty_like(on_device), on_device, stale)
    src = src_parent.cropped(0, 1, 6)  # rows [1, 7)
    dst_values = random_bits((5, 10), dtype, seed=5)
    dst = hb.Buffer.from_host(dst_values.copy(), external_writes=False).cropped(0, 0, 5)
    dst = dst[:, 2:]  # rows [0, 5), columns [2, 10)
    moves, totals = Moves(src_parent), Moves()
    rc, flags, errors = runtime.copy(src, dst, to_device=False)
    assert (rc, errors) == (0, [])
    assert flags & HOST_DIRTY and not flags & DEVICE_DIRTY
    nbytes = box_bytes(src, dst)
    assert nbytes == 4 * 8 * src.itemsize
    assert moves() == down(nbytes) and totals() == down(nbytes)
    assert src_parent.device_dirty()  # the source's storage did not come home
    expected = dst_values.copy()
    expected[1:5, 2:] = on_device[1:5, 2:]
    assert np.array_equal(bits_of(np.asarray(dst)), bits_of(expected[:, 2:]))
    assert totals() == NONE  # the destination is host memory only


@pytest.mark.parametrize("dtype", DTYPES)
def test_device_to_device_moves_nothing_through_the_host(runtime, dtype):
    on_device = random_bits((7, 9), dtype, seed=6)
    src_parent = device_newer(np.empty_like(on_device), on_device, random_bits((7, 9), dtype, seed=7))
    dst_host = random_bits((9, 9), dtype, seed=8)
    dst_parent = in_sync(dst_host)
    # Partial overlap: src rows [0, 7), dst rows [3, 9); columns shifted the other way.
    src = src_parent[:, 2:]
    dst = dst_parent.cropped(0, 3, 6)[:, :6]
    src_moves, dst_moves, totals = Moves(src_parent), Moves(dst_parent), Moves()
    before = dst_host.copy()
    rc, flags, errors = runtime.copy(src, dst, to_device=True)
    assert (rc, errors, flags) == (0, [], DEVICE_DIRTY)
    assert src_moves() == NONE and dst_moves() == NONE and totals() == NONE
    assert np.array_equal(bits_of(dst_host), bits_of(before))  # the host copy was not touched
    expected = before.copy()
    expected[3:7, 2:6] = on_device[3:7, 2:6]
    assert np.array_equal(bits_of(np.asarray(dst_parent)), bits_of(expected))
    assert dst_moves() == down(dst_parent.nbytes)


@pytest.mark.parametrize("source", ["device newer", "in sync"])
def test_device_to_device_between_two_contexts_goes_through_the_host(runtime, source):
    """Device memories that cannot copy into each other (another context of the same device): the
    box goes from the source's current copy, its host copy where that is current (nothing of the
    source's moves), else its device copy (read into host memory, counted for the source), into
    the destination's device copy."""
    import pyopencl as cl

    other = hb.opencl.device(cl.Context([cl.Context.from_int_ptr(hb.opencl.device().context).devices[0]]))
    values = random_bits((6, 8), "float32", seed=30)
    if source == "in sync":
        src = in_sync(values.copy())
    else:
        src = device_newer(np.empty_like(values), values, random_bits((6, 8), "float32", seed=31))
    dst = hb.Buffer.from_host(random_bits((6, 8), "float32", seed=32), external_writes=False)
    dst.copy_to_device(other)
    moves = Moves(src)
    rc, flags, errors = runtime.copy(src, dst, to_device=True)
    assert (rc, errors, flags) == (0, [], DEVICE_DIRTY)
    assert moves() == (NONE if source == "in sync" else down(values.nbytes))
    assert dst.device is other
    assert np.array_equal(bits_of(hb.opencl.as_array(dst, writable=False).get()), bits_of(values))


def test_device_to_device_through_reversed_and_transposed_views(runtime):
    on_device = random_bits((6, 8), "float32", seed=9)
    src_parent = device_newer(np.empty_like(on_device), on_device, np.zeros((6, 8), np.float32))
    dst_parent = in_sync(np.zeros((8, 6), np.float32))
    totals = Moves()
    # dst[i, j] = src.T[i, j] = on_device[j, i], read backwards along the rows of src.
    rc, flags, errors = runtime.copy(src_parent[::-1].transposed(1, 0), dst_parent[:, ::-1], to_device=True)
    assert (rc, errors, flags) == (0, [], DEVICE_DIRTY)
    assert totals() == NONE
    np.testing.assert_array_equal(np.asarray(dst_parent)[:, ::-1], on_device[::-1].T)
    # A strided, reversed crop into a transposed one: every other column only.
    dst2 = in_sync(np.full((8, 6), -1, np.float32))
    totals = Moves()
    rc, flags, errors = runtime.copy(src_parent[::-1, ::2].transposed(1, 0), dst2.transposed(1, 0)[:, ::2].transposed(1, 0),
                                     to_device=True)
    assert (rc, errors) == (0, [])
    assert totals() == NONE
    expected = np.full((8, 6), -1, np.float32)
    expected[::2] = on_device[::-1, ::2].T
    np.testing.assert_array_equal(np.asarray(dst2), expected)


def test_host_to_device_from_reversed_and_transposed_host_views(runtime):
    values = np.arange(48, dtype=np.uint8).reshape(6, 8)
    src = hb.Buffer.from_host(values.copy(), external_writes=False)[::-1, ::-1].transposed(1, 0)
    dst_parent = in_sync(np.zeros((8, 6), np.uint8))
    moves = Moves(dst_parent)
    rc, flags, errors = runtime.copy(src, dst_parent, to_device=True)
    assert (rc, errors, flags) == (0, [], DEVICE_DIRTY)
    assert moves() == up(48)  # one write of the elements, gathered on the host
    np.testing.assert_array_equal(np.asarray(dst_parent), values[::-1, ::-1].T)


def test_a_storage_copied_onto_itself_reversed_goes_through_the_host(runtime):
    values = np.arange(10, dtype=np.int32)
    b = in_sync(values.copy())
    moves = Moves(b)
    # The same coordinates of b[::-1] and b are mirrored elements of one cl_mem: the device
    # cannot copy overlapping rectangles, so the elements are read, then written back.
    rc, flags, errors = runtime.copy(b[::-1], b, to_device=True)
    assert (rc, errors, flags) == (0, [], DEVICE_DIRTY)
    assert moves() == (1, 40, 1, 40)
    np.testing.assert_array_equal(np.asarray(b), values[::-1])


def test_a_destination_whose_device_copy_is_stale_gets_the_box_on_the_host_then_goes_up_whole(runtime):
    """One state covers a storage: writing the box into a device copy that the host copy has
    overtaken, then calling it newer, would bring the stale rest home later. The box goes into
    the host copy instead, and the storage goes up whole."""
    on_device = random_bits((6, 6), "float32", seed=10)
    src = device_newer(np.empty_like(on_device), on_device, np.zeros((6, 6), np.float32))
    dst_parent = in_sync(np.zeros((8, 8), np.float32))
    host = dst_parent.numpy(writable=True)
    host[...] = 7  # newer than the device copy (zeros)
    assert dst_parent.host_dirty()
    dst = dst_parent[1:7, 1:7]
    src_moves, dst_moves = Moves(src), Moves(dst_parent)
    rc, flags, errors = runtime.copy(src, dst, to_device=True)
    assert (rc, errors, flags) == (0, [], DEVICE_DIRTY)
    box = box_bytes(src, dst)
    assert box == 5 * 5 * 4
    assert src_moves() == down(box)  # the source's box, read from its device copy
    assert dst_moves() == up(dst_parent.nbytes)  # the whole destination storage, once
    expected = np.full((8, 8), 7, np.float32)
    expected[1:6, 1:6] = on_device[1:6, 1:6]
    np.testing.assert_array_equal(np.asarray(dst_parent), expected)
    assert dst_moves() == down(dst_parent.nbytes)


def test_a_destination_whose_host_copy_is_stale_comes_home_before_a_copy_to_its_host(runtime):
    """Halide calls the destination's host copy the newer one after a copy to the host: a
    destination whose device copy was newer comes home first, so that the rest of it is kept."""
    on_device = random_bits((6, 6), "uint8", seed=11)
    src = device_newer(np.empty_like(on_device), on_device, np.zeros((6, 6), np.uint8))
    dst_device = np.full((8, 8), 5, np.uint8)
    dst_parent = device_newer(np.empty_like(dst_device), dst_device, np.zeros((8, 8), np.uint8))
    dst = dst_parent[2:, 2:]
    src_moves, dst_moves = Moves(src), Moves(dst_parent)
    rc, flags, errors = runtime.copy(src, dst, to_device=False)
    assert (rc, errors) == (0, [])
    assert flags & HOST_DIRTY and not flags & DEVICE_DIRTY
    assert src_moves() == down(4 * 4) and dst_moves() == down(64)
    assert dst_parent.host_dirty() and not dst_parent.device_dirty()
    expected = dst_device.copy()
    expected[2:6, 2:6] = on_device[2:6, 2:6]
    np.testing.assert_array_equal(np.asarray(dst_parent), expected)
    assert dst_moves() == NONE


def test_a_source_on_another_runtimes_device_is_refused_and_halide_goes_through_the_host(runtime, pipeline):
    """The pipeline's own runtime allocated the source's device copy (a foreign allocation):
    our interface answers -42 and Halide's runtime reads it into the destination's host copy
    itself, then uploads that through our interface."""
    inp = hb.Buffer.from_host(np.arange(64, dtype=np.uint8).reshape(8, 8), external_writes=False)
    out = hb.Buffer((8, 8), "uint8")
    pipeline.run(inp, out)
    assert out.device_dirty() and out.device is None  # another runtime's memory
    dst_parent = in_sync(np.zeros((8, 8), np.uint8))
    out_moves, dst_moves = Moves(out), Moves(dst_parent)
    rc, flags, errors = runtime.copy(out, dst_parent, to_device=True)
    assert (rc, errors, flags) == (0, [], DEVICE_DIRTY)
    assert out_moves() == NONE  # read by its own runtime, invisible to us
    assert dst_moves() == up(64)  # Halide's upload of the destination's host copy
    np.testing.assert_array_equal(np.asarray(dst_parent), np.arange(64, dtype=np.uint8).reshape(8, 8) + 10)


def test_copy_from_a_runtimes_device_copy_into_our_current_device_copy_brings_it_home_first(pipeline):
    """The pipeline's own runtime holds the source's newer copy (a foreign allocation, reached
    only through its runtime, whole): copy_from into a buffer whose device copy is current brings
    the source home, then writes the common box up from its host copy. For a box written up from
    the source's stale host memory."""
    values = np.arange(64, dtype=np.uint8).reshape(8, 8)
    out = hb.Buffer((8, 8), "uint8")
    pipeline.run(hb.Buffer.from_host(values, external_writes=False), out)
    assert out.device_dirty() and out.device is None  # another runtime's memory
    dst_parent = in_sync(np.zeros((8, 8), np.uint8))
    dst_moves = Moves(dst_parent)
    dst_parent.cropped(0, 2, 4).copy_from(out)  # rows [2, 6)
    assert dst_moves() == up(4 * 8)
    assert dst_parent.device_dirty() and not out.device_dirty()  # the source came home
    expected = np.zeros((8, 8), np.uint8)
    expected[2:6] = values[2:6] + 10
    np.testing.assert_array_equal(np.asarray(dst_parent), expected)
    np.testing.assert_array_equal(np.asarray(out), values + 10)


def test_copy_from_takes_in_the_flags_halide_left_in_both_buffers(runtime):
    """halide_buffer_copy leaves its flags in the halide_buffer_t's it is given (ours, published):
    the source's device copy written (device dirty), the destination's host copy written (host
    dirty). copy_from takes in both storages' published flags before it decides where to read and
    write: the box comes from the source's device copy into the destination's host copy. For an
    operation on two storages that takes in (and republishes) only one of them."""
    on_device = random_bits((6, 6), "float32", seed=20)
    on_host = random_bits((6, 6), "float32", seed=21)
    src = in_sync(np.zeros((6, 6), np.float32))
    rc, flags, errors = runtime.copy(hb.Buffer.from_host(on_device.copy()), src, to_device=True)
    assert (rc, errors, flags) == (0, [], DEVICE_DIRTY)
    dst = in_sync(np.zeros((6, 6), np.float32))
    rc, flags, errors = runtime.copy(hb.Buffer.from_host(on_host.copy()), dst, to_device=False)
    assert (rc, errors) == (0, []) and flags & HOST_DIRTY
    src_moves, dst_moves = Moves(src), Moves(dst)
    dst.copy_from(src.cropped(0, 1, 3).cropped(1, 2, 3))  # rows [1, 4), columns [2, 5)
    assert src_moves() == down(3 * 3 * 4) and dst_moves() == NONE
    assert src.device_dirty() and dst.host_dirty() and not dst.device_dirty()
    expected = on_host.copy()
    expected[1:4, 2:5] = on_device[1:4, 2:5]
    assert np.array_equal(bits_of(np.asarray(dst)), bits_of(expected))
    assert dst_moves() == NONE
    assert np.array_equal(bits_of(np.asarray(src)), bits_of(on_device))


def test_a_copy_between_two_parts_of_one_device_allocation_is_one_rectangle_per_outer_element(runtime):
    """Within one cl_mem, clEnqueueCopyBufferRect needs the same pitches on both sides. Here the
    rows of 2 elements repeat along three axes, A (16 bytes apart on both sides), B (64 on both)
    and C (128 bytes apart in the source, 256 in the destination), 2 each: the rectangles of A's
    rows in B's slices (the first pair of the most elements, in the order of the source's
    pitches) have the same pitches on both sides, so the copy is one rectangle per element of C,
    2 commands. For a later pair of as many elements taken instead (B's rows in C's slices, whose
    slice pitches differ: a command per row, 8)."""
    if not opencl_interposer.active():
        pytest.skip(opencl_interposer.reason())
    values = random_bits((8, 4, 2, 4), "float32", seed=22)
    parent = in_sync(values.copy())
    src, dst = parent[0:2, ::2, :, :2], parent[2:6:2, ::2, :, :2]  # disjoint bytes of one storage
    assert src.mins == dst.mins == (0, 0, 0, 0) and src.shape == dst.shape == (2, 2, 2, 2)
    totals, before = Moves(), opencl_interposer.counts()
    rc, flags, errors = runtime.copy(src, dst, to_device=True)
    assert (rc, errors, flags) == (0, [], DEVICE_DIRTY)
    assert opencl_interposer.counts()["copies"] - before["copies"] == 2
    assert totals() == NONE
    expected = values.copy()
    expected[2:6:2, ::2, :, :2] = values[0:2, ::2, :, :2]
    assert np.array_equal(bits_of(np.asarray(parent)), bits_of(expected))


def test_a_copy_between_parts_of_one_device_allocation_with_other_row_pitches_goes_row_by_row(runtime):
    """Within one cl_mem, rows 32 bytes apart in the source and 64 in the destination, in slices
    256 bytes apart on both sides: the pitches differ, so each row is a command of its own."""
    values = random_bits((4, 8, 8), "float32", seed=23)
    parent = in_sync(values.copy())
    src, dst = parent[0:2, 0:3, 0:4], parent[2:4, 0:6:2, 4:8]  # disjoint bytes of one storage
    dst = dst.translated([s - d for s, d in zip(src.mins, dst.mins)])
    assert src.mins == dst.mins and src.shape == dst.shape == (2, 3, 4)
    before = opencl_interposer.counts() if opencl_interposer.active() else None
    rc, flags, errors = runtime.copy(src, dst, to_device=True)
    assert (rc, errors, flags) == (0, [], DEVICE_DIRTY)
    if before is not None:
        assert opencl_interposer.counts()["copies"] - before["copies"] == 6
    expected = values.copy()
    expected[2:4, 0:6:2, 4:8] = values[0:2, 0:3, 0:4]
    assert np.array_equal(bits_of(np.asarray(parent)), bits_of(expected))


def test_no_common_coordinates_copy_nothing(runtime):
    src = in_sync(np.ones((4, 4), np.float32))
    dst = in_sync(np.zeros((8, 4), np.float32))
    totals = Moves()
    rc, flags, errors = runtime.copy(src, dst.cropped(0, 4, 4), to_device=True)
    assert (rc, errors) == (0, [])
    assert totals() == NONE
    np.testing.assert_array_equal(np.asarray(dst), np.zeros((8, 4), np.float32))


@pytest.mark.parametrize(
    "dst_shape, dst_dtype, code",
    [((4, 4, 1), "float32", -43), ((4, 4), "int32", 0), ((4, 4), "uint16", -3)],
    ids=["dimensions", "same-size-type", "element-size"],
)
def test_mismatched_buffers_are_halide_errors(runtime, dst_shape, dst_dtype, code):
    src = in_sync(np.ones((4, 4), np.float32))
    dst = in_sync(np.zeros(dst_shape, dst_dtype))
    rc, _, errors = runtime.copy(src, dst, to_device=True)
    assert rc == code
    assert (errors != []) == (code != 0)
    if code == 0:  # Halide copies bits between types of one size
        np.testing.assert_array_equal(np.asarray(dst), np.ones((4, 4), np.float32).view(np.int32))


def halide_entry(pipeline, name, *argtypes):
    fn = pipeline.lib[name]
    fn.argtypes, fn.restype = [ctypes.c_void_p, *argtypes], ctypes.c_int
    return fn


def halide_buffer_like(src, host_offset, dims):
    """A halide_buffer_t of src's type over src's host memory `host_offset` bytes on, with `dims`
    ((min, extent, stride) per Halide dimension); the caller keeps the result alive."""
    dim = (HalideDimension * len(dims))(*(HalideDimension(*d, 0) for d in dims))
    dst = HalideBufferT(host=src.host + host_offset, type=src.type, dimensions=len(dims), dim=dim)
    return dst, dim


def test_halide_device_crop_and_slice_point_at_their_first_element(pipeline):
    # Halide's halide_device_crop and halide_device_slice on our OpenCL buffer: the new handle is
    # the source's, moved on by the bytes to the crop's (or slice's) first element.
    crop = halide_entry(pipeline, "halide_device_crop", ctypes.c_void_p, ctypes.c_void_p)
    slice_ = halide_entry(pipeline, "halide_device_slice", ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                          ctypes.c_void_p)
    release = halide_entry(pipeline, "halide_device_release_crop", ctypes.c_void_p)
    b = hb.Buffer((6, 8), dtype="float32").translated(0, 10)  # y from 10: crops count from the mins
    b.copy_to_device()
    src = raw_buffer(b)
    offset, memory = opencl_handle(src)
    # x from 2, 5 wide; y from 11, 4 tall: the first element is row 1, column 2.
    dst, dims = halide_buffer_like(src, (1 * 8 + 2) * 4, [(2, 5, 1), (11, 4, 8)])
    assert crop(None, ctypes.addressof(src), ctypes.addressof(dst)) == 0
    assert opencl_handle(dst) == (offset + (1 * 8 + 2) * 4, memory)
    assert release(None, ctypes.addressof(dst)) == 0 and dst.device == 0
    # Row y = 13 (the fourth) as a 1-D buffer.
    row, dims = halide_buffer_like(src, 3 * 8 * 4, [(0, 8, 1)])
    assert slice_(None, ctypes.addressof(src), 1, 13, ctypes.addressof(row)) == 0
    assert opencl_handle(row) == (offset + 3 * 8 * 4, memory)
    assert release(None, ctypes.addressof(row)) == 0 and row.device == 0
