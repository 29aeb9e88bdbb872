"""The residency rules of docs/devices.md on a real OpenCL device (PoCL on a CPU-only machine):
one test per row of the residency table, each asserting the data and the exact copies made."""

import ctypes
import gc
import threading
import time

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pyopencl.tools  # noqa: F401  (cl.tools: memory pools)
import pytest

import halide_buffer as hb

import opencl_interposer
from buffer_protocol import PyBUF_FORMAT, PyBUF_STRIDES, PyBUF_WRITABLE, release, request
from common import (DEVICE_DIRTY, HOST_DIRTY, NONE, HalideBufferT, HalideDeviceInterface, Moves, down, on_device,
                    opencl_handle, ramp, raw_buffer, up)


def device_fill(b, value, *, writable=True):
    """Writes `value` into every element of b on the device, through the shared cl_mem."""
    a = hb.opencl.as_array(b, writable=writable)
    a.fill(value)
    a.queue.finish()


# --- construct from host data / write through a host view: host_dirty -------------------------

def test_construction_and_host_writes_mark_the_host_dirty(dev):
    b = ramp((4, 8))
    assert b.host_dirty() and not b.device_dirty() and not b.has_device_allocation()
    moves = Moves(b)
    b.copy_to_device()
    assert moves() == up(128) and not b.host_dirty()
    b.numpy(writable=True)[1, 2] = -1  # a write through a host view
    assert b.host_dirty() and moves() == NONE
    b.copy_to_device()
    assert moves() == up(128)
    assert on_device(b)[1, 2] == -1


# --- copy_to_host(): download only when device_dirty -------------------------------------------

def test_copy_to_host_downloads_only_a_newer_device_copy(dev):
    b = ramp((16,))
    b.copy_to_device()
    moves = Moves(b)
    b.copy_to_host()
    assert moves() == NONE  # both current: nothing to do
    device_fill(b, 7)
    assert b.device_dirty() and moves() == NONE
    b.copy_to_host()
    assert moves() == down(64) and not b.device_dirty() and not b.host_dirty()
    b.copy_to_host()
    assert moves() == NONE
    np.testing.assert_array_equal(np.asarray(b), np.full(16, 7, np.float32))


# --- copy_to_device(dev): allocate if needed, upload if host_dirty (or new and host has data) ----

def test_copy_to_device_allocates_then_uploads_only_when_the_host_is_newer(dev):
    b = ramp((3, 5), "int32")
    moves = Moves(b)
    b.copy_to_device(dev)
    assert b.has_device_allocation() and b.device is dev
    assert moves() == up(60)
    b.copy_to_device(dev)
    b.copy_to_device()
    assert moves() == NONE
    np.testing.assert_array_equal(on_device(b), np.arange(15).reshape(3, 5))


def test_a_new_device_copy_is_filled_from_the_host_even_when_the_host_is_not_dirty(dev):
    b = ramp((8,))
    b.copy_to_device()
    b.device_free()  # the host holds the only copy now, and it is not dirty
    assert not b.host_dirty() and not b.device_dirty()
    moves = Moves(b)
    b.copy_to_device()
    assert moves() == up(32)
    np.testing.assert_array_equal(on_device(b), np.arange(8))


def test_device_malloc_allocates_without_copying_and_the_next_upload_fills_it(dev):
    b = ramp((8,))
    moves = Moves(b)
    b.device_malloc()
    assert b.has_device_allocation() and b.host_dirty() and moves() == NONE
    b.copy_to_device()
    assert moves() == up(32)


# --- read-only host exports: copy_to_host() first, no flag change ------------------------------

@pytest.mark.parametrize("export", [
    pytest.param(lambda b: np.asarray(memoryview(b)).copy(), id="memoryview"),
    pytest.param(lambda b: np.asarray(b).copy(), id="__array__"),
    pytest.param(lambda b: b.numpy().copy(), id="numpy()"),
])
def test_read_only_host_exports_download_once_and_change_no_flag(dev, export):
    b = ramp((4, 4))
    b.copy_to_device()
    device_fill(b, 3)
    moves = Moves(b)
    first = export(b)
    assert moves() == down(64)
    assert not b.host_dirty() and not b.device_dirty()
    second = export(b)
    assert moves() == NONE
    np.testing.assert_array_equal(first, np.full((4, 4), 3, np.float32))
    np.testing.assert_array_equal(second, first)


