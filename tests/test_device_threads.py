"""Eight threads mixing residency operations on one shared buffer and on buffers of their own:
no corruption, no deadlock, and every copy accounted for. Copies run without the GIL, so the
threads really do overlap inside the core."""

import random
import threading

import numpy as np

import halide_buffer as hb

import opencl_interposer

THREADS = 8
STEPS = 300
N = 4096


def shared_step(shared, expected, rng):
    """Operations that never change the shared buffer's data, in any order from any thread."""
    op = rng.randrange(7)
    lo = rng.randrange(N - 1)
    hi = rng.randrange(lo + 1, N)
    if op == 0:
        np.testing.assert_array_equal(np.asarray(shared[lo:hi]), expected[lo:hi])
    elif op == 1:
        np.testing.assert_array_equal(hb.opencl.as_array(shared.cropped(0, lo, hi - lo), writable=False).get(),
                                      expected[lo:hi])
    elif op == 2:
        shared.copy_to_device()
    elif op == 3:
        shared.copy_to_host()
    elif op == 4:
        shared.device_free()
    elif op == 5:
        shared.device_sync()
    else:
        np.testing.assert_array_equal(memoryview(shared.transposed()), expected)


def own_step(own, model, rng, device_fills):
    """Writes and reads of a buffer only this thread uses, checked against its own model; a
    pyopencl fill on the device is counted in `device_fills`."""
    op = rng.randrange(4)
    lo = rng.randrange(N - 1)
    hi = rng.randrange(lo + 1, N)
    value = rng.randrange(-1000, 1000)
    if op == 0:
        own[lo:hi].numpy(writable=True)[...] = value
        model[lo:hi] = value
    elif op == 1:
        a = hb.opencl.as_array(own[lo:hi])
        a.fill(np.int32(value))
        a.queue.finish()
        model[lo:hi] = value
        device_fills.append(hi - lo)
    elif op == 2:
        own.device_free()
    np.testing.assert_array_equal(np.asarray(own), model)


def test_eight_threads_mixing_operations():
    expected = np.arange(N, dtype=np.int32)
    shared = hb.Buffer.from_host(expected.copy(), external_writes=False)
    shared.copy_to_device()
    hb.opencl.as_array(shared)  # the device copy is the current one: readers race to download it
    start = threading.Barrier(THREADS)
    errors = []
    device_fills = []  # list.append is atomic: one list for every thread
    launched = opencl_interposer.counts() if opencl_interposer.active() else None

    def work(seed):
        rng = random.Random(seed)
        own = hb.Buffer((N,), "int32")
        model = np.zeros(N, np.int32)
        try:
            start.wait()
            for _ in range(STEPS):
                if rng.random() < 0.5:
                    shared_step(shared, expected, rng)
                else:
                    own_step(own, model, rng, device_fills)
        except BaseException as e:  # reported below, with the thread that raised it
            errors.append((seed, e))

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "deadlock: a thread did not finish"
    assert not errors, errors
    np.testing.assert_array_equal(np.asarray(shared), expected)
    t = shared.transfers
    assert t.to_device_bytes == t.to_device * N * 4 and t.to_host_bytes == t.to_host * N * 4
    assert t.to_host >= 1  # the first reader downloaded the device copy
    # The device writes really ran on the device: pyopencl's fill is a kernel launch (or a
    # clEnqueueFillBuffer) on the buffer's cl_mem, and each one was checked above through the
    # host copy it had to download.
    assert device_fills, "no thread filled its buffer on the device"
    if launched is not None:
        now = opencl_interposer.counts()
        assert (now["kernels"] + now["fills"]) - (launched["kernels"] + launched["fills"]) >= len(device_fills)
    # pyopencl reads the shared buffer's device copy: it holds the data too.
    shared.copy_to_device()
    np.testing.assert_array_equal(hb.opencl.as_array(shared, writable=False).get(), expected)
