"""The CUDA backend against the driver stand-in (tests/drivers/cuda_standin.c), on every machine.

What these tests prove is halide_buffer's own bookkeeping: residency flags, every copy counted
and made once, views and crops at the right device addresses, wrapped and lent memory kept and
freed at the right time, the CUDA array interface and DLPack as we hand them out, streams
ordered by events, driver failures turned into DeviceErrors with the data intact, two devices.
The stand-in keeps device memory on the host, checks every call strictly (a misuse fails the
test: conftest.py) and runs queued work only when something waits for it, so a missing
synchronisation reads stale bytes here. It proves nothing about CUDA itself: no kernel runs, no
GPU peer reads its memory. That is tests/test_cuda.py's part on a GPU (tests/gpu/run_checks.sh).

Every test id carries ``cuda-driver-standin``. Device memory is read and written through the
stand-in's control API, standing for a consumer or a producer's kernel.
"""

import ctypes
import gc
import re
import threading
import types
import weakref

import numpy as np
import pytest

import halide_buffer as hb

import cuda_standin as standin
from common import (ALL_DTYPES, DEVICE_DIRTY, NONE, HalideBufferT, HalideDeviceInterface, HalideDimension, Moves,
                    bits_of, down, filled, pooled_blocks, ramp, random_bits, raw_buffer, up)


@pytest.fixture(scope="module", autouse=True, params=["cuda-driver-standin"])
def driver(request):
    if not standin.active():
        pytest.skip(standin.why_inactive())
    return request.param


@pytest.fixture(autouse=True)
def no_leaked_device_memory():
    """Every allocation a test made is freed once its buffers are gone."""
    gc.collect()
    before = standin.live_allocations() - pooled_blocks()
    yield
    gc.collect()
    assert standin.live_allocations() - pooled_blocks() == before, "device memory outlived every buffer that used it"


@pytest.fixture(scope="module")
def gpu():
    """The stand-in's device 0, its pool off: these tests watch each free reach the driver
    (the pool has its own tests, test_device_pool.py)."""
    d = hb.cuda.device()
    limit = d.pool_limit
    d.pool_limit = 0
    yield d
    d.pool_limit = limit


@pytest.fixture(scope="module")
def gpu1():
    return hb.cuda.device(1)


def device_bytes(address, nbytes):
    """What device memory holds now, as a consumer would read it."""
    return np.frombuffer(standin.read(address, nbytes), np.uint8)


def interface_of(b):
    return b.__cuda_array_interface__


class Producer:
    """A foreign producer's device array in stand-in memory (what CuPy is on a GPU): it owns the
    allocation, frees it when it dies, and exposes only __cuda_array_interface__."""

    def __init__(self, values, ordinal=0, stream=None, version=3):
        self.values = np.ascontiguousarray(values)
        self.ordinal = ordinal
        self.ptr = standin.mem_alloc(max(self.values.nbytes, 1), ordinal)
        standin.write(self.ptr, self.values.tobytes())
        self.__cuda_array_interface__ = {"shape": self.values.shape, "typestr": hb.dtype(self.values.dtype).typestr,
                                         "data": (self.ptr, False), "strides": None, "version": version}
        if version >= 3:
            self.__cuda_array_interface__["stream"] = stream

    def get(self):
        return np.frombuffer(standin.read(self.ptr, self.values.nbytes), self.values.dtype).reshape(self.values.shape)

    def __del__(self):
        standin.mem_free(self.ptr, self.ordinal)


# ---------------------------------------------------------------------------------------------
# Residency and counted copies
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL_DTYPES)
def test_every_dtype_goes_up_and_comes_home_bit_for_bit_once(gpu, name):
    b, src = filled((6, 9), name, seed=21)
    moves = Moves(b)
    b.copy_to_device(gpu)
    assert moves() == up(src.nbytes) and b.device is gpu and not b.host_dirty() and not b.device_dirty()
    d = interface_of(b)
    np.testing.assert_array_equal(device_bytes(d["data"][0], src.nbytes), bits_of(src).reshape(-1))
    assert b.device_dirty() and moves() == NONE  # the interface is a write lease
    other = random_bits((6, 9), name, seed=22)
    standin.write(d["data"][0], bits_of(other).tobytes())  # a consumer's kernel writes it
    np.testing.assert_array_equal(bits_of(np.asarray(b)), bits_of(other))
    assert moves() == down(src.nbytes)
    np.asarray(b)
    assert moves() == NONE


def test_copies_are_made_once_and_only_when_needed(gpu):
    b = ramp((64, 32))
    nbytes = 64 * 32 * 4
    moves = Moves(b)
    calls = standin.calls("cuMemcpyHtoDAsync")
    b.copy_to_device(gpu)
    b.copy_to_device(gpu)
    b.copy_to_device()
    assert moves() == up(nbytes) and standin.calls("cuMemcpyHtoDAsync") == calls + 1
    b.set_device_dirty()
    b.copy_to_host()
    b.copy_to_host()
    assert moves() == down(nbytes)
    b.device_free()
    assert moves() == NONE and not b.has_device_allocation() and b.device is None
    m = ramp((16,))
    allocs = standin.calls("cuMemAlloc")
    m.device_malloc(gpu)
    assert standin.calls("cuMemAlloc") == allocs + 1 and m.host_dirty() and Moves(m)() == NONE
    m.copy_to_device()
    assert m.transfers.to_device == 1 and m.transfers.to_device_bytes == 64


