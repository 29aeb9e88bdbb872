"""Empty arrays: every entry that wraps memory (from_host, DLPack import, pickle, shared memory,
views) gives an empty buffer C-contiguous strides, whatever its exporter said (NumPy 2 gives empty
arrays zero strides, which a pipeline's innermost-stride-1 constraint refuses); a pipeline whose
outputs are all empty computes nothing and returns them, on the host and on OpenCL."""

import multiprocessing
import pickle

import halide as hl  # required test dependency: the test fails, not skips, without it
import numpy as np
import pytest

import halide_buffer as hb
from pipelines import OPENCL_TARGET, TARGET, affine_offset_func, c_compiler, compile_and_load, output_bounds_follow

pytestmark = pytest.mark.needs_halide

SHAPES = [(0, 5), (5, 0), (0, 0), (3, 0, 4)]


def c_strides(shape, itemsize):
    """Our strides for an empty shape: C order, an empty axis stepping as one of extent 1."""
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def through_pickle(protocol):
    def entry(a):
        b = hb.Buffer.from_host(a, copy=True)
        if protocol < 5:
            return pickle.loads(pickle.dumps(b, protocol=protocol))
        buffers = []
        s = pickle.dumps(b, protocol=5, buffer_callback=buffers.append)
        return pickle.loads(s, buffers=buffers)
    return entry


def through_torch(a):
    torch = pytest.importorskip("torch")
    return hb.from_dlpack(torch.from_numpy(a))


def through_shared_memory(a):
    b = hb.Buffer.from_host(a, copy=True).share_memory()
    return multiprocessing.reduction.ForkingPickler.loads(multiprocessing.reduction.ForkingPickler.dumps(b))


def crop_empty_axes(b, shape):
    for axis, n in enumerate(shape):
        if n == 0:
            b = b.cropped(axis, 0, 0)
    return b


# Each entry: an ndarray (zero strides, as NumPy 2 makes it) in, a Buffer out.
ENTRIES = {
    "from_host": hb.Buffer.from_host,
    "from_host(copy=True)": lambda a: hb.Buffer.from_host(a, copy=True),
    "from_host(memoryview)": lambda a: hb.Buffer.from_host(memoryview(a)),
    "from_dlpack(numpy)": hb.from_dlpack,
    "from_dlpack(torch)": through_torch,
    "shared memory": through_shared_memory,
    **{f"pickle protocol {p}": through_pickle(p) for p in range(pickle.HIGHEST_PROTOCOL + 1)},
    # views of buffers with elements, made empty (their strides were a strided or a reordered view's)
    "a strided slice": lambda a: hb.Buffer.from_host(np.zeros(tuple(2 * n + 1 for n in a.shape), a.dtype))[
        tuple(slice(0, n * 2, 2) if n else slice(0, 0) for n in a.shape)],
    "transposed": lambda a: hb.Buffer(a.shape[::-1], a.dtype.name).transposed(),
    "cropped": lambda a: crop_empty_axes(hb.Buffer(tuple(n or 4 for n in a.shape), a.dtype.name), a.shape),
    "sliced": lambda a: hb.Buffer(a.shape[:1] + (3,) + a.shape[1:], a.dtype.name).sliced(1, 1),
}


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("entry", list(ENTRIES))
def test_every_entry_gives_an_empty_array_c_contiguous_strides(entry, shape):
    a = np.zeros(shape, np.float32)
    assert 0 in a.strides  # NumPy 2's empty arrays: what the exporters describe
    b = ENTRIES[entry](a)
    assert b.shape == shape and b.size == 0
    assert b.strides == c_strides(shape, 4)
    assert b.is_c_contiguous
    assert np.asarray(b).shape == shape


def pointwise_func():
    """out(x, y) = in(x, y) * 2 + 1 (uint8), sized like its input: runs on any extent."""
    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(hl.UInt(8), 2, "inp")
    out = hl.Func("pointwise")
    out[x, y] = inp[x, y] * hl.u8(2) + hl.u8(1)
    output_bounds_follow(out, inp)
    return out, [inp]


