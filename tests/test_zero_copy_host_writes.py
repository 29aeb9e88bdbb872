"""One memory, two users: on a device sharing the host's memory (zero-copy, PoCL's default) a
pipeline call returns with its kernels queued, and they read the host memory of its inputs itself.
Every path that writes a buffer's host memory waits for them first, so the result is the input's
at the call, as with copies. Each test holds the kernel back behind a gate on the queue
(queue_gate.py) and checks that the write waited for it and the result is right; without the
wait, the write lands while the gate is closed and the kernel computes on it."""

import contextlib
import io
import pickle

import numpy as np
import pytest

import halide_buffer as hb

import opencl_interposer as oi
from pipelines import OPENCL_TARGET, brighter_opencl_func, c_compiler, compile_and_load
from queue_gate import QueueGate

try:
    import torch as TORCH  # imported before any gate closes: its first import takes seconds
except ImportError:
    TORCH = None

SHAPE = (256, 256)


@pytest.fixture(scope="module")
def brighter(tmp_path_factory):
    """out = in + 10 (uint8) on the OpenCL device, in 8x8 tiles."""
    hb.opencl.device()  # opens the OpenCL loader process-wide, where a pipeline's runtime looks
    p = compile_and_load(tmp_path_factory.mktemp("zero_copy_writes"), c_compiler(), *brighter_opencl_func(),
                         "hb_zero_copy_writes_brighter", target=OPENCL_TARGET)
    p(np.zeros(SHAPE, np.uint8))  # the first call builds the kernels, and waits for that
    return p


def frame_input(device, value=10):
    """An owned input holding `value`, current on `device` already: the call queues its kernel
    and nothing else (no map the gate would hold)."""
    b = hb.Buffer(SHAPE, "uint8")
    b.fill(value)
    b.copy_to_device(device)
    return b


@contextlib.contextmanager
def queued_call(device, brighter, b):
    """brighter(b) with its kernel held behind a closed gate: gives (gate, output). The output is
    placed on the device first, so the call itself waits for nothing."""
    out = hb.Buffer(SHAPE, "uint8")
    out.device_malloc(device)
    with QueueGate(device) as gate:
        brighter(b, out)
        assert gate.closed(), "the call waited for its kernel"
        yield gate, out


def through_numpy(b):
    b.numpy(writable=True)[...] = 200


def through_buffer_protocol(b):
    io.BytesIO(b"\xc8" * b.nbytes).readinto(b)  # a writable buffer-protocol export: 200 in every byte


def through_torch_dlpack(b):
    torch = TORCH or pytest.skip("PyTorch is not installed")
    torch.from_dlpack(b).fill_(200)


def through_numpy_dlpack(b):
    np.from_dlpack(b)[...] = 200


def through_fill(b):
    b.fill(200)


def through_fill_on_the_host(b):
    b.set_host_dirty(True)  # the device copy is no longer current: the fill is done on the host
    b.fill(200)


def through_assignment(b):
    b[...] = 200


def through_array_assignment(b):
    b[...] = np.full(SHAPE, 200, np.uint8)


def through_copy_from_on_the_host(b):
    b.set_host_dirty(True)
    b.copy_from(hb.Buffer.from_host(np.full(SHAPE, 200, np.uint8)))


def through_pickle_out_of_band(b):
    buffers = []
    data = pickle.dumps(b, protocol=5, buffer_callback=buffers.append)  # hands out the memory
    pickle.loads(data, buffers=buffers).numpy(writable=True)[...] = 200


def through_share_memory(b):
    b.share_memory()  # the memory becomes a segment other processes may write
    b.numpy(writable=True)[...] = 200


def through_to_halide(b):
    h = b.to_halide()  # an hl.Buffer over the memory, which Halide's code writes on the host
    h.fill(200)
    del h


WRITERS = [through_numpy, through_buffer_protocol, through_torch_dlpack, through_numpy_dlpack, through_fill,
           through_fill_on_the_host, through_assignment, through_array_assignment, through_copy_from_on_the_host,
           through_pickle_out_of_band, through_share_memory, through_to_halide]


