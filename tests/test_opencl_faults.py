"""Driver failures injected into the real OpenCL backend (PoCL) through the test suite's OpenCL
interposer (tests/opencl_interposer.py): each failure raises hb.DeviceError carrying the
driver's code, keeps the current copy of the data, leaves consistent flags and exact transfer
counts, and leaks no cl_mem."""

import gc

import numpy as np
import pytest

import halide_buffer as hb
import opencl_interposer as oi

from common import NONE, Moves, counts, down, pooled_blocks, up

ALLOCATION_FAILURE = -4   # CL_MEM_OBJECT_ALLOCATION_FAILURE
OUT_OF_RESOURCES = -5     # CL_OUT_OF_RESOURCES
NAMES = {ALLOCATION_FAILURE: "CL_MEM_OBJECT_ALLOCATION_FAILURE", OUT_OF_RESOURCES: "CL_OUT_OF_RESOURCES"}
SHAPE = (6, 8)
NBYTES = 6 * 8 * 4


@pytest.fixture(autouse=True)
def interposer(dev):
    """The interposer in the process; no fault left behind; every cl_mem made meanwhile released."""
    if not oi.active():
        pytest.skip(f"the OpenCL interposer is not installed: {oi.reason()}")
    gc.collect()
    live = oi.live_mem_objects() - pooled_blocks()
    yield
    oi.clear_faults()
    gc.collect()
    assert oi.live_mem_objects() - pooled_blocks() == live, "cl_mem objects leaked"


def host_buffer(value=1.0):
    b = hb.Buffer(SHAPE, "float32")
    b.numpy(writable=True)[...] = np.arange(np.prod(SHAPE), dtype=np.float32).reshape(SHAPE) * value
    return b


def device_dirty_buffer():
    """A buffer whose device copy (all 5.0) is newer than its host copy (arange)."""
    b = host_buffer()
    b.copy_to_device()
    b.fill(5.0)  # on the device
    assert b.device_dirty() and not b.host_dirty()
    return b


def expect_fault(call, code, match):
    """Runs `call` with the fault armed; the DeviceError it raises names the driver's code."""
    process = hb.transfers()
    fired = oi.injected()
    with pytest.raises(hb.DeviceError, match=match) as e:
        call()
    assert (e.value.code, e.value.name) == (code, NAMES[code])
    assert f"{NAMES[code]} ({code})" in str(e.value)
    assert oi.injected() > fired
    assert counts(hb.transfers() - process) == NONE, "a failed copy was counted"
    oi.clear_faults()


def consistent(b):
    assert not (b.host_dirty() and b.device_dirty())


# --- allocation -------------------------------------------------------------------------------


def test_an_allocation_failure_in_copy_to_device_keeps_the_host_copy():
    b = host_buffer()
    moves = Moves(b)
    oi.fail("clCreateBuffer", ALLOCATION_FAILURE)
    expect_fault(b.copy_to_device, ALLOCATION_FAILURE, r"copy_to_device\(\): allocating device memory failed")
    assert not b.has_device_allocation() and b.host_dirty() and moves() == NONE
    consistent(b)
    b.copy_to_device()  # usable: the next try succeeds
    assert moves() == up(NBYTES) and not b.host_dirty()
    assert np.asarray(b).tolist() == host_buffer().numpy().tolist()


@pytest.mark.parametrize("writable", [True, False], ids=["lease", "read-only export"])
def test_an_allocation_failure_in_a_device_export_keeps_the_host_copy(writable):
    b = host_buffer()
    moves = Moves(b)
    oi.fail("clCreateBuffer", ALLOCATION_FAILURE)
    expect_fault(lambda: hb.opencl.as_array(b, writable=writable), ALLOCATION_FAILURE,
                 r"opencl.as_array\(\): allocating device memory failed")
    assert not b.has_device_allocation() and not b.device_dirty() and moves() == NONE
    a = hb.opencl.as_array(b, writable=writable)
    assert moves() == up(NBYTES) and b.device_dirty() == writable
    assert a.get().tolist() == host_buffer().numpy().tolist()
    del a


