"""Shared memory: share_memory(), Buffer(shared=True), and what multiprocessing makes of a shared
buffer under every start method and channel: the same memory, no copy, nothing left behind."""

import ctypes
import gc
import multiprocessing as mp
import os
import pickle
import resource
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pyopencl as cl
import pytest

import halide_buffer as hb
import shared_children as children
from common import ALL_DTYPES, Moves, bits_of, random_bits
from halide_buffer import _core

METHODS = ["fork", "spawn", "forkserver"]
TIMEOUT = 60
LARGE = (1024, 1024)  # 4 MiB of float32: pages of its own, replaced in place
SEGMENT_NAME = "halide_buffer"  # the name halide_buffer gives its segments (memfd_create)


def segments(pid="self"):
    """(mappings, descriptors) of halide_buffer segments in a process."""
    with open(f"/proc/{pid}/maps") as f:
        maps = sum(f"memfd:{SEGMENT_NAME}" in line for line in f)
    fds = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            fds += f"memfd:{SEGMENT_NAME}" in os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            pass  # closed meanwhile
    return maps, fds


def dev_shm():
    """Our entries of /dev/shm: those named like our segments. Our segments are memfds and never
    appear there; other entries (multiprocessing's sem.mp-*, other processes' files) come and go
    on their own, so they are left out."""
    if not os.path.isdir("/dev/shm"):
        return []
    return sorted(name for name in os.listdir("/dev/shm") if SEGMENT_NAME in name)


@pytest.fixture
def no_segments_left():
    """Every segment a test made is gone from this process when it ends; nothing of ours is left
    in /dev/shm."""
    gc.collect()
    before, shm = segments(), dev_shm()
    yield before
    gc.collect()
    assert segments() == before and dev_shm() == shm


def bfloat16_view():
    """A transposed, translated bfloat16 view of a shared buffer of random bits, and those bits."""
    a = random_bits((6, 4), "bfloat16", seed=3)
    b = hb.Buffer((6, 4), "bfloat16", shared=True)
    b[...] = a
    return b, b.transposed().translated((5, -2)), a


# --- share_memory() and Buffer(shared=True) ------------------------------------------------------

@pytest.mark.parametrize("shape", [(3, 5), LARGE], ids=["heap block", "pages of its own"])
def test_share_memory_moves_the_storage_once_and_keeps_the_data(shape, no_segments_left):
    maps, fds = no_segments_left
    b = hb.Buffer(shape, "float32")
    b[...] = np.arange(b.size, dtype=np.float32).reshape(shape)
    assert not b.is_shared and segments() == (maps, fds)
    assert b.share_memory() is b and b.is_shared
    assert segments() == (maps + 1, fds + 1)  # one mapping and one descriptor per storage
    b.share_memory()  # a no-op now
    assert segments() == (maps + 1, fds + 1)
    assert np.array_equal(np.asarray(b), np.arange(b.size, dtype=np.float32).reshape(shape))
    assert "memory=shared" in repr(b)
    del b


def test_a_large_buffer_is_replaced_in_place_so_views_and_exports_stay_valid(no_segments_left):
    b = hb.Buffer(LARGE, "float32")
    a = b.numpy(writable=True)
    view = b[1:, 2:]
    with memoryview(b) as m:
        b.share_memory()
        assert m.obj is b
    assert view.is_shared and view.shares_storage_with(b)
    a[1, 2] = 5
    assert np.asarray(view)[0, 0] == 5  # the ndarray made before writes into the segment
    b[0, 0] = 9
    assert a[0, 0] == 9
    del a, view, b