def test_device_free_brings_a_newer_device_copy_home_first_and_frees(gpu):
    b = ramp((4, 64))
    b.copy_to_device(gpu)
    address = interface_of(b)["data"][0]
    standin.write(address, np.full(256, 7.5, np.float32).tobytes())
    live = standin.live_allocations()
    moves = Moves(b)
    b.device_free()
    assert moves() == down(1024) and not b.has_device_allocation()
    np.testing.assert_array_equal(np.asarray(b), np.full((4, 64), 7.5, np.float32))
    # Lent (the interface handed its pointer out): kept until the storage dies, not freed now.
    assert standin.live_allocations() == live
    del b, moves
    gc.collect()
    assert standin.live_allocations() == live - 1


def test_unlent_device_memory_is_freed_at_once(gpu):
    b = ramp((128,))
    live = standin.live_allocations()
    b.copy_to_device(gpu)
    assert standin.live_allocations() == live + 1
    b.device_free()
    assert standin.live_allocations() == live


def test_views_and_crops_are_at_their_device_addresses(gpu):
    b = ramp((8, 16))
    ref = np.arange(128, dtype=np.float32).reshape(8, 16)
    b.copy_to_device(gpu)
    base = interface_of(b)["data"][0]
    moves = Moves(b)
    v = interface_of(b[2:6, 4:12])
    assert v["data"][0] == base + (2 * 16 + 4) * 4 and v["strides"] == (64, 4) and v["shape"] == (4, 8)
    crop = b.cropped(1, 4, 8)
    assert interface_of(crop)["data"][0] == base + 16
    r = interface_of(b[::-1, ::2])
    assert r["data"][0] == base + 7 * 16 * 4 and r["strides"] == (-64, 8)
    for row in range(8):  # what the device holds, read at the view's addresses
        got = np.frombuffer(standin.read(base + row * 64, 64), np.float32)
        np.testing.assert_array_equal(got, ref[row])
    assert moves() == NONE
    standin.write(v["data"][0], np.zeros(8, np.float32).tobytes())  # a write through one view
    ref[2, 4:12] = 0
    np.testing.assert_array_equal(np.asarray(b[0]), ref[0])
    assert moves() == down(512)  # the whole storage, once, for a read of one row
    np.testing.assert_array_equal(np.asarray(b), ref)


def test_a_negative_stride_storage_uploads_its_own_values(gpu):
    src = np.arange(40, dtype=np.int16).reshape(5, 8)
    b = hb.Buffer.from_host(src.copy())[::-1, ::-1]
    b.copy_to_device(gpu)
    d = interface_of(b)
    assert d["strides"] == (-16, -2)
    # The first element of the view is the storage's last; the storage's bytes start 39 elements lower.
    np.testing.assert_array_equal(np.frombuffer(standin.read(d["data"][0] - 78, 80), np.int16), src.reshape(-1))


def test_a_strided_view_uploads_the_span_and_reads_back_exactly(gpu):
    base = np.arange(10 * 12, dtype=np.float64).reshape(10, 12)
    b = hb.Buffer.from_host(base, external_writes=False)[1:9:3, 2:11:4]
    b.copy_to_device(gpu)
    b.set_device_dirty()
    b.copy_to_host()
    np.testing.assert_array_equal(np.asarray(b), base[1:9:3, 2:11:4])


def test_fills_and_device_copies_run_on_the_device(gpu):
    b = hb.Buffer((16, 16), "int32")
    b.copy_to_device(gpu)
    sets = standin.calls("cuMemsetD32Async") + standin.calls("cuMemsetD2D32Async")
    b.fill(7)
    assert standin.calls("cuMemsetD32Async") + standin.calls("cuMemsetD2D32Async") > sets
    assert b.device_dirty() and np.asarray(b).tolist() == [[7] * 16] * 16
    c = hb.Buffer((16, 16), "int32")
    c.copy_to_device(gpu)
    d2d = standin.calls("cuMemcpyDtoDAsync") + standin.calls("cuMemcpy3DAsync")
    b.set_device_dirty()
    c.copy_from(b)
    assert standin.calls("cuMemcpyDtoDAsync") + standin.calls("cuMemcpy3DAsync") > d2d
    np.testing.assert_array_equal(np.asarray(c), np.full((16, 16), 7, np.int32))


MEMSETS = [f"cuMemset{kind}{bits}Async" for kind in ("D", "D2D") for bits in (8, 16, 32)]


def memset_calls():
    return {entry: standin.calls(entry) for entry in MEMSETS}


# dtype, two values of distinct bytes (no narrower word repeats to them), the memset word in bits.
FILL_WORDS = [("uint8", (0xA5, 0x3C), 8), ("int16", (0x0102, -0x0203), 16), ("int32", (0x01020304, -0x05060708), 32)]