def test_a_read_only_ndarray_cannot_be_written():
    b = ramp((4,))
    with pytest.raises(ValueError, match="read-only"):
        np.asarray(b)[0] = 1


# --- writable host exports: copy_to_host(), then host_dirty ------------------------------------

def writable_buffer_request(b):
    """A PyBUF_WRITABLE buffer-protocol export as an ndarray, and its release."""
    view = request(b, PyBUF_WRITABLE | PyBUF_STRIDES | PyBUF_FORMAT)
    return np.ctypeslib.as_array((ctypes.c_float * b.size).from_address(view.buf)), lambda: release(view)


@pytest.mark.parametrize("export", [
    pytest.param(lambda b: (b.numpy(writable=True), lambda: None), id="numpy(writable=True)"),
    pytest.param(writable_buffer_request, id="PyBUF_WRITABLE"),
])
def test_writable_host_exports_download_then_mark_the_host_dirty(dev, export):
    b = ramp((8,))
    b.copy_to_device()
    device_fill(b, 5)
    moves = Moves(b)
    view, done = export(b)
    assert moves() == down(32)
    assert b.host_dirty() and not b.device_dirty()
    np.testing.assert_array_equal(view, np.full(8, 5, np.float32))
    view[0] = 42  # the consumer writes: the lease said it might
    done()
    b.copy_to_device()
    assert moves() == up(32)
    assert on_device(b)[0] == 42


# --- device exports: copy_to_device(), then device_dirty unless read-only ----------------------

def test_a_device_export_uploads_then_marks_the_device_dirty(dev):
    b = ramp((8,))
    moves = Moves(b)
    a = hb.opencl.as_array(b)
    assert moves() == up(32)
    assert b.device_dirty() and not b.host_dirty()
    assert a.shape == (8,) and a.dtype == np.float32
    assert a.base_data.int_ptr == hb.opencl.as_array(b).base_data.int_ptr  # one cl_mem
    a *= 2
    np.testing.assert_array_equal(np.asarray(b), 2 * np.arange(8))
    assert moves() == down(32)


def test_a_read_only_device_export_leaves_the_host_current(dev):
    b = ramp((8,))
    hb.opencl.as_array(b, writable=False)
    assert not b.device_dirty() and not b.host_dirty()
    moves = Moves(b)
    np.asarray(b)
    assert moves() == NONE


def test_read_only_memory_goes_to_the_device_for_reading_only(dev, ctx):
    src = np.arange(6, dtype=np.int32)
    src.flags.writeable = False
    b = hb.Buffer.from_host(src)
    moves = Moves(b)
    a = hb.opencl.as_array(b, writable=False)
    assert moves() == up(24) and not b.device_dirty()
    np.testing.assert_array_equal(a.get(), src)
    # Nothing may make the device copy the newer one: it could never be written back.
    with pytest.raises(BufferError, match=r"opencl.as_array\(\): the buffer wraps read-only memory; "
                                          r"pass writable=False"):
        hb.opencl.as_array(b)
    with pytest.raises(ValueError, match=r"set_device_dirty\(\): the buffer wraps read-only memory"):
        b.set_device_dirty()
    b.device_free()
    with pytest.raises(ValueError, match=r"device_wrap_native\(\): the buffer wraps read-only memory"):
        b.device_wrap_native(cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 24))
    assert not b.device_dirty() and not b.has_device_allocation()


# --- borrowed writable memory: external writes unless promised otherwise ----------------------

def test_wrapped_writable_memory_is_uploaded_before_every_device_use(dev):
    a = np.arange(4, dtype=np.float32)
    b = hb.Buffer.from_host(a)
    moves = Moves(b)
    b.copy_to_device()
    assert moves() == up(16)
    a[0] = 100  # the owner writes behind our back: external writes cover it
    b.copy_to_device()
    assert moves() == up(16)
    assert on_device(b)[0] == 100