def test_a_heap_block_moves_only_while_nothing_else_points_into_it(no_segments_left):
    fix = r"call share_memory\(\) before making views, share a copy \(b.copy\(\).share_memory\(\)\)"
    b = hb.Buffer((8,), "int32")
    v = b[2:]
    with pytest.raises(BufferError, match=r"share_memory\(\): other views or exports .* " + fix):
        b.share_memory()
    del v
    with memoryview(b):
        with pytest.raises(BufferError, match="other views or exports"):
            b.share_memory()
    b.share_memory()  # the view and the memoryview are gone
    assert b.is_shared
    c = hb.Buffer((8,), "int32")
    kept = np.asarray(c)  # through the buffer protocol: released when the ndarray goes
    with pytest.raises(BufferError, match="other views or exports"):
        c.share_memory()
    del kept
    c.share_memory()
    c = hb.Buffer((8,), "int32")
    c.numpy()  # an ndarray view handed out lives as long as NumPy says: c never moves
    with pytest.raises(BufferError, match="other views or exports"):
        c.share_memory()
    assert not c.is_shared
    d = c.copy().share_memory()
    assert d.is_shared
    del b, c, d


def test_borrowed_memory_is_refused_with_what_to_do():
    a = np.zeros(4, np.float32)
    with pytest.raises(BufferError, match=r"share_memory\(\): the buffer borrows its memory .* share a copy, "
                                          r"b.copy\(\).share_memory\(\), or allocate shared memory: "
                                          r"Buffer\(shape, dtype, shared=True\)"):
        hb.Buffer.from_host(a).share_memory()
    assert np.shares_memory(np.asarray(hb.Buffer.from_host(a)), a)


def test_buffer_shared_allocates_zeroed_shared_memory_in_any_order(no_segments_left):
    b = hb.Buffer((3, 4, 5), "uint16", order="F", shared=True)
    assert b.is_shared and b.strides == (2, 6, 24) and not np.asarray(b).any()
    assert "memory=shared" in repr(b) and b.external_writes
    del b


def test_the_segment_cannot_be_shrunk_underneath(no_segments_left):
    b = hb.Buffer((1024,), "uint8", shared=True)
    fd, offset = b._shared_handle()
    assert offset == 0
    with pytest.raises(PermissionError):
        os.truncate(f"/proc/self/fd/{fd}", 0)  # sealed: no SIGBUS can follow
    b[...] = 3
    assert np.asarray(b).sum() == 3 * 1024
    del b


def test_share_memory_brings_a_newer_device_copy_home_once_and_drops_it(dev, queue, no_segments_left):
    b = hb.Buffer((64,), "float32")
    b.copy_to_device(dev)
    a = hb.opencl.as_array(b)
    a.fill(np.float32(2))
    queue.finish()
    del a
    moves = Moves(b)
    b.share_memory()
    assert moves() == (0, 0, 1, 256) and not b.has_device_allocation()
    assert np.asarray(b).tolist() == [2.0] * 64
    # Other processes may write the host copy at any time: it counts as newer for every device use.
    b.copy_to_device(dev)
    b.copy_to_device(dev)
    assert moves() == (2, 512, 0, 0)
    b.device_free()
    del b


def test_a_device_copy_that_cannot_come_home_keeps_the_buffer_unshared(dev, ctx, queue):
    mem = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.HOST_NO_ACCESS, 16)
    cl.enqueue_fill_buffer(queue, mem, np.float32(7), 0, 16).wait()
    b = hb.Buffer((4,), "float32")
    b.device_wrap_native(mem)
    with pytest.raises(hb.DeviceError, match="copying to the host failed with CL_INVALID_OPERATION"):
        b.share_memory()
    assert not b.is_shared and b.device_dirty() and b.has_device_allocation()
    b.set_device_dirty(False)
    b.device_free()


# --- multiprocessing ------------------------------------------------------------------------------

FRESH = "HALIDE_BUFFER_FORK_TESTS"


def context(method):
    """The start method's context. Forking a process that has imported JAX or started PoCL's
    threads risks deadlocks (JAX warns of it), so under fork these tests run in an interpreter of
    their own (test_the_fork_start_method_in_a_fresh_interpreter)."""
    if method == "fork" and not os.environ.get(FRESH):
        pytest.skip("runs in a fresh interpreter: see test_the_fork_start_method_in_a_fresh_interpreter")
    return mp.get_context(method)


