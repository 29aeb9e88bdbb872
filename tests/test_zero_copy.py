"""Zero-copy residency on a device that shares the host's memory (PoCL's CPU device reports
CL_DEVICE_HOST_UNIFIED_MEMORY): the device copy of a storage aligned for it is its host memory,
what were copies are maps (counted apart from copies: no byte moves), and the dirty flags still
order kernels and host access. The residency model and the fault injection run on this device
too (test_residency_model.py, test_device_faults.py); the pool is test_device_pool.py's."""

import os
import subprocess
import sys

import numpy as np
import pytest

import halide_buffer as hb

import opencl_interposer as oi
from pipelines import OPENCL_TARGET, brighter_opencl_func, c_compiler, compile_and_load

ENV = "HALIDE_BUFFER_OPENCL_ZERO_COPY"


@pytest.fixture(scope="module")
def copying():
    return hb.opencl.device(zero_copy=False)


@pytest.fixture()
def calls():
    """The interposer's counts of OpenCL calls since the test began, as a function."""
    if not oi.active():
        pytest.skip(f"the OpenCL interposer is not installed: {oi.reason()}")
    before = oi.counts()
    return lambda: {k: v - before[k] for k, v in oi.counts().items()}


def address(a):
    return a.__array_interface__["data"][0]


def moved(t):
    """(copies to the device, bytes, copies to the host, bytes, maps to the device, to the host)."""
    return (t.to_device, t.to_device_bytes, t.to_host, t.to_host_bytes, t.maps_to_device, t.maps_to_host)


def test_zero_copy_is_chosen_per_device_and_by_the_environment(zc, copying):
    assert zc.host_unified_memory and not copying.zero_copy
    assert hb.opencl.device(zero_copy=True) is zc and hb.opencl.device(zero_copy=False) is copying
    assert zc.context == copying.context and zc.queue == copying.queue  # one memory, one queue
    with pytest.raises(TypeError, match=r"opencl\.device\(\): zero_copy must be True, False or None, not int"):
        hb.opencl.device(zero_copy=1)
    for value, expected in (("0", "False"), ("off", "False"), ("no", "False"), ("1", "True"), (None, "True")):
        env = {k: v for k, v in os.environ.items() if k != ENV}
        if value is not None:
            env[ENV] = value
        out = subprocess.run([sys.executable, "-c", "import halide_buffer as hb; print(hb.opencl.device().zero_copy)"],
                             env=env, capture_output=True, text=True, timeout=120)
        assert out.stdout.strip() == expected, (value, out.stderr)


@pytest.mark.parametrize("first", ["zero-copy", "copying"])
def test_moving_between_the_zero_copy_device_and_its_copying_twin_says_which_is_which(zc, copying, first):
    """The two share one context and queue, so one name: the refusal says which holds the copy."""
    here, there = (zc, copying) if first == "zero-copy" else (copying, zc)
    other = "copying" if first == "zero-copy" else "zero-copy"
    b = hb.Buffer((4,), "float32")
    b.copy_to_device(here)
    name = f"{here.name} ({here.platform})".replace("(", r"\(").replace(")", r"\)")
    with pytest.raises(ValueError, match=rf"copy_to_device\(\): the buffer's device copy is on the {first} {name}, not "
                                         rf"the {other} {name}; call device_free\(\) first to move it"):
        b.copy_to_device(there)
    b.device_free()
    b.copy_to_device(there)  # what the message says to do
    assert b.device is there


def test_a_device_adopting_a_context_follows_the_environment_unless_told(zc, ctx, queue):
    # The suite's environment turns zero-copy off for new devices (conftest.py).
    assert os.environ[ENV] == "0"
    assert not hb.opencl.device(ctx, queue).zero_copy
    assert hb.opencl.device(ctx, queue, zero_copy=True).zero_copy
    assert not hb.opencl.device(ctx, zero_copy=False).zero_copy


