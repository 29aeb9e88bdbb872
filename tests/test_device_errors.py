"""Device failures and bad arguments on a real OpenCL runtime: each raises a clear exception
naming the entry point and the fix, and the buffer stays valid with its current data intact."""

import gc

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pytest

import halide_buffer as hb

from common import MALLINFO2, Moves, NONE, live_counts


def test_an_allocation_over_the_device_limit_is_refused_and_changes_nothing(dev):
    gc.collect()
    allocations = live_counts()["device_allocations"]
    rows = dev.max_allocation_size // 2**30 + 1
    b = hb.Buffer((rows, 2**30), "uint8")  # zero pages: only what is written gets memory
    b.numpy(writable=True)[-1, -4:] = [1, 2, 3, 4]
    moves = Moves(b)
    with pytest.raises(hb.DeviceError, match=r"copy_to_device\(\): allocating device memory failed with "
                                             r"CL_INVALID_BUFFER_SIZE \(-61\): an allocation of \d+ MiB "
                                             r"exceeds the device's largest .*CL_DEVICE_MAX_MEM_ALLOC_SIZE"
                                             r"\); split the buffer") as e:
        b.copy_to_device()
    assert (e.value.code, e.value.name) == (-61, "CL_INVALID_BUFFER_SIZE")
    assert not b.has_device_allocation() and b.host_dirty() and moves() == NONE
    assert b.numpy()[-1, -4:].tolist() == [1, 2, 3, 4]
    with pytest.raises(hb.DeviceError, match="CL_INVALID_BUFFER_SIZE"):
        b.device_malloc()
    assert live_counts()["device_allocations"] == allocations  # neither refusal left one behind


def test_a_refused_download_keeps_the_device_copy(dev, ctx, queue):
    # HOST_NO_ACCESS memory: the driver itself refuses every host read.
    mem = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.HOST_NO_ACCESS, 16)
    cl.enqueue_fill_buffer(queue, mem, np.float32(7), 0, 16).wait()
    b = hb.Buffer((4,), "float32")
    b.device_wrap_native(mem)
    for attempt in (b.copy_to_host, lambda: np.asarray(b), b.device_free, b.device_detach_native):
        with pytest.raises(hb.DeviceError, match=r"\(\): copying to the host failed with "
                                                 r"CL_INVALID_OPERATION \(-59\): clEnqueueReadBuffer of "
                                                 r"16 B; the device copy is kept") as e:
            attempt()
        assert e.value.name == "CL_INVALID_OPERATION"
        assert b.device_dirty() and b.has_device_allocation() and b.transfers.to_host == 0
    out = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 16)
    cl.enqueue_copy(queue, out, mem).wait()  # device to device: the data is all there
    host = np.empty(4, np.float32)
    cl.enqueue_copy(queue, host, out)
    assert host.tolist() == [7, 7, 7, 7]
    b.set_device_dirty(False)  # the way out: give up the device copy explicitly
    b.device_free()


def test_a_refused_upload_keeps_the_host_copy(dev, ctx):
    mem = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.HOST_READ_ONLY, 16)
    b = hb.Buffer((4,), "float32")
    b.device_wrap_native(mem)
    b.numpy(writable=True)[:] = [1, 2, 3, 4]
    with pytest.raises(hb.DeviceError, match=r"copy_to_device\(\): copying to the device failed with "
                                             r"CL_INVALID_OPERATION \(-59\): clEnqueueWriteBuffer of 16 B; "
                                             r"the host copy is kept"):
        b.copy_to_device()
    assert b.host_dirty() and not b.device_dirty() and b.transfers.to_device == 0
    assert np.asarray(b).tolist() == [1, 2, 3, 4]


@pytest.mark.parametrize("call, error, message", [
    (lambda b: b.copy_to_device(device="gpu"), TypeError,
     r"copy_to_device\(\): device must be a halide_buffer.Device or None, not str; get one with "
     r"halide_buffer.opencl.device\(\)"),
    (lambda b: b.device_malloc(device=3), TypeError, r"device_malloc\(\): device must be a halide_buffer.Device"),
    (lambda b: b.device_wrap_native("mem"), TypeError,
     r"device_wrap_native\(\): handle must be a pyopencl.Buffer, or the address \(int\) of CUDA device "
     r"memory, not str"),
    (lambda b: b.device_wrap_native(0), ValueError, r"device_wrap_native\(\): the handle is NULL"),
    (lambda b: b.device_detach_native() if b.copy_to_device() is None else None, ValueError,
     r"device_detach_native\(\): the device allocation was not wrapped with device_wrap_native\(\); "
     r"use device_free\(\)"),
    (lambda b: hb.opencl.as_array(b[::-1]), BufferError,
     r"opencl.as_array\(\): pyopencl arrays cannot have negative strides; pass buffer.copy\(\) instead"),
    (lambda b: hb.opencl.as_array(np.zeros(3)), TypeError, r"opencl.as_array\(\): expected a halide_buffer.Buffer"),
])
def test_bad_arguments_name_the_entry_point_and_the_fix(dev, call, error, message):
    b = hb.Buffer((4,), "float32")
    b.numpy(writable=True)[:] = 5
    with pytest.raises(error, match=message):
        call(b)
    assert np.asarray(b).tolist() == [5, 5, 5, 5]