def test_a_repeating_allocation_failure_fails_every_try_until_cleared():
    b = host_buffer()
    oi.fail("clCreateBuffer", ALLOCATION_FAILURE, repeat=True)
    for _ in range(3):
        with pytest.raises(hb.DeviceError) as e:
            b.copy_to_device()
        assert e.value.code == ALLOCATION_FAILURE
    oi.clear_faults()
    b.copy_to_device()
    assert b.has_device_allocation()


# --- uploads and downloads --------------------------------------------------------------------


def test_out_of_resources_on_an_upload_keeps_the_host_copy():
    b = host_buffer()
    b.copy_to_device()
    b.numpy(writable=True)[0, 0] = -1  # host newer
    moves = Moves(b)
    oi.fail("clEnqueueWriteBuffer", OUT_OF_RESOURCES)
    expect_fault(b.copy_to_device, OUT_OF_RESOURCES,
                 r"copy_to_device\(\): copying to the device failed .*the host copy is kept")
    assert b.host_dirty() and moves() == NONE
    consistent(b)
    b.copy_to_device()
    assert moves() == up(NBYTES)
    assert hb.opencl.as_array(b, writable=False).get()[0, 0] == -1


@pytest.mark.parametrize("read", ["copy_to_host", "host read", "device_free"])
def test_out_of_resources_on_a_download_keeps_the_device_copy(read):
    b = device_dirty_buffer()
    moves = Moves(b)
    call = {"copy_to_host": b.copy_to_host, "host read": lambda: np.asarray(b),
            "device_free": b.device_free}[read]
    # Repeating: NumPy tries the buffer protocol, then __array__, each a download.
    oi.fail("clEnqueueReadBuffer", OUT_OF_RESOURCES, repeat=True)
    expect_fault(call, OUT_OF_RESOURCES, r"copying to the host failed .*the device copy is kept")
    # device_free refused to lose the only current copy
    assert b.device_dirty() and b.has_device_allocation() and moves() == NONE
    consistent(b)
    assert np.asarray(b).tolist() == np.full(SHAPE, 5.0).tolist()
    assert moves() == down(NBYTES) and not b.device_dirty()
    b.device_free()
    assert not b.has_device_allocation() and moves() == NONE


def test_a_failing_clfinish_raises_from_device_sync():
    b = device_dirty_buffer()
    oi.fail("clFinish", OUT_OF_RESOURCES)
    expect_fault(b.device_sync, OUT_OF_RESOURCES, r"device_sync\(\): .*clFinish")
    assert b.device_dirty()
    b.device_sync()
    assert np.asarray(b).tolist() == np.full(SHAPE, 5.0).tolist()


def test_the_nth_call_fails_and_the_ones_before_it_pass():
    a, b = host_buffer(), host_buffer(2.0)
    oi.fail("clEnqueueWriteBuffer", OUT_OF_RESOURCES, nth=2)
    a.copy_to_device()
    expect_fault(b.copy_to_device, OUT_OF_RESOURCES, r"copy_to_device\(\)")
    assert not a.host_dirty() and b.host_dirty()


# --- crops and views --------------------------------------------------------------------------


def test_a_failed_download_through_a_crop_keeps_the_whole_storage_on_the_device():
    b = device_dirty_buffer()
    crop = b[1:3, 2:6]
    moves = Moves(b)
    oi.fail("clEnqueueReadBuffer", OUT_OF_RESOURCES, repeat=True)
    expect_fault(lambda: np.asarray(crop), OUT_OF_RESOURCES, r"copying to the host failed")
    assert crop.device_dirty() and b.device_dirty() and moves() == NONE
    consistent(crop)
    assert np.asarray(crop).tolist() == np.full((2, 4), 5.0).tolist()
    assert moves() == down(NBYTES)