def test_an_owned_buffer_crosses_by_maps_and_a_kernels_write_is_read_in_place(zc, calls):
    b = hb.Buffer((64, 64), "float32")
    b.numpy(writable=True)[...] = np.arange(4096, dtype=np.float32).reshape(64, 64)
    b.copy_to_device(zc)
    assert moved(b.transfers) == (0, 0, 0, 0, 1, 0) and not b.host_dirty()
    a = hb.opencl.as_array(b, device=zc)  # a consumer's write on the device
    a.fill(7.0)
    a.queue.finish()
    assert b.device_dirty()
    np.testing.assert_array_equal(np.asarray(b), np.full((64, 64), 7.0, np.float32))
    assert moved(b.transfers) == (0, 0, 0, 0, 1, 1) and not b.device_dirty()
    b.numpy(writable=True)[0, :3] = -1  # a host write, then the device copy is current again
    b.copy_to_device(zc)
    assert moved(b.transfers) == (0, 0, 0, 0, 2, 1)
    c = calls()
    assert (c["reads"], c["writes"], c["read_bytes"], c["write_bytes"]) == (0, 0, 0, 0)
    assert c["maps"] == c["unmaps"] == 3 and c["mem_created"] == 1
    # The consumer reads, on the device, what the host wrote.
    np.testing.assert_array_equal(hb.opencl.as_array(b, device=zc, writable=False).get()[0, :4], [-1, -1, -1, 7])
    process = hb.transfers()
    assert process.maps_to_device >= 2 and process.maps_to_host >= 1
    assert "maps_to_device=2, maps_to_host=1" in repr(b.transfers)


def test_memory_aligned_for_its_elements_is_used_in_place_and_other_memory_is_copied(zc):
    raw = np.zeros(8192, np.uint8)
    at = (-address(raw)) % 128 + 16  # 16 bytes past a multiple of 128
    u8 = raw[at:at + 1024]  # uint8's widest vector is 16 bytes: in place
    f32 = raw[at:at + 1024].view(np.float32)  # float32's is 64 bytes: copied
    f32_aligned = raw[at + 112:at + 112 + 1024].view(np.float32)
    # float64's is 128 bytes: memory at a multiple of 112 bytes (a whole number of doubles) that is
    # not one of 128 is copied
    odd = next(o for o in range(0, 1024, 16) if (address(raw) + o) % 112 == 0 and (address(raw) + o) % 128)
    f64 = raw[odd:odd + 1024].view(np.float64)
    f64_aligned = raw[at + 112:at + 112 + 1024].view(np.float64)
    cases = ((u8, True), (f32, False), (f32_aligned, True), (f64, False), (f64_aligned, True))
    for array, in_place in cases:
        b = hb.Buffer.from_host(array, external_writes=False)
        b.copy_to_device(zc)
        expected = (0, 0, 0, 0, 1, 0) if in_place else (1, 1024, 0, 0, 0, 0)
        assert moved(b.transfers) == expected, (array.dtype, address(array) % 128)
    # The copying device copies all of them.
    b = hb.Buffer.from_host(u8, external_writes=False)
    b.copy_to_device(hb.opencl.device(zero_copy=False))
    assert moved(b.transfers) == (1, 1024, 0, 0, 0, 0)


def test_a_part_read_back_in_place_is_a_map_of_its_bytes(zc, calls):
    b = hb.Buffer((32,), "int32")
    b.numpy(writable=True)[...] = np.arange(32)
    b.copy_to_device(zc)
    a = hb.opencl.as_array(b, device=zc)
    a.fill(5)
    a.queue.finish()
    part = b[4:12]
    np.testing.assert_array_equal(np.asarray(part), np.full(8, 5))  # the storage comes home: one map
    assert moved(b.transfers)[:4] == (0, 0, 0, 0)
    assert calls()["read_bytes"] == 0


@pytest.fixture(scope="module")
def brighter(tmp_path_factory):
    hb.opencl.device()  # opens the OpenCL loader process-wide, where a pipeline's runtime looks
    return compile_and_load(tmp_path_factory.mktemp("zero_copy"), c_compiler(), *brighter_opencl_func(),
                            "hb_zero_copy_brighter", target=OPENCL_TARGET)