def test_wrapping_too_small_a_cl_mem_changes_nothing(ctx):
    b = hb.Buffer((8,), "float64")
    with pytest.raises(ValueError, match=r"device_wrap_native\(\): the device memory holds 32 bytes, the buffer "
                                         r"needs 64 from offset 0; wrap a larger allocation"):
        b.device_wrap_native(cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 32))
    with pytest.raises(ValueError, match=r"needs 64 from offset 40"):
        b.device_wrap_native(cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 100), offset=40)
    assert not b.has_device_allocation() and b.host_dirty()


@pytest.mark.skipif(MALLINFO2 is None, reason="needs glibc's mallinfo2() to count the bytes malloc hands out")
def test_a_refused_wrap_keeps_no_record_of_the_memory(ctx):
    # The refusal detaches what it wrapped: the record of the memory (ours, for memory the caller
    # keeps alive) ends with it. Counted with malloc's bytes in use over many refusals, after a
    # few to warm up; one record kept per refusal is about 100 bytes.
    b = hb.Buffer((8,), "float64")
    small = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 32)

    def refuse(times):
        for _ in range(times):
            with pytest.raises(ValueError, match="wrap a larger allocation"):
                b.device_wrap_native(small)

    refuse(50)
    before = MALLINFO2().uordblks
    refuse(1000)
    grown = MALLINFO2().uordblks - before
    assert grown < 1000 * 16, f"{grown} bytes kept by 1000 refused wraps"
    assert not b.has_device_allocation() and b.host_dirty()


def test_wrapping_memory_of_another_context_is_refused(dev):
    other = cl.Context([cl.Context.from_int_ptr(dev.context).devices[0]])
    b = hb.Buffer((4,), "int32")
    with pytest.raises(hb.DeviceError, match=r"device_wrap_native\(\): wrapping the device memory failed with "
                                             r"CL_INVALID_CONTEXT \(-34\): the cl_mem belongs to another "
                                             r"context; pass the device of its context"):
        b.device_wrap_native(cl.Buffer(other, cl.mem_flags.READ_WRITE, 16), device=dev)
    assert not b.has_device_allocation()
    b.device_wrap_native(cl.Buffer(other, cl.mem_flags.READ_WRITE, 16), device=hb.opencl.device(other))


def test_wrapping_twice_needs_a_device_free_first(ctx):
    b = hb.Buffer((4,), "int32")
    b.copy_to_device()
    with pytest.raises(ValueError, match=r"device_wrap_native\(\): the buffer already has a device "
                                         r"allocation; call device_free\(\) first"):
        b.device_wrap_native(cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 16))


@pytest.mark.parametrize("make, kwargs, error, message", [
    (lambda q: cla.zeros(q, (4, 4), np.float32)[:, ::2], {}, ValueError,
     r"opencl.wrap\(\): the pyopencl array is not C-contiguous; pass array.copy\(\)"),
    (lambda q: cla.zeros(q, (4,), np.float32), {"dtype": "float32"}, TypeError,
     r"opencl.wrap\(\): shape and dtype come from the pyopencl array; pass neither"),
    (lambda q: cl.Buffer(q.context, cl.mem_flags.READ_WRITE, 16), {}, TypeError,
     r"opencl.wrap\(\): a pyopencl.Buffer has no shape or dtype; pass both"),
    (lambda q: 42, {}, TypeError, r"opencl.wrap\(\): expected a pyopencl.array.Array or pyopencl.Buffer, not int"),
])
def test_opencl_wrap_refuses_what_it_cannot_share(queue, make, kwargs, error, message):
    with pytest.raises(error, match=message):
        hb.opencl.wrap(make(queue), **kwargs)


# --- ints never reach a driver as handles unless the caller vouches for them -------------------

class FakeMemory:
    """Looks like a pyopencl memory object to anyone who only reads int_ptr."""
    int_ptr = 12345


@pytest.mark.parametrize("handle", [12345, np.int64(12345), FakeMemory()], ids=["int", "numpy-int", "int_ptr"])
def test_an_unvouched_int_never_reaches_opencl_as_a_cl_mem(dev, handle):
    b = hb.Buffer((3,), "float32")
    error = TypeError
    message = (r"^device_wrap_native\(\): an int would reach the OpenCL driver as a cl_mem address, which "
               r"nothing can check; pass the pyopencl.Buffer, or trust_handle=True")
    if isinstance(handle, FakeMemory):
        message = r"^device_wrap_native\(\): handle must be a pyopencl.Buffer"
    with pytest.raises(error, match=message):
        b.device_wrap_native(handle)
    assert not b.has_device_allocation() and b.host_dirty()


def test_a_vouched_int_is_wrapped(dev, ctx, queue):
    mem = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 16)
    cl.enqueue_fill_buffer(queue, mem, np.float32(4), 0, 16).wait()
    b = hb.Buffer((4,), "float32")
    b.device_wrap_native(mem.int_ptr, trust_handle=True)
    assert b.device_dirty() and np.asarray(b).tolist() == [4, 4, 4, 4]
    b.device_detach_native()
    del mem


@pytest.mark.parametrize("stream", [7, 2**40])
def test_an_unvouched_int_never_reaches_cuda_as_a_stream(stream):
    with pytest.raises(TypeError, match=rf"^cuda.device\(\): the int {stream} would reach the driver as a "
                                        r"CUstream address, which nothing can check; .*trust_handle=True"):
        hb.cuda.device(stream=stream)
