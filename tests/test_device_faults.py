"""Random operation sequences with random driver failures, on both backends: data is never lost.

The machine drives one buffer (owned, external writes, a promised wrap or read-only memory) of
a few dtypes through host reads and writes, copies, views, exports, leases, frees and device
writes that need no pipeline (a consumer's kernel: pyopencl's fill on OpenCL, the stand-in's
memory writes on CUDA), and arms failures at random: the n-th call of a driver entry point
fails with a code. The CUDA driver is the test suite's stand-in (tests/drivers/cuda_standin.c:
our bookkeeping, not CUDA's behaviour); OpenCL is PoCL through the interposer
(tests/drivers/opencl_interposer.c). After every step:

- a step that failed raised a DeviceError carrying the injected code, and moved no data and
  changed no flag (a device allocation made before the failing copy may stay);
- the flags, the exact copies (counts and bytes) and the host memory match the model
  (residency_rules.py), so the valid copy of the data is intact and readable;
- the buffer is never dirty on both sides.

At the end of each sequence, once the buffer is gone, no device memory is left: the stand-in's
allocation table and the interposer's count of live cl_mem objects are back where they were.
"""

import gc
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis import note
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import halide_buffer as hb

import cuda_standin
import opencl_interposer
from common import counts, pooled_blocks
from residency_rules import (DTYPES, N, STARTS, assert_holds, consumer_read, consumer_write, mirrors_host, ranges,
                             start_buffer, values)

# Per backend: the entry points failures are injected into, and the codes they fail with.
FAULTS = {
    "cuda-driver-standin": (
        ["cuMemAlloc", "cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync", "cuMemcpy3DAsync", "cuStreamSynchronize",
         "cuCtxPushCurrent", "cuPointerGetAttribute"],
        {2: "CUDA_ERROR_OUT_OF_MEMORY", 700: "CUDA_ERROR_ILLEGAL_ADDRESS", 719: "CUDA_ERROR_LAUNCH_FAILED",
         999: "CUDA_ERROR_UNKNOWN"},
    ),
    "opencl-pocl-interposer": (
        ["clCreateBuffer", "clEnqueueReadBuffer", "clEnqueueWriteBuffer", "clEnqueueReadBufferRect",
         "clEnqueueWriteBufferRect", "clFinish"],
        {-4: "CL_MEM_OBJECT_ALLOCATION_FAILURE", -5: "CL_OUT_OF_RESOURCES", -6: "CL_OUT_OF_HOST_MEMORY"},
    ),
    # PoCL with zero-copy: the device copy of aligned storages is their host memory, mapped.
    "opencl-pocl-zero-copy": (
        ["clCreateBuffer", "clEnqueueMapBuffer", "clEnqueueUnmapMemObject", "clEnqueueReadBuffer",
         "clEnqueueWriteBuffer", "clFinish"],
        {-4: "CL_MEM_OBJECT_ALLOCATION_FAILURE", -5: "CL_OUT_OF_RESOURCES", -6: "CL_OUT_OF_HOST_MEMORY"},
    ),
}


class Backend:
    """What differs between the two: the device, arming failures, a consumer's device writes
    and reads, and the count of live device memory."""

    def __init__(self, name):
        self.name = name
        self.entries, self.codes = FAULTS[name]
        if name.startswith("cuda"):
            self.device = hb.cuda.device()
            self.driver = cuda_standin
            self.live = lambda: cuda_standin.live_allocations() - pooled_blocks()
        else:
            self.device = hb.opencl.device(zero_copy=name.endswith("zero-copy"))
            self.driver = opencl_interposer
            self.live = lambda: opencl_interposer.live_mem_objects() - pooled_blocks()

    def arm(self, entry, code, nth, repeat):
        if self.name.startswith("cuda"):
            cuda_standin.fail(entry, code, nth, repeat)
        else:
            opencl_interposer.fail(entry, code, nth, repeat)

    def disarm(self):
        self.driver.clear_faults()

    def device_write(self, v, raw):
        """A consumer's kernel writes the view (contiguous, forward) with `raw` bytes; the lease
        is ours (it may fail), the write the consumer's (never faulted)."""
        consumer_write(self.device, v, raw, after_lease=self.disarm)

    def device_read(self, v, dtype):
        return consumer_read(self.device, v, dtype, after_lease=self.disarm)