@pytest.mark.parametrize("write", WRITERS, ids=lambda f: f.__name__)
def test_a_host_write_after_a_call_waits_for_the_kernel_reading_the_memory(zc, brighter, write):
    b = frame_input(zc)
    with queued_call(zc, brighter, b) as (gate, out):
        write(b)
        assert not gate.closed(), f"{write.__name__} wrote while the kernel reading the memory was queued"
        np.testing.assert_array_equal(np.asarray(out), np.full(SHAPE, 20, np.uint8))
    np.testing.assert_array_equal(np.asarray(b), np.full(SHAPE, 200, np.uint8))


def test_a_host_read_of_an_output_waits_for_the_kernel_writing_it(zc, brighter):
    b = frame_input(zc)
    with queued_call(zc, brighter, b) as (gate, out):
        got = np.asarray(out)
        assert not gate.closed()
        np.testing.assert_array_equal(got, np.full(SHAPE, 20, np.uint8))


def test_a_lease_owners_write_comes_after_the_call_that_waited(zc, brighter):
    """Memory its owner may write at any time cannot be waited for at the write: the call waits."""
    image = np.full(SHAPE, 10, np.uint8)
    b = hb.Buffer.from_host(image)
    assert b.external_writes
    b.copy_to_device(zc)
    out = hb.Buffer(SHAPE, "uint8")
    out.device_malloc(zc)
    with QueueGate(zc) as gate:
        brighter(b, out)
        assert not gate.closed(), "a call on a lease returned with its kernel queued"
        image[...] = 200
    np.testing.assert_array_equal(np.asarray(out), np.full(SHAPE, 20, np.uint8))


def test_device_free_waits_for_the_kernel_before_the_memory_is_the_hosts_alone(zc, brighter):
    x = frame_input(zc)
    b = brighter(x)  # a host block of the device's pool, which going back does not wait for
    out = hb.Buffer(SHAPE, "uint8")
    out.device_malloc(zc)
    with QueueGate(zc) as gate:
        brighter(b, out)
        assert gate.closed()
        b.device_free()
        assert not gate.closed(), "device_free() let the memory go under a queued kernel"
        b.numpy(writable=True)[...] = 0
        np.testing.assert_array_equal(np.asarray(out), np.full(SHAPE, 30, np.uint8))


def test_a_copying_device_keeps_its_rule_the_write_goes_to_the_host_copy_at_once(brighter):
    """With copies, the kernel reads the device copy: a host write need not wait, and does not."""
    copying = hb.opencl.device(zero_copy=False)
    b = frame_input(copying)
    with queued_call(copying, brighter, b) as (gate, out):
        through_numpy(b)
        assert gate.closed()
    np.testing.assert_array_equal(np.asarray(out), np.full(SHAPE, 20, np.uint8))


@pytest.fixture()
def waits():
    """waits(f): how many clFinish calls f() made (the OpenCL interposer counts them)."""
    if not oi.active():
        pytest.skip(f"the OpenCL interposer is not installed: {oi.reason()}")

    def count(f):
        before = oi.counts()["finishes"]
        f()
        return oi.counts()["finishes"] - before

    return count


def test_a_write_waits_only_where_work_on_that_memory_may_still_be_queued(zc, brighter, waits):
    b = frame_input(zc)
    idle = frame_input(zc)
    out = brighter(b)
    assert waits(lambda: through_numpy(idle)) == 0  # never given to a call
    assert waits(lambda: through_numpy(b)) == 1  # the call's kernel may still read it
    assert waits(lambda: through_numpy(b)) == 0  # waited for already
    np.testing.assert_array_equal(np.asarray(out), np.full(SHAPE, 20, np.uint8))
    second, third = brighter(b), brighter(idle)
    assert waits(lambda: through_numpy(b)) == 1
    assert waits(lambda: through_numpy(idle)) == 0  # the wait for b covered the call before it too
    np.testing.assert_array_equal(np.asarray(second), np.full(SHAPE, 210, np.uint8))
    np.testing.assert_array_equal(np.asarray(third), np.full(SHAPE, 210, np.uint8))
