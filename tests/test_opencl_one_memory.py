"""One device memory across every Halide OpenCL runtime in the process (PoCL).

Every pipeline library opened after halide_buffer binds its runtime's context hooks to ours
(halide_buffer._opencl_hooks): it computes in the context and queue of the call's device, on
device copies we place, so nothing crosses the host that need not. Every copy is counted twice:
in ``hb.transfers()`` and by the OpenCL interposer (every clEnqueueRead/WriteBuffer of the
process, the runtimes' own included), and the two must agree.
"""

import ctypes
import subprocess
import sys
import threading
from pathlib import Path

import halide as hl
import numpy as np
import pytest

import halide_buffer as hb
import opencl_interposer
from common import NONE, Moves, counts, down, up
from pipelines import OPENCL_TARGET, TARGET, build, c_compiler, compile_and_load, output_bounds_follow

SHAPE = (64, 80)
NBYTES = SHAPE[0] * SHAPE[1]


def adder(add, name, target=OPENCL_TARGET, fixed=True):
    """out(x, y) = in(x, y) + add (uint8, wrapping), on the GPU target in 8x8 tiles (on the host
    for a host target), sized like its input."""
    x, y, xo, yo, xi, yi = (hl.Var(n) for n in ("x", "y", "xo", "yo", "xi", "yi"))
    inp = hl.ImageParam(hl.UInt(8), 2, "inp")
    out = hl.Func(name)
    out[x, y] = inp[x, y] + hl.u8(add)
    if "opencl" in target:
        out.gpu_tile(x, y, xo, yo, xi, yi, 8, 8)
    if fixed:
        output_bounds_follow(out, inp)
    return out, [inp]


@pytest.fixture(scope="module")
def libraries(tmp_path_factory):
    """Three OpenCL libraries (three Halide runtimes) adding 1, 2 and 4, and a host one adding 8."""
    directory = tmp_path_factory.mktemp("one_memory")
    cc = c_compiler()
    made = {name: compile_and_load(directory, cc, *adder(add, name), name, target=OPENCL_TARGET)
            for name, add in (("add1", 1), ("add2", 2), ("add4", 4))}
    made["host8"] = compile_and_load(directory, cc, *adder(8, "host8", TARGET), "host8", target=TARGET)
    made["directory"] = directory
    return made


def image(seed=0, shape=SHAPE):
    return np.random.default_rng(seed).integers(0, 256, size=shape, dtype=np.uint8)


def added(a, n):
    return (a.astype(np.int64) + n).astype(np.uint8)


class Copies:
    """Every host<->device copy of the process since the last call, as hb.transfers() counted
    them: (uploads, bytes, downloads, bytes); the bytes every clEnqueueWriteBuffer and
    clEnqueueReadBuffer of the process moved (the OpenCL interposer's count) must be the same. (A
    copy of a strided region may be several commands, so only the bytes are compared.)"""

    def __init__(self):
        if not opencl_interposer.active():
            pytest.skip(f"the OpenCL interposer counts every runtime's copies: {opencl_interposer.reason()}")
        self._last = opencl_interposer.counts(), hb.transfers()

    def __call__(self):
        seen, ours = opencl_interposer.counts(), hb.transfers()
        (was_seen, was_ours), self._last = self._last, (seen, ours)
        process = tuple(seen[k] - was_seen[k] for k in ("write_bytes", "read_bytes"))
        counted = counts(ours - was_ours)
        assert process == counted[1::2], f"the process copied {process} bytes, hb.transfers() counted {counted}"
        assert (counted[0] > 0) == (process[0] > 0) and (counted[2] > 0) == (process[1] > 0)
        return counted


# ---------------------------------------------------------------------------------------------
# Chains across libraries, outputs to pyopencl, buffers already on our device
# ---------------------------------------------------------------------------------------------