def test_the_fork_start_method_in_a_fresh_interpreter():
    # From this working directory: the halide_buffer this run imports is the one tested there
    # too (an installed wheel's, when the tests run from elsewhere).
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__, "-k",
                          "fork and not forkserver and not fresh"],
                         capture_output=True, text=True, timeout=4 * TIMEOUT, env=dict(os.environ, **{FRESH: "1"}))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "7 passed" in run.stdout and "skipped" not in run.stdout, run.stdout


def check_seen(seen, view, a):
    """The child saw the view's exact dtype, geometry and bits, in shared memory."""
    dtype, shape, strides, mins, shared, first = seen
    assert (dtype, shape, strides, mins, shared) == ("bfloat16", view.shape, view.strides, view.mins, True)
    assert first == bytes(bits_of(a)[0, 0])


def wrote(view):
    return np.asarray(view)[0, 0] == 42


def child_sees_and_writes(ctx, target, args, send, receive, view, a):
    """Runs target(*args) in a child, sends it the view (send), checks what it reports (receive)
    and that its write is seen here."""
    p = ctx.Process(target=target, args=args)
    p.start()
    send(view)
    check_seen(receive(), view, a)
    p.join(TIMEOUT)
    assert p.exitcode == 0 and wrote(view)


@pytest.mark.parametrize("method", METHODS)
def test_a_process_argument_arrives_as_the_same_memory(method, no_segments_left):
    ctx = context(method)
    b, view, a = bfloat16_view()
    outbox = ctx.Queue()
    child_sees_and_writes(ctx, children.report_to, (outbox, view), lambda v: None,
                          lambda: outbox.get(timeout=TIMEOUT), view, a)
    del b, view


@pytest.mark.parametrize("method", METHODS)
def test_a_queue_and_a_pipe_carry_a_handle_not_the_data(method, no_segments_left):
    ctx = context(method)
    b, view, a = bfloat16_view()
    inbox, outbox = ctx.Queue(), ctx.Queue()
    child_sees_and_writes(ctx, children.serve_queue, (inbox, outbox), inbox.put,
                          lambda: outbox.get(timeout=TIMEOUT), view, a)
    b[...] = a
    here, there = ctx.Pipe()
    child_sees_and_writes(ctx, children.serve_pipe, (there,), here.send,
                          lambda: here.recv() if here.poll(TIMEOUT) else None, view, a)
    del b, view


@pytest.mark.parametrize("method", METHODS)
def test_pools_return_a_view_of_the_parents_own_storage(method, no_segments_left):
    ctx = context(method)
    b, view, a = bfloat16_view()
    with ctx.Pool(1) as pool:
        back = pool.apply(children.echo_after_write, (view,))
        assert back.shares_storage_with(b) and wrote(view)  # one storage, one residency state
        assert (back.shape, back.strides, back.mins) == (view.shape, view.strides, view.mins)
        reversed_view = b[::-1, 1::2]  # negative strides: the first element lies at the end
        back = pool.apply(children.echo_after_write, (reversed_view,))
        assert back.strides == reversed_view.strides and np.asarray(b)[-1, 1] == 42
    b[...] = 0
    with ProcessPoolExecutor(1, mp_context=ctx) as pool:
        back = pool.submit(children.echo_after_write, view).result(timeout=TIMEOUT)
    assert back.shares_storage_with(b) and wrote(view)
    del b, view, back


