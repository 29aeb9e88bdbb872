"""Helpers shared by the test files: plain functions, classes and constants, nothing of pytest's.

Test files import them as ``from common import ...`` (pytest puts tests/ on sys.path, as for
pipelines.py); conftest.py keeps the fixtures and hooks only.

What it offers:

- Data: `ALL_DTYPES`, `random_bits(shape, dtype, seed)`, `bits_of(a)`, and buffers on the host
  holding them: `filled(shape, dtype, seed)` (random bits) and `ramp(shape, dtype)` (0, 1, 2...);
  `on_device(b)`, b's elements as the OpenCL device holds them.
- Transfers: `counts(t)`, `Moves(b)`, `NONE`, `up(nbytes)`, `down(nbytes)`.
"""
import numpy as np

import halide_buffer as hb

ALL_DTYPES = [t.name for t in hb.dtypes()]


# ---------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------


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


def filled(shape, dtype, seed=0):
    """A buffer holding random bits of `dtype` (on the host), and the ndarray of those values."""
    src = random_bits(shape, dtype, seed)
    b = hb.Buffer(shape, dtype)
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


def on_device(b):
    """b's elements as the OpenCL device holds them (read with pyopencl, not through b)."""
    return hb.opencl.as_array(b, writable=False).get()


# ---------------------------------------------------------------------------------------------
# Transfers
# ---------------------------------------------------------------------------------------------


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