def test_a_failed_upload_through_a_view_keeps_the_host_copy():
    b = host_buffer()
    b.copy_to_device()
    view = b[::2, 1:5]
    view.numpy(writable=True)[...] = -3  # host newer, through the view
    moves = Moves(b)
    oi.fail("clEnqueueWriteBuffer", OUT_OF_RESOURCES)
    expect_fault(view.copy_to_device, OUT_OF_RESOURCES, r"copy_to_device\(\)")
    assert view.host_dirty() and b.host_dirty() and moves() == NONE
    consistent(b)
    b.copy_to_device()
    assert moves() == up(NBYTES)
    assert (hb.opencl.as_array(b, writable=False).get()[::2, 1:5] == -3).all()


@pytest.mark.parametrize("entry", ["clCreateBuffer", "clEnqueueFillBuffer", "clEnqueueCopyBufferRect",
                                   "clFinish"])
def test_a_failed_device_fill_of_a_view_keeps_the_device_copy(entry):
    # A fill of a view with gaps fills scratch memory on the device and copies it into place:
    # a failure at any step leaves the old device data, and the scratch memory is released.
    b = device_dirty_buffer()
    view = b[1:4, 2:5]
    moves = Moves(b)
    before = oi.counts()
    oi.fail(entry, OUT_OF_RESOURCES)
    with pytest.raises(hb.DeviceError) as e:
        view.fill(9.0)
    assert (e.value.code, e.value.name) == (OUT_OF_RESOURCES, "CL_OUT_OF_RESOURCES")
    oi.clear_faults()
    assert b.device_dirty() and moves() == NONE
    consistent(b)
    after = oi.counts()
    assert after["mem_created"] - before["mem_created"] == after["mem_released"] - before["mem_released"]
    if entry != "clFinish":  # a failed wait may come after the fill ran
        assert np.asarray(b).tolist() == np.full(SHAPE, 5.0).tolist()
    view.fill(9.0)
    expected = np.full(SHAPE, 5.0)
    expected[1:4, 2:5] = 9.0
    assert np.asarray(b).tolist() == expected.tolist()


def test_a_failed_region_write_into_a_device_view_keeps_both_copies():
    b = device_dirty_buffer()
    view = b[1:3, 2:6]
    src = hb.Buffer.from_host(np.full((6, 8), 4.0, np.float32))
    moves = Moves(b)
    writes = oi.counts()["writes"]
    oi.fail("clEnqueueWriteBufferRect", OUT_OF_RESOURCES)
    with pytest.raises(hb.DeviceError, match=r"clEnqueueWriteBufferRect") as e:  # the call that failed, named
        view.copy_from(src)
    assert e.value.code == OUT_OF_RESOURCES
    oi.clear_faults()
    assert oi.counts()["writes"] == writes and b.device_dirty() and moves() == NONE
    assert np.asarray(b).tolist() == np.full(SHAPE, 5.0).tolist()


def test_a_failed_region_read_from_a_device_view_changes_neither_side():
    b = device_dirty_buffer()
    dst = hb.Buffer(SHAPE, "float32")
    dst.numpy(writable=True)[...] = 0
    moves, dst_moves = Moves(b), Moves(dst)
    oi.fail("clEnqueueReadBufferRect", OUT_OF_RESOURCES)
    expect_fault(lambda: dst[1:3, 2:6].copy_from(b[1:3, 2:6]), OUT_OF_RESOURCES,
                 r"copy_from\(\): .*clEnqueueReadBufferRect")
    assert b.device_dirty() and moves() == NONE and dst_moves() == NONE
    assert not dst.numpy().any()
    dst[1:3, 2:6].copy_from(b[1:3, 2:6])
    assert dst_moves() == NONE and moves() == down(2 * 4 * 4)  # the region read counts for the source
    assert dst.numpy()[1:3, 2:6].tolist() == np.full((2, 4), 5.0).tolist()