def test_a_chain_of_pipelines_moves_no_byte_between_host_and_device(zc, brighter, calls):
    image = np.random.default_rng(0).integers(0, 200, (64, 96), dtype=np.uint8)
    x = hb.Buffer.from_host(image, external_writes=False)
    x.device_malloc(zc)  # the chain's device: hb.aot computes where its inputs are
    process = hb.transfers()
    out = brighter(brighter(brighter(x)))
    np.testing.assert_array_equal(np.asarray(out), image + 30)
    t = hb.transfers() - process
    assert (t.to_device_bytes, t.to_host_bytes) == (0, 0) and t.maps_to_device == 1 and t.maps_to_host == 1
    c = calls()
    assert (c["read_bytes"], c["write_bytes"]) == (0, 0) and c["kernels"] == 3
    assert out.device is zc


def test_storages_a_pipeline_allocates_are_host_blocks_of_the_devices_pool(zc, brighter, calls):
    image = np.arange(64 * 64, dtype=np.uint8).reshape(64, 64)
    x = hb.Buffer.from_host(image, external_writes=False)
    x.device_malloc(zc)
    first = brighter(x)
    del first
    pool = zc.pool
    created = calls()["mem_created"]
    for _ in range(10):
        out = brighter(x)
        np.testing.assert_array_equal(np.asarray(out), image + 10)
        assert "memory=owned" in repr(out)
        del out
    assert calls()["mem_created"] == created  # every output is the same block, reused
    assert zc.pool["hits"] - pool["hits"] == 10 and zc.pool["misses"] == pool["misses"]


def test_a_pooled_output_moves_into_shared_memory_and_its_block_goes_back(zc, brighter):
    image = np.arange(64 * 64, dtype=np.uint8).reshape(64, 64)
    x = hb.Buffer.from_host(image, external_writes=False)
    x.device_malloc(zc)
    out = brighter(x)  # a host block of the pool, computed on in place
    held = zc.pool["blocks_held"]
    out.share_memory()  # the device copy comes home (a map) and goes; the data moves to a segment
    assert out.is_shared and not out.has_device_allocation() and zc.pool["blocks_held"] == held + 1
    np.testing.assert_array_equal(np.asarray(out), image + 10)
    assert moved(out.transfers)[:4] == (0, 0, 0, 0)


def test_a_lease_given_to_a_call_is_its_owners_again_when_the_call_returns(zc, brighter):
    """Wrapped memory its owner may write at any time is the device copy the kernels read: a
    call returns once they finished, so the owner's next write cannot reach the result (it did
    in most calls when the call returned with its kernel queued)."""
    for _ in range(10):
        image = np.full((2048, 2048), 100, np.uint8)
        x = hb.Buffer.from_host(image)  # memory its owner writes (external writes), in place (uint8 is aligned for itself)
        assert x.external_writes
        x.device_malloc(zc)
        out = brighter(x)
        image[...] = 0  # the owner's write, after the call
        np.testing.assert_array_equal(np.asarray(out), np.full((2048, 2048), 110, np.uint8))
        assert moved(x.transfers)[:4] == (0, 0, 0, 0)


def test_only_a_call_on_memory_its_owner_writes_waits_for_its_kernels(zc, brighter, calls):
    """The wait above is for external writes alone (clFinish calls counted): a call on memory nobody else
    writes returns with its kernels queued; a call on memory its owner writes waits once, besides the map that
    hands that memory to the device (a map waits too)."""
    image = np.full((64, 64), 1, np.uint8)
    promised = hb.Buffer.from_host(image.copy(), external_writes=False)
    owned_by_user = hb.Buffer.from_host(image.copy())
    for x in (promised, owned_by_user):
        x.device_malloc(zc)
        brighter(x)  # the first call hands the memory over (a map)
    finishes = calls()["finishes"]
    out = brighter(promised)
    assert calls()["finishes"] == finishes
    maps = owned_by_user.transfers.maps_to_device
    finishes = calls()["finishes"]
    out = brighter(owned_by_user)
    assert calls()["finishes"] - finishes == owned_by_user.transfers.maps_to_device - maps + 1
    np.testing.assert_array_equal(np.asarray(out), image + 10)


