"""Shared fixtures: the dtype rows and a NumPy reference for each."""

import gc
import os
import sys

import numpy as np
import pytest
from hypothesis import settings

import halide_buffer as hb

import cuda_standin
import opencl_interposer

# Before any test opens a driver: OpenCL through the interposer (its calls counted, failures
# injectable) and CUDA through the driver stand-in, unless the environment names the libraries.
if not os.environ.get(opencl_interposer.ENV_LIBRARY):
    opencl_interposer.install()
cuda_standin.install()

# Property tests draw the same examples on every run ("reproducible"), so the suite's outcome does
# not depend on the day; HYPOTHESIS_PROFILE=explore draws new ones and remembers failures (in
# .hypothesis/), for hunting bugs rather than gating a change.
settings.register_profile("reproducible", derandomize=True, database=None)
settings.register_profile("explore")
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "reproducible"))

ALL_DTYPES = [t.name for t in hb.dtypes()]


def random_bits(shape, dtype, seed=0):
    """An ndarray of `dtype` whose bytes are random: NaN payloads and every bit pattern included.

    Sub-byte ml_dtypes types are stored one per byte; their unused high bits are kept zero, as
    ml_dtypes itself produces them.
    """
    t = hb.dtype(dtype)
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=tuple(shape) + (t.itemsize,), dtype=np.uint8)
    if t.dlpack_padded:
        raw &= np.uint8((1 << t.dlpack_type[1]) - 1)
    if t.name == "bool":
        raw &= np.uint8(1)
    return raw.view(t.numpy).reshape(shape)


def filled(name, shape=(3, 5), seed=1):
    """A buffer holding random bits of dtype `name` (on the host), and those values."""
    src = random_bits(shape, name, seed)
    b = hb.Buffer(shape, name)
    b.numpy(writable=True)[...] = src
    return b, src


def ramp(shape, dtype="float32"):
    """A buffer holding 0, 1, 2, ... in C order (on the host)."""
    b = hb.Buffer(shape, dtype)
    b.numpy(writable=True)[...] = np.arange(b.size).reshape(shape)
    return b


def bits_of(a):
    """The raw bytes of an ndarray, shaped like it, for exact comparison (NaN payloads too)."""
    a = np.ascontiguousarray(a)
    return a.view(np.uint8).reshape(a.shape + (a.dtype.itemsize,))


@pytest.fixture(scope="session")
def dev():
    """The default OpenCL device (PoCL's CPU device on a machine without a GPU)."""
    return hb.opencl.device()


@pytest.fixture(scope="session")
def ctx(dev):
    """pyopencl's view of the default device's context."""
    import pyopencl as cl

    return cl.Context.from_int_ptr(dev.context)


@pytest.fixture(scope="session")
def queue(dev):
    """pyopencl's view of the default device's queue: work on it is ordered with our copies."""
    import pyopencl as cl

    return cl.CommandQueue.from_int_ptr(dev.queue)


def counts(t):
    """A Transfers as (to_device, to_device_bytes, to_host, to_host_bytes)."""
    return (t.to_device, t.to_device_bytes, t.to_host, t.to_host_bytes)


class Moves:
    """What a buffer's storage moved since this object was made: `moves()` gives
    (to_device, to_device_bytes, to_host, to_host_bytes) and restarts the count."""

    def __init__(self, b):
        self.b = b
        self.last = b.transfers

    def __call__(self):
        now = self.b.transfers
        delta, self.last = counts(now - self.last), now
        return delta


NONE = (0, 0, 0, 0)


def up(nbytes):
    """One host->device copy of nbytes."""
    return (1, nbytes, 0, 0)


def down(nbytes):
    """One device->host copy of nbytes."""
    return (0, 0, 1, nbytes)


@pytest.fixture(autouse=True)
def cuda_standin_strict():
    """Fails a test whose CUDA driver calls misused the driver stand-in (its strict mode)."""
    yield
    if cuda_standin.active():
        found = cuda_standin.violations()
        cuda_standin.clear_violations()
        cuda_standin.clear_faults()
        if found:
            pytest.fail("CUDA driver stand-in: misuse of the driver:\n  " + "\n  ".join(found), pytrace=False)


def pytest_sessionfinish(session, exitstatus):
    """The stand-in's strict mode at the end: once every test's objects are gone, no allocation
    is alive that halide_buffer does not hold (a test's buffer kept by a module is still held)."""
    if not cuda_standin.loaded():
        return
    gc.collect()
    alive, held = cuda_standin.live_allocations(), hb._core._live_counts()["device_allocations"]
    if alive > held:
        sys.stderr.write(f"\nCUDA driver stand-in: {alive - held} of its {alive} allocations alive at the end "
                         f"of the session, owned by nothing (halide_buffer holds {held} device allocations)\n")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED

