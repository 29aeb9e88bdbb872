"""Random sequences of host and device operations against a pure-Python model of the rules
(the state machine of docs/architecture.md). After every step the host memory, the flags and the
exact copies must match the model, which moves the storage only when a reader on the stale side
needs it.

The machine starts from an owned buffer, external writes (wrapped writable memory its owner
may write at any time), a promised wrap (`external_writes=False`) or wrapped read-only memory,
of a classic dtype or bfloat16, on the host alone, on OpenCL (PoCL) or on CUDA (the driver
stand-in: our bookkeeping only). Besides reads, writes and copies on both sides it sets the flags directly (a
claim, which the model believes: it keeps what each side's memory holds, so a false claim shows
up as old data, exactly) and makes calls that must be refused: a refused call moves no data and
changes no flag.

Where the layers meet, it also drops DLPack capsules unconsumed, holds `halide_buffer_t`s from
`_get_raw_halide_buffer_t()` across every later step (each must show the state the model has),
copies through Halide's own `halide_buffer_copy` in and out of parts, and calls pipelines
(identity copies, host and OpenCL) on parts and negative-stride views, reading them and writing
them; an OpenCL runtime's own allocation for a part comes home. Where a pipeline's runtime
places a part decides which copies it makes (the whole storage, or the part's elements alone),
so after a device pipeline's call the model takes the flags and counts from the buffer and
checks the values (Model.observe()).
"""

import contextlib
import ctypes
import gc
import os

import halide as hl  # required test dependency: the test fails, not skips, without it
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import halide_buffer as hb

import cuda_standin
from common import DEVICE_DIRTY, HOST_DIRTY, HalideBufferT, at_mins_of, counts, raw_buffer
from pipelines import OPENCL_TARGET, TARGET, build, c_compiler, compile_and_load
from queue_gate import QueueGate
from residency_rules import (DTYPES, N, STARTS, assert_holds, consumer_read, consumer_write, mirrors_host, ranges,
                             start_buffer, values)

# "host": no device ever, host pipelines only; "opencl-zero-copy": PoCL's device copy is the host
# memory itself where it is aligned for it (mirrors_host()).
DEVICES = ["host", "opencl", "opencl-zero-copy", "cuda-driver-standin"]
BITS = {"int32": "uint32", "float32": "uint32", "bfloat16": "uint16"}  # what the pipelines copy


def identity_func(bits, gpu):
    """out(x) = in(x) of unsigned `bits`, any stride on either side; on the GPU in tiles of 8,
    the last one guarded."""
    x, xo, xi = hl.Var("x"), hl.Var("xo"), hl.Var("xi")
    inp = hl.ImageParam(hl.UInt(bits), 1, "inp")
    inp.dim(0).set_stride(hl.Expr())
    out = hl.Func("identity")
    out[x] = inp[x]
    out.output_buffer().dim(0).set_stride(hl.Expr())
    if gpu:
        out.gpu_tile(x, xo, xi, 8, hl.TailStrategy.GuardWithIf)
    return out, [inp]


@pytest.fixture(scope="module")
def pipelines(tmp_path_factory):
    """The identity pipelines by (where, bits dtype), and halide_buffer_copy of an OpenCL runtime."""
    hb.opencl.device()  # opens the OpenCL loader process-wide, where a pipeline's runtime looks
    directory = tmp_path_factory.mktemp("residency_model")
    cc = c_compiler()
    got = {}
    for where, target in [("host", TARGET), ("opencl", OPENCL_TARGET)]:
        for bits in (16, 32):
            name = f"hb_model_identity_{where}_{bits}"
            got[where, f"uint{bits}"] = compile_and_load(directory, cc, *identity_func(bits, where == "opencl"), name,
                                                         target=target)
    copy = build(directory, cc, *identity_func(8, True), "hb_model_runtime", target=OPENCL_TARGET).lib.halide_buffer_copy
    copy.argtypes = [ctypes.c_void_p] * 4
    copy.restype = ctypes.c_int
    got["halide_buffer_copy"] = copy
    return got