@pytest.mark.parametrize("method", METHODS)
def test_every_dtype_arrives_exactly_as_the_same_memory(method, no_segments_left):
    ctx = context(method)
    shared = []
    for i, name in enumerate(ALL_DTYPES):
        b = hb.Buffer((3, 4), name, shared=True)
        b[...] = random_bits((3, 4), name, seed=i)
        shared.append(b[1:].transposed().translated((2, -1)))
    with ctx.Pool(1) as pool:
        seen = pool.map(children.contents, shared)
    for view, (dtype, shape, strides, mins, is_shared, data) in zip(shared, seen):
        assert (dtype, shape, strides, mins, is_shared) == (view.dtype.name, view.shape, view.strides,
                                                            view.mins, True)
        assert data == np.asarray(view).tobytes(), dtype
    del shared, view


FORK_DURING_IMPORT = """
import multiprocessing as mp
import os
import sys
import threading

import halide_buffer as hb

parent = os.getpid()
entered, forked = threading.Event(), threading.Event()


class HoldTheImport:
    # Whichever thread of this process imports multiprocessing.resource_sharer first holds its
    # import lock here until the main thread has forked.
    def find_spec(self, name, path=None, target=None):
        if name == "multiprocessing.resource_sharer" and os.getpid() == parent:
            entered.set()
            forked.wait(30)
        return None


def child(q):
    b = q.get(timeout=30)  # unpickling imports multiprocessing.resource_sharer, unless imported
    sys.exit(0 if b.is_shared and b.numpy()[1] == 5 else 3)


sys.meta_path.insert(0, HoldTheImport())
ctx = mp.get_context("fork")
q = ctx.Queue()
b = hb.Buffer((4,), "int32", shared=True)
b[1] = 5
q.put(b)  # the feeder thread pickles it: reduction.DupFd imports the resource sharer, if not yet
entered.wait(1.0)  # set only when the feeder thread imports it: then it holds the lock now
p = ctx.Process(target=child, args=(q,))
p.start()
forked.set()
p.join(30)
if p.is_alive():
    p.kill()
    sys.exit("the child hung")
sys.exit(p.exitcode)
"""


def test_a_child_started_while_a_feeder_thread_sends_the_first_shared_buffer_does_not_hang():
    """A Queue's feeder thread pickling the first shared buffer imported
    multiprocessing.resource_sharer; a fork from the main thread while it held that module's
    import lock left the child blocked on the lock forever when it unpickled the buffer (1 run
    in 6). Here the import is held until the fork, deterministically: importing halide_buffer
    imports the module first, from the main thread, so the feeder never imports it."""
    run = subprocess.run([sys.executable, "-c", FORK_DURING_IMPORT], capture_output=True, text=True,
                         timeout=4 * TIMEOUT)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.parametrize("method", METHODS)
def test_a_pool_worker_that_exits_after_returning_a_shared_buffer_delivers_it(method, no_segments_left):
    """maxtasksperchild=1: the worker exits after its one task, while its result, a descriptor
    only its resource sharer can hand out, is in flight. Its exit waits until the result handler
    has fetched it (a bug: the handler met a closed sharer and the pool hung)."""
    ctx = context(method)
    with ctx.Pool(1, maxtasksperchild=1) as pool:
        results = [pool.apply_async(children.made_shared, (k,)) for k in range(3)]
        got = [r.get(timeout=TIMEOUT) for r in results]
    assert [(b.is_shared, np.asarray(b).tolist()) for b in got] == [(True, [[k] * 3] * 2) for k in range(3)]
    del got


@pytest.mark.parametrize("method", METHODS)
def test_a_sender_that_returns_at_once_waits_until_its_buffer_is_received(method, no_segments_left):
    ctx = context(method)
    outbox = ctx.Queue()
    p = ctx.Process(target=children.send_shared_and_exit, args=(outbox, 9))
    p.start()
    p.join(1.0)
    assert p.is_alive()  # done with its target: waiting for its buffer to be fetched
    b = outbox.get(timeout=TIMEOUT)
    p.join(TIMEOUT)
    assert p.exitcode == 0 and b.is_shared and np.asarray(b).tolist() == [[9] * 3] * 2
    del b


