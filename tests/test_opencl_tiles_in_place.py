"""Tiles of a storage on the OpenCL device are computed in place (PoCL), however it lies there.

A pipeline given a part of a buffer (a tile) computes in the storage's own device memory: its
Halide runtime makes a sub-buffer starting at the tile, so no byte crosses the host for it. An
OpenCL sub-buffer must start at a multiple of the device's base alignment, counted from the
start of the cl_mem: for a storage laid out backwards (its rows in reverse order in memory), the
cl_mem starts at its lowest byte, not at its element at index 0; for a cl_mem wrapped at an
offset, at the offset before the buffer's first byte. Each case is met on the copying device
(the suite's default) and on the zero-copy device, where a tile the runtime could not be shown
would go up and come back as memory of its runtime's own.

Every copy is counted twice: by ``hb.transfers()`` and by the OpenCL interposer (every
clEnqueueWriteBuffer / clEnqueueReadBuffer of the process, the runtimes' own included).
"""

import numpy as np
import pytest

import halide_buffer as hb

import opencl_interposer
from common import NONE, Moves, down, up
from pipelines import OPENCL_TARGET, brighter_opencl_func, c_compiler, compile_and_load

pytestmark = pytest.mark.needs_halide

TILE_ROWS, WIDTH, TILES = 16, 8, 4  # a tile is 128 bytes of uint8: PoCL's base alignment
ROWS = TILE_ROWS * TILES


@pytest.fixture(scope="module")
def brighter(tmp_path_factory):
    """brighter_opencl_func: out(x, y) = in(x, y) + 10 (uint8, wrapping), on the GPU in 8x8 tiles,
    sized like its input."""
    return compile_and_load(tmp_path_factory.mktemp("tiles_in_place"), c_compiler(), *brighter_opencl_func(),
                            "hb_tiles_brighter", target=OPENCL_TARGET)


@pytest.fixture(params=[False, True], ids=["copying", "zero-copy"])
def device(request):
    d = hb.opencl.device(zero_copy=request.param)
    if request.param and not d.zero_copy:
        pytest.skip(f"{d!r} does not report host-unified memory: no zero-copy to test")
    assert d.base_alignment == TILE_ROWS * WIDTH, "the tiles are sized for PoCL's base alignment"
    return d


class Copies:
    """The bytes the process copied between host and device since the last call, as
    hb.transfers() counts them (to_device, bytes, to_host, bytes); the interposer's count of
    every clEnqueueWriteBuffer / clEnqueueReadBuffer must agree."""

    def __init__(self):
        if not opencl_interposer.active():
            pytest.skip(f"the OpenCL interposer counts every runtime's copies: {opencl_interposer.reason()}")
        self.moves, self.seen = Moves(), opencl_interposer.counts()

    def __call__(self):
        counted, seen = self.moves(), opencl_interposer.counts()
        process = tuple(seen[k] - self.seen[k] for k in ("write_bytes", "read_bytes"))
        self.seen = seen
        assert process == counted[1::2], f"the process copied {process} bytes, hb.transfers() counted {counted}"
        return counted


def image(rows, seed):
    return np.random.default_rng(seed).integers(0, 256, size=(rows, WIDTH), dtype=np.uint8)


def plus(a, n):
    return (a.astype(np.int64) + n).astype(np.uint8)


def computed_in_place(brighter, source, out, device):
    """brighter over each row tile of `source` into the same tile of `out` (on `device`): the
    copies the calls made."""
    copies = Copies()
    for lo in range(0, ROWS, TILE_ROWS):
        brighter(source[lo:lo + TILE_ROWS], out[lo:lo + TILE_ROWS])
    moved = copies()
    assert out.device is device and out.device_dirty()
    return moved


def wrapped_at(device, values, offset):
    """A buffer over a new cl_mem of `device` holding `values` `offset` bytes into it (the device
    copy current), and the cl_mem."""
    import pyopencl as cl

    queue = cl.CommandQueue.from_int_ptr(device.queue, retain=True)
    memory = cl.Buffer(queue.context, cl.mem_flags.READ_WRITE, offset + values.nbytes)
    cl.enqueue_copy(queue, memory, values, dst_offset=offset)  # blocking
    b = hb.Buffer(values.shape, values.dtype)
    b.device_wrap_native(memory, device=device, offset=offset)
    return b, memory


