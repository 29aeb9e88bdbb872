"""A device allocation made by a pipeline's own Halide runtime (a real OpenCL AOT pipeline on
PoCL): the buffer tracks it as foreign, reads it through the interface the runtime set, counts
the copies, and frees it through that interface."""

import ctypes
import gc

import halide as hl  # required test dependency: the test fails, not skips, without it
import numpy as np
import pytest

import halide_buffer as hb

from common import NONE, Moves, down, up
from pipelines import OPENCL_TARGET, brighter_func, build, c_compiler

pytestmark = pytest.mark.needs_halide


def host_brighter_func():
    """brighter_func's sum scheduled on the host, in a pipeline built for an OpenCL target: its runtime
    brings device-resident inputs to the host itself (halide_copy_to_host)."""
    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(hl.UInt(8), 2, "inp")
    out = hl.Func("host_brighter")
    out[x, y] = inp[x, y] + hl.u8(10)
    return out, [inp]


@pytest.fixture(scope="module")
def pipelines(tmp_path_factory):
    hb.opencl.device()  # opens the OpenCL loader process-wide, where the pipeline's runtime looks
    directory = tmp_path_factory.mktemp("halide_opencl")
    return {
        "device": build(directory, c_compiler(), *brighter_func(), "hb_test_brighter_opencl", target=OPENCL_TARGET),
        "host": build(directory, c_compiler(), *host_brighter_func(), "hb_test_host_brighter", target=OPENCL_TARGET),
    }


@pytest.fixture(scope="module")
def brighter(pipelines):
    return pipelines["device"]


def test_a_pipelines_device_output_is_tracked_read_and_freed(brighter):
    src = np.random.default_rng(3).integers(0, 256, (24, 32), dtype=np.uint8)
    inp = hb.Buffer.from_host(src, external_writes=False)
    out = hb.Buffer((24, 32), "uint8")
    moves = Moves(out)
    brighter.run(inp, out)
    # The runtime ran on the device and said so in the flags: nothing has come back yet.
    assert out.device_dirty() and out.has_device_allocation() and out.device is None
    assert moves() == NONE
    expected = (src + np.uint8(10)).astype(np.uint8)
    np.testing.assert_array_equal(np.asarray(out), expected)
    assert moves() == down(24 * 32)
    np.testing.assert_array_equal(np.asarray(out.cropped(0, 5, 7)), expected[5:12])
    np.testing.assert_array_equal(np.asarray(out), expected)
    assert moves() == NONE
    # A host write goes back up through the runtime's own interface.
    out.numpy(writable=True)[0, 0] = 1
    out.copy_to_device()
    assert moves() == up(24 * 32) and not out.host_dirty()
    with pytest.raises(BufferError, match=r"opencl.as_array\(\): the device copy belongs to a pipeline's "
                                          r"Halide runtime; call copy_to_host\(\) and device_free\(\) first"):
        hb.opencl.as_array(out)
    with pytest.raises(ValueError, match=r"the buffer's device copy is on a pipeline runtime's device"):
        out.copy_to_device(hb.opencl.device())
    out.device_free()
    assert not out.has_device_allocation()
    out.copy_to_device(hb.opencl.device())  # now ours
    assert out.device is hb.opencl.device()
    np.testing.assert_array_equal(hb.opencl.as_array(out, writable=False).get()[1:], expected[1:])


def test_buffers_dying_with_a_foreign_allocation_free_it_through_its_runtime(brighter):
    gc.collect()  # storages of earlier tests that only garbage still holds
    before = hb._core._live_counts()["storages"]
    for i in range(50):
        out = hb.Buffer((8, 8), "uint8")
        brighter.run(hb.Buffer.from_host(np.full((8, 8), i, np.uint8)), out)
        assert out.device_dirty()
        if i % 2:
            assert np.asarray(out)[7, 7] == i + 10
        del out  # the storage frees the runtime's allocation through the runtime's interface
    gc.collect()
    assert hb._core._live_counts()["storages"] == before


def test_a_runtime_freeing_the_tracked_allocation_leaves_the_buffer_on_the_host(brighter):
    out = hb.Buffer((8, 8), "uint8")
    brighter.run(hb.Buffer.from_host(np.ones((8, 8), np.uint8)), out)
    free = brighter.lib.halide_device_free
    free.argtypes, free.restype = [ctypes.c_void_p, ctypes.c_void_p], ctypes.c_int
    assert free(None, out._get_raw_halide_buffer_t()) == 0  # Halide's API, on what we handed out
    assert not out.has_device_allocation() and not out.device_dirty()
    out.numpy(writable=True)[0, 0] = 5
    out.copy_to_device()  # a fresh allocation of ours, not the freed one
    assert out.device is hb.opencl.device()
    del out


def test_a_pipelines_allocation_for_a_crop_is_brought_home_and_counted(brighter):
    out = hb.Buffer((10, 9), "uint8")
    crop = out[1:9, 0:8]  # the runtime allocates device memory for the crop only
    brighter.run(hb.Buffer.from_host(np.ones((10, 9), np.uint8)), crop)
    moves = Moves(out)
    expected = np.zeros((10, 9), np.uint8)
    expected[1:9, 0:8] = 11
    np.testing.assert_array_equal(np.asarray(out), expected)
    assert moves() == down(8 * 8)  # the crop's elements, row by row, as the runtime's copy moves them
    assert not out.has_device_allocation() and not crop.device_dirty()


def test_a_runtime_reading_a_crop_of_our_device_buffer_gets_current_data(pipelines, dev):
    full = hb.Buffer((16, 16), "uint8")
    a = hb.opencl.as_array(full)
    a.fill(5)
    a.queue.finish()
    out = hb.Buffer((8, 8), "uint8")
    moves = Moves(full)
    pipelines["host"].run(full[0:8, 0:8], out)  # the runtime calls our interface's copy_to_host
    np.testing.assert_array_equal(np.asarray(out), np.full((8, 8), 15))
    assert moves() == down(16 * 16)  # the whole storage: the rest of it is current too
    assert not full.device_dirty()
    np.testing.assert_array_equal(np.asarray(full), np.full((16, 16), 5))
    assert moves() == NONE