def test_a_promise_of_no_external_writes_ends_the_standing_lease(dev):
    a = np.arange(4, dtype=np.float32)
    b = hb.Buffer.from_host(a, external_writes=False)
    moves = Moves(b)
    b.copy_to_device()
    b.copy_to_device()
    assert moves() == up(16)


def test_a_claim_that_the_device_is_newer_is_refused_over_a_standing_lease(dev):
    a = np.zeros(4, dtype=np.float32)
    b = hb.Buffer.from_host(a)
    b.copy_to_device()
    a[:] = 5  # the owner writes after the upload: the host copy is the newer one
    moves = Moves(b)
    with pytest.raises(ValueError, match=r"^set_device_dirty\(\): the buffer wraps memory its owner may "
                                         r"write at any time, so the host copy counts as newer; .*"
                                         r"external_writes=False"):
        b.set_device_dirty(True)
    assert b.host_dirty() and not b.device_dirty()
    assert np.asarray(b).tolist() == [5, 5, 5, 5] and a.tolist() == [5, 5, 5, 5]
    assert moves() == NONE
    promised = hb.Buffer.from_host(np.zeros(4, np.float32), external_writes=False)
    promised.copy_to_device()
    promised.set_device_dirty(True)  # the promise makes the claim the caller's to make
    assert promised.device_dirty()
    device_fill(b, 7)  # a device lease is the way to write there: the device copy is newer
    b.set_device_dirty(True)  # and saying so again is no mistake
    assert np.asarray(b).tolist() == [7, 7, 7, 7]


def test_wrapping_device_memory_over_a_standing_lease_is_refused(dev):
    a = np.arange(4, dtype=np.float32)
    b = hb.Buffer.from_host(a)
    mem = cl.Buffer(cl.Context.from_int_ptr(dev.context), cl.mem_flags.READ_WRITE, 16)
    with pytest.raises(ValueError, match=r"^device_wrap_native\(\): the buffer wraps host memory its owner "
                                         r"may write at any time, .*external_writes=False"):
        b.device_wrap_native(mem)
    assert not b.has_device_allocation() and np.asarray(b).tolist() == [0, 1, 2, 3]
    promised = hb.Buffer.from_host(a, external_writes=False)
    promised.device_wrap_native(mem)  # promised: the device data supersedes the host's, as asked
    assert promised.device_dirty()
    promised.device_detach_native()


def test_a_refused_array_conversion_downloads_nothing(dev):
    b = hb.Buffer((4,), "float32")
    device_fill(b, 3)
    moves = Moves(b)
    with pytest.raises(ValueError, match=r"^__array__\(\): converting float32 to int8 needs a copy"):
        b.__array__(dtype=np.int8, copy=False)
    assert moves() == NONE and b.device_dirty() and not b.host_dirty()
    assert b.__array__(dtype=np.int8).tolist() == [3, 3, 3, 3]


def test_a_dlpack_export_no_consumer_took_leaves_no_mark(dev):
    b = hb.Buffer((4,), "bfloat16")
    b.copy_to_device()
    assert not b.host_dirty() and not b.device_dirty()
    with pytest.raises(RuntimeError, match="Unsupported dtype"):  # NumPy refuses bfloat16 after the export
        np.from_dlpack(b)
    assert not b.host_dirty() and not b.device_dirty()
    moves = Moves(b)
    b.copy_to_device()
    assert moves() == NONE  # nothing to upload again
    capsule = b.__dlpack__(max_version=(1, 1))  # a lease standing while its capsule lives
    assert b.host_dirty()
    b.copy_to_device()  # something happened since: the mark stays, whatever the capsule does
    assert moves() == up(8)
    b.numpy(writable=True)
    del capsule
    assert b.host_dirty()


def test_a_consumed_dlpack_export_keeps_its_mark(dev):
    b = hb.Buffer((4,), "float32")
    b.copy_to_device()
    a = np.from_dlpack(b)
    assert b.host_dirty()
    del a
    assert b.host_dirty()  # the consumer may have written


