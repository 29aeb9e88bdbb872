"""Random sequences of host and device operations against a pure-Python model of the rules
(the state machine of docs/architecture.md). After every step the host memory, the flags and the exact copies must match
the model, which moves the storage only when a reader on the stale side needs it.

The machine starts from an owned buffer, a standing lease (wrapped writable memory its owner
may write at any time), a promised wrap (`external_writes=False`) or wrapped read-only memory,
of a classic dtype or bfloat16. Besides reads, writes and copies on both sides it sets the flags
directly (a claim, which the model believes: it keeps what each side's memory holds, so a false
claim shows up as old data, exactly) and makes calls that must be refused: a refused call moves
no data and changes no flag."""

import contextlib

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import halide_buffer as hb

from common import counts
from residency_rules import DTYPES, N, STARTS, assert_holds, ranges, start_buffer, values

class Residency(RuleBasedStateMachine):
    @initialize(seed=st.integers(0, 2**32 - 1), dtype=st.sampled_from(DTYPES), start=st.sampled_from(STARTS))
    def start(self, seed, dtype, start):
        self.dtype = np.dtype(hb.dtype(dtype).numpy)
        self.bfloat16 = dtype == "bfloat16"
        self.nbytes = N * self.dtype.itemsize
        self.b, self.a, self.model = start_buffer(seed, dtype, start)
        assert self.b.external_writes == (start == "lease")  # read-only memory is no lease
        assert self.b.readonly == (start == "read-only")
        # The host memory itself, read after every step without a lease (no copy, no flag).
        self.host_memory = self.b.numpy()

    def view(self, lo, hi, reverse=False):
        v = self.b[lo:hi] if lo % 2 else self.b.cropped(0, lo, hi - lo)
        return v[::-1] if reverse else v

    def value(self, value):
        return np.asarray(value).astype(self.dtype)[()]

    def device_array(self, v, writable=True):
        if self.bfloat16:  # its bits, which pyopencl can fill
            v = v.bits()
        return hb.opencl.as_array(v, writable=writable)

    def state(self):
        b = self.b
        return (b.host_dirty(), b.device_dirty(), b.has_device_allocation(), counts(b.transfers),
                self.host_memory.tobytes())

    @contextlib.contextmanager
    def refused(self, exception, match):
        """The call raises, and moved no data and changed no flag."""
        before = self.state()
        with pytest.raises(exception, match=match):
            yield
        assert self.state() == before, "a refused call changed the buffer"

    # --- host side ------------------------------------------------------------------------

    @rule(r=ranges, value=values)
    def host_write(self, r, value):
        x = self.value(value)
        v = self.view(*r)
        if self.model.readonly:
            with self.refused(BufferError, r"numpy\(\): the buffer wraps read-only memory"):
                v.numpy(writable=True)
            return
        self.model.host_current()
        v.numpy(writable=True)[...] = x
        self.model.host_dirty = True
        self.model.host[r[0]:r[1]] = x

    @precondition(lambda self: self.model.lease and not self.model.device_dirty)
    @rule(r=ranges, value=values)
    def owner_write(self, r, value):  # the owner writes the wrapped array itself, telling no one
        x = self.value(value)
        self.a[r[0]:r[1]] = x
        self.model.host[r[0]:r[1]] = x

    @rule(r=ranges, reverse=st.booleans(), how=st.sampled_from(["asarray", "memoryview", "numpy"]))
    def host_read(self, r, reverse, how):
        v = self.view(*r, reverse=reverse)
        if how == "memoryview" and self.bfloat16:
            with self.refused(BufferError, r"__buffer__\(\): dtype bfloat16 has no PEP 3118 format"):
                memoryview(v)
            got = np.asarray(memoryview(v.bits())).view(self.dtype)
        else:
            got = {"asarray": np.asarray, "memoryview": lambda x: np.asarray(memoryview(x)),
                   "numpy": lambda x: x.numpy()}[how](v)
        self.model.host_current()
        expected = self.model.host[r[0]:r[1]]
        assert_holds(got, expected[::-1] if reverse else expected)

    @rule(r=ranges)
    def from_dlpack(self, r):
        v = self.view(*r)
        if self.bfloat16:
            # NumPy refuses the dtype after our export made the host copy current: a host read;
            # the write lease no consumer took leaves no mark.
            with pytest.raises(RuntimeError, match="Unsupported dtype"):
                np.from_dlpack(v)
            self.model.host_current()
            return
        got = np.from_dlpack(v)  # a writable lease (unless the memory is read-only)
        assert got.flags.writeable != self.model.readonly
        self.model.host_current()
        self.model.host_dirty |= not self.model.readonly
        assert_holds(got, self.model.host[r[0]:r[1]])

    @rule()
    def copy_to_host(self):
        self.b.copy_to_host()
        self.model.host_current()

    # --- device side ----------------------------------------------------------------------

    @rule(r=ranges, value=values)
    def device_write(self, r, value):
        x = self.value(value)
        v = self.view(*r)
        if self.model.readonly:
            with self.refused(BufferError, r"opencl\.as_array\(\): the buffer wraps read-only memory"):
                self.device_array(v)
            return
        a = self.device_array(v)  # a pyopencl kernel on the shared cl_mem
        self.model.device_current()
        a.fill(np.array(x).view(a.dtype)[()])
        a.queue.finish()
        self.model.device_dirty = True
        self.model.host_dirty = False
        self.model.dev[r[0]:r[1]] = x

    @rule(r=ranges)
    def device_read(self, r):
        got = self.device_array(self.view(*r), writable=False).get().view(self.dtype)
        self.model.device_current()
        assert_holds(got, self.model.dev[r[0]:r[1]])

    @rule()
    def copy_to_device(self):
        self.b.copy_to_device()
        self.model.device_current()

    @rule()
    def device_malloc(self):
        self.b.device_malloc()
        self.model.allocate()

    @rule()
    def device_free(self):
        self.b.device_free()
        self.model.free()

    @precondition(lambda self: self.model.allocated and not self.model.host_dirty_reads()
                  and not self.model.readonly)
    @rule()
    def claim_device_write(self):  # a device writer that tells us afterwards (Halide's way)
        self.b.set_device_dirty(True)
        self.model.device_dirty = True

    # --- the flags, set directly ----------------------------------------------------------

    @rule(r=ranges, value=st.booleans())
    def set_host_dirty(self, r, value):  # True: the host copy is the newer one
        v = self.view(*r)
        if value and self.model.device_dirty:
            with self.refused(ValueError, r"set_host_dirty\(\): the device copy is newer"):
                v.set_host_dirty(True)
            return
        v.set_host_dirty(value)
        self.model.host_dirty = value

    @rule(r=ranges, value=st.booleans())
    def set_device_dirty(self, r, value):  # True: the device copy is the newer one
        v = self.view(*r)
        reasons = self.model.device_dirty_refusals() if value else []
        if reasons:
            with self.refused(ValueError, r"set_device_dirty\(\): (%s)" % "|".join(reasons)):
                v.set_device_dirty(True)
            return
        v.set_device_dirty(value)
        self.model.device_dirty = value

    # --- calls that must be refused (besides those in the rules above) -------------------

    @rule(r=ranges)
    def array_without_a_copy_in_another_dtype(self, r):
        with self.refused(ValueError, r"__array__\(\): converting \w+ to int8 needs a copy"):
            self.view(*r).__array__(dtype=np.int8, copy=False)

    @rule(r=ranges, value=values)
    def write_through_asarray(self, r, value):
        got = np.asarray(self.view(*r))  # a read: the host copy is made current
        self.model.host_current()
        with self.refused(ValueError, "read-only"):
            got[...] = self.value(value)

    # --- after every step -----------------------------------------------------------------

    @invariant()
    def state_matches_the_model(self):
        m = self.model
        assert (self.b.host_dirty(), self.b.device_dirty()) == (m.host_dirty_reads(), m.device_dirty)
        assert not (m.host_dirty and m.device_dirty)
        assert self.b.has_device_allocation() == m.allocated
        assert counts(self.b.transfers) == (m.up, m.up * self.nbytes, m.down, m.down * self.nbytes)
        assert_holds(self.host_memory, m.host)


def run(examples):
    Residency.TestCase.settings = settings(max_examples=examples, stateful_step_count=25,
                                           deadline=None, suppress_health_check=[HealthCheck.too_slow])
    Residency.TestCase("runTest").runTest()


def test_random_operations_match_the_model():
    run(1000)


@pytest.mark.long
def test_random_operations_match_the_model_long():
    run(20000)