def device_of(name):
    """The device a machine's buffer goes to: None on the host alone."""
    if name == "host":
        return None
    if name.startswith("opencl"):
        return hb.opencl.device(zero_copy=name == "opencl-zero-copy")
    return hb.cuda.device()


class Residency(RuleBasedStateMachine):
    device_name: str  # set per run
    pipelines: dict

    @initialize(seed=st.integers(0, 2**32 - 1), dtype=st.sampled_from(DTYPES), start=st.sampled_from(STARTS))
    def start(self, seed, dtype, start):
        self.device = device_of(self.device_name)
        self.dtype = np.dtype(hb.dtype(dtype).numpy)
        self.bfloat16 = dtype == "bfloat16"
        self.bits = BITS[dtype]
        self.b, self.a, self.model = start_buffer(seed, dtype, start)
        self.model.zero_copy = mirrors_host(self.device, self.b)
        assert self.b.external_writes == (start == "lease")  # read-only memory is no lease
        assert self.b.readonly == (start == "read-only")
        # The host memory itself, read after every step without a lease (no copy, no flag).
        self.host_memory = self.b.numpy()
        self.structs = []  # (view, its halide_buffer_t) handed out and held
        self.held_result = None  # [a pipeline's output, the values it must hold, steps since]
        self.rng = np.random.default_rng(seed)

    def teardown(self):
        if getattr(self, "held_result", None) and self.held_result[3] is not None:
            self.held_result[3].__exit__(None, None, None)  # the queue is never left gated
            self.held_result = None
        for name in ("b", "a", "host_memory", "structs", "held_result"):
            self.__dict__.pop(name, None)
        gc.collect()

    def view(self, lo, hi, reverse=False):
        v = self.b[lo:hi] if lo % 2 else self.b.cropped(0, lo, hi - lo)
        return v[::-1] if reverse else v

    def value(self, value):
        return np.asarray(value).astype(self.dtype)[()]

    def random_values(self, n):
        return self.rng.integers(-2**31, 2**31, n).astype(self.dtype)

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
        self.model.host_write(*r, x)

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
                np.from_dlpack(v, device="cpu")
            self.dlpack_dropped_effect()
            return
        got = np.from_dlpack(v, device="cpu")  # a writable lease (unless the memory is read-only)
        assert got.flags.writeable != self.model.readonly
        self.model.host_current()
        self.model.host_dirty |= not self.model.readonly
        assert_holds(got, self.model.host[r[0]:r[1]])

    @rule(r=ranges, reverse=st.booleans(), versioned=st.booleans(), written=st.none() | values)
    def dlpack_dropped(self, r, reverse, versioned, written):
        """A capsule made and dropped, no consumer taking it; meanwhile, perhaps, a host write
        through another view, which the capsule's end must not take back."""
        # Read-only memory goes out in a versioned capsule only (a legacy one cannot say so).
        versioned |= self.model.readonly
        kwargs = {"dl_device": (1, 0)}  # the host's memory, wherever the buffer is
        if versioned:
            kwargs["max_version"] = (1, 0)
        capsule = self.view(*r, reverse=reverse).__dlpack__(**kwargs)
        if written is None or self.model.readonly:
            del capsule
            self.dlpack_dropped_effect()
            return
        self.model.host_current()
        x = self.value(written)
        self.b.numpy(writable=True)[r[0]:r[1]] = x
        self.model.host_write(*r, x)
        del capsule

    def dlpack_dropped_effect(self):
        # The export made the host copy current; its lease leaves no mark, unless a
        # halide_buffer_t is out (foreign code may have acted on the mark since).
        self.model.host_current()
        if self.structs and not self.model.readonly:
            self.model.host_dirty = True

    @rule()
    def copy_to_host(self):
        self.b.copy_to_host()
        self.model.host_current()

    # --- device side ----------------------------------------------------------------------

    @precondition(lambda self: self.device is not None)
    @rule(r=ranges, value=values)
    def device_write(self, r, value):
        x = np.full(r[1] - r[0], self.value(value), self.dtype)
        v = self.view(*r)
        if self.model.readonly:
            with self.refused(BufferError, r"\(\): the buffer wraps read-only memory"):
                consumer_write(self.device, v, x.tobytes())
            return
        consumer_write(self.device, v, x.tobytes())
        self.model.device_write(*r, x.astype(np.float64))

    @precondition(lambda self: self.device is not None)
    @rule(r=ranges)
    def device_read(self, r):
        got = consumer_read(self.device, self.view(*r), self.dtype)
        self.model.device_current()
        assert_holds(got, self.model.dev[r[0]:r[1]])

    @precondition(lambda self: self.device is not None)
    @rule()
    def copy_to_device(self):
        self.b.copy_to_device(self.device)
        self.model.device_current()

    @precondition(lambda self: self.device is not None)
    @rule()
    def device_malloc(self):
        self.b.device_malloc(self.device)
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

    # --- halide_buffer_t's handed to foreign code -------------------------------------------

    @precondition(lambda self: len(self.structs) < 4)
    @rule(r=ranges, reverse=st.booleans())
    def hold_struct(self, r, reverse):  # publishing one moves nothing
        v = self.view(*r, reverse=reverse)
        self.structs.append((v, HalideBufferT.from_address(v._get_raw_halide_buffer_t())))

    @precondition(lambda self: self.structs)
    @rule(which=st.integers(0, 3))
    def drop_struct(self, which):
        del self.structs[which % len(self.structs)]

    def struct_of(self, r):
        """The halide_buffer_t of a view over r (forward) for Halide's runtime: a held one's,
        asked for again (publishing moves nothing), else a new one, held from now on."""
        for v, raw in self.structs:
            if v.mins == self.view(*r).mins and v.shape == (r[1] - r[0],) and v.strides[0] > 0:
                break
        else:
            v = self.view(*r)
            self.structs.append((v, None))
        raw = HalideBufferT.from_address(v._get_raw_halide_buffer_t())
        self.structs = [(w, raw if w is v else held) for w, held in self.structs]
        return v, raw

    @rule(r=ranges)
    def halide_buffer_copy_out(self, r):
        """Halide's runtime copies a part of ours into a new host buffer: from the current copy,
        whichever it is, moving nothing of ours."""
        v, raw = self.struct_of(r)
        dst = at_mins_of(v, np.zeros(r[1] - r[0], self.dtype))
        assert self.pipelines["halide_buffer_copy"](None, ctypes.addressof(raw), None, ctypes.addressof(
            raw_buffer(dst))) == 0
        assert_holds(dst.numpy(), self.model.current()[r[0]:r[1]])
        if self.model.device_dirty:  # the elements read from the device copy: a copy of those bytes
            self.model.down += 1
            self.model.down_bytes += (r[1] - r[0]) * self.dtype.itemsize

    @precondition(lambda self: not self.model.readonly)  # Halide has no read-only flag
    @rule(r=ranges, value=values, to_device=st.booleans())
    def halide_buffer_copy_in(self, r, value, to_device):
        """Halide's runtime copies a host buffer into a part of ours: to its host copy, or to its
        device copy (which must exist)."""
        if not to_device and self.model.device_dirty:
            # Halide's runtime writes the elements into the host copy and calls it the newer one,
            # whatever the device holds: its caller brings the host copy home first.
            self.b.copy_to_host()
            self.model.host_current()
        v, raw = self.struct_of(r)
        x = self.value(value)
        src = at_mins_of(v, np.full(r[1] - r[0], x, self.dtype))
        interface = raw.device_interface if to_device else None
        to_device = interface is not None  # a part shown without device memory takes a host copy
        assert self.pipelines["halide_buffer_copy"](None, ctypes.addressof(raw_buffer(src)), interface,
                                                    ctypes.addressof(raw)) == 0
        if not to_device:
            self.model.host_write(*r, x)  # Halide sets host_dirty in the struct: taken in
        elif self.model.host_dirty_reads():
            # Into the host copy, which then goes up whole: the device copy's rest was stale.
            self.model.host[r[0]:r[1]] = x
            self.model.device_current()
            self.model.device_dirty = True
        else:  # the elements alone, written into the current device copy: a copy of those bytes
            self.model.dev[r[0]:r[1]] = x
            self.model.device_dirty = True
            self.model.host_dirty = False
            self.model.up += 1
            self.model.up_bytes += (r[1] - r[0]) * self.dtype.itemsize

    # --- pipelines on parts ---------------------------------------------------------------

    def pipeline(self, where):
        """The identity pipeline of this dtype's bits on `where`; the host's on the host and for a
        buffer on CUDA (an OpenCL pipeline would move it to OpenCL: not this machine's subject)."""
        return self.pipelines[where if self.computed_on_device(where) else "host", self.bits]

    def computed_on_device(self, where):
        """hb.aot computes on the device the buffer is on, else on the default device: this
        machine's device, or the host's pipeline is used (the zero-copy machine's buffer meets
        OpenCL pipelines once it is on its device)."""
        if where != "opencl" or self.device is None or self.device.kind != "opencl":
            return False
        return (self.b.device or hb.opencl.device()) is self.device

    def copies_agree(self):
        """No false claim stands: where both copies are called current they hold the same values
        (a device pipeline's copies are then taken from the buffer: see Model.observe())."""
        m = self.model
        if not m.allocated or m.host_dirty_reads() or m.device_dirty:
            return True
        return np.array_equal(m.host, m.dev)  # never true over device memory nobody wrote (NaN)

    @precondition(lambda self: self.copies_agree())
    @rule(r=ranges, reverse=st.booleans(), where=st.sampled_from(["host", "opencl"]))
    def pipeline_reads_a_part(self, r, reverse, where):
        """The output is an owned buffer (no lease: the call returns with its kernels queued) and
        is read after the next step: on the zero-copy machine the kernel reads the buffer's host
        memory itself, which a host write in that step must not reach (check_held_result())."""
        self.settle_held_result()  # one call held at a time
        v = self.view(*r, reverse=reverse)
        out = hb.Buffer(v.shape, self.bits)
        out.set_min(*v.mins)
        gate = None
        if self.model.zero_copy and self.computed_on_device(where) and QueueGate.native():
            # The kernel held back until well after the next step began, whatever its speed.
            gate = QueueGate(self.device, delay=0.01).__enter__()
        self.pipeline(where)(v.bits(), out)
        expected = self.model.current()[r[0]:r[1]]
        if not self.computed_on_device(where):
            self.model.host_current()
        self.held_result = [out, (expected[::-1] if reverse else expected).copy(), 0, gate]
        if self.computed_on_device(where):
            self.model.observe(self.b, self.model.current().copy(), self.host_memory)

    @precondition(lambda self: self.copies_agree())
    @rule(where=st.sampled_from(["host", "opencl"]))
    def pipeline_reads_the_whole(self, where):
        """The common call: the whole buffer in, which a device computes on in place (a part is
        in place only where the device can start a sub-buffer: rarely drawn above)."""
        self.pipeline_reads_a_part(r=[0, N], reverse=False, where=where)

    @precondition(lambda self: self.copies_agree())
    @rule(r=ranges, reverse=st.booleans(), where=st.sampled_from(["host", "opencl"]))
    def pipeline_writes_a_part(self, r, reverse, where):
        v = self.view(*r, reverse=reverse)
        x = self.random_values(r[1] - r[0])
        src = at_mins_of(v.bits(), x.view(self.bits))
        if self.model.readonly:
            with self.refused(hb.ReadOnlyError, r"\(\): argument '\S+': the output's memory is read-only"):
                self.pipeline(where)(src, v.bits())
            return
        self.pipeline(where)(src, v.bits())
        written = x.astype(np.float64)[::-1] if reverse else x.astype(np.float64)
        if not self.computed_on_device(where):
            self.model.host_write(*r, written)
            return
        values = self.model.current().copy()
        values[r[0]:r[1]] = written
        self.model.observe(self.b, values, self.host_memory)

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
    def check_held_result(self):
        """A pipeline's output holds what its input held at the call, read one step later."""
        if self.held_result is None:
            return
        if self.held_result[2] == 0:  # the invariants right after the call itself
            self.held_result[2] = 1
            return
        self.settle_held_result()

    def settle_held_result(self):
        """Opens the held call's gate (if any) and checks its output."""
        if self.held_result is None:
            return
        out, expected, _, gate = self.held_result
        self.held_result = None
        if gate is not None:
            gate.__exit__(None, None, None)
        assert_holds(out.numpy().view(self.dtype), expected)

    @invariant()
    def state_matches_the_model(self):
        m = self.model
        assert (self.b.host_dirty(), self.b.device_dirty()) == (m.host_dirty_reads(), m.device_dirty)
        assert not (m.host_dirty_reads() and m.device_dirty)
        assert self.b.has_device_allocation() == m.allocated
        assert counts(self.b.transfers) == m.transfers()
        assert (self.b.transfers.maps_to_device, self.b.transfers.maps_to_host) == m.maps()
        if m.zero_copy and m.device_dirty:
            self.b.device_sync()  # the host memory is the device's: read it once its kernels finished
        assert_holds(self.host_memory, m.host)
        # Every halide_buffer_t held shows the state. What Halide's runtime wrote into one of
        # them reaches the others with the next operation on the storage: the reads above.
        for _, raw in self.structs:
            assert (bool(raw.flags & HOST_DIRTY), bool(raw.flags & DEVICE_DIRTY)) == (m.host_dirty_reads(),
                                                                                      m.device_dirty)


