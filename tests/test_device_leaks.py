"""Ten thousand device buffers created, copied and freed: every allocation is released (the
backend counts them), no storage or export outlives its buffer, and the process does not grow."""

import gc
import os

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pytest

import halide_buffer as hb

from common import live_counts

ROUNDS = 10_000


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def cycle(i, queue):
    """One buffer's life, a different path through the device code each time."""
    b = hb.Buffer((64,), "float32")
    b.numpy(writable=True)[:] = i
    kind = i % 5
    if kind == 0:  # copy there and back, free explicitly
        b.copy_to_device()
        b.set_device_dirty()
        assert np.asarray(b)[0] == i
        b.device_free()
    elif kind == 1:  # a device view and a published halide_buffer_t, freed by the destructor
        a = hb.opencl.as_array(b[8:16])
        b.cropped(0, 4, 8)._get_raw_halide_buffer_t()
        assert a.get()[0] == i
    elif kind == 2:  # wrap someone's memory, then detach
        w = hb.opencl.wrap(cla.to_device(queue, np.full(16, i, np.int32)))
        assert np.asarray(w)[0] == i
        w.device_detach_native()
    elif kind == 3:  # wrap and let the buffer die with it
        mem = cl.Buffer(queue.context, cl.mem_flags.READ_WRITE, 256)
        b.device_wrap_native(mem)
    else:  # allocate without copying, then a view frees it
        b.device_malloc()
        b[1:].device_free()


@pytest.mark.skipif(bool(os.environ.get("HALIDE_BUFFER_SANITIZER")),
                    reason="RSS under AddressSanitizer measures its quarantine and shadow memory, not our leaks")
def test_ten_thousand_device_buffers_leave_nothing_behind():
    queue = cl.CommandQueue.from_int_ptr(hb.opencl.device().queue)
    gc.collect()
    before = live_counts()
    probe = hb.Buffer((64,), "float32")
    probe.copy_to_device()
    held = live_counts()
    del probe
    # The counts see a live buffer and its device allocation, so their return to `before` below
    # says that everything was freed.
    assert held["storages"] == before["storages"] + 1
    assert held["device_allocations"] == before["device_allocations"] + 1
    for i in range(ROUNDS // 10):  # warm up: caches, kernels, allocator pools
        cycle(i, queue)
    gc.collect()
    warm = rss_bytes()
    for i in range(ROUNDS):
        cycle(i, queue)
    gc.collect()
    grown = rss_bytes() - warm
    assert live_counts() == before
    assert grown < 16 * 2**20, f"RSS grew by {grown / 2**20:.1f} MiB over {ROUNDS} device buffers"