def test_a_chain_across_three_libraries_moves_one_upload_and_one_download(libraries):
    src = image(1)
    copies = Copies()
    out = libraries["add1"](libraries["add2"](libraries["add4"](libraries["add1"](src))))
    assert copies() == up(NBYTES)  # the input, once: every runtime computes in our memory
    assert out.device is hb.opencl.device() and out.device_dirty()
    np.testing.assert_array_equal(np.asarray(out), added(src, 8))
    assert copies() == down(NBYTES)


def test_an_output_goes_to_pyopencl_without_a_copy(libraries, queue):
    src = image(2)
    out = libraries["add2"](src)
    moves = Moves(out)
    array = hb.opencl.as_array(out)  # the pipeline's output is an ordinary device copy of ours
    np.testing.assert_array_equal(array.get(queue=queue), added(src, 2))  # pyopencl's own read
    array.fill(np.uint8(9), queue=queue)  # a write through pyopencl, read by the next library
    queue.finish()
    del array
    assert moves() == NONE
    copies = Copies()
    again = libraries["add4"](out)
    assert copies() == NONE
    np.testing.assert_array_equal(np.asarray(again), np.full(SHAPE, 13, np.uint8))


def test_a_buffer_current_on_our_device_is_used_as_it_is(libraries, dev):
    b = hb.Buffer(SHAPE, "uint8")
    b.copy_to_device(dev)
    hb.opencl.as_array(b).fill(np.uint8(5)).finish()
    assert b.device_dirty()
    moves, copies = Moves(b), Copies()
    out = libraries["add1"](b)
    assert moves() == NONE and copies() == NONE  # not brought home, not uploaded again
    assert b.device is dev and b.device_dirty()
    np.testing.assert_array_equal(np.asarray(out), np.full(SHAPE, 6, np.uint8))


def test_fill_and_copy_from_on_a_pipeline_output_stay_on_the_device(libraries):
    out = libraries["add1"](image(3))
    other = hb.Buffer(SHAPE, "uint8")
    other.copy_to_device(out.device)  # current on the device: a copy into it stays there
    copies = Copies()
    out.fill(3)
    other.copy_from(out)
    assert copies() == NONE
    np.testing.assert_array_equal(np.asarray(libraries["add2"](other)), np.full(SHAPE, 5, np.uint8))


def test_arguments_on_two_contexts_are_moved_once_and_counted(libraries, ctx):
    """An input on another context than the call's device (the first buffer argument's) is
    brought home and uploaded to the call's device: one counted download, one counted upload."""
    import pyopencl as cl

    mine_context = cl.Context(ctx.devices)
    mine = hb.opencl.device(context=mine_context)
    src = hb.Buffer.from_host(image(4), copy=True)
    src.copy_to_device(mine)
    out = hb.Buffer(SHAPE, "uint8")
    out.device_malloc(hb.opencl.device())
    copies = Copies()
    assert libraries["add1"](src, out) is out  # the call runs on src's device: out moves there
    assert out.device is mine and src.device is mine
    assert copies() == NONE  # out held nothing worth keeping; src was current on the call's device
    # out's memory is a new allocation in mine's context, not the old one renamed (OpenCL memory
    # belongs to one context; PoCL happens to accept another's, a GPU driver need not).
    assert hb.opencl.as_array(out, writable=False).base_data.context == mine_context
    np.testing.assert_array_equal(np.asarray(out), added(image(4), 1))


# ---------------------------------------------------------------------------------------------
# Views at any mins are the whole storage
# ---------------------------------------------------------------------------------------------


def test_outputs_at_nonzero_mins_stay_on_the_device(libraries):
    src = hb.Buffer.from_host(image(5), copy=True).translated((3, 3))
    copies = Copies()
    x = src
    for _ in range(100):
        x = libraries["add1"](x)
        assert x.mins == (3, 3)
    assert copies() == up(NBYTES)  # the input once; no output was brought home
    np.testing.assert_array_equal(np.asarray(x), added(image(5), 100))
    assert copies() == down(NBYTES)


