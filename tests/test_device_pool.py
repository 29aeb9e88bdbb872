"""The device memory pool: device memory our buffers free is kept by size class and handed to the
next allocation of that class (OpenCL through the interposer's counts of clCreateBuffer, CUDA on
the driver stand-in, which proves our bookkeeping, not CUDA's behaviour); released by trim(),
when an allocation fails (then retried), and when the process exits. Leak checks count what the
pool keeps as held (common.pooled_blocks())."""

import gc
import subprocess
import sys

import numpy as np
import pytest

import halide_buffer as hb

import cuda_standin as standin
import opencl_interposer as oi
from common import live_counts
from pipelines import OPENCL_TARGET, brighter_opencl_func, c_compiler, compile_and_load

ALLOCATION_FAILURE = -4  # CL_MEM_OBJECT_ALLOCATION_FAILURE


@pytest.fixture()
def copying():
    """The OpenCL device that copies (each allocation its own cl_mem), through the interposer."""
    if not oi.active():
        pytest.skip(f"the OpenCL interposer is not installed: {oi.reason()}")
    d = hb.opencl.device(zero_copy=False)
    gc.collect()  # buffers of earlier tests freed now, not into this test's counts
    d.trim()
    yield d
    oi.clear_faults()
    d.pool_limit = 2**30


def created():
    return oi.counts()["mem_created"]


def released():
    return oi.counts()["mem_released"]


def on_device(device, nbytes):
    b = hb.Buffer((nbytes,), "uint8")
    b.copy_to_device(device)
    return b


def test_freed_memory_is_kept_by_size_class_and_reused(copying):
    made, start = created(), copying.pool  # hits and misses count from the device's start

    def since():
        now = copying.pool
        return {**now, "hits": now["hits"] - start["hits"], "misses": now["misses"] - start["misses"]}

    b = on_device(copying, 1000)
    b.device_free()  # kept, not released: 1000 bytes are allocated as the class of 1024
    assert since() == {"bytes_held": 1024, "blocks_held": 1, "hits": 0, "misses": 1, "limit": 2**30}
    c = on_device(copying, 1020)  # the same class: the same memory
    assert since()["hits"] == 1 and copying.pool["blocks_held"] == 0 and created() == made + 1
    d = on_device(copying, 1030)  # the next class (1280): the driver
    assert since()["misses"] == 2 and created() == made + 2
    np.testing.assert_array_equal(np.asarray(c), np.zeros(1020, np.uint8))  # uploaded whole, as a new one is
    del c, d
    gc.collect()
    assert copying.pool["bytes_held"] == 1024 + 1280 and copying.pool["blocks_held"] == 2


def test_size_classes_are_four_per_power_of_two_from_256_bytes(copying):
    for nbytes, size in ((1, 256), (256, 256), (257, 320), (1000, 1024), (1025, 1280), (3 << 20, 3 << 20),
                         ((3 << 20) + 1, (3 << 20) + (1 << 19))):
        copying.trim()
        on_device(copying, nbytes).device_free()
        assert copying.pool["bytes_held"] == size, nbytes


def test_trim_releases_what_the_pool_keeps_and_live_counts_hold_it_until_then(copying):
    gc.collect()
    before, driver = live_counts(), hb._core._live_counts()["device_allocations"]
    for n in (300, 5000, 70000):
        on_device(copying, n).device_free()
    assert hb._core._live_counts()["device_allocations"] == driver + 3  # still ours
    assert live_counts() == before  # but no buffer holds them
    gone = released()
    assert copying.trim() == 320 + 5120 + 81920
    assert released() == gone + 3 and copying.pool["bytes_held"] == 0
    assert hb._core._live_counts()["device_allocations"] == driver


def test_the_pool_keeps_at_most_its_limit(copying):
    copying.pool_limit = 2048
    gone = released()
    first, second = on_device(copying, 1024), on_device(copying, 1024)
    first.device_free()
    second.device_free()  # exactly the limit: kept
    assert copying.pool["bytes_held"] == 2048 and released() == gone
    copying.trim()
    gone = released()
    on_device(copying, 1024).device_free()
    on_device(copying, 2048).device_free()  # past the limit: released
    assert copying.pool["bytes_held"] == 1024 and released() == gone + 1
    copying.pool_limit = 0
    on_device(copying, 512).device_free()
    assert copying.pool["bytes_held"] == 1024 and released() == gone + 2


def test_a_limit_of_zero_takes_the_pool_out_of_the_way(copying):
    copying.pool_limit = 0
    start, made, gone = copying.pool, created(), released()
    for _ in range(2):
        on_device(copying, 1000).device_free()  # straight to the driver and back to it
    assert created() == made + 2 and released() == gone + 2
    assert copying.pool == start  # never asked: no hit, no miss, nothing kept


def test_memory_a_consumer_still_holds_is_never_handed_on(copying):
    b = on_device(copying, 4096)
    b.numpy(writable=True)[:] = 9
    b.copy_to_device(copying)
    lease = hb.opencl.as_array(b, device=copying, writable=False)  # pyopencl holds a reference
    b.device_free()
    assert copying.pool["blocks_held"] == 0
    c = on_device(copying, 4096)
    c.numpy(writable=True)[:] = 1
    c.copy_to_device(copying)
    np.testing.assert_array_equal(lease.get(), np.full(4096, 9, np.uint8))  # not overwritten


