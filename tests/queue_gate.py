"""A gate on an OpenCL device's queue, for tests that must see what happens while a kernel is
still queued: every command queued after the gate closes waits behind a barrier on an OpenCL user
event, which a timer thread completes `delay` seconds after the gate closed. Whatever waits for
that work (clFinish, a blocking map) returns only after the gate opened; whatever does not,
returns while it is still closed. Deterministic either way: nothing depends on how fast a kernel
runs. Plain code, nothing of pytest's.

    with QueueGate(device, delay=0.3) as gate:
        out = pipeline(b, out)        # its kernel waits behind the gate
        assert gate.closed()          # the call did not wait for it
        write(b)                      # waits for the kernel, if it must
        assert not gate.closed()      # ... and it did
"""

import gc
import threading
import time


class QueueGate:
    def __init__(self, device, delay=0.3):
        import pyopencl as cl

        self._cl = cl
        self._queue = cl.CommandQueue.from_int_ptr(device.queue)
        self._event = cl.UserEvent(cl.Context.from_int_ptr(device.context))
        self._lock = threading.Lock()
        self._opened_at = None
        self._timer = threading.Timer(delay, self.open)

    def __enter__(self):
        # Garbage holding zero-copy memory dies first: the end of such an allocation waits for the
        # queue (with the GIL held, in a deallocator), which would wait for the gate forever.
        gc.collect()
        self._cl.enqueue_barrier(self._queue, wait_for=[self._event])
        self._timer.start()
        return self

    def __exit__(self, *exc):
        self._timer.cancel()
        self.open()  # never leave the queue blocked, whatever the test did
        self._queue.finish()

    def open(self):
        """Lets the queued commands run (the timer's job; idempotent)."""
        with self._lock:
            if self._opened_at is None:
                self._opened_at = time.monotonic()
                self._event.set_status(self._cl.command_execution_status.COMPLETE)

    def closed(self):
        """Whether the commands queued behind the gate are still held back."""
        with self._lock:
            return self._opened_at is None