def test_a_download_into_wrapped_memory_lands_in_the_owners_array(dev):
    a = np.zeros(4, dtype=np.float32)
    b = hb.Buffer.from_host(a)
    device_fill(b, 9)
    assert b.device_dirty()  # the device copy beats external writes
    b.copy_to_host()
    np.testing.assert_array_equal(a, np.full(4, 9, np.float32))


def test_wrapped_strided_memory_downloads_only_its_elements(dev):
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    b = hb.Buffer.from_host(base[::-1, ::2])  # gaps and a negative stride
    moves = Moves(b)
    # pyopencl takes no negative strides: the same elements, flipped; then the whole device span
    # (elements and gaps) is overwritten, and only the elements may come home.
    a = hb.opencl.as_array(b[::-1])
    assert moves() == up(23 * 4)  # the span from the lowest to the highest element
    cl.enqueue_fill_buffer(a.queue, a.base_data, np.float32(-1), a.offset, 23 * 4).wait()
    b.copy_to_host()
    assert moves() == down(23 * 4)
    expected = np.arange(24, dtype=np.float32).reshape(4, 6)
    expected[:, ::2] = -1
    np.testing.assert_array_equal(base, expected)  # the gaps are untouched



def test_wrapped_negative_stride_memory_uploads_its_elements_in_place(dev, queue):
    """What the upload of a storage with negative strides puts on the device, read back with
    pyopencl before anything else writes there: every element at its place in the span."""
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    b = hb.Buffer.from_host(base[::-1, ::2])  # gaps and a negative stride
    moves = Moves(b)
    a = hb.opencl.as_array(b[::-1], writable=False)  # the same elements, flipped: base[:, ::2]
    assert moves() == up(23 * 4)  # the span from the lowest to the highest element
    span = np.full(24, -1, np.float32)
    cl.enqueue_copy(queue, span[:23], a.base_data, src_offset=a.offset)  # blocking: waits for the read
    np.testing.assert_array_equal(span.reshape(4, 6)[:, ::2], base[:, ::2])
    np.testing.assert_array_equal(span[:23], base.reshape(-1)[:23])  # the gaps are the host's bytes too
    # One axis, reversed: pyopencl reads the elements in order.
    c = hb.Buffer.from_host(np.arange(8, dtype=np.int32)[::-1])
    np.testing.assert_array_equal(hb.opencl.as_array(c[::-1], writable=False).get(), np.arange(8, dtype=np.int32))
    assert c.transfers.to_device == 1 and c.transfers.to_host == 0

# --- views share residency ---------------------------------------------------------------------

def test_views_of_a_device_resident_buffer_stay_on_the_device(dev):
    b = ramp((6, 8))
    b.copy_to_device()
    device_fill(b, 1)
    views = [b.cropped(0, 2, 3), b.sliced(1, 4), b.transposed(), b[1:5, ::3], b[::-1]]
    for v in views:
        assert v.has_device_allocation() and v.device_dirty() and v.device is dev
    moves = Moves(b)
    crop = views[0]
    device_fill(crop, 2)  # a device write through the crop: an offset into the same cl_mem
    assert moves() == NONE
    expected = np.ones((6, 8), np.float32)
    expected[2:5] = 2
    np.testing.assert_array_equal(np.asarray(crop), expected[2:5])
    assert moves() == down(6 * 8 * 4)  # the whole storage, once
    for v, e in zip(views, [expected[2:5], expected[:, 4], expected.T, expected[1:5, ::3], expected[::-1]]):
        np.testing.assert_array_equal(np.asarray(v), e)
    assert moves() == NONE


def test_a_host_write_through_a_view_is_seen_through_every_view_and_the_device(dev):
    b = ramp((4, 4), "int16")
    b.copy_to_device()
    b[1:3, 1:3].numpy(writable=True)[...] = 0
    assert b.host_dirty() and b.cropped(0, 0, 1).host_dirty()
    expected = np.arange(16, dtype=np.int16).reshape(4, 4)
    expected[1:3, 1:3] = 0
    np.testing.assert_array_equal(on_device(b.transposed()), expected.T)