@pytest.mark.parametrize("layout", ["whole", "columns"])
@pytest.mark.parametrize("name, values, bits", FILL_WORDS, ids=[w[0] for w in FILL_WORDS])
def test_a_device_fill_sets_each_element_with_one_memset_of_the_elements_width(gpu, name, values, bits, layout):
    """A fill of 1-, 2- and 4-byte elements is one cuMemsetD8/16/32 (a contiguous buffer: one row)
    or one cuMemsetD2D8/16/32 (a view of 4 of 8 columns: 8 rows 8 elements apart) of the value's
    own bytes, and leaves the other columns alone. For a 16-bit word not passed on (a zero fill
    instead), an 8-bit word taken from the wrong byte of the value, or a 2-D memset of the wrong
    width."""
    b = ramp((8, 8), name)
    b.copy_to_device(gpu)
    target = b if layout == "whole" else b[:, 2:6]
    entry = f"cuMemset{'D' if layout == 'whole' else 'D2D'}{bits}Async"
    expected = np.arange(64).astype(name).reshape(8, 8)
    for value in values:  # two values: a wrong byte of the pattern cannot match both
        moves, before = Moves(b), memset_calls()
        target.fill(value)
        after = memset_calls()
        assert {e: after[e] - before[e] for e in MEMSETS if after[e] != before[e]} == {entry: 1}
        assert b.device_dirty() and moves() == NONE  # filled where it lives: nothing crossed
        if layout == "whole":
            expected[...] = value
        else:
            expected[:, 2:6] = value
        np.testing.assert_array_equal(np.asarray(b), expected)
        assert moves() == down(64 * b.dtype.itemsize)
        b.copy_to_device()  # the next fill on a current device copy again
        moves()


def test_a_device_fill_looped_around_its_rectangles_stays_on_the_device(gpu):
    """Two of every four int32 of every other row: the rows of the memsets are the outer axis (6
    rows 144 bytes apart), and the pitch of the other axis (32 bytes) is no slice of them, so the
    fill is 5 cuMemsetD2D32 in a loop whose step is a whole number of words. For a loop step
    judged misaligned when it is a multiple of the word (the fill then went to the host: the
    device copy downloaded first)."""
    b = ramp((6, 9, 4), "int32")
    b.copy_to_device(gpu)
    target = b[:, ::2, :2]
    moves, before = Moves(b), memset_calls()
    target.fill(-0x05060708)
    after = memset_calls()
    assert {e: after[e] - before[e] for e in MEMSETS if after[e] != before[e]} == {"cuMemsetD2D32Async": 5}
    assert b.device_dirty() and moves() == NONE
    expected = np.arange(6 * 9 * 4).astype(np.int32).reshape(6, 9, 4)
    expected[:, ::2, :2] = -0x05060708
    np.testing.assert_array_equal(np.asarray(b), expected)


@pytest.mark.parametrize("reversed_side", ["destination", "source"])
def test_a_device_copy_between_reversed_rows_puts_each_row_in_its_place(gpu, reversed_side):
    """Rows in opposite orders on the two sides are one cuMemcpyDtoDAsync per row, each at its
    own offset on both sides; for a destination offset applied with the wrong sign (rows written
    past either end of the destination's memory, or on the wrong rows)."""
    src, dst = ramp((4, 8), "int32"), hb.Buffer((4, 8), "int32")
    src.copy_to_device(gpu)
    dst.copy_to_device(gpu)
    moves_src, moves_dst = Moves(src), Moves(dst)
    copies = standin.calls("cuMemcpyDtoDAsync")
    if reversed_side == "destination":
        dst[::-1].copy_from(src)
    else:
        dst.copy_from(src[::-1])
    assert standin.calls("cuMemcpyDtoDAsync") == copies + 4
    assert moves_src() == NONE and moves_dst() == NONE and dst.device_dirty()
    np.testing.assert_array_equal(np.asarray(dst), np.arange(32, dtype=np.int32).reshape(4, 8)[::-1])
    assert moves_dst() == down(128)


# ---------------------------------------------------------------------------------------------
# The CUDA array interface and DLPack, our side
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL_DTYPES)
def test_the_interface_dict_of_every_dtype(gpu, name):
    b, src = filled((4, 6), name, seed=23)
    b.copy_to_device(gpu)
    d = interface_of(b)
    assert d["shape"] == (4, 6) and d["typestr"] == hb.dtype(name).typestr and d["version"] == 3
    assert d["strides"] is None and d["stream"] == 1 and d["data"][1] is False
    np.testing.assert_array_equal(device_bytes(d["data"][0], src.nbytes), bits_of(src).reshape(-1))


@pytest.mark.parametrize("name", ALL_DTYPES)
def test_a_producers_memory_is_wrapped_and_read_back_once(gpu, name):
    src = random_bits((7, 5), name, seed=24)
    p = Producer(src)
    b = hb.cuda.wrap(p, dtype=name)
    assert b.dtype == name and b.device is gpu and b.device_dirty() and interface_of(b)["data"][0] == p.ptr
    moves = Moves(b)
    np.testing.assert_array_equal(bits_of(np.asarray(b)), bits_of(src))
    assert moves() == down(src.nbytes)
    b.numpy(writable=True)[...] = random_bits((7, 5), name, seed=25)
    b.copy_to_device()
    assert moves() == up(src.nbytes)
    np.testing.assert_array_equal(bits_of(p.get()), bits_of(random_bits((7, 5), name, seed=25)))


def test_a_wrapped_producer_lives_as_long_as_the_buffer(gpu):
    p = Producer(np.arange(64, dtype=np.float32))
    alive = weakref.ref(p)
    b = hb.cuda.wrap(p)
    del p
    gc.collect()
    assert alive() is not None  # its memory is the buffer's device copy
    np.testing.assert_array_equal(np.asarray(b), np.arange(64, dtype=np.float32))
    del b
    gc.collect()
    assert alive() is None