def pointwise_opencl_func():
    """pointwise_func on the GPU target in 8x8 tiles, the last tile guarded (runs on any extent)."""
    out, args = pointwise_func()
    x, y, xo, yo, xi, yi = (hl.Var(n) for n in ("x", "y", "xo", "yo", "xi", "yi"))
    out.gpu_tile(out.args()[0], out.args()[1], xo, yo, xi, yi, 8, 8, hl.TailStrategy.GuardWithIf)
    return out, args


@pytest.fixture(scope="module")
def pipelines(tmp_path_factory):
    directory = tmp_path_factory.mktemp("empty")
    cc = c_compiler()
    return {
        "host": compile_and_load(directory, cc, *pointwise_func(), "hb_empty_host", target=TARGET),
        "opencl": compile_and_load(directory, cc, *pointwise_opencl_func(), "hb_empty_opencl", target=OPENCL_TARGET),
        "vectorized": compile_and_load(directory, cc, *affine_offset_func(), "hb_empty_vectorized", target=TARGET),
    }


@pytest.mark.parametrize("where", ["host", "opencl"])
@pytest.mark.parametrize("shape", [(0, 5), (5, 0), (0, 0)], ids=str)
@pytest.mark.parametrize("entry", list(ENTRIES))
def test_a_pipeline_over_an_empty_array_returns_an_empty_one(pipelines, where, entry, shape):
    p = pipelines[where]
    inp = ENTRIES[entry](np.zeros(shape, np.uint8))
    out = p(inp)  # its output, sized by the bounds query: as empty as the input
    assert out.shape == shape and out.dtype.name == "uint8" and out.size == 0
    given = hb.Buffer(shape, "uint8")
    assert p(inp, given) is given
    assert np.asarray(given).shape == shape


@pytest.mark.parametrize("where", ["host", "opencl"])
def test_the_same_pipelines_compute_arrays_with_elements(pipelines, where):
    # The pipelines above do run: an empty call's result is not a pipeline that never works.
    a = np.arange(6 * 10, dtype=np.uint8).reshape(6, 10)
    out = pipelines[where](hb.Buffer.from_host(a))
    np.testing.assert_array_equal(np.asarray(out), a * np.uint8(2) + np.uint8(1))


def test_an_empty_device_input_reaches_an_opencl_pipeline(pipelines):
    inp = hb.Buffer.from_host(np.zeros((0, 7), np.uint8), copy=True)
    inp.copy_to_device(hb.opencl.device())
    out = pipelines["opencl"](inp)
    assert out.shape == (0, 7) and inp.transfers.to_host == 0


def test_a_call_whose_outputs_are_all_empty_computes_nothing(pipelines):
    # Halide's own code refuses an empty output of a loop vectorized by 16: the last vector starts
    # 16 elements before the end, here before the min. The call does not run it: nothing to compute.
    p = pipelines["vectorized"]
    out = hb.Buffer((4, 0), "uint8")
    assert p(np.zeros((4, 0), np.uint8), 3, out) is out
    # With elements, the same pipeline runs (and Halide's constraint is its own: 16 at least).
    a = np.arange(4 * 16, dtype=np.uint8).reshape(4, 16)
    got = np.asarray(p(a, 3))
    assert got[1, 2] == np.uint8(int(a[1, 2]) * 2 + 2 + 3 * 1 + 3)
    with pytest.raises(hb.PipelineError, match=r"hb_empty_vectorized\(\): (In|Out)put buffer \S+ is accessed at -"):
        p(np.zeros((4, 3), np.uint8), 3, hb.Buffer((4, 3), "uint8"))


def test_a_vectorized_pipeline_sizing_an_empty_output_is_refused_by_halide(pipelines):
    # Not given, the output comes from the bounds query, which grows an empty region to one
    # vector: Halide reads 16 elements of an input of none and says so (as for any input
    # narrower than its vectors). Pass the output to get the empty result.
    with pytest.raises(hb.PipelineError, match=r"Input buffer inp is accessed at -16"):
        pipelines["vectorized"](np.zeros((4, 0), np.uint8), 3)
