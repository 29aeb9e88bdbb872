"""What ``multiprocessing`` sends for a Buffer.

Plain ``pickle`` copies a buffer's elements (``Buffer.__reduce_ex__``). Between the processes
of one machine, ``multiprocessing`` (Process arguments under spawn and forkserver, Queue, Pipe,
Pool, ``concurrent.futures.ProcessPoolExecutor``) pickles with its own pickler, to which this
module adds one rule: a buffer in shared memory (``b.share_memory()``, ``Buffer(...,
shared=True)``) travels as a duplicate of its segment's file descriptor plus its geometry, and
arrives as a view of the same memory. Any other buffer travels by value.

Queues, pipes and pools fetch that descriptor from the sender's resource sharer (a thread of the
sender's): a process that sent a shared buffer waits at exit, up to ``RECEIVE_WAIT`` seconds,
until every descriptor it handed out was fetched, so a child may return one and exit (a pool
worker with ``maxtasksperchild=1``). docs/processes.md says what remains.
"""

from __future__ import annotations

import pickle
import threading
import time
from multiprocessing import reduction, util

# Imported now, from the main thread, never first from a queue's feeder thread (reduction.DupFd
# imports it on the first shared buffer sent): a fork while that thread held the module's import
# lock left the child blocked on the lock forever when it unpickled the buffer. PyTorch's
# reductions import it early for the same reason.
import multiprocessing.resource_sharer as resource_sharer

from ._core import Buffer, DType, _rebuild_buffer, _rebuild_shared_buffer, dtype

RECEIVE_WAIT = 10.0  # seconds a sender's exit waits for its shared buffers to be fetched


def _rebuild(*state):
    """Unpickles a Buffer (``Buffer.__reduce_ex__`` names this function: a plain one, which
    pickle records by name)."""
    return _rebuild_buffer(*state)


def _dtype(name: str) -> DType:
    """Unpickles a DType (the same object as ``halide_buffer.dtype(name)``)."""
    return dtype(name)


def _rebuild_shared(handle, offset, dtype, shape, strides, mins, readonly):
    try:
        fd = handle.detach()
    except OSError as e:  # the sender's resource sharer is gone: it exited
        raise type(e)(e.errno, f"multiprocessing (receiving a shared halide_buffer.Buffer): the process that sent "
                               f"it exited before it was received ({e.strerror}); receive it while the sender "
                               f"lives (a sender waits {RECEIVE_WAIT:g} s at exit: do not join it first), or send a "
                               "buffer not in shared memory, which travels by value") from e
    return _rebuild_shared_buffer(fd, offset, dtype, shape, strides, mins, readonly)


def _wait_for_receivers() -> None:
    """At exit: waits, up to RECEIVE_WAIT seconds in all, for this process's queues to have sent
    what they hold (their feeder threads, told to finish, pickle it: a shared buffer's descriptor
    is handed out then), and then for every descriptor handed out to be fetched."""
    deadline = time.monotonic() + RECEIVE_WAIT
    for thread in threading.enumerate():
        if thread.name == "QueueFeederThread" and thread is not threading.current_thread():
            thread.join(max(0.0, deadline - time.monotonic()))
    sharer = getattr(resource_sharer, "_resource_sharer", None)
    pending = getattr(sharer, "_cache", None)
    while pending and time.monotonic() < deadline:
        time.sleep(0.005)
    # A descriptor leaves the cache before it is sent, so an empty cache may still have a send in
    # flight: the sharer's stop() is served after that send ends (one connection at a time).
    if sharer is not None and getattr(sharer, "_address", None) is not None:
        sharer.stop(max(0.0, deadline - time.monotonic()))


def _wait_for_receivers_at_exit(_=None) -> None:
    """Registers _wait_for_receivers with multiprocessing's exit: in every process that imports
    this module, and again in every child multiprocessing forks (which starts with no exit
    finalizers). Its exitpriority puts it after the queues are told to finish (10) and before
    the resource sharer's socket is removed (0)."""
    util.Finalize(None, _wait_for_receivers, exitpriority=1)


_wait_for_receivers_at_exit()
util.register_after_fork(_wait_for_receivers, _wait_for_receivers_at_exit)


def _reduce_for_process(b: Buffer):
    if not b.is_shared:
        return b.__reduce_ex__(pickle.DEFAULT_PROTOCOL)
    fd, offset = b._shared_handle()
    # DupFd: a duplicate the child inherits (a spawning Process) or fetches from this process's
    # resource sharer (queues, pipes, pools), valid however long the message waits.
    return _rebuild_shared, (reduction.DupFd(fd), offset, b.dtype.name, b.shape, b.strides, b.mins, b.readonly)


reduction.ForkingPickler.register(Buffer, _reduce_for_process)