@pytest.mark.parametrize("method", METHODS)
def test_a_buffer_received_after_its_sender_exited_names_the_cause(method, no_segments_left):
    """Joining the sender before receiving: its exit waits RECEIVE_WAIT (shortened here) for a
    receiver that cannot come, then the descriptor is gone, and receiving says why."""
    ctx = context(method)
    outbox = ctx.Queue()
    p = ctx.Process(target=children.send_shared_and_exit, args=(outbox, 9, 0.2))
    p.start()
    p.join(TIMEOUT)
    assert p.exitcode == 0
    with pytest.raises(OSError, match=r"^\[Errno \d+\] multiprocessing \(receiving a shared halide_buffer.Buffer\): "
                                      r"the process that sent it exited before it was received \(.+\); receive it "
                                      r"while the sender lives"):
        outbox.get(timeout=TIMEOUT)


def test_a_feeder_blocked_on_a_full_pipe_delays_the_exit_by_receive_wait_at_most():
    ctx = mp.get_context("spawn")
    p = ctx.Process(target=children.block_a_feeder_and_exit, args=(0.2,))
    p.start()
    p.join(TIMEOUT)
    alive = p.is_alive()
    if alive:
        p.kill()
    assert not alive and p.exitcode == 0


def test_a_buffer_not_in_shared_memory_travels_by_value():
    ctx = mp.get_context("spawn")
    a = random_bits((6, 4), "bfloat16", seed=4)
    b = hb.Buffer((6, 4), "bfloat16")
    b.numpy(writable=True)[...] = a
    with ProcessPoolExecutor(1, mp_context=ctx) as pool:
        back = pool.submit(children.echo_after_write, b.translated((1, 1))).result(timeout=TIMEOUT)
    assert not back.is_shared and not back.shares_storage_with(b) and back.mins == (1, 1)
    assert np.asarray(back)[0, 0] == 42 and np.array_equal(bits_of(np.asarray(b)), bits_of(a))


def test_a_child_killed_while_it_maps_a_segment_leaves_nothing_behind(no_segments_left):
    ctx = mp.get_context("spawn")
    b = hb.Buffer((256, 1024), "float32", shared=True)
    inbox, outbox = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=children.hold_until_killed, args=(inbox, outbox))
    p.start()
    inbox.put(b)
    pid = outbox.get(timeout=TIMEOUT)
    assert segments(pid)[0] >= 1  # the child maps it
    os.kill(pid, signal.SIGKILL)
    p.join(TIMEOUT)
    assert p.exitcode == -signal.SIGKILL and np.asarray(b)[0, 0] == 7
    del b  # the last buffer on the segment, in the last process that had it
    inbox.close()
    outbox.close()


def test_no_resource_tracker_warnings_and_no_files_after_a_normal_run(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent("""
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor
        import halide_buffer as hb
        import shared_children as children

        if __name__ == "__main__":
            b = hb.Buffer((64, 64), "float32", shared=True)
            with ProcessPoolExecutor(2, mp_context=mp.get_context("spawn")) as pool:
                assert pool.submit(children.echo_after_write, b).result().shares_storage_with(b)
            print("done")
    """))
    shm = dev_shm()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(children.__file__)] + sys.path))
    run = subprocess.run([sys.executable, "-W", "error", str(script)], capture_output=True, text=True,
                         timeout=TIMEOUT, env=env)
    assert run.returncode == 0 and run.stdout == "done\n" and run.stderr == ""
    assert dev_shm() == shm


# --- what a process receives is checked ----------------------------------------------------------

def test_a_descriptor_that_is_not_a_sealed_segment_is_refused():
    with tempfile.TemporaryFile() as f:
        f.write(bytes(64))
        f.flush()
        fd = os.dup(f.fileno())
        with pytest.raises(BufferError, match=r"pickle.loads\(\): the received descriptor is not a sealed "
                                              r"shared-memory segment"):
            _core._rebuild_shared_buffer(fd, 0, "uint8", (64,), (1,), (0,), False)
        with pytest.raises(OSError):
            os.fstat(fd)  # taken and closed