@pytest.mark.parametrize("name", ALL_DTYPES)
def test_dlpack_on_the_device_both_ways(gpu, name):
    b, src = filled((4, 10), name, seed=26)
    b.copy_to_device(gpu)
    assert b.__dlpack_device__() == (2, 0)
    moves = Moves(b)
    back = hb.from_dlpack(b)  # our own consumer: the same device memory, no copy
    assert moves() == NONE and back.device is gpu and back.dtype == name
    assert interface_of(back)["data"][0] == interface_of(b)["data"][0]
    np.testing.assert_array_equal(bits_of(np.asarray(back)), bits_of(src))


def test_dlpack_arguments_of_a_device_buffer(gpu):
    """__dlpack__'s rules for data on a CUDA device (interop/dlpack.cpp's plan_export()), as
    tests/test_cuda.py checks them on a GPU, and the plans carried out."""
    b = ramp((4,))
    b.copy_to_device(gpu)
    with pytest.raises(BufferError, match=r"__dlpack__\(\): stream=0 is ambiguous and disallowed by DLPack"):
        b.__dlpack__(stream=0)
    for number in (-2, 2**64, -2**64):  # negative, or beyond 64 bits either way
        with pytest.raises(BufferError, match=rf"__dlpack__\(\): stream {number} is no stream; pass None, -1"):
            b.__dlpack__(stream=number)
    for value, text in (("1", "'1'"), (True, "True"), (1.0, "1.0")):
        with pytest.raises(TypeError, match=rf"__dlpack__\(\): stream must be an int or None, not {text}"):
            b.__dlpack__(stream=value)
    with pytest.raises(BufferError, match=r"__dlpack__\(\): copy=True of data on a CUDA device is not supported"):
        b.__dlpack__(copy=True)
    with pytest.raises(BufferError, match=r"__dlpack__\(\): stream=0 is ambiguous"):  # the stream's rule first
        b.__dlpack__(copy=True, stream=0)
    with pytest.raises(BufferError, match=r"__dlpack__\(\): dl_device \(2, 1\) is not where the data is \(2, 0\)"):
        b.__dlpack__(dl_device=(2, 1))
    with pytest.raises(BufferError, match=r"__dlpack__\(\): stream must be None for data on the CPU, not 1"):
        b.__dlpack__(dl_device=(1, 0), stream=1)
    for stream in (None, -1, 1, 2):
        back = hb.from_dlpack(b.__dlpack__(stream=stream, max_version=(1, 0), dl_device=(2, 0)))
        assert back.__dlpack_device__() == (2, 0) and back.device_dirty()
        assert interface_of(back)["data"][0] == interface_of(b)["data"][0]
    # The host copy on request: a download first, then a host lease like any CPU export.
    b.set_device_dirty()
    moves = Moves(b)
    host = hb.from_dlpack(b.__dlpack__(dl_device=(1, 0), max_version=(1, 0)))
    assert moves() == down(16) and b.host_dirty() and host.__dlpack_device__() == (1, 0)
    np.testing.assert_array_equal(np.asarray(host), np.arange(4))
    copied = hb.from_dlpack(b.__dlpack__(dl_device=(1, 0), copy=True))  # writable: a legacy capsule will do
    np.testing.assert_array_equal(np.asarray(copied), np.arange(4))


@pytest.mark.parametrize("read_only", [False, True], ids=["writable", "read-only"])
def test_read_only_device_memory_becomes_no_device_copy_whichever_way_it_comes(gpu, read_only):
    """One rule (interop/cuda_interop.cpp's check_wrappable_cuda()) for someone else's CUDA memory,
    whichever protocol brings it: memory marked read-only never becomes a buffer's device copy
    (uploads write it), through the CUDA array interface (cuda.wrap) or DLPack (from_dlpack, where
    copy=True asks for its values alone); writable memory is wrapped by both."""
    src = np.arange(6, dtype=np.int32)
    src.flags.writeable = not read_only
    b = hb.Buffer.from_host(src)
    b.copy_to_device(gpu)
    routes = {"cuda.wrap": lambda: hb.cuda.wrap(types.SimpleNamespace(__cuda_array_interface__=interface_of(b))),
              "from_dlpack": lambda: hb.from_dlpack(b.__dlpack__(max_version=(1, 0)))}
    for entry, route in routes.items():
        if read_only:
            with pytest.raises(BufferError, match=rf"^{re.escape(entry)}\(\): the [a-zA-Z ]+ is read-only, and a "
                                                  r"buffer's device copy is written by uploads; "):
                route()
        else:
            wrapped = route()
            assert wrapped.device is gpu and interface_of(wrapped)["data"][0] == interface_of(b)["data"][0]
    copied = hb.from_dlpack(b.__dlpack__(max_version=(1, 0)), copy=True)
    np.testing.assert_array_equal(np.asarray(copied), src)