def test_a_device_view_with_an_offset_exports_that_offset(dev):
    b = ramp((10,), "int32")
    a = hb.opencl.as_array(b[3:7])
    assert a.offset == 12 and a.shape == (4,)
    np.testing.assert_array_equal(a.get(), [3, 4, 5, 6])


# --- never both dirty --------------------------------------------------------------------------

def test_a_flag_change_that_would_make_both_dirty_raises_and_changes_nothing(dev):
    b = ramp((4,))
    b.copy_to_device()
    b.numpy(writable=True)[0] = 1
    with pytest.raises(ValueError, match=r"set_device_dirty\(\): the host copy is newer"):
        b.set_device_dirty()
    assert b.host_dirty() and not b.device_dirty()
    b.copy_to_device()
    b.set_device_dirty()
    with pytest.raises(ValueError, match=r"set_host_dirty\(\): the device copy is newer"):
        b.set_host_dirty()
    assert b.device_dirty() and not b.host_dirty()


# --- device memory: free, sync, wrap, detach ---------------------------------------------------

def test_device_free_keeps_a_newer_device_copy(dev):
    b = ramp((8,))
    device_fill(b, 4)
    moves = Moves(b)
    b.device_free()
    assert moves() == down(32)
    assert not b.has_device_allocation() and b.device is None and not b.device_dirty()
    np.testing.assert_array_equal(np.asarray(b), np.full(8, 4, np.float32))
    b.device_free()  # nothing to free
    assert moves() == NONE


def test_device_sync_waits_for_queued_work(dev, ctx, queue):
    b = ramp((1024,))
    a = hb.opencl.as_array(b)
    # A fill queued behind a user event: it cannot run before another thread opens the gate,
    # and its state is read from its event, without queueing anything after it.
    gate = cl.UserEvent(ctx)
    filled = cl.enqueue_fill_buffer(queue, a.base_data, np.float32(6), a.offset, b.nbytes, wait_for=[gate])
    queue.flush()
    complete = cl.command_execution_status.COMPLETE
    assert filled.command_execution_status != complete  # held back by the gate
    opener = threading.Timer(0.5, gate.set_status, (complete,))
    opener.start()  # device_sync() waits without the GIL: the timer's thread can open the gate
    try:
        b.device_sync()
        assert filled.command_execution_status == complete, "device_sync() returned before the queued fill ran"
    finally:
        opener.join()
        filled.wait()
    hb.Buffer((1,)).device_sync()  # no device: nothing to wait for
    np.testing.assert_array_equal(a.get(), np.full(1024, 6, np.float32))


HOST_EXPORTS = {
    "np.asarray": np.asarray,
    "memoryview": lambda b: np.frombuffer(memoryview(b), np.float32),
    "numpy(writable=True)": lambda b: b.numpy(writable=True),
    "copy()": lambda b: np.asarray(b.copy()),
    "np.from_dlpack": np.from_dlpack,
}


@pytest.mark.parametrize("export", HOST_EXPORTS.values(), ids=HOST_EXPORTS.keys())
def test_a_host_export_waiting_for_the_device_lets_other_threads_run(dev, ctx, queue, export):
    if not opencl_interposer.active():
        pytest.skip("the gate would open from a Python thread: an export holding the GIL would never return")
    b = ramp((1024,))
    a = hb.opencl.as_array(b)
    # A fill queued behind a user event that a native thread completes in 0.5 s, needing no GIL:
    # the export's download waits for it.
    gate = cl.UserEvent(ctx)
    filled = cl.enqueue_fill_buffer(queue, a.base_data, np.float32(6), a.offset, b.nbytes, wait_for=[gate])
    queue.flush()
    assert opencl_interposer.complete_event_after(gate.int_ptr, 0.5)
    complete = cl.command_execution_status.COMPLETE
    seen_waiting = []
    # Another Python thread looks at the fill while the export waits for it: it can only while the
    # export has let the GIL go.
    watcher = threading.Thread(target=lambda: (time.sleep(0.05),
                                               seen_waiting.append(filled.command_execution_status != complete)))
    watcher.start()
    try:
        np.testing.assert_array_equal(export(b), np.full(1024, 6, np.float32))
    finally:
        watcher.join()
        filled.wait()
    assert seen_waiting == [True], "the export held the GIL while it waited for the device"


