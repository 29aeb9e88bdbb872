"""The residency rules in Python (the state machine of docs/architecture.md), for the property
tests that drive random operations against them (test_residency_model.py, test_device_faults.py)."""

import numpy as np
from hypothesis import strategies as st

import halide_buffer as hb

N = 24  # elements: one storage of N * itemsize bytes
DTYPES = ["int32", "float32", "bfloat16"]  # pyopencl has no bfloat16 kernels: its device side uses bits()
# An owned buffer, external writes (wrapped writable memory its owner may write at any time), a
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


def mirrors_host(device, b):
    """Whether the device copy of b's storage will be its host memory itself (zero-copy): the
    device says so, and the storage's first byte is aligned for the widest vector of its
    elements (16 lanes), or for the device's base alignment if that is less."""
    if device is None or not getattr(device, "zero_copy", False):
        return False
    address = b.numpy().__array_interface__["data"][0]
    return address % min(device.base_alignment, 16 * b.itemsize) == 0


class Model:
    """The rules, in Python: what each side's memory holds, the flags, and what each step must
    move. Memory contents are float64 (exact for every value written here); NaN marks bytes
    nobody wrote (a new device allocation), which are never compared."""

    def __init__(self, data, *, lease, readonly):
        self.nbytes = data.nbytes
        self.host = np.asarray(data, np.float64)  # the host memory
        self.dev = None  # the device memory, while there is an allocation
        self.host_dirty = True  # the raw flag; constructed from host data
        self.device_dirty = False
        self.lease = lease  # wrapped writable memory its owner may write at any time
        self.readonly = readonly
        self.up = self.down = 0
        self.up_bytes = self.down_bytes = 0  # the whole storage each time, but for a pipeline's parts
        # Zero-copy (mirrors_host()): the device copy is the host memory itself, one array here,
        # and what would be copies are maps, which move nothing.
        self.zero_copy = False
        self.maps_up = self.maps_down = 0

    @property
    def allocated(self):
        return self.dev is not None

    def host_dirty_reads(self):  # host_dirty(): external writes are newer unless the device copy is
        return self.host_dirty or (self.lease and not self.device_dirty)

    def host_current(self):  # copy_to_host()
        if self.device_dirty:
            if self.zero_copy:
                self.maps_down += 1
            else:
                self.host = self.dev.copy()
                self.down += 1
                self.down_bytes += self.nbytes
            self.device_dirty = False

    def allocate(self):  # device_malloc(): a new device copy is empty, the host holds the data
        if not self.allocated:
            self.dev = self.host if self.zero_copy else np.full(N, np.nan)
            self.host_dirty = True

    def device_current(self):  # copy_to_device()
        self.allocate()
        if self.host_dirty_reads():
            if self.zero_copy:
                self.maps_up += 1
            else:
                self.dev = self.host.copy()
                self.up += 1
                self.up_bytes += self.nbytes
            self.host_dirty = False

    def free(self):  # device_free(): a newer device copy comes home first
        if self.allocated:
            self.host_current()
            self.dev = None

    def current(self):
        """What a reader sees: the newer copy's values."""
        return self.dev if self.device_dirty else self.host

    def transfers(self):
        """The copies the rules made, as common.counts() gives a buffer's."""
        return (self.up, self.up_bytes, self.down, self.down_bytes)

    def maps(self):
        """The maps the rules made, as (maps_to_device, maps_to_host)."""
        return (self.maps_up, self.maps_down)

    def host_write(self, lo, hi, x):  # numpy(writable=True) and every other host writer
        self.host_current()
        self.host_dirty = True
        self.host[lo:hi] = x

    def device_write(self, lo, hi, x):  # a consumer's kernel, under a write lease
        self.device_current()
        self.device_dirty = True
        self.host_dirty = False
        self.dev[lo:hi] = x

    def observe(self, b, values, host_memory):
        """After a step whose copies depend on where a pipeline's runtime placed a part (whole
        storages or its elements alone, its own allocations brought home): the flags and the
        copies are taken from the buffer, the values from what the step computed. The copy that
        is current must hold them (checked here); a stale one's contents are unknown."""
        self.device_dirty = b.device_dirty()
        self.host_dirty = b.host_dirty()
        t = b.transfers
        self.up, self.up_bytes, self.down, self.down_bytes = t.to_device, t.to_device_bytes, t.to_host, t.to_host_bytes
        self.maps_up, self.maps_down = t.maps_to_device, t.maps_to_host
        if self.zero_copy and self.device_dirty:
            b.device_sync()  # one memory, which the step's queued kernels may still be writing
        # Kernels that only read it may still run: nothing waits for them here, so a later host
        # write must (Residency.check_held_result()).
        if not self.device_dirty or self.zero_copy:
            assert_holds(host_memory, values)
            self.host = values.copy()
        else:
            self.host = np.asarray(host_memory, np.float64).copy()
        if not b.has_device_allocation():
            self.dev = None
        elif self.zero_copy:
            self.dev = self.host  # one memory
        elif self.host_dirty_reads():
            self.dev = np.full(N, np.nan)  # stale: never compared
        else:
            self.dev = values.copy()  # a device read checks it

    def device_dirty_refusals(self):
        """Why set_device_dirty(True) must be refused now, as patterns of its message."""
        reasons = []
        if not self.allocated:
            reasons.append(r"the buffer has no device allocation")
        if self.host_dirty_reads():  # external writes: the owner may have written since
            reasons.append(r"the host copy is newer|the buffer wraps memory its owner may write" if self.lease
                           else r"the host copy is newer")
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


# --- a device consumer: pyopencl on OpenCL, the stand-in's control API on CUDA ---------------------


def consumer_write(device, v, raw, after_lease=lambda: None):
    """A consumer's kernel writes the forward view `v` with `raw` bytes, under a write lease
    (ours: it may fail or be refused); `after_lease` runs between the two."""
    if device.kind == "cuda":
        native, offset, _ = v._device_view(device, True, "device_write")
        after_lease()
        cuda_standin().write(native + offset, raw)
        return
    a = hb.opencl.as_array(v.bits() if v.dtype == "bfloat16" else v, device=device, writable=True)
    after_lease()
    a.set(np.frombuffer(raw, a.dtype).reshape(a.shape))
    a.queue.finish()


def consumer_read(device, v, dtype, after_lease=lambda: None):
    """What a consumer reads of the forward view `v` on the device, under a read lease."""
    if device.kind == "cuda":
        native, offset, _ = v._device_view(device, False, "device_read")
        after_lease()
        return np.frombuffer(cuda_standin().read(native + offset, v.size * dtype.itemsize), dtype)
    a = hb.opencl.as_array(v.bits() if v.dtype == "bfloat16" else v, device=device, writable=False)
    after_lease()
    return a.get().view(dtype)


def cuda_standin():
    import cuda_standin as standin  # tests/cuda_standin.py: loaded where the driver is asked for

    return standin