def test_device_wrap_native_at_an_offset_and_detach(gpu):
    p = Producer(np.arange(64, dtype=np.float32))
    b = hb.Buffer((16,), "float32")
    b.device_wrap_native(p.ptr, device=gpu, offset=8 * 4)
    assert b.device is gpu and b.device_dirty() and interface_of(b)["data"][0] == p.ptr + 32
    moves = Moves(b)
    np.testing.assert_array_equal(np.asarray(b), np.arange(8, 24))
    assert moves() == down(64)
    b.numpy(writable=True)[:] = -1
    b.copy_to_device()
    got = p.get()
    assert (got[8:24] == -1).all() and (got[:8] == np.arange(8)).all() and (got[24:] == np.arange(24, 64)).all()
    b.device_detach_native()
    assert not b.has_device_allocation() and b.device is None
    big = hb.Buffer((1 << 12,), "float32")
    with pytest.raises(ValueError, match=r"device_wrap_native\(\): the device memory holds 256 bytes, the buffer "
                                         r"needs 16384 from offset 0; wrap a larger allocation"):
        big.device_wrap_native(p.ptr, device=gpu)
    assert not big.has_device_allocation() and big.host_dirty()


def test_a_host_pointer_is_refused_as_device_memory(gpu):
    host = np.zeros(16, np.float32)
    b = hb.Buffer((16,), "float32")
    with pytest.raises(hb.DeviceError, match=r"device_wrap_native\(\): wrapping the device memory failed with "
                                             r"CUDA_ERROR_INVALID_VALUE \(1\): cuPointerGetAttribute; pass a live CUDA "
                                             r"device pointer"):
        b.device_wrap_native(host.ctypes.data, device=gpu)
    assert not b.has_device_allocation()


# ---------------------------------------------------------------------------------------------
# Streams
# ---------------------------------------------------------------------------------------------


def test_a_producers_stream_is_waited_for_before_we_read(gpu):
    stream = standin.stream_create(non_blocking=True)
    try:
        p = Producer(np.zeros(256, np.float32), stream=stream)
        standin.enqueue_write(stream, p.ptr, np.full(256, 3.0, np.float32).tobytes())  # its kernel, queued
        assert standin.pending() >= 1 and (p.get() == 0).all()  # not run yet: nobody waited
        b = hb.cuda.wrap(p)
        np.testing.assert_array_equal(np.asarray(b), np.full(256, 3.0, np.float32))
        del b, p
    finally:
        standin.stream_destroy(stream)


def test_without_its_stream_a_producers_queued_work_is_not_seen(gpu):
    # The stand-in's own check: what the test above relies on is real.
    stream = standin.stream_create(non_blocking=True)
    try:
        p = Producer(np.zeros(64, np.float32), stream=None)
        standin.enqueue_write(stream, p.ptr, np.ones(64, np.float32).tobytes())
        b = hb.cuda.wrap(p)  # version 3, stream None: "nothing to wait for"
        assert (np.asarray(b) == 0).all()
        del b
        standin.stream_synchronize(stream)
        assert (p.get() == 1).all()
        del p
    finally:
        standin.stream_destroy(stream)


def test_a_consumer_stream_waits_for_work_queued_on_ours(gpu):
    ours = standin.stream_create(non_blocking=True)
    theirs = standin.stream_create(non_blocking=True)
    try:
        dev = hb.cuda.device(stream=ours, trust_handle=True)
        b = ramp((64,))
        b.copy_to_device(dev)
        address = interface_of(b)["data"][0]
        standin.enqueue_write(ours, address, np.full(64, 9.0, np.float32).tobytes())  # a pipeline's kernel
        b.__dlpack__(stream=theirs)  # the consumer's stream waits for ours (an event)
        assert not (device_bytes(address, 256).view(np.float32) == 9).all()  # still queued
        standin.stream_synchronize(theirs)
        assert (device_bytes(address, 256).view(np.float32) == 9).all()
        del b, dev
        gc.collect()
    finally:
        standin.stream_destroy(theirs)
        standin.stream_destroy(ours)


def test_a_device_on_another_stream_takes_the_memory_over(gpu):
    stream = standin.stream_create(non_blocking=True)
    try:
        dev = hb.cuda.device(stream=stream, trust_handle=True)
        assert dev is not gpu and dev.stream == stream and dev.context == gpu.context
        b = ramp((1000,))
        b.copy_to_device(dev)
        assert interface_of(b)["stream"] == stream
        address, moves = interface_of(b)["data"][0], Moves(b)
        b.copy_to_device(gpu)
        assert b.device is gpu and interface_of(b)["data"][0] == address and moves() == NONE
        assert interface_of(b)["stream"] == 1
        del b, dev
        gc.collect()
    finally:
        standin.stream_destroy(stream)


@pytest.mark.parametrize("module, name, attribute", [("cupy.cuda.stream", "Stream", "ptr"),
                                                     ("torch.cuda.streams", "Stream", "cuda_stream"),
                                                     ("torch.cuda.streams", "ExternalStream", "cuda_stream")])
def test_a_frameworks_stream_object_gives_its_handle(gpu, module, name, attribute):
    """A CuPy or PyTorch stream object (here one of the same module and name as theirs, over a
    stand-in stream) is taken by the handle it carries, no trust_handle needed."""
    stream = standin.stream_create(non_blocking=True)
    try:
        framework_stream = type(name, (), {"__module__": module, attribute: stream})()
        dev = hb.cuda.device(stream=framework_stream)
        assert dev.stream == stream and dev.context == gpu.context
        del dev
        gc.collect()
    finally:
        standin.stream_destroy(stream)


# ---------------------------------------------------------------------------------------------
# Lifetimes: lent memory, contexts
# ---------------------------------------------------------------------------------------------