@pytest.mark.parametrize("offset, shape, strides", [(4096, (1,), (1,)), (0, (4097,), (1,)), (-1, (1,), (1,)),
                                                    (0, (2, 2), (-4, 1)), (0, (2,), (2**62,)),
                                                    (4097, (0,), (1,)), (-1, (0, 4), (4, 1))])  # empty, yet outside
def test_a_geometry_outside_the_segment_is_refused(offset, shape, strides, no_segments_left):
    b = hb.Buffer((4096,), "uint8", shared=True)
    fd, _ = b._shared_handle()
    with pytest.raises(ValueError, match=r"pickle.loads\(\): the received shape .* reach outside the shared "
                                         r"segment of 4096 bytes"):
        _core._rebuild_shared_buffer(os.dup(fd), offset, "uint8", shape, strides, (0,) * len(shape), False)
    del b


def test_a_damaged_handle_closes_the_descriptor(no_segments_left):
    b = hb.Buffer((16,), "uint8", shared=True)
    fd = os.dup(b._shared_handle()[0])
    with pytest.raises(ValueError, match="dtype 'nope' is not one"):
        _core._rebuild_shared_buffer(fd, 0, "nope", (16,), (1,), (0,), False)
    with pytest.raises(OSError):
        os.fstat(fd)
    del b


def test_plain_pickle_of_a_shared_buffer_copies_the_data():
    b = hb.Buffer((4,), "int32", shared=True)
    c = pickle.loads(pickle.dumps(b, protocol=4))
    assert not c.is_shared and not c.shares_storage_with(b)
    with pytest.raises(BufferError, match=r"_shared_handle\(\): the buffer is not in shared memory; call "
                                          r"b.share_memory\(\) first"):
        hb.Buffer((4,))._shared_handle()


# --- what a failing system call becomes -----------------------------------------------------------

def test_a_segment_larger_than_the_address_space_is_a_memory_error(no_segments_left):
    # 2**48 bytes: memfd_create and ftruncate accept it (a sparse file), but no process can map it
    # (user space is 2**47 bytes on x86-64, 2**48 on AArch64): mmap fails with ENOMEM, which is
    # MemoryError, not a BufferError about memfd_create. Nothing is left open.
    with pytest.raises(MemoryError, match=r"^Buffer\(\): mapping the shared memory failed: .*; free memory, "
                                          r"or share less \(shared memory counts against the system's shmem "
                                          r"limit\)$"):
        hb.Buffer((2**18, 2**30), "uint8", shared=True)


def test_a_received_descriptor_that_cannot_be_mapped_is_refused_and_closed(no_segments_left):
    # The segment reopened read-only (through /proc): it is sealed, but a shared writable mapping
    # of it fails with EACCES, which is the error, and the descriptor is closed (bug: the failed
    # mapping was taken for the segment's memory).
    b = hb.Buffer((64,), "uint8", shared=True)
    fd, _ = b._shared_handle()
    read_only = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY)
    del b, fd
    gc.collect()  # the segment is now known to no storage of this process: it is mapped anew
    with pytest.raises(BufferError, match=r"^pickle.loads\(\): mapping the received shared memory failed: "
                                          r"Permission denied; "):
        _core._rebuild_shared_buffer(read_only, 0, "uint8", (64,), (1,), (0,), True)
    with pytest.raises(OSError):
        os.fstat(read_only)  # taken and closed


def lowest_free_descriptor():
    fd = os.open(os.devnull, os.O_RDONLY)
    os.close(fd)
    return fd


