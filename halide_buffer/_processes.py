"""What ``multiprocessing`` sends for a Buffer.

Plain ``pickle`` copies a buffer's elements (``Buffer.__reduce_ex__``). Between the processes
of one machine, ``multiprocessing`` (Process arguments under spawn and forkserver, Queue, Pipe,
Pool, ``concurrent.futures.ProcessPoolExecutor``) pickles with its own pickler, to which this
module adds one rule: a buffer in shared memory (``b.share_memory()``, ``Buffer(...,
shared=True)``) travels as a duplicate of its segment's file descriptor plus its geometry, and
arrives as a view of the same memory. Any other buffer travels by value.
"""

from __future__ import annotations

import pickle
from multiprocessing import reduction

from ._core import Buffer, DType, _rebuild_buffer, _rebuild_shared_buffer, dtype


def _rebuild(*state):
    """Unpickles a Buffer (``Buffer.__reduce_ex__`` names this function: a plain one, which
    pickle records by name)."""
    return _rebuild_buffer(*state)


def _dtype(name: str) -> DType:
    """Unpickles a DType (the same object as ``halide_buffer.dtype(name)``)."""
    return dtype(name)


def _rebuild_shared(handle, offset, dtype, shape, strides, mins, readonly):
    return _rebuild_shared_buffer(handle.detach(), offset, dtype, shape, strides, mins, readonly)


def _reduce_for_process(b: Buffer):
    if not b.is_shared:
        return b.__reduce_ex__(pickle.DEFAULT_PROTOCOL)
    fd, offset = b._shared_handle()
    # DupFd: a duplicate the child inherits (a spawning Process) or fetches from this process's
    # resource sharer (queues, pipes, pools), valid however long the message waits.
    return _rebuild_shared, (reduction.DupFd(fd), offset, b.dtype.name, b.shape, b.strides, b.mins, b.readonly)


reduction.ForkingPickler.register(Buffer, _reduce_for_process)
