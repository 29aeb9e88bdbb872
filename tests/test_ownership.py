"""Ownership: a wrapped source lives as long as any view or export of it; every export and every
storage is released exactly once."""

import gc
import os
import weakref

import ml_dtypes
import numpy as np
import pytest

import halide_buffer as hb


def live():
    gc.collect()
    return hb._core._live_counts()


class Bytes(bytearray):
    """A weak-referenceable buffer-protocol exporter that counts its open exports."""


@pytest.mark.parametrize("make", [
    lambda: np.arange(12, dtype=np.float32).reshape(3, 4),
    lambda: np.zeros((3, 4), ml_dtypes.bfloat16),
])
def test_wrapped_array_outlives_its_buffer_while_views_or_exports_live(make):
    base = live()
    src = make()
    alive = weakref.ref(src)
    b = hb.Buffer.from_host(src)
    view = b.cropped(1, 1, 2)
    exported = np.asarray(view)
    del src, b
    assert alive() is not None
    del view
    assert alive() is not None  # the ndarray export still holds the view's storage
    assert exported.shape == (3, 2)
    del exported
    gc.collect()
    assert alive() is None
    assert live() == base


def test_buffer_protocol_source_is_released_exactly_once():
    base = live()
    src = Bytes(b"\x00" * 16)
    b = hb.Buffer.from_host(src)
    with pytest.raises(BufferError):
        src.extend(b"x")  # bytearray refuses to resize while an export is open
    views = [b[i:] for i in range(4)]
    del b
    with pytest.raises(BufferError):
        src.extend(b"x")
    del views
    gc.collect()
    src.extend(b"x")  # the one export was released
    assert len(src) == 17
    assert live() == base


def test_memoryview_exports_are_counted_and_released():
    base = live()
    b = hb.Buffer((8,), "uint32")
    views = [memoryview(b) for _ in range(5)]
    assert live()["exports"] == base["exports"] + 5
    for m in views:
        m.release()
    assert live()["exports"] == base["exports"]
    with memoryview(b[::2]) as m:
        assert m.shape == (4,)
    del views, b
    assert live() == base


def test_storage_outlives_the_buffer_through_numpy_views():
    base = live()
    b = hb.Buffer((1000,), "float64")
    a = b.numpy(writable=True)
    a[:] = 1.5
    del b
    assert live()["storages"] == base["storages"] + 1
    assert a.sum() == 1500
    del a
    assert live() == base


def test_many_wraps_and_exports_leak_nothing():
    base = live()
    src = np.ones((16, 16), np.int16)
    for _ in range(2000):
        b = hb.Buffer.from_host(src)[1:, ::2]
        np.asarray(b)
        memoryview(b).release()
        b.numpy(writable=True)
        b._get_raw_halide_buffer_t()
    del b
    assert live() == base
    assert src.base is None  # nothing left hanging off the source


@pytest.mark.skipif(bool(os.environ.get("HALIDE_BUFFER_SANITIZER")),
                    reason="RSS under ASan counts its quarantine of freed memory")
@pytest.mark.parametrize("elements", [1 << 18, 1 << 21], ids=["heap-block", "own-pages"])
def test_a_dead_buffer_gives_its_host_memory_back(elements):
    # Each size takes another road to the system and back (a heap block, pages of its own): a
    # storage that kept its memory would grow the process by the 200 buffers' bytes, written so
    # that every page is resident.
    def resident():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def one():
        b = hb.Buffer((elements,), "float32")
        b.fill(1)  # every page written: resident
        return b.nbytes

    one()  # the allocator's own first growth
    before = resident()
    made = sum(one() for _ in range(200))
    grown = resident() - before
    assert grown < max(made // 4, 8 << 20), f"{grown} bytes still resident after {made} bytes came and went"