class Faulty(RuleBasedStateMachine):
    backend: Backend  # set per run

    @initialize(seed=st.integers(0, 2**32 - 1), dtype=st.sampled_from(DTYPES), start=st.sampled_from(STARTS))
    def start(self, seed, dtype, start):
        gc.collect()
        self.live_before = self.backend.live()
        self.dev = self.backend.device
        self.dtype = np.dtype(hb.dtype(dtype).numpy)
        self.b, self.a, self.model = start_buffer(seed, dtype, start)
        self.model.zero_copy = mirrors_host(self.dev, self.b)
        self.host_memory = self.b.numpy()
        self.armed = None

    def teardown(self):
        self.backend.disarm()
        for name in ("b", "a", "host_memory"):
            self.__dict__.pop(name, None)
        gc.collect()
        if hasattr(self, "live_before"):
            assert self.backend.live() == self.live_before, "device memory outlived its buffer"

    # --- failures ----------------------------------------------------------------------------

    @rule(entry=st.integers(0, 63), code=st.integers(0, 63), nth=st.integers(1, 3), repeat=st.booleans())
    def arm(self, entry, code, nth, repeat):  # indices into the backend's entry points and codes
        which = self.backend.entries[entry % len(self.backend.entries)]
        codes = sorted(self.backend.codes)
        code = codes[code % len(codes)]
        note(f"arm: {which} fails with {code} on call {nth}{' and after' if repeat else ''}")
        self.backend.disarm()
        self.backend.arm(which, code, nth, repeat)
        self.armed = code

    def state(self):
        b = self.b
        return (b.host_dirty(), b.device_dirty(), counts(b.transfers), self.host_memory.tobytes())

    def attempt(self, action):
        """Runs `action`; True when it went through. A DeviceError must carry the armed code,
        and leave the buffer as it was: no data moved, the flags as the model has them (an
        allocation made before the failing copy may stay, as a new one would be)."""
        before, allocated = self.state(), self.b.has_device_allocation()
        try:
            action()
            return True
        except hb.DeviceError as e:
            assert self.armed is not None, f"a DeviceError with no failure injected: {e}"
            assert (e.code, e.name) == (self.armed, self.backend.codes[self.armed]), str(e)
            assert self.state()[2:] == before[2:], f"a failed call moved data: {e}"
            if self.b.has_device_allocation() and not allocated:
                self.model.allocate()  # the flags then say so too: the invariant checks them
            self.backend.disarm()
            self.armed = None
            return False

    def view(self, lo, hi):
        return self.b[lo:hi] if lo % 2 else self.b.cropped(0, lo, hi - lo)

    def value(self, value):
        return np.asarray(value).astype(self.dtype)[()]

    # --- host side ------------------------------------------------------------------------------

    @rule(r=ranges, value=values)
    def host_write(self, r, value):
        if self.model.readonly:
            return
        x = self.value(value)
        v = self.view(*r)
        held = []
        if self.attempt(lambda: held.append(v.numpy(writable=True))):
            self.model.host_current()
            held[0][...] = x
            self.model.host_dirty = True
            self.model.host[r[0]:r[1]] = x

    @rule(r=ranges, how=st.sampled_from(["asarray", "dlpack"]))
    def host_read(self, r, how):
        if how == "dlpack" and self.dtype.kind == "V":
            how = "asarray"  # NumPy takes no bfloat16 through DLPack
        v = self.view(*r)
        got = []
        dlpack = how == "dlpack" and self.dtype.name != "bfloat16"
        read = (lambda x: np.from_dlpack(x, device="cpu")) if dlpack else np.asarray
        if self.attempt(lambda: got.append(read(v))):
            self.model.host_current()
            if dlpack:
                self.model.host_dirty |= not self.model.readonly  # a writable export is a lease
            assert_holds(got[0], self.model.host[r[0]:r[1]])

    @rule()
    def copy_to_host(self):
        if self.attempt(self.b.copy_to_host):
            self.model.host_current()

    # --- device side ----------------------------------------------------------------------------

    @rule()
    def copy_to_device(self):
        if self.attempt(lambda: self.b.copy_to_device(self.dev)):
            self.model.device_current()

    @rule()
    def device_malloc(self):
        if self.attempt(lambda: self.b.device_malloc(self.dev)):
            self.model.allocate()

    @rule()
    def device_free(self):
        if self.attempt(self.b.device_free):
            self.model.free()

    @rule()
    def device_sync(self):
        self.attempt(self.b.device_sync)

    @precondition(lambda self: not self.model.readonly)
    @rule(r=ranges, value=values)
    def device_write(self, r, value):
        x = np.full(r[1] - r[0], self.value(value), self.dtype)
        if self.attempt(lambda: self.backend.device_write(self.view(*r), x.tobytes())):
            self.model.device_current()
            self.model.device_dirty = True
            self.model.host_dirty = False
            self.model.dev[r[0]:r[1]] = x.astype(np.float64)

    @rule(r=ranges)
    def device_read(self, r):
        got = []
        if self.attempt(lambda: got.append(self.backend.device_read(self.view(*r), self.dtype))):
            self.model.device_current()
            assert_holds(got[0], self.model.dev[r[0]:r[1]])

    # --- after every step -----------------------------------------------------------------------

    @invariant()
    def state_matches_the_model(self):
        m = self.model
        assert (self.b.host_dirty(), self.b.device_dirty()) == (m.host_dirty_reads(), m.device_dirty)
        assert not (self.b.host_dirty() and self.b.device_dirty())
        assert self.b.has_device_allocation() == m.allocated
        assert counts(self.b.transfers) == m.transfers()
        assert (self.b.transfers.maps_to_device, self.b.transfers.maps_to_host) == m.maps()
        assert_holds(self.host_memory, m.host)


BACKENDS = list(FAULTS)
PHASES = [Phase.explicit, Phase.reuse, Phase.generate] + ([] if os.environ.get("HB_NO_SHRINK") else [Phase.shrink])


def run(backend, examples):
    if backend.startswith("cuda") and not cuda_standin.active():
        pytest.skip(cuda_standin.why_inactive())
    if backend.startswith("opencl") and not opencl_interposer.active():
        pytest.skip(opencl_interposer.reason())
    Faulty.backend = Backend(backend)
    Faulty.TestCase.settings = settings(max_examples=examples, stateful_step_count=25, deadline=None,
                                        suppress_health_check=[HealthCheck.too_slow], phases=PHASES)
    Faulty.TestCase("runTest").runTest()


@pytest.mark.examples(quick=30, ci=200)
@pytest.mark.parametrize("backend", BACKENDS)
def test_random_failures_never_lose_data(backend, examples):
    run(backend, examples)


@pytest.mark.long
@pytest.mark.parametrize("backend", BACKENDS)
def test_random_failures_never_lose_data_long(backend):
    run(backend, 2000)