@pytest.mark.parametrize("how", ["translated", "set_min"])
def test_a_view_covering_its_storage_at_other_mins_is_the_storage(libraries, dev, how):
    b = hb.Buffer.from_host(image(6), copy=True)
    b.copy_to_device(dev)
    if how == "translated":
        view = b.translated((10, -4))
    else:
        view = b[...]
        view.set_min((10, -4))
    copies = Copies()
    out = libraries["add2"](view)
    assert out.mins == (10, -4)
    assert copies() == NONE and b.device is dev
    np.testing.assert_array_equal(np.asarray(out), added(image(6), 2))


# ---------------------------------------------------------------------------------------------
# Parts of a storage: in place where the device can show them
# ---------------------------------------------------------------------------------------------


def test_tiles_of_an_image_on_the_device_are_computed_in_place(libraries, dev):
    """Row tiles starting at multiples of the device's sub-buffer alignment: the runtime computes
    in the image's device copy and writes into the output's, nothing crosses the host until the
    result is read."""
    rows, width = 32, 512
    assert (rows * width) % dev.base_alignment == 0
    src = image(10, (rows * 4, width))
    img = libraries["add1"](src)  # device dirty: only the device copy is current
    out = hb.Buffer(src.shape, "uint8")
    copies = Copies()
    for lo in range(0, rows * 4, rows):
        assert libraries["add2"](img[lo:lo + rows], out[lo:lo + rows]).mins == (lo, 0)
    assert copies() == up(src.size)  # out's storage, once, so its other rows are current there too
    assert img.device_dirty() and out.device_dirty() and out.device is dev
    np.testing.assert_array_equal(np.asarray(out), added(src, 3))
    assert copies() == down(src.size)


def test_tiles_of_memory_its_owner_writes_go_up_alone(libraries, dev):
    """A NumPy array wrapped as it is (its owner may write it at any time) is newer on the host at
    every call: each tile goes up alone, not the whole array for each tile."""
    rows, width = 32, 512
    src = image(12, (rows * 4, width))
    img = hb.Buffer.from_host(src)
    copies = Copies()
    for lo in range(0, rows * 4, rows):
        np.testing.assert_array_equal(np.asarray(libraries["add1"](img[lo:lo + rows])), added(src[lo:lo + rows], 1))
    assert copies() == (4, src.size, 4, src.size)  # each tile up once, each result down once
    assert not img.has_device_allocation()


def test_a_part_the_device_cannot_show_comes_home_counted(libraries, dev):
    """A column crop starting 8 bytes into a row: no sub-buffer can start there, so the runtime
    allocates for it and its result comes home when the call returns (both copies counted)."""
    src = image(11, (32, 256))
    inp = hb.Buffer.from_host(src, copy=True)
    out = hb.Buffer.from_host(np.zeros_like(src), copy=True)
    out.copy_to_device(dev)
    copies = Copies()
    part = out[:, 8:72]
    libraries["add4"](inp[:, 8:72], part)
    np.testing.assert_array_equal(np.asarray(out)[:, 8:72], added(src[:, 8:72], 4))
    assert np.all(np.asarray(out)[:, :8] == 0) and np.all(np.asarray(out)[:, 72:] == 0)
    moved = copies()
    assert moved[0] >= 1 and moved[2] >= 1  # the parts went up and the result came home, all counted


# ---------------------------------------------------------------------------------------------
# Libraries called without hb.aot, and libraries opened before halide_buffer
# ---------------------------------------------------------------------------------------------


def cl_mem_context(b):
    """The cl_context of the cl_mem a buffer's published halide_buffer_t shows ({offset, cl_mem})."""
    import pyopencl as cl

    raw = ctypes.cast(b._get_raw_halide_buffer_t(), ctypes.POINTER(ctypes.c_uint64))
    handle = ctypes.cast(ctypes.c_void_p(raw[0]), ctypes.POINTER(ctypes.c_uint64))
    return cl.MemoryObject.from_int_ptr(handle[1], retain=True).context.int_ptr


