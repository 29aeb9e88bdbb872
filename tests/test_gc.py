"""Buffers take part in cyclic garbage collection.

A buffer keeps Python objects alive from C++: what from_host() wrapped, a DLPack producer, a
wrapped device handle's owner. An object that stores the buffer made from it closes a reference
cycle through that C++ reference; the buffer shows it to the garbage collector, so
`gc.collect()` frees such cycles, storages and all. Each test builds many cycles, drops them,
collects, and counts live storages (`_live_counts()`): back to where they started.

Not collected, by design: a cycle through a buffer whose storage someone else shares too (another
view, an export), since that reference is not the buffer's alone; and a PyTorch tensor or NumPy
array storing the buffer made from it through DLPack without a copy, which the producer's own C
keeps alive through its export (proved below).
"""

import gc
import random
import threading
import weakref

import numpy as np
import pytest

import halide_buffer as hb

CYCLES = 200


def live():
    return hb._core._live_counts()["storages"]


def assert_cycles_collected(make, n=CYCLES):
    """Builds n cycles with make(i) (each drops its own references), collects, and checks that
    every storage they made is gone."""
    gc.collect()
    before = live()
    gc.disable()  # no collection meanwhile: each cycle must be built whole to prove anything
    try:
        for i in range(n):
            make(i)
        assert live() == before + n, "the cycles were freed without the collector: the test proves nothing"
    finally:
        gc.enable()
    gc.collect()
    assert live() == before, f"{live() - before} of {n} storages leaked"


class Producer:
    """A DLPack producer handing out a NumPy array's tensor (not its own memory)."""

    def __init__(self, values):
        self.values = values

    def __dlpack__(self, **kwargs):
        return self.values.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.values.__dlpack_device__()


class Array(np.ndarray):
    """An ndarray that can carry attributes."""


class Bytes(bytearray):
    """A buffer-protocol exporter that can carry attributes."""


# --- one test per kind of producer -------------------------------------------------------------

def test_a_dlpack_producer_storing_its_buffer_is_collected():
    def make(i):
        p = Producer(np.full(4, i, np.float32))
        p.hb = hb.from_dlpack(p)

    assert_cycles_collected(make)


def test_an_ndarray_subclass_storing_its_buffer_is_collected():
    def make(i):
        a = np.full(8, i, np.float64).view(Array)
        a.hb = hb.Buffer.from_host(a)

    assert_cycles_collected(make)


def test_a_buffer_protocol_exporter_storing_its_buffer_is_collected():
    exporters = []

    def make(i):
        x = Bytes(16)
        x.hb = hb.Buffer.from_host(x)
        exporters.append(weakref.ref(x))

    assert_cycles_collected(make)
    assert all(r() is None for r in exporters)  # each export was released, the exporter freed


def test_a_from_dlpack_view_of_a_buffer_storing_it_is_collected():
    # A buffer made from one of ours shares its storage: the storage's producer is reached once.
    def make(i):
        p = Producer(np.full(4, i, np.float32))
        b = hb.from_dlpack(p)
        p.hb = b
        p.again = hb.from_dlpack(b)  # the same storage: two buffers share it ...
        del p.again  # ... until one goes; then the cycle is the first one's alone

    assert_cycles_collected(make)


def test_a_pyopencl_array_wrapped_and_stored_on_its_memory_is_collected(ctx, queue):
    cl = pytest.importorskip("pyopencl")
    cla = pytest.importorskip("pyopencl.array")

    class Memory(cl.Buffer):
        """Device memory that can carry attributes."""

    def allocate(nbytes):
        return Memory(ctx, cl.mem_flags.READ_WRITE, nbytes)

    def make(i):
        a = cla.to_device(queue, np.full(4, i, np.float32), allocator=allocate)
        a.hb = hb.opencl.wrap(a)  # the buffer keeps a.base_data alive (not the array) ...
        a.base_data.hb = a.hb  # ... so a cycle goes through the memory object

    assert_cycles_collected(make)


def test_an_owner_of_wrapped_device_memory_storing_the_buffer_is_collected(ctx):
    cl = pytest.importorskip("pyopencl")

    class Memory(cl.Buffer):
        """Device memory that can carry attributes."""

    def make(i):
        m = Memory(ctx, cl.mem_flags.READ_WRITE, 16)
        b = hb.Buffer(4, "float32")
        b.device_wrap_native(m)
        m.hb = b

    assert_cycles_collected(make)