def test_copy_to_another_device_needs_a_device_free_first(dev):
    other = hb.opencl.device(cl.Context([cl.Context.from_int_ptr(dev.context).devices[0]]))
    b = ramp((4,))
    b.copy_to_device(dev)
    with pytest.raises(ValueError, match=r"copy_to_device\(\): the buffer's device copy is on .*"
                                         r"call device_free\(\) first"):
        b.copy_to_device(other)
    b.device_free()
    b.copy_to_device(other)
    assert b.device is other
    np.testing.assert_array_equal(on_device(b), np.arange(4))


def test_wrapping_a_pyopencl_array_shares_its_memory_and_keeps_it_alive(dev, queue):
    a = cla.to_device(queue, np.arange(12, dtype=np.float32).reshape(3, 4))
    b = hb.opencl.wrap(a)
    assert b.shape == (3, 4) and b.dtype == "float32" and b.device is dev
    assert b.device_dirty() and b.transfers.to_device == 0
    a.fill(8)
    queue.finish()
    del a
    gc.collect()
    np.testing.assert_array_equal(np.asarray(b), np.full((3, 4), 8, np.float32))
    assert b.transfers.to_host == 1


def test_wrapping_an_offset_pyopencl_array_starts_at_its_offset(dev, queue):
    a = cla.to_device(queue, np.arange(10, dtype=np.int64))
    b = hb.opencl.wrap(a[4:])
    np.testing.assert_array_equal(np.asarray(b), np.arange(4, 10))
    b.numpy(writable=True)[0] = -4
    b.copy_to_device()
    np.testing.assert_array_equal(a.get()[3:6], [3, -4, 5])


def test_wrapping_a_cl_buffer_then_detaching_returns_it(dev, queue):
    mem = cl.Buffer(cl.Context.from_int_ptr(dev.context), cl.mem_flags.READ_WRITE, 64)
    cl.enqueue_copy(queue, mem, np.arange(16, dtype=np.int32))
    b = hb.opencl.wrap(mem, shape=(4, 4), dtype="int32")
    gc.collect()  # earlier tests' garbage may hold device allocations: freed now, not while counting below
    live = hb._core._live_counts()["device_allocations"]
    np.testing.assert_array_equal(np.asarray(b), np.arange(16).reshape(4, 4))
    b.numpy(writable=True)[0, 0] = 99
    b.copy_to_device()
    assert b.device_detach_native() is mem
    assert not b.has_device_allocation() and hb._core._live_counts()["device_allocations"] == live - 1
    out = np.empty(16, np.int32)
    cl.enqueue_copy(queue, out, mem)
    assert out[0] == 99  # detaching left the memory to its owner, with our data in it


def test_detach_downloads_a_newer_device_copy_first(dev, queue):
    mem = cl.Buffer(cl.Context.from_int_ptr(dev.context), cl.mem_flags.READ_WRITE, 16)
    cl.enqueue_copy(queue, mem, np.full(4, 3, np.float32))
    b = hb.Buffer((4,), "float32")
    b.device_wrap_native(mem)
    assert b.device_dirty()
    b.device_detach_native()
    np.testing.assert_array_equal(np.asarray(b), np.full(4, 3, np.float32))


# --- transfers ---------------------------------------------------------------------------------

def test_transfers_are_counted_per_storage_and_for_the_process(dev):
    before = hb.transfers()
    b = ramp((8,))
    view = b[2:4]
    view.copy_to_device()
    device_fill(b, 1)
    np.asarray(view)
    assert b.transfers == view.transfers
    assert (b.transfers.to_device, b.transfers.to_host) == (1, 1)
    delta = hb.transfers() - before
    assert delta.to_device >= 1 and delta.to_device_bytes >= 32 and delta.to_host_bytes >= 32
    assert repr(b.transfers) == "Transfers(to_device=1, to_device_bytes=32, to_host=1, to_host_bytes=32)"