def test_a_library_called_through_ctypes_computes_in_our_context(libraries, dev):
    lib = build(libraries["directory"], c_compiler(), *adder(7, "ctypes7"), "ctypes7", target=OPENCL_TARGET)
    src = hb.Buffer.from_host(image(7), copy=True)
    out = hb.Buffer(SHAPE, "uint8")
    lib.run(src, out)
    assert out.device_dirty() and out.device is None  # the runtime's allocation (it is shown ours to no one)
    assert cl_mem_context(out) == dev.context  # ... made in our context
    np.testing.assert_array_equal(np.asarray(out), added(image(7), 7))


CHILD_OPENED_FIRST = """
import ctypes, os, sys
# Opened before halide_buffer with every symbol bound now: its runtime keeps its own hooks (opened
# lazily, it would bind ours at its first call).
early = ctypes.CDLL({library!r}, mode=os.RTLD_NOW)
assert "halide_buffer" not in sys.modules
sys.path.insert(0, {tests!r})
import opencl_interposer  # imports halide_buffer
opencl_interposer.install()
import numpy as np
import halide_buffer as hb
p = hb.aot.load({library!r}, "early3")
src = np.arange({n}, dtype=np.uint8).reshape({shape!r})
out = p(src)
assert out.device is None, out  # the runtime's own memory, in its own context
assert np.array_equal(np.asarray(out), (src + 3).astype(np.uint8))
# An empty argument beside an output to compute: Halide's runtime would abort allocating it in
# its own memory, where we cannot give it ours; refused instead.
try:
    p(np.zeros({empty!r}, np.uint8), hb.Buffer({shape!r}, "uint8"))
except ValueError as e:
    assert "argument 'inp' is empty, and the pipeline's runtime keeps device memory of its own" in str(e), e
else:
    raise AssertionError("an empty argument of a runtime keeping its own memory was not refused")
late = hb.aot.load({late!r}, "late5")
again = late(src)
assert again.device is hb.opencl.device(), again
print("ok")
"""


def test_a_library_opened_before_halide_buffer_keeps_its_own_context(libraries):
    """A runtime bound to its own hooks before our hooks library was loaded: hb.aot finds out at
    its first call and lets it keep its memory (the host carries data between it and ours)."""
    directory = libraries["directory"]
    cc = c_compiler()
    build(directory, cc, *adder(3, "early3"), "early3", target=OPENCL_TARGET)
    build(directory, cc, *adder(5, "late5"), "late5", target=OPENCL_TARGET)
    code = CHILD_OPENED_FIRST.format(tests=str(Path(__file__).parent), library=str(directory / "libearly3.so"),
                                     late=str(directory / "liblate5.so"), n=NBYTES, shape=SHAPE, empty=(0,) + SHAPE[1:])
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-3000:]


# ---------------------------------------------------------------------------------------------
# The hooks' contract (Halide's, for overrides of its acquire and release)
# ---------------------------------------------------------------------------------------------


def hooks_library():
    import importlib.util

    lib = ctypes.CDLL(importlib.util.find_spec("halide_buffer._opencl_hooks").origin)
    lib.halide_acquire_cl_context.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                                              ctypes.POINTER(ctypes.c_void_p), ctypes.c_bool]
    lib.halide_acquire_cl_context.restype = ctypes.c_int
    lib.halide_release_cl_context.argtypes = [ctypes.c_void_p]
    lib.halide_release_cl_context.restype = ctypes.c_int
    return lib


