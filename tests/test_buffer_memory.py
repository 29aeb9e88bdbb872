"""What a small buffer costs in memory, counted exactly.

A `Buffer((4, 4), "float32")` is one Python object holding its view, and one heap block: the
storage, its root dimensions and its 64 bytes of data at the first 128-byte aligned address after
them. A view (`b[1:3]`) is its Python object alone. The heap is counted with glibc's `mallinfo2()`
(bytes in use), which sees every `malloc` and nothing of Python's own small-object allocator, so
the figures are exact where `benchmarks/rss_per_buffer.py` reads whole pages.
"""

import ctypes
import ctypes.util
import gc
import os
import sys

import pytest

import halide_buffer as hb

COUNT = 2000


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def _mallinfo2():
    """glibc's mallinfo2(), or None where there is none (another C library, glibc before 2.33)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        f = libc.mallinfo2
    except (OSError, AttributeError):
        return None
    f.restype = _MallInfo2
    return f


MALLINFO2 = _mallinfo2()

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


def test_a_small_buffer_is_one_heap_block_besides_its_python_object():
    # 416 bytes asked of malloc (the storage with its control block and allocator, two root
    # dimensions, at most 120 bytes of slack, the data), 432 with malloc's header; the view lives
    # in the Python object.
    per_buffer = heap_bytes_per_object(lambda: hb.Buffer((4, 4), "float32"))
    assert per_buffer <= 432
    b = hb.Buffer((4, 4), "float32")
    assert b.numpy().ctypes.data % 128 == 0  # the promise the slack keeps


def test_a_view_allocates_nothing_besides_its_python_object():
    b = hb.Buffer((4, 4), "float32")
    assert heap_bytes_per_object(lambda: b[1:3]) < 1
    assert heap_bytes_per_object(lambda: b.transposed()) < 1

