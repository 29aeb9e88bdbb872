"""Random sequences of host and device operations against a pure-Python model of the rules
(DESIGN section 4). After every step the data, the flags and the exact copies must match the
model, which moves the storage only when a reader on the stale side needs it."""

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import halide_buffer as hb

from conftest import counts

N = 24  # int32 elements: one storage of 96 bytes
NBYTES = N * 4


class Model:
    """The rules, in Python: where the current data is, and what each step must move."""

    def __init__(self, data):
        self.data = data.copy()
        self.allocated = False
        self.host_dirty = True  # constructed from host data
        self.device_dirty = False
        self.up = self.down = 0

    def host_current(self):  # copy_to_host()
        if self.device_dirty:
            self.down += 1
            self.device_dirty = False

    def device_current(self):  # copy_to_device()
        if not self.allocated:
            self.allocated = True
            self.host_dirty = True  # a new device copy is empty: the host holds the data
        if self.host_dirty:
            self.up += 1
            self.host_dirty = False

    def free(self):  # device_free(): a newer device copy comes home first
        if self.allocated:
            self.host_current()
            self.allocated = False


ranges = st.tuples(st.integers(0, N - 1), st.integers(1, N)).map(sorted).filter(lambda r: r[0] < r[1])
values = st.integers(-2**31, 2**31 - 1)


class Residency(RuleBasedStateMachine):
    @initialize(seed=st.integers(0, 2**32 - 1))
    def start(self, seed):
        data = np.random.default_rng(seed).integers(-2**31, 2**31, N, dtype=np.int32)
        self.b = hb.Buffer((N,), "int32")
        self.b.numpy(writable=True)[...] = data
        self.model = Model(data)

    def view(self, lo, hi, reverse=False):
        v = self.b[lo:hi] if lo % 2 else self.b.cropped(0, lo, hi - lo)
        return v[::-1] if reverse else v

    # --- host side ------------------------------------------------------------------------

    @rule(r=ranges, value=values)
    def host_write(self, r, value):
        self.model.host_current()
        self.view(*r).numpy(writable=True)[...] = value
        self.model.host_dirty = True
        self.model.data[r[0]:r[1]] = value

    @rule(r=ranges, reverse=st.booleans(), how=st.sampled_from(["asarray", "memoryview", "numpy"]))
    def host_read(self, r, reverse, how):
        v = self.view(*r, reverse=reverse)
        got = {"asarray": np.asarray, "memoryview": lambda x: np.asarray(memoryview(x)),
               "numpy": lambda x: x.numpy()}[how](v)
        self.model.host_current()
        expected = self.model.data[r[0]:r[1]]
        np.testing.assert_array_equal(got, expected[::-1] if reverse else expected)

    @rule()
    def copy_to_host(self):
        self.b.copy_to_host()
        self.model.host_current()

    # --- device side ----------------------------------------------------------------------

    @rule(r=ranges, value=values)
    def device_write(self, r, value):
        a = hb.opencl.as_array(self.view(*r))  # a pyopencl kernel on the shared cl_mem
        self.model.device_current()
        a.fill(np.int32(value))
        a.queue.finish()
        self.model.device_dirty = True
        self.model.data[r[0]:r[1]] = value

    @rule(r=ranges)
    def device_read(self, r):
        got = hb.opencl.as_array(self.view(*r), writable=False).get()
        self.model.device_current()
        np.testing.assert_array_equal(got, self.model.data[r[0]:r[1]])

    @rule()
    def copy_to_device(self):
        self.b.copy_to_device()
        self.model.device_current()

    @rule()
    def device_malloc(self):
        self.b.device_malloc()
        if not self.model.allocated:
            self.model.allocated = True
            self.model.host_dirty = True

    @rule()
    def device_free(self):
        self.b.device_free()
        self.model.free()

    @precondition(lambda self: self.model.allocated and not self.model.host_dirty)
    @rule()
    def claim_device_write(self):  # a device writer that tells us afterwards (Halide's way)
        self.b.set_device_dirty(True)
        self.model.device_dirty = True

    # --- after every step -----------------------------------------------------------------

    @invariant()
    def state_matches_the_model(self):
        m = self.model
        assert (self.b.host_dirty(), self.b.device_dirty()) == (m.host_dirty, m.device_dirty)
        assert not (m.host_dirty and m.device_dirty)
        assert self.b.has_device_allocation() == m.allocated
        assert counts(self.b.transfers) == (m.up, m.up * NBYTES, m.down, m.down * NBYTES)


def run(examples):
    Residency.TestCase.settings = settings(max_examples=examples, stateful_step_count=25,
                                           deadline=None, suppress_health_check=[HealthCheck.too_slow])
    Residency.TestCase("runTest").runTest()


def test_random_operations_match_the_model():
    run(1000)


@pytest.mark.long
def test_random_operations_match_the_model_long():
    run(20000)