def test_acquire_gives_the_default_devices_context_and_blocks_until_release(dev):
    """Halide's rule: acquire stores a valid context and queue (those of the call's device; the
    default device's outside any call), and waits while another thread holds them."""
    lib = hooks_library()
    ctx, q = ctypes.c_void_p(), ctypes.c_void_p()
    assert lib.halide_acquire_cl_context(None, ctypes.byref(ctx), ctypes.byref(q), True) == 0
    assert (ctx.value, q.value) == (dev.context, dev.queue)
    got = threading.Event()

    def second():
        c2, q2 = ctypes.c_void_p(), ctypes.c_void_p()
        lib.halide_acquire_cl_context(None, ctypes.byref(c2), ctypes.byref(q2), True)
        got.set()
        lib.halide_release_cl_context(None)

    other = threading.Thread(target=second)
    other.start()
    assert not got.wait(0.3)  # held by this thread
    assert lib.halide_release_cl_context(None) == 0
    assert got.wait(10)
    other.join()
    assert lib.halide_release_cl_context(None) == 0  # a release without an acquire does nothing


def test_acquire_without_create_outside_a_call_gives_no_context():
    """Halide's device_release asks with create=false: outside a call there is nothing of its own
    to release, and nothing is made."""
    lib = hooks_library()
    ctx, q = ctypes.c_void_p(1), ctypes.c_void_p(1)
    assert lib.halide_acquire_cl_context(None, ctypes.byref(ctx), ctypes.byref(q), False) == 0
    assert (ctx.value, q.value) == (None, None)
    assert lib.halide_release_cl_context(None) == 0


# ---------------------------------------------------------------------------------------------
# Threads
# ---------------------------------------------------------------------------------------------

CHILD_COLD_CALLS = """
import sys, threading
sys.path.insert(0, {tests!r})
import opencl_interposer
opencl_interposer.install()
import numpy as np
import halide_buffer as hb
pipelines = [hb.aot.load(path, name) for path, name in {libraries!r}]
src = np.arange({n}, dtype=np.uint8).reshape({shape!r})
start = threading.Barrier(8)
failures = []

def first_call(p, add):
    start.wait()
    try:
        got = np.asarray(p(src))
        if not np.array_equal(got, (src + add).astype(np.uint8)):
            failures.append(p.name + ": wrong values")
    except Exception as e:
        failures.append(repr(e))

threads = [threading.Thread(target=first_call, args=(p, add)) for p, add in zip(pipelines * 4, (1, 2) * 4)]
for t in threads: t.start()
for t in threads: t.join()
seen, ours = opencl_interposer.counts(), hb.transfers()
if (seen["write_bytes"], seen["read_bytes"]) != (ours.to_device_bytes, ours.to_host_bytes):
    failures.append(f"the process copied {{seen}}, hb.transfers() counted {{ours}}")
print(failures or "ok")
"""


def test_cold_first_calls_of_two_libraries_in_four_threads_each(libraries):
    """Each fresh process makes the first calls of two libraries at once, from 8 threads: no
    runtime creates a context of its own, so none races to make one."""
    directory = libraries["directory"]
    cc = c_compiler()
    names = []
    for name, add in (("cold1", 1), ("cold2", 2)):
        build(directory, cc, *adder(add, name), name, target=OPENCL_TARGET)
        names.append((str(directory / f"lib{name}.so"), name))
    code = CHILD_COLD_CALLS.format(tests=str(Path(__file__).parent), libraries=names, n=NBYTES, shape=SHAPE)
    for _ in range(3):
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        assert run.returncode == 0 and run.stdout.strip() == "ok", (run.stdout, run.stderr[-3000:])


