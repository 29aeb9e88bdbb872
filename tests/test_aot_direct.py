"""A host pipeline call takes one of two ways, and the user sees the same result either way.

Small buffers that nothing has touched (never on a device, no ``halide_buffer_t`` handed out,
64 KiB at most in all) are passed to the pipeline directly, on ``halide_buffer_t``s made for the
call; every other call lends each buffer's own ``halide_buffer_t`` and takes it back. A NumPy
array or a CPU tensor is borrowed for a host pipeline's call (described for it alone, no Buffer):
the direct way, at any size. Each case
below runs three ways — ``direct`` (fresh buffers), ``lent`` (the same buffers after
``_get_raw_halide_buffer_t()`` handed one out) and ``large`` (fresh, but over 64 KiB) — and
checks the way it went (``_live_counts()["direct_calls"]``) as well as the values, element for
element against NumPy, over views with mins, negative strides and transposes.
"""

import threading
import time

import numpy as np
import pytest

import halide_buffer as hb

from pipelines import (affine_offset_func, affine_u8_func, c_compiler, compile_and_load, expected_affine,
                       expected_affine_u8, plus_and_half_pipeline, random_u8)

WAYS = ["direct", "lent", "large"]
SMALL, LARGE = (16, 48), (300, 256)  # 768 B a buffer; 76,800 B: over the direct call's 64 KiB


@pytest.fixture(scope="module")
def pipelines(tmp_path_factory):
    directory, cc = tmp_path_factory.mktemp("aot_direct"), c_compiler()
    two, two_args, _ = plus_and_half_pipeline()
    return {
        "strided": compile_and_load(directory, cc, *affine_u8_func(True), "hb_direct_strided"),
        "affine": compile_and_load(directory, cc, *affine_offset_func(), "hb_direct_affine"),
        "two": compile_and_load(directory, cc, two, two_args, "hb_direct_two"),
    }


def shape_for(way):
    return LARGE if way == "large" else SMALL


def touch(way, *buffers):
    """For the lent way, hands out each buffer's halide_buffer_t: its storage is touched then."""
    if way == "lent":
        for b in buffers:
            b._get_raw_halide_buffer_t()


def call_counting(way, call):
    """Runs call() and checks it went the way `way` says; returns what it returned."""
    before = hb._core._live_counts()["direct_calls"]
    result = call()
    assert hb._core._live_counts()["direct_calls"] - before == (1 if way == "direct" else 0)
    return result


def source(shape, seed=7):
    return random_u8(np.random.default_rng(seed), shape)


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("view", ["whole", "rows_reversed", "columns_reversed", "both_reversed", "transposed"])
def test_an_input_view_is_read_element_for_element_as_numpy_reads_it(pipelines, way, view):
    shape = shape_for(way)
    a = source(shape)
    views = {
        "whole": lambda x: x,
        "rows_reversed": lambda x: x[::-1],
        "columns_reversed": lambda x: x[:, ::-1],
        "both_reversed": lambda x: x[::-1, ::-1],
        "transposed": lambda x: x.transposed(1, 0) if isinstance(x, hb.Buffer) else x.T,
    }
    inp = views[view](hb.Buffer.from_host(a, copy=True))
    seen = views[view](a)
    out = hb.Buffer(seen.shape, "uint8")
    touch(way, inp, out)
    assert call_counting(way, lambda: pipelines["strided"](inp, out)) is out
    np.testing.assert_array_equal(np.asarray(out), expected_affine_u8(seen))
    np.testing.assert_array_equal(np.asarray(inp), seen)  # the input is unchanged


@pytest.mark.parametrize("way", WAYS)
def test_crops_keep_their_coordinates_both_ways(pipelines, way):
    h, w = shape_for(way)
    a = source((h, w))
    inp = hb.Buffer.from_host(a, copy=True).cropped(0, 2, h - 4).cropped(1, 3, w - 8)
    whole = hb.Buffer((h, w), "uint8")
    out = whole.cropped(0, 2, h - 4).cropped(1, 3, w - 8)
    touch(way, inp, out)
    call_counting(way, lambda: pipelines["strided"](inp, out))
    expected = expected_affine_u8(a[2:h - 2, 3:w - 5], mins=(2, 3))
    np.testing.assert_array_equal(np.asarray(out), expected)
    got = np.asarray(whole)
    assert not got[:2].any() and not got[h - 2:].any() and not got[:, :3].any() and not got[:, w - 5:].any()


@pytest.mark.parametrize("way", ["direct", "large"])
def test_an_ndarray_output_holds_the_result_and_is_returned(pipelines, way):
    """NumPy arrays are borrowed for a host pipeline's call, described for it alone: the direct
    way at any size."""
    a = source(shape_for(way))
    out = np.zeros(a.shape, np.uint8)
    result = call_counting("direct", lambda: pipelines["affine"](a, 5, out))
    assert result is out
    np.testing.assert_array_equal(out, expected_affine(a, 5))


