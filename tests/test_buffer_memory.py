"""What a small buffer costs in memory, counted exactly.

A `Buffer((4, 4), "float32")` is one Python object holding its view, and one 256-byte slot
(csrc/core/aligned_slots.h): its 64 bytes of data at the slot's 128-byte aligned start, then the
storage and its root dimensions. Slots are cut from 64 KiB chunks taken from malloc. A view
(`b[1:3]`) is its Python object alone. The heap is counted with glibc's `mallinfo2()` (bytes in
use), which sees every `malloc` and nothing of Python's own small-object allocator, so the figures
are exact to a chunk where `benchmarks/rss_per_buffer.py` reads whole pages.
"""

import gc
import os

import numpy as np
import pytest

import halide_buffer as hb

from common import MALLINFO2

COUNT = 2000
CHUNK = 64 << 10  # the bytes slots are cut from at a time

pytestmark = [
    pytest.mark.skipif(MALLINFO2 is None, reason="needs glibc's mallinfo2()"),
    pytest.mark.skipif(os.environ.get("PYTHONMALLOC", "pymalloc") != "pymalloc",
                       reason="Python objects must come from pymalloc, not malloc, to be told apart"),
]


def heap_bytes_per_object(make):
    """The malloc'd bytes each of COUNT live objects make() returns keeps, after a warm-up."""
    for _ in range(200):
        make()
    kept = [None] * COUNT  # the list's slots: allocated before the first reading
    gc.collect()
    before = MALLINFO2().uordblks
    for i in range(COUNT):
        kept[i] = make()
    after = MALLINFO2().uordblks
    assert all(k is not None for k in kept)
    return (after - before) / COUNT


def test_a_small_buffer_is_one_slot_besides_its_python_object():
    # A 256-byte slot: the data (64 B), the block's prefix (8 B), the control block (16 B), the
    # storage (136 B) and two root dimensions (32 B). Counted a chunk at a time: at most one chunk
    # more than the slots' bytes, spread over the buffers.
    per_buffer = heap_bytes_per_object(lambda: hb.Buffer((4, 4), "float32"))
    assert per_buffer <= 256 + CHUNK / COUNT
    b = hb.Buffer((4, 4), "float32")
    assert b.numpy().ctypes.data % 128 == 0  # the slot's start


@pytest.mark.parametrize("shape, dtype", [((4, 4), "float32"), ((3,), "uint8"), ((2, 2, 2), "float64"),
                                          ((16, 2), "complex128"), ((0, 5), "int16"), ((), "int32")])
def test_a_slot_given_back_serves_the_next_buffer_aligned_and_zeroed(shape, dtype):
    # Buffers written all over and dropped give their slots back; the next ones of the same size
    # take them, and must still start on 128 bytes with every element zero.
    for _ in range(50):
        hb.Buffer(shape, dtype).numpy(writable=True).reshape(-1).view(np.uint8)[...] = 0xA5
    for _ in range(50):
        b = hb.Buffer(shape, dtype)
        a = b.numpy()
        assert a.ctypes.data % 128 == 0
        assert not a.reshape(-1).view(np.uint8).any()


def test_a_view_allocates_nothing_besides_its_python_object():
    b = hb.Buffer((4, 4), "float32")
    assert heap_bytes_per_object(lambda: b[1:3]) < 1
    assert heap_bytes_per_object(lambda: b.transposed()) < 1



@pytest.mark.parametrize("shape, dtype, where", [
    ((4, 4), "float32", "a 256-byte slot"),
    ((2,) * 6, "float32", "a 512-byte slot, full"),
    ((2,) * 6 + (1,), "float32", "no slot holds it: the storage's malloc block"),
    ((1,) * 24, "uint8", "no slot holds it, one byte of data"),
    ((257,), "uint8", "a calloc block of its own"),
])
def test_small_blocks_of_every_kind_keep_their_own_bytes(shape, dtype, where):
    # Many live buffers of one kind, each filled with its own byte, made between each other's
    # allocations: a block shorter than its data, or data placed past its block, shows another
    # buffer's byte (or breaks the heap) here.
    kept = []
    for i in range(200):
        b = hb.Buffer(shape, dtype)
        assert b.numpy().ctypes.data % 128 == 0, where
        b.numpy(writable=True).reshape(-1).view(np.uint8)[...] = i % 251
        kept.append(b)
    for i, b in enumerate(kept):
        assert (b.numpy().reshape(-1).view(np.uint8) == i % 251).all(), f"{where}: buffer {i}"