def test_an_allocation_failure_releases_the_pool_and_retries(copying):
    on_device(copying, 1 << 16).device_free()
    gone = released()
    oi.fail("clCreateBuffer", ALLOCATION_FAILURE)  # the next one fails, once
    b = on_device(copying, 1 << 12)  # another class: the driver is asked, refuses, is asked again
    assert b.has_device_allocation() and released() == gone + 1 and copying.pool["bytes_held"] == 0
    oi.fail("clCreateBuffer", ALLOCATION_FAILURE)  # with nothing kept the failure is the caller's
    with pytest.raises(hb.DeviceError, match=r"copy_to_device\(\): allocating device memory failed"):
        on_device(copying, 1 << 12)


@pytest.fixture(scope="module")
def brighter(tmp_path_factory):
    hb.opencl.device()  # opens the OpenCL loader process-wide, where a pipeline's runtime looks
    return compile_and_load(tmp_path_factory.mktemp("pool"), c_compiler(), *brighter_opencl_func(),
                            "hb_pool_brighter", target=OPENCL_TARGET)


@pytest.mark.parametrize("zero_copy", [False, True], ids=["copying", "zero-copy"])
def test_a_loop_of_calls_with_outputs_not_given_allocates_nothing_after_its_first_calls(brighter, zero_copy, copying):
    device = hb.opencl.device(zero_copy=zero_copy)
    device.trim()
    image = np.arange(32 * 48, dtype=np.uint8).reshape(32, 48)
    x = hb.Buffer.from_host(image, external_writes=False)
    x.copy_to_device(device)
    out = brighter(x)
    out = brighter(x)  # the loop's steady state: one output alive while the next is made, two blocks
    made, pool = created(), device.pool
    for _ in range(20):
        out = brighter(x)
        assert out.device is device
        np.testing.assert_array_equal(np.asarray(out), image + 10)
    assert created() == made  # no clCreateBuffer once the loop runs
    assert device.pool["hits"] - pool["hits"] == 20 and device.pool["misses"] == pool["misses"]


def test_a_host_block_beyond_the_limit_is_released_and_one_at_it_kept(brighter):
    zc = hb.opencl.device(zero_copy=True)
    if not zc.zero_copy:
        pytest.skip(f"{zc!r} does not share the host's memory: no host blocks")
    zc.trim()
    x = hb.Buffer.from_host(np.zeros((32, 48), np.uint8), external_writes=False)
    x.copy_to_device(zc)
    limit = zc.pool_limit
    try:
        zc.pool_limit = 1536  # the class of 32 x 48 bytes: one block exactly
        first, second = brighter(x), brighter(x)
        gone = released()
        del first
        assert zc.pool["blocks_held"] == 1 and released() == gone  # at the limit: kept
        del second
        assert zc.pool["blocks_held"] == 1 and released() == gone + 1  # beyond it: released
    finally:
        zc.pool_limit = limit


def test_the_pools_are_released_at_exit():
    """An atexit handler registered before halide_buffer's runs after it: by then the pool is empty."""
    code = """
import atexit
held = []
atexit.register(lambda: print("at exit:", held[0].pool["bytes_held"]))
import halide_buffer as hb
d = hb.opencl.device(zero_copy=False)
b = hb.Buffer((5000,), "uint8")
b.copy_to_device(d)
b.device_free()
print("before:", d.pool["bytes_held"])
held.append(d)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["before:", "5120", "at", "exit:", "0"], out.stderr


# --- CUDA, on the driver stand-in ----------------------------------------------------------------


@pytest.fixture()
def gpu():
    if not standin.active():
        pytest.skip(standin.why_inactive())
    d = hb.cuda.device()
    gc.collect()  # buffers of earlier tests freed now, not into this test's counts
    d.trim()
    yield d
    standin.clear_faults()


def test_cuda_memory_is_pooled_the_same_way(gpu):
    allocs, live, hits = standin.calls("cuMemAlloc"), standin.live_allocations(), gpu.pool["hits"]
    b = on_device(gpu, 3000)
    b.device_free()
    assert gpu.pool["bytes_held"] == 3072 and standin.live_allocations() == live + 1
    c = on_device(gpu, 2900)
    assert standin.calls("cuMemAlloc") == allocs + 1 and gpu.pool["hits"] == hits + 1
    del c
    gc.collect()
    assert gpu.trim() == 3072 and standin.live_allocations() == live


def test_cuda_memory_lent_to_a_consumer_is_not_pooled(gpu):
    b = on_device(gpu, 4096)
    b.__cuda_array_interface__  # a raw pointer handed out: the memory ends with the storage
    b.device_free()
    assert gpu.pool["blocks_held"] == 0
    live = standin.live_allocations()
    del b  # the storage's end frees it (the driver's count drops), rather than pooling it
    assert standin.live_allocations() == live - 1 and gpu.pool["blocks_held"] == 0


def test_a_cuda_allocation_failure_releases_the_pool_and_retries(gpu):
    on_device(gpu, 1 << 16).device_free()
    with standin.failing("cuMemAlloc", standin.OUT_OF_MEMORY):
        b = on_device(gpu, 1 << 12)
    assert b.has_device_allocation() and gpu.pool["bytes_held"] == 0