def test_memory_its_owner_writes_is_waited_for_wherever_it_is_among_the_arguments(zc, brighter, calls):
    """As an output after a promised input, memory its owner writes makes the call wait for its kernels as it
    does as the first argument: its owner may write its memory as soon as the call returns."""
    image = np.full((64, 64), 1, np.uint8)
    inp = hb.Buffer.from_host(image.copy(), external_writes=False)
    target = np.zeros_like(image)
    owned_by_user = hb.Buffer.from_host(target)  # the user's own memory, in place
    for x in (inp, owned_by_user):
        x.device_malloc(zc)
    brighter(inp, owned_by_user)  # the first call hands the memory over (a map)
    maps = owned_by_user.transfers.maps_to_device
    finishes = calls()["finishes"]
    brighter(inp, owned_by_user)
    assert calls()["finishes"] - finishes == owned_by_user.transfers.maps_to_device - maps + 1
    np.testing.assert_array_equal(np.asarray(owned_by_user), image + 10)


def test_numpy_inputs_and_dask_chunks_move_no_byte_on_the_default_device(brighter):
    """With the environment's default (zero-copy on PoCL), in a process of its own: a NumPy image
    through a chain of calls, then hb.dask.map_pipeline over chunks, copy nothing."""
    code = f"""
import numpy as np, dask.array as da, halide_buffer as hb
p = hb.aot.load({brighter.library_path!r}, {brighter.name!r})
assert hb.opencl.device().zero_copy
image = np.arange(64 * 96, dtype=np.uint8).reshape(64, 96)
before = hb.transfers()
assert (np.asarray(p(p(image))) == image + 20).all()
(got,) = hb.dask.compute(hb.dask.map_pipeline(p, da.from_array(image, chunks=(32, 48))))
assert (got == image + 10).all()
t = hb.transfers() - before
print(t.to_device_bytes, t.to_host_bytes, t.maps_to_device > 0, t.maps_to_host > 0)
"""
    env = {k: v for k, v in os.environ.items() if k != ENV}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.stdout.split() == ["0", "0", "True", "True"], out.stderr


def test_host_memory_under_queued_kernels_outlives_them(brighter):
    """Kernels are queued, not waited for: an input array dropped right after the calls (NumPy's
    large arrays are pages of their own, unmapped when freed) must not be freed while they run on
    it, nor a pool's block that trim() releases or that goes back beyond the pool's limit. In a
    process of its own: the bug this is for crashed it."""
    code = f"""
import numpy as np, halide_buffer as hb
d = hb.opencl.device(zero_copy=True)
assert d.zero_copy
p = hb.aot.load({brighter.library_path!r}, {brighter.name!r})
for i in range(100):
    x = np.full((1024, 1024), i % 200, np.uint8)   # 1 MiB: pages of its own, unmapped when freed
    b = hb.Buffer.from_host(x, external_writes=False)
    b.copy_to_device(d)
    for _ in range(20):
        kept = p(b)                                  # a pool's block; the kernels are queued
    del kept
    if i % 25 == 24:
        d.trim()                                     # the blocks' host memory, under the kernels
    del x, b                                         # the input's, under the kernels
d.pool_limit = 0                                     # every block going back is released at once
b = hb.Buffer.from_host(np.full((1024, 1024), 3, np.uint8), external_writes=False)
b.copy_to_device(d)
for _ in range(2000):
    kept = p(b)                                      # the previous output's block, under its kernel
del kept
x = np.full((1024, 1024), 7, np.uint8)
assert (np.asarray(p(x)) == 17).all()
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.split() == ["ok"], (out.returncode, out.stderr[-2000:])