# --- producers whose own DLPack export holds them ----------------------------------------------

def test_numpy_keeps_an_array_alive_while_its_dlpack_export_is_held():
    # NumPy's rule, without halide_buffer: a DLPack export holds its array from C, where the
    # collector cannot see it: even an array referring only to itself is not collected.
    a = np.zeros(4).view(Array)
    a.me = a
    export = a.__dlpack__()
    alive = weakref.ref(a)
    del a
    gc.collect()
    assert alive() is not None
    del export
    gc.collect()
    assert alive() is None


def test_an_array_storing_the_buffer_from_dlpack_of_it_is_not_collected():
    # The same rule: the buffer holds the array's export. from_host() holds the array itself,
    # which the collector sees (test_an_ndarray_subclass_storing_its_buffer_is_collected).
    gc.collect()
    before = live()
    arrays = []
    for i in range(20):
        a = np.full(4, i, np.float32).view(Array)
        a.hb = hb.from_dlpack(a)
        arrays.append(weakref.ref(a))
    del a
    gc.collect()
    assert live() == before + 20 and all(r() is not None for r in arrays)
    for r in arrays:
        assert any(x is r() for x in gc.get_referents(r().hb))  # ours is shown: NumPy's is not
        del r().hb  # breaks the cycle
    gc.collect()
    assert live() == before and all(r() is None for r in arrays)


# --- PyTorch ----------------------------------------------------------------------------------

@pytest.mark.needs_torch
def test_a_producer_of_torch_tensors_storing_its_buffer_is_collected():
    torch = pytest.importorskip("torch")

    def make(i):
        p = Producer(torch.full((4,), float(i)))
        p.hb = hb.from_dlpack(p)  # the capsule holds the tensor, which is not in the cycle

    assert_cycles_collected(make)


@pytest.mark.needs_torch
def test_pytorch_keeps_a_tensor_alive_while_its_dlpack_export_is_held():
    # PyTorch's own rule, without halide_buffer: while C++ holds a tensor's TensorImpl (as a
    # DLPack export does), the tensor's Python object is kept alive from C++, where the
    # collector cannot see it: even a tensor referring only to itself is not collected.
    torch = pytest.importorskip("torch")
    t = torch.zeros(4)
    t.me = t
    export = t.__dlpack__()
    alive = weakref.ref(t)
    del t
    gc.collect()
    assert alive() is not None
    del export
    gc.collect()
    assert alive() is None


@pytest.mark.needs_torch
@pytest.mark.parametrize("path", ["exchange API", "__dlpack__"])
def test_a_tensor_storing_the_buffer_made_from_it_is_not_collected(path):
    # The same rule: the buffer holds the tensor's DLPack export, so PyTorch keeps the tensor
    # (and with it the buffer) alive. The ways out: copy=True, or not storing the buffer on the
    # tensor; or deleting the attribute when done.
    torch = pytest.importorskip("torch")

    class Tensor(torch.Tensor):
        __dlpack_c_exchange_api__ = None  # no C exchange API: from_dlpack() calls __dlpack__

    gc.collect()
    before = live()
    tensors = []
    for i in range(20):
        t = torch.full((4,), float(i))
        if path == "__dlpack__":
            t = t.as_subclass(Tensor)
        t.hb = hb.from_dlpack(t)
        tensors.append(weakref.ref(t))
    del t
    gc.collect()
    assert live() == before + 20 and all(r() is not None for r in tensors)
    for i, r in enumerate(tensors):
        np.testing.assert_array_equal(np.asarray(r().hb), np.full(4, i, np.float32))  # intact
        assert any(x is r() for x in gc.get_referents(r().hb))  # ours is shown: PyTorch's is not
        del r().hb  # breaks the cycle
    gc.collect()
    assert live() == before and all(r() is None for r in tensors)


@pytest.mark.needs_torch
def test_a_tensor_storing_a_copy_made_from_it_is_collected():
    torch = pytest.importorskip("torch")

    def make(i):
        t = torch.full((4,), float(i))
        t.hb = hb.from_dlpack(t, copy=True)  # owns its memory: holds nothing of the tensor
        t.me = t  # a cycle of the tensor's own, so the collector is what frees it

    assert_cycles_collected(make)


# --- exact accounting --------------------------------------------------------------------------