# --- the halide_buffer_t we publish carries the device copy and our interface ------------------

HALIDE_COPY_TO_HOST = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)


def test_a_halide_runtime_can_copy_our_buffer_through_the_interface_we_publish(dev):
    b = ramp((4, 4))
    crop = b.cropped(1, 1, 2)
    device_fill(b, 2)
    address = crop._get_raw_halide_buffer_t()
    raw = HalideBufferT.from_address(address)
    assert raw.device != 0 and raw.device_interface and raw.flags == DEVICE_DIRTY
    # Halide's {uint64 offset; cl_mem} layout at the device handle: the crop starts 4 bytes in.
    offset, mem = opencl_handle(raw)
    assert offset == 4 and mem == hb.opencl.as_array(b, writable=False).base_data.int_ptr
    # What halide_copy_to_host() does: the interface's copy_to_host on the buffer.
    copy_to_host = HALIDE_COPY_TO_HOST(HalideDeviceInterface.from_address(raw.device_interface).copy_to_host)
    moves = Moves(b)
    assert copy_to_host(None, address) == 0
    assert raw.flags == 0
    assert not b.device_dirty()  # the runtime cleared the flag; every view sees it
    assert moves() == down(4 * 4 * 4)  # the whole storage: one state covers all of it
    np.testing.assert_array_equal(np.asarray(crop), np.full((4, 2), 2, np.float32))
    assert moves() == NONE


def test_device_free_withdraws_the_handles_of_published_views(dev):
    b = ramp((4,))
    b.copy_to_device()
    v = b[1:]
    raw = raw_buffer(v)
    assert raw.device != 0
    b.device_free()
    assert raw.device == 0 and not raw.device_interface
    b.copy_to_device()  # published again with the new allocation on the next request
    assert raw_buffer(v).device not in (0, None)


def test_copy_reads_the_current_data(dev):
    b = ramp((6,))
    device_fill(b[2:], 4)
    moves = Moves(b)
    c = b[1:].copy()
    assert moves() == down(24)
    np.testing.assert_array_equal(np.asarray(c), [1, 4, 4, 4, 4])
    assert not c.has_device_allocation() and c.host_dirty()


HALIDE_COPY_TO_DEVICE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


def test_a_runtime_uploading_a_crop_uploads_the_whole_storage(dev):
    b = ramp((4, 8), "int32")
    b.copy_to_device()
    b.numpy(writable=True)[:] = 7  # the host is newer everywhere
    crop = b[1:3, 2:4]
    address = crop._get_raw_halide_buffer_t()
    raw = HalideBufferT.from_address(address)
    interface = HalideDeviceInterface.from_address(raw.device_interface)
    moves = Moves(b)
    assert HALIDE_COPY_TO_DEVICE(interface.copy_to_device)(None, address, None) == 0  # halide_copy_to_device
    assert moves() == up(4 * 8 * 4)
    assert not b.host_dirty() and not b.device_dirty()
    np.testing.assert_array_equal(on_device(b), np.full((4, 8), 7))


def test_published_views_never_show_a_stale_state(dev):
    b = ramp((8,))
    v = b[2:6]
    raw = raw_buffer(v)
    assert raw.flags == HOST_DIRTY and raw.device == 0
    device_fill(b, 3)  # every operation republishes the views it changed
    assert raw.flags == DEVICE_DIRTY and raw.device != 0
    np.asarray(b)
    assert raw.flags == 0


def test_device_arrays_keep_a_wrapped_pool_block_from_being_reused(dev, queue):
    pool = cl.tools.MemoryPool(cl.tools.ImmediateAllocator(queue))
    src = cla.to_device(queue, np.arange(16, dtype=np.float32), allocator=pool)
    b = hb.opencl.wrap(src)
    arr = hb.opencl.as_array(b)
    del b, src
    gc.collect()
    other = cla.to_device(queue, np.full(16, -1, np.float32), allocator=pool)
    assert other.base_data.int_ptr != arr.base_data.int_ptr  # the block is still ours
    np.testing.assert_array_equal(arr.get(), np.arange(16))