@pytest.mark.parametrize("kind", ["ndarray", "buffer"])
def test_a_large_call_lets_other_threads_go_on(pipelines, kind):
    """Above 64 KiB a call runs without the GIL, borrowed arrays (the direct way) and Buffers (the
    lent way) alike: a thread that only needs the GIL gets on while the pipeline computes."""
    shape = (4096, 4096)  # 16 MiB a buffer: milliseconds of computing
    a = np.ones(shape, np.uint8)
    out = np.zeros(shape, np.uint8)
    if kind == "buffer":
        a, out = hb.Buffer.from_host(a, copy=True), hb.Buffer(shape, "uint8")
    counted, stop = [0], threading.Event()

    def count():
        while not stop.is_set():
            counted[0] += 1
            time.sleep(0)  # lets the GIL go, and asks for it again at once

    thread = threading.Thread(target=count)
    thread.start()
    try:
        while counted[0] < 10:  # the thread runs
            time.sleep(0.001)
        steps = []
        for _ in range(3):  # the most any of three calls let it get on
            before = counted[0]
            pipelines["affine"](a, 1, out)
            steps.append(counted[0] - before)
    finally:
        stop.set()
        thread.join()
    np.testing.assert_array_equal(np.asarray(out)[:2, :4], expected_affine(np.ones((2, 4), np.uint8), 1))
    assert max(steps) > 50, f"the other thread took {steps} steps during the calls: the GIL was held"


@pytest.mark.parametrize("way", WAYS)
def test_two_outputs_one_of_them_empty_the_other_is_still_filled(pipelines, way):
    """Nothing to compute only when every output is empty: one empty output of two still runs."""
    h, w = shape_for(way)
    a = source((h, w))
    inp = hb.Buffer.from_host(a, copy=True)
    plus = hb.Buffer((h, w), "uint8")
    # The second output empty in the same coordinates (a crop of extent 0 keeps its min).
    half = hb.Buffer((h, w), "float32").cropped(1, 0, 0)
    touch(way, inp, plus, half)
    p = pipelines["two"]
    if way != "large":
        # An empty output gets its region from the other's: the pipeline's bounds say it may not
        # be empty where the other is not, so Halide refuses the call; the direct and the lent
        # ways refuse alike, and leave the buffers usable.
        with pytest.raises(hb.PipelineError):
            call_counting(way, lambda: p(inp, plus, half))
    empty_plus, empty_half = hb.Buffer((h, 0), "uint8"), hb.Buffer((h, 0), "float32")
    touch(way, empty_plus, empty_half)
    assert call_counting(way, lambda: p(inp, empty_plus, empty_half)) == (empty_plus, empty_half)
    half = hb.Buffer((h, w), "float32")
    touch(way, half)
    call_counting(way, lambda: p(inp, plus, half))
    np.testing.assert_array_equal(np.asarray(plus), a + np.uint8(1))
    np.testing.assert_array_equal(np.asarray(half), a.astype(np.float32) * np.float32(0.5))


@pytest.mark.parametrize("way", WAYS)
def test_a_failed_call_leaves_the_buffers_as_they_were(pipelines, way):
    h, w = shape_for(way)
    a = source((h, w))
    inp = hb.Buffer.from_host(a, copy=True)
    too_big = hb.Buffer((h + 4, w), "uint8")  # larger than the input it reads
    touch(way, inp, too_big)
    with pytest.raises(hb.PipelineError, match=r"hb_direct_strided\(\): Input buffer inp is accessed at"):
        call_counting(way, lambda: pipelines["strided"](inp, too_big))
    np.testing.assert_array_equal(np.asarray(inp), a)
    assert not np.asarray(too_big).any()
    out = hb.Buffer((h, w), "uint8")
    touch(way, out)
    call_counting(way, lambda: pipelines["strided"](inp, out))
    np.testing.assert_array_equal(np.asarray(out), expected_affine_u8(a))


def test_a_direct_call_leaves_nothing_touched(pipelines):
    """After a direct call its buffers are as untouched as before: the next call is direct too,
    nothing was copied, and both stay host dirty (the state they were made in)."""
    a = source(SMALL)
    inp, out = hb.Buffer.from_host(a, copy=True), hb.Buffer(SMALL, "uint8")
    for _ in range(2):
        call_counting("direct", lambda: pipelines["affine"](inp, 1, out))
    for b in (inp, out):
        assert b.host_dirty() and not b.device_dirty() and not b.has_device_allocation()
        t = b.transfers
        assert (t.to_device, t.to_device_bytes, t.to_host, t.to_host_bytes) == (0, 0, 0, 0)
    np.testing.assert_array_equal(np.asarray(out), expected_affine(a, 1))


def test_a_buffer_once_on_a_device_takes_the_lent_way(pipelines, dev):
    a = source(SMALL)
    inp, out = hb.Buffer.from_host(a, copy=True), hb.Buffer(SMALL, "uint8")
    inp.copy_to_device(dev)
    inp.device_free()  # the host copy current again, but the storage has been on a device
    call_counting("lent", lambda: pipelines["affine"](inp, 2, out))
    np.testing.assert_array_equal(np.asarray(out), expected_affine(a, 2))