def test_the_producer_is_a_referent_of_the_only_buffer_over_its_storage():
    p = Producer(np.arange(4, dtype=np.float32))
    b = hb.from_dlpack(p)
    assert any(r is p for r in gc.get_referents(b))
    view = b[1:]  # shares the storage: the reference is no longer b's alone
    assert not any(r is p for r in gc.get_referents(b))
    assert not any(r is p for r in gc.get_referents(view))
    del view
    assert any(r is p for r in gc.get_referents(b))
    export = b.__dlpack__()  # a consumer's hold on the storage counts too
    assert not any(r is p for r in gc.get_referents(b))
    del export
    assert any(r is p for r in gc.get_referents(b))


def test_a_cycle_through_a_buffer_whose_storage_is_shared_waits_for_the_sharer():
    p = Producer(np.arange(4, dtype=np.float32))
    p.hb = hb.from_dlpack(p)
    view = p.hb[2:]
    alive = weakref.ref(p)
    del p
    gc.collect()
    assert alive() is not None  # the view shares the storage: not this cycle's to free
    np.testing.assert_array_equal(np.asarray(view), [2, 3])
    del view
    gc.collect()
    assert alive() is None


def test_buffers_in_live_cycles_keep_working_across_collections():
    gc.collect()
    before = live()
    held = []
    for i in range(50):
        p = Producer(np.full((3, 4), i, np.float32))
        p.hb = hb.from_dlpack(p)
        a = np.full(6, i, np.int32).view(Array)
        a.hb = hb.Buffer.from_host(a)
        # Keep one member of each cycle: the buffer, the producer, or an array over the buffer.
        held.append((i, [p.hb, p, np.asarray(p.hb)][i % 3], [a.hb, a][i % 2]))
    del p, a
    for _ in range(3):
        gc.collect()
        for i, first, second in held:
            b = first if isinstance(first, hb.Buffer) else getattr(first, "hb", None)
            values = np.asarray(b) if b is not None else first
            np.testing.assert_array_equal(values, np.full((3, 4), i, np.float32))
            b = second if isinstance(second, hb.Buffer) else second.hb
            np.testing.assert_array_equal(np.asarray(b), np.full(6, i, np.int32))
    assert live() == before + 100
    del held, first, second, b, values
    gc.collect()
    assert live() == before


def test_views_and_collections_interleaved_free_nothing_early():
    # Views kept outside a cycle share its storage: the cycle waits for them, its memory intact.
    rng = random.Random(7)
    gc.collect()
    before = live()
    kept = []  # (expected values, a view or a producer keeping its cycle reachable)
    for i in range(600):
        p = Producer(np.arange(i, i + 16, dtype=np.float64))
        p.hb = hb.from_dlpack(p)
        for _ in range(rng.randrange(3)):
            start = rng.randrange(16)
            kept.append((np.arange(i + start, i + 16), p.hb[start:]))
        if rng.random() < 0.1:
            kept.append((np.arange(i, i + 16), p))
        del p
        if rng.random() < 0.1:
            gc.collect()
        while kept and rng.random() < 0.5:
            kept.pop(rng.randrange(len(kept)))
        for expected, obj in kept:
            b = obj if isinstance(obj, hb.Buffer) else obj.hb
            np.testing.assert_array_equal(np.asarray(b), expected)
    del kept, obj, b
    gc.collect()
    assert live() == before


def test_collections_while_other_threads_move_storages_to_and_from_a_device(dev):
    # Residency operations hold a storage's lock without the GIL; a collection meanwhile leaves
    # that storage's owners alone (and collects the cycle later).
    gc.collect()
    before = live()
    producers = [Producer(np.full(1024, i, np.float32)) for i in range(8)]
    for p in producers:
        p.hb = hb.from_dlpack(p)
    stop = threading.Event()
    errors = []

    def move(b, i):
        try:
            while not stop.is_set():
                b.copy_to_device(dev)
                b.numpy(writable=True)[0] = i
                b.device_free()
        except Exception as e:  # pragma: no cover: reported below
            errors.append(e)

    threads = [threading.Thread(target=move, args=(p.hb, i)) for i, p in enumerate(producers)]
    for t in threads:
        t.start()
    try:
        for _ in range(200):
            gc.collect(0)
        gc.collect()
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors
    for i, p in enumerate(producers):
        np.testing.assert_array_equal(np.asarray(p.hb)[:2], [i, i])
    del threads, p, t
    producers.clear()
    gc.collect()
    assert live() == before