@pytest.mark.parametrize("whole", [True, False], ids=["storage", "view"])
def test_a_failed_device_to_device_copy_keeps_the_destination(whole):
    src = device_dirty_buffer()
    dst = host_buffer(2.0)
    dst.copy_to_device()
    target, source = (dst, src) if whole else (dst[1:3, 2:6], src[1:3, 2:6])
    oi.fail("clEnqueueCopyBuffer" if whole else "clEnqueueCopyBufferRect", OUT_OF_RESOURCES)
    expect_fault(lambda: target.copy_from(source), OUT_OF_RESOURCES, r"copy_from\(\)")
    consistent(dst)
    assert np.asarray(dst).tolist() == host_buffer(2.0).numpy().tolist()
    assert np.asarray(src).tolist() == np.full(SHAPE, 5.0).tolist()


# --- the interposer's counts ------------------------------------------------------------------


def test_the_interposer_counts_what_hb_transfers_counts():
    before, process = oi.counts(), hb.transfers()
    b = host_buffer()
    b.copy_to_device()                     # one upload
    b.fill(2.0)                            # one fill on the device
    np.asarray(b)                          # one download
    b.numpy(writable=True)[0, 0] = 1       # host newer
    b.copy_to_device()                     # one upload
    b.device_sync()
    b.device_free()
    del b
    gc.collect()
    hb.opencl.device().trim()  # the freed cl_mem is released, not kept
    c, t = oi.counts(), hb.transfers() - process
    delta = {k: c[k] - before[k] for k in c}
    assert (delta["writes"], delta["write_bytes"]) == (t.to_device, t.to_device_bytes) == (2, 2 * NBYTES)
    assert (delta["reads"], delta["read_bytes"]) == (t.to_host, t.to_host_bytes) == (1, NBYTES)
    assert delta["fills"] == 1 and delta["kernels"] == 0 and delta["copies"] == 0
    assert delta["finishes"] >= 1
    assert delta["mem_created"] == delta["mem_released"] == 1


def test_pyopencl_calls_pass_through_the_interposer(ctx, queue):
    import pyopencl as cl
    import pyopencl.array as cla

    before, live = oi.counts(), oi.live_mem_objects()
    a = cla.to_device(queue, np.arange(16, dtype=np.float32))   # clCreateBuffer + a write
    doubled = (2 * a).get()                                     # a kernel + a read
    host = np.empty(16, np.float32)
    cl.enqueue_copy(queue, host, a.data)                        # another read
    queue.finish()
    c = oi.counts()
    delta = {k: c[k] - before[k] for k in c}
    assert doubled.tolist() == (2 * np.arange(16)).tolist() and host.tolist() == list(range(16))
    assert delta["kernels"] >= 1 and delta["writes"] >= 1 and delta["reads"] >= 2
    assert delta["read_bytes"] >= 2 * 64 and delta["finishes"] >= 1
    assert oi.live_mem_objects() > live
    # Repeating: pyopencl retries a call that ran out of memory once, after a gc.
    oi.fail("clEnqueueReadBuffer", OUT_OF_RESOURCES, repeat=True)
    with pytest.raises(cl.Error, match="OUT_OF_RESOURCES"):
        cl.enqueue_copy(queue, host, a.data)
    del a
    gc.collect()


def test_halide_buffer_resolves_only_entry_points_the_interposer_defines():
    from pathlib import Path

    import re

    source = (Path(__file__).resolve().parent.parent / "csrc" / "backends" / "opencl_api.cpp").read_text()
    resolved = set(re.findall(r'resolve\(library, "(cl\w+)"', source))
    assert resolved and resolved <= set(oi.entries())
    assert hb.opencl.loaded_library() is not None
    assert oi.loader() and "libOpenCL" in oi.loader()


def test_fail_refuses_what_it_cannot_do():
    with pytest.raises(ValueError, match="not an entry point"):
        oi.fail("clBuildProgram", -11)
    with pytest.raises(ValueError, match="nth"):
        oi.fail("clFinish", -5, nth=0)
    with pytest.raises(ValueError, match="not 0"):
        oi.fail("clFinish", 0)
    with oi.failing("clFinish", OUT_OF_RESOURCES, nth=2):
        hb.opencl.device().synchronize()
        with pytest.raises(hb.DeviceError):
            hb.opencl.device().synchronize()
    hb.opencl.device().synchronize()  # cleared on leaving the block
