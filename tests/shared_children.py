"""What the child processes of test_shared_memory.py run: importable by name under every start
method, and light (NumPy and halide_buffer only)."""

import os
import time

import numpy as np


def describe(b):
    """What a child saw: dtype, geometry, whether it is shared, and its first element's bits."""
    first = np.asarray(b)[(0,) * b.ndim]
    return b.dtype.name, b.shape, b.strides, b.mins, b.is_shared, bytes(np.asarray(first).tobytes())


def write_first(b, value=42):
    """Writes value into the first element (by position); returns what the child saw before."""
    seen = describe(b)
    b[(0,) * b.ndim] = value
    return seen


def echo_after_write(b):
    """Writes into b, then sends it back."""
    write_first(b)
    return b


def serve_queue(inbox, outbox):
    """Takes a buffer from inbox, writes into it, reports on outbox."""
    outbox.put(write_first(inbox.get()))


def serve_pipe(conn):
    conn.send(write_first(conn.recv()))
    conn.close()


def report_to(outbox, b):
    """A Process target: writes into b (an argument) and reports."""
    outbox.put(write_first(b))


def hold_until_killed(inbox, outbox):
    """Takes a buffer, writes into it, reports its pid, then keeps it mapped until killed."""
    b = inbox.get()
    b[(0,) * b.ndim] = 7
    outbox.put(os.getpid())
    time.sleep(120)


def contents(b):
    """A buffer's dtype, geometry, sharing and element bytes, as a child sees them."""
    return b.dtype.name, b.shape, b.strides, b.mins, b.is_shared, np.asarray(b).tobytes()


def made_shared(value, receive_wait=None):
    """A new shared buffer holding value, returned (a pool worker's result); receive_wait, when
    given, is how long this process's exit waits for it to be fetched."""
    import halide_buffer as hb
    from halide_buffer import _processes

    if receive_wait is not None:
        _processes.RECEIVE_WAIT = receive_wait
    b = hb.Buffer((2, 3), "int32", shared=True)
    b[...] = value
    return b


def send_shared_and_exit(outbox, value, receive_wait=None):
    """A Process target: puts a new shared buffer on outbox and returns at once."""
    outbox.put(made_shared(value, receive_wait))


def block_a_feeder_and_exit(receive_wait):
    """A Process target: a queue no one reads, its feeder thread blocked on a full pipe (and
    not joined by multiprocessing at exit), then returns: the exit's wait must end."""
    import multiprocessing

    from halide_buffer import _processes

    _processes.RECEIVE_WAIT = receive_wait
    q = multiprocessing.Queue()
    q.cancel_join_thread()
    q.put(bytes(1 << 20))  # more than a pipe holds