PHASES = [Phase.explicit, Phase.reuse, Phase.generate] + ([] if os.environ.get("HB_NO_SHRINK") else [Phase.shrink])


def run(device, pipelines, examples):
    if device.startswith("cuda") and not cuda_standin.active():
        pytest.skip(cuda_standin.why_inactive())
    Residency.device_name = device
    Residency.pipelines = pipelines
    Residency.TestCase.settings = settings(max_examples=examples, stateful_step_count=25,
                                           deadline=None, suppress_health_check=[HealthCheck.too_slow],
                                           phases=PHASES)
    Residency.TestCase("runTest").runTest()


@pytest.mark.needs_halide
@pytest.mark.examples(quick=60, ci=600)
@pytest.mark.parametrize("device", DEVICES)
def test_random_operations_match_the_model(pipelines, device, examples):
    run(device, pipelines, examples)


@pytest.mark.long
@pytest.mark.needs_halide
@pytest.mark.parametrize("device", DEVICES)
def test_random_operations_match_the_model_long(pipelines, device):
    run(device, pipelines, 10000)


@pytest.mark.needs_halide
def test_zero_copy_memory_is_compared_once_the_queued_kernels_finished(pipelines):
    """A sequence the random machine found: on the zero-copy machine a device pipeline writes a
    part and returns with its kernel queued; the host memory is the device copy, so the model
    reads it only after the queue finished (read at once, it held the old value or the new one,
    depending on the kernel's progress)."""
    Residency.device_name = "opencl-zero-copy"
    Residency.pipelines = pipelines
    state = Residency()
    state.start(seed=0, dtype="int32", start="owned")
    assert state.model.zero_copy
    for step in (state.copy_to_device,
                 lambda: state.halide_buffer_copy_in(r=[0, 1], to_device=False, value=0),
                 lambda: state.pipeline_writes_a_part(r=[0, 1], reverse=False, where="opencl")):
        step()
        state.state_matches_the_model()
    state.teardown()


@pytest.mark.needs_halide
def test_a_host_write_after_a_device_call_is_compared_with_the_calls_result(pipelines):
    """The sequence of the frame loop, on the zero-copy machine: a device pipeline reads the whole
    buffer (its kernel held back behind a gate), a host write follows, and the call's output, read
    after that step, must hold the values at the call. Before host writes waited for the kernels
    still reading their memory, the output held the written values."""
    Residency.device_name = "opencl-zero-copy"
    Residency.pipelines = pipelines
    state = Residency()
    state.start(seed=0, dtype="int32", start="owned")
    assert state.model.zero_copy
    steps = [state.copy_to_device,
             lambda: state.pipeline_reads_the_whole(where="opencl"),  # the first call: its kernels built
             lambda: state.pipeline_reads_the_whole(where="opencl"),
             lambda: state.host_write(r=[0, N], value=5)]
    for step in steps:
        step()
        state.check_held_result()
        state.state_matches_the_model()
    state.check_held_result()
    state.teardown()