def test_calls_on_two_contexts_at_once(libraries, ctx):
    import pyopencl as cl

    devices = [hb.opencl.device(), hb.opencl.device(context=cl.Context(ctx.devices))]
    failures = []

    def calls(device, seed):
        src = hb.Buffer.from_host(image(seed), copy=True)
        src.copy_to_device(device)
        for k in range(10):
            out = libraries["add1" if k % 2 else "add2"](src)
            if out.device is not device:
                failures.append(f"output on {out.device}, not {device}")
            if not np.array_equal(np.asarray(out), added(image(seed), 1 if k % 2 else 2)):
                failures.append("wrong values")

    threads = [threading.Thread(target=calls, args=(devices[i % 2], i)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


def slow_func(name):
    """out(x, y) = in(x, y) + the low byte of a long sum (the same for every pixel): about 3 s for
    256 x 256 on the host, in one thread."""
    x, y, r = hl.Var("x"), hl.Var("y"), hl.RDom([(0, 9000)])
    inp = hl.ImageParam(hl.UInt(8), 2, "inp")
    out = hl.Func(name)
    out[x, y] = inp[x, y] + hl.u8(hl.sum(hl.i32(hl.sin(hl.f32(r.x) + hl.f32(x) * 0) * 2)) & 255)
    output_bounds_follow(out, inp)
    return out, [inp]


def test_freeing_a_device_copy_a_running_call_shows_is_refused(libraries, dev):
    """A call lends its arguments' halide_buffer_t to the pipeline: while it runs (the GIL
    released), another thread's device_free() of the copy it shows is refused, not done under it."""
    p = compile_and_load(libraries["directory"], c_compiler(), *slow_func("slow"), "slow", target=TARGET)
    src = image(13, (256, 256))
    img = hb.Buffer.from_host(src, copy=True)
    constant = np.asarray(p(np.zeros((1, 1), np.uint8)))[0, 0]  # what every pixel gets added
    expected = (src + constant).astype(np.uint8)
    img.copy_to_device(dev)  # in sync: a host pipeline is shown our device copy too
    result = {}
    running = threading.Thread(target=lambda: result.update(out=np.asarray(p(img))))
    running.start()
    running.join(0.5)
    assert running.is_alive(), "the pipeline returned too soon to test anything"
    with pytest.raises(BufferError, match=r"^device_free\(\): a pipeline call running in another thread computes "
                                          r"in the buffer's device copy; free or move it after the call returns$"):
        img.device_free()
    running.join()
    np.testing.assert_array_equal(result["out"], expected)
    img.device_free()  # the call returned: nothing holds it now
    assert not img.has_device_allocation()


def test_threads_calling_pipelines_on_slices_of_one_buffer(libraries, dev):
    """Tiles of one image in a thread pool (OpenCL and host pipelines), and a reader of the whole
    image: a view lent to a running call is left alone by every other operation on its storage."""
    rows = 64
    # Rows of 97 bytes: tiles starting at a multiple of 128 bytes (PoCL's sub-buffer alignment)
    # are computed in place in the image's device copy, the others in memory their runtime
    # allocates for them, which comes home when the call returns.
    src = image(9, (rows * 8, 97))
    img = hb.Buffer.from_host(src, copy=True)
    img.copy_to_device(dev)  # the whole image on our device: the slices are parts of it
    failures = []
    stop = threading.Event()
    copies = Copies()

    def tiles(name, add, first):
        for k in range(24):
            lo = ((first + k) % 8) * rows
            try:
                got = np.asarray(libraries[name](img[lo:lo + rows]))
            except Exception as e:  # noqa: BLE001 (every failure is reported)
                failures.append(repr(e))
                continue
            if not np.array_equal(got, added(src[lo:lo + rows], add)):
                failures.append(f"{name} rows {lo}..{lo + rows}: wrong values")

    def reader():
        while not stop.is_set():
            if not np.array_equal(np.asarray(img), src):
                failures.append("the reader saw other values")

    workers = [threading.Thread(target=tiles, args=(name, add, i))
               for i, (name, add) in enumerate((("add1", 1), ("add2", 2), ("host8", 8), ("add4", 4)))]
    watcher = threading.Thread(target=reader)
    watcher.start()
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    stop.set()
    watcher.join()
    assert failures == []
    np.testing.assert_array_equal(np.asarray(img), src)
    copies()  # every upload of a slice the runtimes made, and every download, counted as ours