def output_on(device):
    out = hb.Buffer((ROWS, WIDTH), "uint8")
    out.copy_to_device(device)
    return out


def test_tiles_of_a_storage_laid_out_backwards_are_computed_in_place(brighter, device):
    """Its rows reversed in memory, two more than the tiles (so the storage's element at index 0
    lies at no multiple of the alignment from its lowest byte): the tiles of the view in memory
    order start at multiples of it, and are computed where they are. The storage goes up once,
    whole (on the zero-copy device: nothing moves), and no tile comes home."""
    values = image(ROWS + 2, seed=1)
    backwards = values[::-1].copy()[::-1]  # values, the rows in reverse memory order
    src = hb.Buffer.from_host(backwards, external_writes=False)
    assert src.strides == (-WIDTH, 1)
    out = output_on(device)
    moved = computed_in_place(brighter, src[::-1], out, device)
    assert moved == (NONE if device.zero_copy else up(backwards.nbytes))
    assert src.device is device
    expected = plus(values[::-1][:ROWS], 10)
    copies = Copies()
    np.testing.assert_array_equal(np.asarray(out), expected)
    assert copies() == (NONE if device.zero_copy else down(out.nbytes))


def test_tiles_of_a_storage_laid_out_backwards_on_the_device_are_computed_in_place(brighter, device):
    """The same storage already current on the device (its allocation there): nothing moves."""
    values = image(ROWS + 2, seed=2)
    src = hb.Buffer.from_host(values[::-1].copy()[::-1], external_writes=False)
    src.copy_to_device(device)
    out = output_on(device)
    assert computed_in_place(brighter, src[::-1], out, device) == NONE
    np.testing.assert_array_equal(np.asarray(out), plus(values[::-1][:ROWS], 10))


def test_tiles_of_a_cl_mem_wrapped_at_an_offset_are_computed_in_place(brighter, device):
    """A pyopencl array starting one alignment into its cl_mem: the tiles, in its memory, are
    computed there. The results are read by pyopencl from the cl_mem at the tiles' places; nothing
    crossed the host."""
    import pyopencl as cl

    values = image(ROWS, seed=3)
    src, memory = wrapped_at(device, values, device.base_alignment)
    out, _ = wrapped_at(device, np.zeros_like(values), device.base_alignment)
    assert src.device is device and out.device is device
    assert computed_in_place(brighter, src, out, device) == NONE
    assert computed_in_place(brighter, out, out, device) == NONE  # an output tile as its own input too
    queue = cl.CommandQueue.from_int_ptr(device.queue, retain=True)
    np.testing.assert_array_equal(hb.opencl.as_array(out, writable=False).get(queue=queue), plus(values, 20))
    whole = np.empty(memory.size, np.uint8)
    cl.enqueue_copy(queue, whole, memory)  # src's own memory: untouched, at the offset it was put
    np.testing.assert_array_equal(whole[device.base_alignment:].reshape(values.shape), values)


def test_tiles_of_a_cl_mem_wrapped_at_an_offset_of_no_alignment_come_home_counted(brighter, device):
    """Wrapped 8 bytes into its cl_mem, no tile starts at a multiple of the alignment: each is
    shown without device memory, its runtime allocates its own, and the result comes home when
    the call returns, every copy counted; the values are the same."""
    values = image(ROWS, seed=4)
    src, _ = wrapped_at(device, values, 8)
    out = output_on(device)
    copies = Copies()
    for lo in range(0, ROWS, TILE_ROWS):
        brighter(src[lo:lo + TILE_ROWS], out[lo:lo + TILE_ROWS])
    moved = copies()
    assert moved[0] >= TILES and moved[2] >= 1  # the tiles went up and came home, all counted
    np.testing.assert_array_equal(np.asarray(out), plus(values, 10))