def test_lent_memory_outlives_device_free_and_dies_with_the_storage(gpu):
    b = ramp((1 << 10,))
    b.copy_to_device(gpu)
    address = interface_of(b)["data"][0]
    view = b[:]
    b.device_free()
    live = standin.live_allocations()
    assert standin.read(address, 4) == np.float32(0).tobytes()  # still readable: not freed
    del b
    gc.collect()
    assert standin.live_allocations() == live  # the view keeps the storage
    del view
    gc.collect()
    assert standin.live_allocations() == live - 1


def test_devices_retain_and_release_the_primary_context():
    refs = standin.context_refs(0)
    stream = standin.stream_create(non_blocking=True)
    try:
        dev = hb.cuda.device(stream=stream, trust_handle=True)
        assert standin.context_refs(0) == refs + 1
        del dev
        gc.collect()
        assert standin.context_refs(0) == refs
    finally:
        standin.stream_destroy(stream)


# ---------------------------------------------------------------------------------------------
# Halide's crops of our buffers, through the interface we publish
# ---------------------------------------------------------------------------------------------

INCOMPATIBLE_DEVICE_INTERFACE = -42  # halide_error_code_incompatible_device_interface


def interface_entry(raw, name, *argtypes):
    """The entry `name` of the halide_device_interface_t a published halide_buffer_t carries, as
    a Halide runtime calls it (user_context first)."""
    address = getattr(HalideDeviceInterface.from_address(raw.device_interface), name)
    return ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *argtypes)(address)


