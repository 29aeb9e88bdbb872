"""A gate on an OpenCL device's queue, for tests that must see what happens while a kernel is
still queued: every command queued after the gate closes waits behind a barrier on an OpenCL user
event, completed `delay` seconds after the gate closed. Whatever waits for that work (clFinish, a
blocking map) returns only after the gate opened; whatever does not, returns while it is still
closed. Deterministic either way: nothing depends on how fast a kernel runs. The event is
completed by a native thread of the OpenCL interposer where it is installed (no GIL needed: the
gate opens even while the waiting thread holds the GIL, as a deallocator does), else by a Python
timer thread. Plain code, nothing of pytest's.

    with QueueGate(device, delay=0.3) as gate:
        out = pipeline(b, out)        # its kernel waits behind the gate
        assert gate.closed()          # the call did not wait for it
        write(b)                      # waits for the kernel, if it must
        assert not gate.closed()      # ... and it did
"""

import gc
import threading

import opencl_interposer


class QueueGate:
    def __init__(self, device, delay=0.3):
        import pyopencl as cl

        self._cl = cl
        self._delay = delay
        self._queue = cl.CommandQueue.from_int_ptr(device.queue)
        self._event = cl.UserEvent(cl.Context.from_int_ptr(device.context))
        self._timer = None

    @staticmethod
    def native():
        """Whether the gate opens from a native thread (the OpenCL interposer is installed)."""
        return opencl_interposer.active()

    def __enter__(self):
        native = self.native()
        if not native:
            # Garbage holding zero-copy memory dies first: the end of such an allocation waits for
            # the queue holding the GIL, and the timer thread needs the GIL to open the gate.
            gc.collect()
        self._cl.enqueue_barrier(self._queue, wait_for=[self._event])
        if not (native and opencl_interposer.complete_event_after(self._event.int_ptr, self._delay)):
            self._timer = threading.Timer(self._delay, self._open)
            self._timer.start()
        return self

    def __exit__(self, *exc):
        if self._timer is not None:
            self._timer.join()
        self._event.wait()  # opened by now, or soon: the queue is never left blocked
        self._queue.finish()

    def _open(self):
        self._event.set_status(self._cl.command_execution_status.COMPLETE)

    def closed(self):
        """Whether the commands queued behind the gate are still held back."""
        return self._event.command_execution_status != self._cl.command_execution_status.COMPLETE