def test_running_out_of_descriptors_is_a_buffer_error_naming_the_limit(no_segments_left):
    # Every descriptor below the soft limit in use: memfd_create fails with EMFILE, a BufferError
    # that says to raise ulimit -n, never a MemoryError. share_memory() leaves the buffer as it was.
    b = hb.Buffer((4,), "int32")
    b[...] = np.arange(4, dtype=np.int32)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free_descriptor(), hard))
    try:
        with pytest.raises(BufferError, match=r"^Buffer\(\): memfd_create failed: .*; every shared storage holds "
                                              r"one file descriptor in each process that maps it: raise the limit "
                                              r"\(ulimit -n\) or share fewer, larger buffers$"):
            hb.Buffer((4,), "int32", shared=True)
        with pytest.raises(BufferError, match=r"^share_memory\(\): memfd_create failed: .*\(ulimit -n\)"):
            b.share_memory()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert not b.is_shared and np.asarray(b).tolist() == [0, 1, 2, 3]
    assert b.share_memory().is_shared
    del b


def test_a_heap_block_moved_into_a_segment_is_read_and_written_there(no_segments_left):
    # The buffer's own data pointer follows its bytes into the segment (a view 2 elements in, at
    # byte offset 8): what it writes, another process mapping the segment reads, and the other
    # way round; the handle sent to other processes names that offset.
    v = hb.Buffer((8,), "int32")[2:]  # the only buffer left on its heap block
    v[...] = np.arange(6, dtype=np.int32)
    v.share_memory()
    fd, offset = v._shared_handle()
    assert offset == 8
    assert os.pread(fd, 24, 8) == np.arange(6, dtype=np.int32).tobytes()
    v[...] = np.arange(10, 16, dtype=np.int32)
    assert os.pread(fd, 24, 8) == np.arange(10, 16, dtype=np.int32).tobytes()
    os.pwrite(fd, np.int32(-7).tobytes(), 8 + 4 * 5)  # as another process writes the segment
    assert np.asarray(v).tolist() == [10, 11, 12, 13, 14, -7]
    del v


LATE_CALLBACKS = []  # destructor callbacks a driver has not called yet


def test_a_segment_received_while_its_last_buffer_is_released_stays_one_storage(dev, no_segments_left):
    # The last buffer over a segment is released while the same segment arrives again (in another
    # thread; here, deterministically, from the OpenCL driver's destructor callback of the
    # buffer's device memory, which PoCL runs inside that release). The arrival is a new storage; the release that
    # ends afterwards must not drop it from the process's table, or the next arrival of the
    # segment would be a second storage (a second residency state) instead of a view of it.
    notify = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)
    set_callback = ctypes.CDLL(None).clSetMemObjectDestructorCallback
    set_callback.argtypes, set_callback.restype = [ctypes.c_void_p, notify, ctypes.c_void_p], ctypes.c_int

    def receive():
        return _core._rebuild_shared_buffer(os.dup(fd), 0, "int32", (16,), (4,), (0,), False)

    b = hb.Buffer((16,), "int32", shared=True)
    b[...] = np.arange(16, dtype=np.int32)
    fd = os.dup(b._shared_handle()[0])
    b.copy_to_device(dev)
    a = hb.opencl.as_array(b)
    mem = a.data.int_ptr
    del a
    received, here = [], threading.get_ident()

    def on_release(_mem, _data):
        if threading.get_ident() == here:
            received.append(receive())

    callback = notify(on_release)
    assert set_callback(mem, callback, None) == 0
    del b  # its device memory is released with it: the segment arrives meanwhile
    gc.collect()
    if not received:
        LATE_CALLBACKS.append(callback)  # the driver may still call it
        os.close(fd)
        pytest.skip(f"{dev.platform} calls a memory object's destructor callbacks later or on another thread, "
                    "not inside clReleaseMemObject")
    again = receive()
    assert again.shares_storage_with(received[0])
    assert np.asarray(again).tolist() == list(range(16))
    del received, again
    os.close(fd)