def crop_of(raw, first, extent):
    """A 1-D halide_buffer_t over `extent` elements of raw's host memory from element `first`, as
    halide_device_crop's destination (no device memory yet)."""
    dim = (HalideDimension * 1)(HalideDimension(raw.dim[0].min + first, extent, 1, 0))
    crop = HalideBufferT(host=raw.host + first * raw.type.bits // 8, type=raw.type, dimensions=1, dim=dim)
    crop._dim = dim  # kept alive with it
    return crop


def test_buffer_copy_from_a_storage_laid_out_backwards_reads_its_own_elements(gpu):
    """Our interface's buffer_copy (as a Halide runtime calls it) from a storage whose own
    strides are negative, into another device buffer: its element 0 lies 78 bytes into the
    allocation, and the source's place is counted from that element (the whole storage and a
    crop of its rows alike). For the place of the source taken as its offset plus the storage's
    instead of minus it (elements read 156 bytes off)."""
    values = np.arange(40, dtype=np.int16).reshape(5, 8)
    src = hb.Buffer.from_host(values.copy()[::-1, ::-1], external_writes=False)
    assert src.strides == (-16, -2)
    src.copy_to_device(gpu)
    src.set_device_dirty()  # the device copy is the newer one: the copy must read it there
    crop_expected = np.zeros((5, 8), np.int16)
    crop_expected[1:4] = values[::-1, ::-1][1:4]  # by coordinates: rows 1 to 3 of the storage
    for view, expected in ((src, values[::-1, ::-1]), (src[1:4], crop_expected)):
        dst = hb.Buffer((5, 8), "int16")
        dst.copy_to_device(gpu)
        raw_src = raw_buffer(view)
        raw_dst = raw_buffer(dst)
        copy = interface_entry(raw_src, "buffer_copy", ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
        assert copy(None, ctypes.addressof(raw_src), raw_dst.device_interface, ctypes.addressof(raw_dst)) == 0
        dst.set_device_dirty()  # the interface's copy leaves the flags to its caller
        np.testing.assert_array_equal(np.asarray(dst), expected)


def test_a_released_crop_has_no_device_memory_and_takes_another_crop(gpu):
    """halide_device_release_crop through our interface leaves the crop without device memory
    (device 0), as Halide's rule says: a crop whose device field stayed set would be refused as
    the destination of the next crop. For a release that only drops the interface."""
    b = ramp((64,))
    b.copy_to_device(gpu)
    raw = raw_buffer(b)
    assert raw.device != 0
    crop = interface_entry(raw, "device_crop", ctypes.c_void_p, ctypes.c_void_p)
    release = interface_entry(raw, "device_release_crop", ctypes.c_void_p)
    c = crop_of(raw, 8, 16)
    assert crop(None, ctypes.addressof(raw), ctypes.addressof(c)) == 0
    assert c.device == raw.device + 8 * 4 and c.device_interface == raw.device_interface
    assert release(None, ctypes.addressof(c)) == 0
    assert c.device == 0 and not c.device_interface
    # The same halide_buffer_t cropped again, further on.
    c.host, c.dim[0].min = raw.host + 40 * 4, 40
    assert crop(None, ctypes.addressof(raw), ctypes.addressof(c)) == 0
    assert c.device == raw.device + 40 * 4
    assert release(None, ctypes.addressof(c)) == 0 and c.device == 0
    # A crop still holding device memory is refused as a destination (what the first would be).
    held = crop_of(raw, 0, 8)
    assert crop(None, ctypes.addressof(raw), ctypes.addressof(held)) == 0
    assert crop(None, ctypes.addressof(raw), ctypes.addressof(held)) == INCOMPATIBLE_DEVICE_INTERFACE
    assert release(None, ctypes.addressof(held)) == 0


def test_a_crop_of_lent_memory_copies_from_that_memory_after_device_free(gpu):
    """device_free() of lent memory retires it: the storage lets go, and a crop Halide made of it
    before reads its own elements from it, not the storage's new allocation. For a retired
    allocation still tied to its storage: the crop's copy would move the whole storage from the
    new allocation instead (counted as 256 bytes, the lent memory's bytes never read)."""
    b = ramp((64,))
    b.copy_to_device(gpu)
    old = interface_of(b)["data"][0]  # lent: a consumer holds this pointer
    raw = raw_buffer(b)
    crop = interface_entry(raw, "device_crop", ctypes.c_void_p, ctypes.c_void_p)
    copy_to_host = interface_entry(raw, "copy_to_host", ctypes.c_void_p)
    release = interface_entry(raw, "device_release_crop", ctypes.c_void_p)
    c = crop_of(raw, 8, 16)
    assert crop(None, ctypes.addressof(raw), ctypes.addressof(c)) == 0 and c.device == old + 32
    live = standin.live_allocations()
    b.device_free()
    assert standin.live_allocations() == live  # lent: kept until the storage dies
    standin.write(old + 32, np.full(16, -1, np.float32).tobytes())  # the consumer writes it meanwhile
    b.copy_to_device(gpu)  # a new allocation for the storage, in sync with the host
    assert raw_buffer(b).device not in (0, old)
    moves = Moves(b)
    c.flags = DEVICE_DIRTY
    assert copy_to_host(None, ctypes.addressof(c)) == 0  # what halide_copy_to_host does
    assert c.flags == 0 and moves() == down(16 * 4)
    expected = np.arange(64, dtype=np.float32)
    expected[8:24] = -1
    np.testing.assert_array_equal(np.asarray(b), expected)
    assert release(None, ctypes.addressof(c)) == 0 and c.device == 0


# ---------------------------------------------------------------------------------------------
# Two devices
# ---------------------------------------------------------------------------------------------


def test_a_buffer_moves_between_two_devices_through_the_host(gpu, gpu1):
    assert gpu1.ordinal == 1 and gpu1.context != gpu.context
    b = ramp((32,))
    b.copy_to_device(gpu)
    b.set_device_dirty()
    moves = Moves(b)
    with pytest.raises(ValueError, match=r"copy_to_device\(\): the buffer's device copy is on .*CUDA device 0.*, "
                                         r"not .*CUDA device 1.*; call device_free\(\) first to move it"):
        b.copy_to_device(gpu1)
    b.device_free()  # the newer device copy comes home first
    b.copy_to_device(gpu1)
    assert b.device is gpu1 and moves() == (1, 128, 1, 128)
    np.testing.assert_array_equal(np.frombuffer(standin.read(interface_of(b)["data"][0], 128), np.float32),
                                  np.arange(32, dtype=np.float32))


def test_memory_of_the_second_device_is_wrapped_on_it(gpu, gpu1):
    p = Producer(np.arange(8, dtype=np.int32), ordinal=1)
    b = hb.cuda.wrap(p)
    assert b.device is gpu1 and b.__dlpack_device__() == (2, 1)
    np.testing.assert_array_equal(np.asarray(b), np.arange(8))
    c = hb.Buffer((8,), "int32")
    with pytest.raises(hb.DeviceError, match=r"the memory is on CUDA device 1; pass halide_buffer.cuda.device\(1\)"):
        c.device_wrap_native(p.ptr, device=gpu)
    del b


# ---------------------------------------------------------------------------------------------
# Driver failures: a DeviceError with the driver's code, the data intact, the buffer usable
# ---------------------------------------------------------------------------------------------


def test_out_of_memory_changes_nothing_and_a_later_upload_works(gpu):
    b = ramp((64,))
    moves = Moves(b)
    with standin.failing("cuMemAlloc", standin.OUT_OF_MEMORY):
        with pytest.raises(hb.DeviceError, match=r"copy_to_device\(\): allocating device memory failed with "
                                                 r"CUDA_ERROR_OUT_OF_MEMORY \(2\)") as info:
            b.copy_to_device(gpu)
    assert info.value.code == 2 and info.value.name == "CUDA_ERROR_OUT_OF_MEMORY"
    assert moves() == NONE and not b.has_device_allocation() and b.host_dirty() and b.device is None
    b.copy_to_device(gpu)
    assert moves() == up(256)


def test_a_failed_upload_keeps_the_host_copy(gpu):
    b = ramp((64,))
    moves = Moves(b)
    with standin.failing("cuMemcpyHtoDAsync", standin.ILLEGAL_ADDRESS):
        with pytest.raises(hb.DeviceError, match=r"CUDA_ERROR_ILLEGAL_ADDRESS \(700\)") as info:
            b.copy_to_device(gpu)
    assert info.value.code == 700
    assert moves() == NONE and b.host_dirty() and not b.device_dirty()
    np.testing.assert_array_equal(np.asarray(b), np.arange(64))
    b.copy_to_device(gpu)
    assert moves() == up(256) and not b.host_dirty()


def test_a_failed_download_keeps_the_device_copy_and_a_retry_works(gpu):
    b = ramp((64,))
    b.copy_to_device(gpu)
    standin.write(interface_of(b)["data"][0], np.full(64, 5, np.float32).tobytes())
    moves = Moves(b)
    for entry in ("cuMemcpyDtoHAsync", "cuStreamSynchronize"):
        with standin.failing(entry, standin.LAUNCH_FAILED, repeat=True):
            with pytest.raises(hb.DeviceError, match=r"CUDA_ERROR_LAUNCH_FAILED \(719\)"):
                b.copy_to_host()
            with pytest.raises(hb.DeviceError, match=r"CUDA_ERROR_LAUNCH_FAILED"):
                b.device_free()  # never loses the only current copy
        assert b.device_dirty() and not b.host_dirty() and b.has_device_allocation() and moves() == NONE
    np.testing.assert_array_equal(np.asarray(b), np.full(64, 5, np.float32))
    assert moves() == down(256)


def test_a_lost_context_fails_every_call_until_it_comes_back(gpu):
    b = ramp((16,))
    b.copy_to_device(gpu)
    b.set_device_dirty()
    with standin.failing("cuCtxPushCurrent", standin.LAUNCH_FAILED, repeat=True):
        for call in (b.copy_to_host, b.device_sync, lambda: np.asarray(b), b.device_free):
            with pytest.raises(hb.DeviceError, match="CUDA_ERROR_LAUNCH_FAILED"):
                call()
        assert b.device_dirty() and not b.host_dirty()
    np.testing.assert_array_equal(np.asarray(b), np.arange(16))


@pytest.mark.parametrize("entry", ["cuMemFree", "cuCtxPushCurrent"])
def test_a_failed_free_keeps_the_allocation_and_a_retry_frees_it(gpu, entry):
    b = ramp((64,))
    view = b[8:24]
    view.copy_to_device(gpu)  # nothing lent: device_free() frees at once
    live = standin.live_allocations()
    moves = Moves(b)
    with standin.failing(entry, standin.ILLEGAL_ADDRESS, repeat=True):
        with pytest.raises(hb.DeviceError, match=r"device_free\(\): freeing device memory failed with "
                                                 r"CUDA_ERROR_ILLEGAL_ADDRESS \(700\)"):
            b.device_free()
    # Nothing forgotten: the memory, the storage's record of it, and the view's handle into it.
    assert standin.live_allocations() == live and b.has_device_allocation() and view.device is gpu
    view.set_device_dirty()
    np.testing.assert_array_equal(np.asarray(view), np.arange(8, 24))  # read from the same memory
    assert moves() == down(256)
    b.device_free()
    assert standin.live_allocations() == live - 1 and not b.has_device_allocation() and b.device is None
    np.testing.assert_array_equal(np.asarray(b), np.arange(64))


# ---------------------------------------------------------------------------------------------
# A storage that leaves CUDA while an export looks it up
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("export", ["__cuda_array_interface__", "__dlpack__"])
def test_an_export_racing_a_move_to_opencl_leaks_nothing(gpu, export):
    ocl = hb.opencl.device()
    b = ramp((256,))
    b.copy_to_device(gpu)

    def move_to_opencl():
        b.device_free()
        b.copy_to_device(ocl)

    def move():  # another thread, between the export's device lookup and its lease
        t = threading.Thread(target=move_to_opencl)
        t.start()
        t.join()

    hb._core._set_after_device_lookup(move)
    try:
        with pytest.raises(BufferError, match=rf"{export}\(\): the buffer left .* meanwhile") as info:
            getattr(b, export) if export.startswith("__cuda") else b.__dlpack__()
    finally:
        hb._core._set_after_device_lookup(None)
    assert b.device is ocl
    # No lease was taken on the OpenCL memory: device_free releases its only reference.
    import pyopencl as cl

    native, _, _ = b._device_view(ocl, False, "test")
    mem = cl.MemoryObject.from_int_ptr(native, retain=False)
    refs = mem.get_info(cl.mem_info.REFERENCE_COUNT)
    assert refs == 2, refs  # the storage's own and the view just taken
    assert re.fullmatch(rf"{re.escape(export)}\(\): the buffer left {re.escape(gpu.name)} \(CUDA device 0\) meanwhile "
                        rf"\(another thread moved it to {re.escape(ocl.name)}.*\); export it again", str(info.value))


# ---------------------------------------------------------------------------------------------
# A pipeline call given __cuda_array_interface__ objects (bookkeeping on the stand-in)
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def host_affine(tmp_path_factory):
    pytest.importorskip("halide")
    from pipelines import affine_u8_func, c_compiler, compile_and_load

    func, args = affine_u8_func(False)
    return compile_and_load(tmp_path_factory.mktemp("cai_call"), c_compiler(), func, args, "hb_cai_affine")


def test_a_pipeline_call_takes_cuda_array_interface_objects_and_leaves_an_output_in_their_memory(gpu,
                                                                                              host_affine):
    """A host pipeline given a producer's device array: the input comes down once; an output
    given as one holds the result in its device memory when the call returns (one upload), and is
    what the call returns. Its old contents come down first (a host pipeline's write lease), so a
    call that fails leaves the producer's data the valid copy."""
    from pipelines import expected_affine_u8

    src = random_bits((8, 32), "uint8", seed=40)
    before = hb.transfers()
    out = np.zeros_like(src)
    assert host_affine(Producer(src), out) is out
    np.testing.assert_array_equal(out, expected_affine_u8(src))
    target = Producer(np.zeros_like(src))
    assert host_affine(src, target) is target
    np.testing.assert_array_equal(target.get(), expected_affine_u8(src))
    moved = hb.transfers() - before
    assert (moved.to_host, moved.to_host_bytes, moved.to_device, moved.to_device_bytes) == (2, 2 * src.nbytes, 1,
                                                                                             src.nbytes)
