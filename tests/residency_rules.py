"""The residency rules in Python (the state machine of docs/architecture.md), for the property
tests that drive random operations against them (test_residency_model.py, test_device_faults.py)."""

import numpy as np
from hypothesis import strategies as st

import halide_buffer as hb

N = 24  # elements: one storage of N * itemsize bytes
DTYPES = ["int32", "float32", "bfloat16"]  # pyopencl has no bfloat16 kernels: its device side uses bits()
# An owned buffer, a standing lease (wrapped writable memory its owner may write at any time), a
# promised wrap (external_writes=False) and wrapped read-only memory.
STARTS = ["owned", "lease", "promised", "read-only"]


def start_buffer(seed, dtype, start):
    """A buffer of N random values of `dtype` made the way `start` names, the array it wraps
    (None for an owned one: keep it alive with the buffer), and its Model."""
    data = np.random.default_rng(seed).integers(-2**31, 2**31, N).astype(hb.dtype(dtype).numpy)
    if start == "owned":
        b, wrapped = hb.Buffer((N,), dtype), None
        b.numpy(writable=True)[...] = data
    else:
        wrapped = data
        if start == "read-only":
            data.flags.writeable = False
        b = hb.Buffer.from_host(data, external_writes=start != "promised")
    return b, wrapped, Model(data, lease=start == "lease", readonly=start == "read-only")


class Model:
    """The rules, in Python: what each side's memory holds, the flags, and what each step must
    move. Memory contents are float64 (exact for every value written here); NaN marks bytes
    nobody wrote (a new device allocation), which are never compared."""

    def __init__(self, data, *, lease, readonly):
        self.host = np.asarray(data, np.float64)  # the host memory
        self.dev = None  # the device memory, while there is an allocation
        self.host_dirty = True  # the raw flag; constructed from host data
        self.device_dirty = False
        self.lease = lease  # wrapped writable memory its owner may write at any time
        self.readonly = readonly
        self.up = self.down = 0

    @property
    def allocated(self):
        return self.dev is not None

    def host_dirty_reads(self):  # host_dirty(): a standing lease is newer unless the device copy is
        return self.host_dirty or (self.lease and not self.device_dirty)

    def host_current(self):  # copy_to_host()
        if self.device_dirty:
            self.host = self.dev.copy()
            self.down += 1
            self.device_dirty = False

    def allocate(self):  # device_malloc(): a new device copy is empty, the host holds the data
        if not self.allocated:
            self.dev = np.full(N, np.nan)
            self.host_dirty = True

    def device_current(self):  # copy_to_device()
        self.allocate()
        if self.host_dirty_reads():
            self.dev = self.host.copy()
            self.up += 1
            self.host_dirty = False

    def free(self):  # device_free(): a newer device copy comes home first
        if self.allocated:
            self.host_current()
            self.dev = None

    def device_dirty_refusals(self):
        """Why set_device_dirty(True) must be refused now, as patterns of its message."""
        reasons = []
        if not self.allocated:
            reasons.append(r"the buffer has no device allocation")
        if self.host_dirty:
            reasons.append(r"the host copy is newer")
        elif self.host_dirty_reads():  # a standing lease: the owner may have written since
            reasons.append(r"the host copy is newer|the buffer wraps memory its owner may write")
        if self.readonly:
            reasons.append(r"the buffer wraps read-only memory")
        return reasons


def assert_holds(got, expected):
    """`got` has the model's values wherever the model knows them."""
    known = ~np.isnan(expected)
    got = np.asarray(got)[known].astype(np.float64)
    if not np.array_equal(got, expected[known]):
        np.testing.assert_array_equal(got, expected[known])


ranges = st.tuples(st.integers(0, N - 1), st.integers(1, N)).map(sorted).filter(lambda r: r[0] < r[1])
values = st.integers(-2**31, 2**31 - 1)
