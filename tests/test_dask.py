"""hb.dask.map_pipeline: Halide AOT pipelines over dask arrays, each output chunk fed exactly the
input region the pipeline's bounds query names. The bar: bit-identical to one call of the
pipeline on the whole array, for irregular chunks, every boundary mode, several dtypes, inputs
and outputs, on the threaded scheduler and on a dask.distributed cluster of processes."""

import concurrent.futures
import contextlib
import multiprocessing
import multiprocessing.pool
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import dask
import dask.array as da
import dask.multiprocessing
import dask.threaded
import halide as hl  # required test dependency: the test fails, not skips, without it
import numpy as np
import pytest

import halide_buffer as hb
from common import bits_of, random_bits
from pipelines import OPENCL_TARGET, TARGET, c_compiler, compile_and_load

STRICT = TARGET + "-strict_float"
PAD_MODES = {"nearest": "edge", "reflect": "symmetric", "periodic": "wrap"}
IRREGULAR = ((37, 64, 27), (50, 19, 71, 3))  # a 128 x 143 array in uneven chunks
HANG = 300  # seconds: the most a cluster operation may take before the test fails; never a pace
CLUSTER_START = 120  # seconds: the most a step of starting the cluster may take, per try; never a pace


def blur_func(t, name, gpu=False):
    """out(x, y) = the mean of the 3 x 3 neighbourhood, in t (uint8: integer sum // 9);
    vectorized, or in 8 x 8 tiles on the device."""
    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(t, 2, "inp")
    wide = hl.UInt(16) if t == hl.UInt(8) else hl.Float(32)
    total = sum(hl.cast(wide, inp[x + i, y + j]) for i in (-1, 0, 1) for j in (-1, 0, 1))
    out = hl.Func(name)
    out[x, y] = hl.cast(t, total / 9)
    if gpu:
        xo, yo, xi, yi = hl.Var("xo"), hl.Var("yo"), hl.Var("xi"), hl.Var("yi")
        out.gpu_tile(x, y, xo, yo, xi, yi, 8, 8)
    else:
        out.vectorize(x, 8)
    return out, [inp]


def asymmetric_func():
    """A stencil reaching 2 right and 1 up in x/y only: halos differ per side."""
    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(hl.UInt(8), 2, "inp")
    out = hl.Func("dask_asymmetric")
    out[x, y] = inp[x + 2, y] - inp[x, y - 1] * 2 + inp[x - 1, y + 3]
    return out, [inp]


def stencil3d_func():
    """A float32 3-D stencil: different reaches on each axis."""
    x, y, z = hl.Var("x"), hl.Var("y"), hl.Var("z")
    inp = hl.ImageParam(hl.Float(32), 3, "inp")
    out = hl.Func("dask_stencil3d")
    out[x, y, z] = inp[x - 1, y, z] * 0.5 + inp[x, y + 2, z] - inp[x, y, z + 1] * 0.25
    return out, [inp]


def two_inputs_func():
    """Two inputs read with different stencils, and a float32 scalar."""
    x, y = hl.Var("x"), hl.Var("y")
    a = hl.ImageParam(hl.Float(32), 2, "a")
    b = hl.ImageParam(hl.Float(32), 2, "b")
    gain = hl.Param(hl.Float(32), "gain")
    out = hl.Func("dask_two_inputs")
    out[x, y] = a[x - 2, y] + a[x + 2, y] + gain * b[x, y + 1]
    return out, [a, b, gain]


def two_outputs_pipeline():
    """Two uint8 outputs of one input: horizontal and vertical differences."""
    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(hl.UInt(8), 2, "inp")
    across, down = hl.Func("across"), hl.Func("down")
    across[x, y] = inp[x + 1, y] - inp[x - 1, y]
    down[x, y] = inp[x, y + 1] - inp[x, y - 2]
    return hl.Pipeline([across, down]), [inp]


def own_boundary_func():
    """A blur that clamps its reads to the whole array itself (its extents as parameters), plus an
    offset: needs no padding, so it runs with boundary='none'."""
    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(hl.UInt(8), 2, "inp")
    width, height, offset = hl.Param(hl.Int(32), "width"), hl.Param(hl.Int(32), "height"), hl.Param(hl.UInt(8), "offset")
    clamped = hl.BoundaryConditions.repeat_edge(inp, [(0, width), (0, height)])
    total = sum(hl.u16(clamped[x + i, y + j]) for i in (-1, 0, 1) for j in (-1, 0, 1))
    out = hl.Func("dask_own_boundary")
    out[x, y] = hl.u8(total / 9) + offset
    return out, [inp, width, height, offset]


def implicit_edge_func():
    """A blur clamping to its input's own bounds (repeat_edge without bounds): in each chunk the
    input is the region map_pipeline hands it, clipped to the array, so the clamp still lands on
    the array's edges."""
    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(hl.UInt(8), 2, "inp")
    clamped = hl.BoundaryConditions.repeat_edge(inp)
    total = sum(hl.u16(clamped[x + i, y + j]) for i in (-1, 0, 1) for j in (-1, 0, 1))
    out = hl.Func("dask_implicit_edge")
    out[x, y] = hl.u8(total / 9)
    return out, [inp]


def strict_func():
    """Fails (a Halide require) where the input holds 255."""
    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(hl.UInt(8), 2, "inp")
    out = hl.Func("dask_strict")
    out[x, y] = hl.require(inp[x, y] != 255, inp[x, y])
    return out, [inp]


def across_func():
    """out(x, y) = in(x - 1, y) + in(x + 1, y) (uint8): a reach along x only, none along y; the
    input takes any strides (an empty NumPy array's are 0, which Halide's default of a dense
    first dimension refuses)."""
    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(hl.UInt(8), 2, "inp")
    inp.dim(0).set_stride(hl.Expr())
    out = hl.Func("dask_across")
    out[x, y] = inp[x - 1, y] + inp[x + 1, y]
    return out, [inp]


@pytest.fixture(scope="session")
def pipes(tmp_path_factory):
    directory = tmp_path_factory.mktemp("dask_pipelines")
    cc = c_compiler()
    built = {}
    # strict_float: without it Halide may reassociate float math differently in the code for a
    # chunk's edges and the whole array's, and bits differ (docs/dask.md).
    for key, (func, args) in {
        "uint8": blur_func(hl.UInt(8), "dask_blur_u8"),
        "float32": blur_func(hl.Float(32), "dask_blur_f32"),
        "bfloat16": blur_func(hl.BFloat(16), "dask_blur_bf16"),
        "asymmetric": asymmetric_func(),
        "stencil3d": stencil3d_func(),
        "two_inputs": two_inputs_func(),
        "two_outputs": two_outputs_pipeline(),
        "own_boundary": own_boundary_func(),
        "implicit_edge": implicit_edge_func(),
        "strict": strict_func(),
        "across": across_func(),
    }.items():
        built[key] = compile_and_load(directory, cc, func, args, f"hb_dask_{key}", target=STRICT)
    return built


def whole_call(pipeline, inputs, boundary="none", **scalars):
    """The reference: one call of the pipeline on the whole array (inputs padded as far as the
    whole output's bounds query reaches, as boundary says); outputs shaped like the first input."""
    shape = next(iter(inputs.values())).shape
    outputs = [a for a in pipeline.arguments if a["kind"] == "output_buffer"]
    needed = pipeline.required_regions(scalars, {a["name"]: ((0,) * len(shape), shape) for a in outputs})
    args = dict(scalars)
    for name, a in inputs.items():
        (lo, extent) = needed[name]
        pad = [(max(0, -m), max(0, m + e - n)) for m, e, n in zip(lo, extent, a.shape)]
        if boundary == "none":
            assert not any(p for side in pad for p in side)
            padded = a
        elif boundary in PAD_MODES:
            padded = np.pad(a, pad, mode=PAD_MODES[boundary])
        else:
            padded = np.pad(a, pad, mode="constant", constant_values=boundary)
        args[name] = hb.Buffer.from_host(padded).translated(tuple(-p for p, _ in pad))
    for a in outputs:
        args[a["name"]] = hb.Buffer(shape, a["dtype"])
    pipeline(**args)
    result = tuple(np.asarray(args[a["name"]]) for a in outputs)
    return result[0] if len(result) == 1 else result


def same_bits(got, expected):
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert np.array_equal(bits_of(got), bits_of(expected))


# --- the correctness bar -------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["uint8", "float32", "bfloat16"])
@pytest.mark.parametrize("boundary", ["nearest", "reflect", "periodic", 3])
def test_a_stencil_over_irregular_chunks_equals_one_whole_call(pipes, dtype, boundary):
    a = random_bits((128, 143), dtype, seed=1)
    if dtype != "uint8":
        a = np.nan_to_num(a.astype(np.float32), nan=0, posinf=1, neginf=-1).clip(-1e4, 1e4).astype(a.dtype)
    out = hb.dask.map_pipeline(pipes[dtype], da.from_array(a, chunks=IRREGULAR), boundary=boundary)
    assert out.chunks == IRREGULAR and out.dtype == a.dtype
    same_bits(out.compute(), whole_call(pipes[dtype], {"inp": a}, boundary))


def test_a_bfloat16_torch_tensor_is_an_input_as_a_call_takes_it(pipes):
    """Anything a call takes goes to map_pipeline too: a bfloat16 tensor (which NumPy's __array__
    path refuses) is read through DLPack, its exact dtype kept."""
    torch = pytest.importorskip("torch")
    a = random_bits((40, 37), "bfloat16", seed=5)
    a = np.nan_to_num(a.astype(np.float32), nan=0, posinf=1, neginf=-1).clip(-1e4, 1e4).astype(a.dtype)
    t = torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    out = hb.dask.map_pipeline(pipes["bfloat16"], t, boundary="nearest")
    assert out.dtype == a.dtype
    same_bits(out.compute(), whole_call(pipes["bfloat16"], {"inp": a}, "nearest"))
    with pytest.raises(TypeError, match=r"^hb.dask.map_pipeline\(\): argument 'inp': object holds no memory"):
        hb.dask.map_pipeline(pipes["bfloat16"], object())
    # Inputs are only read: read-only memory and immutable JAX arrays are taken.
    frozen = a.copy()
    frozen.flags.writeable = False
    same_bits(hb.dask.map_pipeline(pipes["bfloat16"], frozen, boundary="nearest").compute(),
              whole_call(pipes["bfloat16"], {"inp": a}, "nearest"))
    jnp = pytest.importorskip("jax.numpy")
    same_bits(hb.dask.map_pipeline(pipes["bfloat16"], jnp.asarray(a), boundary="nearest").compute(),
              whole_call(pipes["bfloat16"], {"inp": a}, "nearest"))


def test_a_transposed_input_reaches_the_pipeline_with_dense_rows(pipes):
    a = random_bits((70, 90), "uint8", seed=10) % 255
    x = da.from_array(a, chunks=(30, 40)).T  # each chunk a transposed view: rows not dense
    got = hb.dask.map_pipeline(pipes["strict"], x).compute()  # pointwise: each piece is a chunk as it is
    same_bits(got, np.ascontiguousarray(a.T))


def test_an_asymmetric_stencil_gets_different_halos_per_side(pipes):
    a = random_bits((90, 70), "uint8", seed=2)
    x = da.from_array(a, chunks=(13, 22))
    p = pipes["asymmetric"]
    (lo, extent) = p.required_regions({}, {"dask_asymmetric": ((20, 30), (10, 5))})["inp"]
    assert (lo, extent) == ((19, 29), (14, 8))  # 1 up, 3 down; 1 left, 2 right
    same_bits(hb.dask.map_pipeline(p, x, boundary="reflect").compute(), whole_call(p, {"inp": a}, "reflect"))


def test_a_3d_stencil(pipes):
    a = np.random.default_rng(3).standard_normal((9, 20, 31)).astype(np.float32)
    x = da.from_array(a, chunks=((4, 5), (7, 13), (16, 15)))
    p = pipes["stencil3d"]
    same_bits(hb.dask.map_pipeline(p, x, boundary="nearest").compute(), whole_call(p, {"inp": a}, "nearest"))


def test_two_inputs_with_different_stencils_and_a_scalar_by_name(pipes):
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((40, 60)).astype(np.float32), rng.standard_normal((40, 60)).astype(np.float32)
    p = pipes["two_inputs"]
    got = hb.dask.map_pipeline(p, da.from_array(a, chunks=(15, 25)), b=da.from_array(b, chunks=(7, 60)),
                               gain=0.5, boundary="periodic")
    same_bits(got.compute(), whole_call(p, {"a": a, "b": b}, "periodic", gain=0.5))
    got = hb.dask.map_pipeline(p, da.from_array(a, chunks=(15, 25)), b, 0.5, boundary="periodic")  # b: NumPy
    same_bits(got.compute(), whole_call(p, {"a": a, "b": b}, "periodic", gain=0.5))


def test_two_outputs_come_back_as_a_tuple(pipes):
    a = random_bits((50, 41), "uint8", seed=5)
    p = pipes["two_outputs"]
    across, down = hb.dask.map_pipeline(p, da.from_array(a, chunks=(12, 17)), boundary="nearest",
                                        chunks=(20, 41))
    assert across.chunks == ((20, 20, 10), (41,))
    expected = whole_call(p, {"inp": a}, "nearest")
    across, down = dask.compute(across, down)
    same_bits(across, expected[0])
    same_bits(down, expected[1])


def test_a_pipeline_handling_its_own_boundary_needs_no_padding(pipes):
    a = random_bits((64, 80), "uint8", seed=6)
    p = pipes["own_boundary"]
    scalars = dict(width=80, height=64, offset=5)
    got = hb.dask.map_pipeline(p, da.from_array(a, chunks=(17, 30)), **scalars)  # boundary='none'
    same_bits(got.compute(), whole_call(p, {"inp": a}, **scalars))
    same_bits(got.compute(), whole_call(pipes["uint8"], {"inp": a}, "nearest") + np.uint8(5))


def test_a_pipeline_clamping_to_its_inputs_own_bounds_is_fed_regions_clipped_to_the_array(pipes):
    a = random_bits((64, 80), "uint8", seed=11)
    p = pipes["implicit_edge"]
    got = hb.dask.map_pipeline(p, da.from_array(a, chunks=(17, 30)))  # boundary='none': nothing to pad
    same_bits(got.compute(), whole_call(pipes["uint8"], {"inp": a}, "nearest"))
    asked = {"dask_implicit_edge": ((0, 0), (17, 30))}
    assert p.required_regions({}, asked, {"inp": ((0, 0), (64, 80))})["inp"] == ((0, 0), (18, 31))


# --- engines -----------------------------------------------------------------------------------

def test_an_opencl_pipeline_brings_each_output_chunk_home_once(tmp_path, dev):
    p = compile_and_load(tmp_path, c_compiler(), *blur_func(hl.UInt(8), "dask_blur_opencl", gpu=True),
                         "hb_dask_blur_opencl", target=OPENCL_TARGET)
    a = random_bits((64, 96), "uint8", seed=7)
    x = da.from_array(a, chunks=(32, 48))
    out = hb.dask.map_pipeline(p, x, boundary="nearest")
    before = hb.transfers()
    got = out.compute(scheduler="synchronous")
    moved = hb.transfers() - before
    assert moved.to_host == 4 and moved.to_host_bytes == a.nbytes  # 4 chunks, each home once
    # (the inputs go up through the pipeline runtime's own copies, which hb.transfers() does not see)
    same_bits(got, whole_call(p, {"inp": a}, "nearest"))


class ClusterDidNotStart(RuntimeError):
    """The cluster fixture could not start its worker processes: an error of the run (a loaded
    machine), not a failure of the tests that use it."""


def start_cluster(distributed, stack):
    """A client of a new cluster of two worker processes, both up, closed with `stack`; each step
    (a connection, a worker's start, both workers joining) may take up to CLUSTER_START seconds."""
    with dask.config.set({"distributed.comm.timeouts.connect": f"{CLUSTER_START}s"}):
        c = stack.enter_context(distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                                         dashboard_address=None, silence_logs=50,
                                                         death_timeout=CLUSTER_START))
        client = stack.enter_context(distributed.Client(c, set_as_default=False, timeout=CLUSTER_START))
    client.wait_for_workers(2, timeout=CLUSTER_START)
    return client


@pytest.fixture(scope="module")
def cluster():
    """A client of two worker processes. Not dask's default scheduler: the tests that use it ask
    it by name, and every other test of this module runs where it says (threads, unless it names
    another), whichever tests ran before it. A start that fails (processes too slow to start on a
    loaded machine) is tried once more; a second failure is ClusterDidNotStart, which pytest
    reports as an error in this fixture, never as a failure of a test."""
    distributed = pytest.importorskip("distributed")
    failures = []
    for _ in range(2):
        stack = contextlib.ExitStack()
        try:
            client = start_cluster(distributed, stack)
        except Exception as e:  # a timeout, a refused connection, a worker that died starting: all mean "not up"
            failures.append(f"{type(e).__name__}: {e}")
            with contextlib.suppress(Exception):  # what did start goes; its own errors say nothing more
                stack.close()
            continue
        with stack:
            yield client
        return
    raise ClusterDidNotStart(f"cluster: a dask.distributed cluster of two worker processes did not start, in two "
                             f"tries of up to {CLUSTER_START} s a step ({'; '.join(failures)}); the tests that "
                             "use it did not run: run them again on a less loaded machine")


def test_a_cluster_of_processes_gives_the_same_bits(pipes, cluster):
    a = random_bits((200, 150), "bfloat16", seed=8)
    a = np.nan_to_num(a.astype(np.float32), nan=0, posinf=1, neginf=-1).clip(-1e4, 1e4).astype(a.dtype)
    out = hb.dask.map_pipeline(pipes["bfloat16"], da.from_array(a, chunks=(64, 50)), boundary="reflect")
    same_bits(cluster.compute(out).result(), whole_call(pipes["bfloat16"], {"inp": a}, "reflect"))
    across, down = hb.dask.map_pipeline(pipes["two_outputs"], da.from_array(random_bits((60, 60), "uint8"),
                                                                            chunks=25), boundary=0)
    got = cluster.compute([across, down], sync=True)
    expected = whole_call(pipes["two_outputs"], {"inp": random_bits((60, 60), "uint8")}, 0)
    same_bits(got[0], expected[0])
    same_bits(got[1], expected[1])


def test_a_worker_killed_mid_computation_is_retried_and_the_result_is_identical(pipes, cluster):
    distributed = pytest.importorskip("distributed")
    a = random_bits((1024, 1024), "uint8", seed=9)
    # Every input chunk waits at a gate that opens only after the kill: however fast or slow the
    # machine, no task the victim holds can have finished when it dies, so they must run again.
    gate = distributed.Event("test_dask-worker-killed-gate", client=cluster)
    gate.clear()
    name = gate.name

    def through_the_gate(chunk):  # runs on a worker: its own client reaches the same event
        if not distributed.Event(name).wait(timeout=HANG):
            raise TimeoutError("the gate was never opened")
        return chunk

    x = da.from_array(a, chunks=(64, 64)).map_blocks(through_the_gate, dtype=a.dtype)  # 256 chunks
    out = hb.dask.map_pipeline(pipes["uint8"], x, boundary="nearest")
    pids = cluster.run(os.getpid)
    assert len(pids) == 2, pids
    address, victim = next(iter(pids.items()))
    future = cluster.compute(out)
    deadline = time.monotonic() + HANG  # bounds a hang only: the loop ends as soon as a task is there
    while not cluster.processing(workers=[address]).get(address):
        assert time.monotonic() < deadline, f"no task reached {address} in {HANG} s"
        time.sleep(0.01)
    os.kill(victim, signal.SIGKILL)
    gate.set()
    same_bits(future.result(timeout=HANG), whole_call(pipes["uint8"], {"inp": a}, "nearest"))
    cluster.wait_for_workers(2, timeout=HANG)  # the nanny started another one
    assert victim not in cluster.run(os.getpid).values()


@pytest.mark.skipif(bool(os.environ.get("HALIDE_BUFFER_SANITIZER")),
                    reason="RSS under ASan measures its quarantine and shadow memory")
def test_a_zarr_array_goes_through_with_far_less_memory_than_its_size(pipes, tmp_path):
    zarr = pytest.importorskip("zarr")
    n = 16384  # 256 MiB of uint8, 1,024 chunks
    source = zarr.create_array(str(tmp_path / "in.zarr"), shape=(n, n), chunks=(512, 512), dtype="uint8")
    da.store(da.fromfunction(lambda i, j: (7 * i + 13 * j) % 251, shape=(n, n), chunks=2048,
                             dtype=np.int32).astype(np.uint8), source)
    p = pipes["uint8"]
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(f"""
        import re, sys
        import dask, dask.array as da, zarr
        import halide_buffer as hb, halide_buffer.dask
        # A fixed number of threads, not one per core: the chunks in flight at once, and so the
        # peak, are the same on every machine.
        dask.config.set(scheduler="threads", num_workers=4)
        if sys.argv[1:] != ["--baseline"]:
            p = hb.aot.load({p.library_path!r}, {p.name!r})
            src = da.from_zarr(zarr.open_array({str(tmp_path / "in.zarr")!r}, mode="r"))
            da.to_zarr(hb.dask.map_pipeline(p, src, boundary="nearest"), {str(tmp_path / "out.zarr")!r})
        # This process's own peak (KiB). Not ru_maxrss: a child's starts at its parent's peak (pytest's,
        # often larger than this whole run), which would hide any growth.
        with open("/proc/self/status") as f:
            print(re.search(r"VmHWM:\\s+(\\d+) kB", f.read()).group(1))
    """))
    peak_kib = {}
    for mode in ("--baseline", "--run"):
        run = subprocess.run([sys.executable, str(script), mode], capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr
        peak_kib[mode] = int(run.stdout)
    extra_mib = (peak_kib["--run"] - peak_kib["--baseline"]) / 1024
    assert extra_mib < n * n / 2**20 / 2, f"{extra_mib:.0f} MiB over the imports for a 256 MiB array"
    out = zarr.open_array(str(tmp_path / "out.zarr"), mode="r")
    corner = source[:65, :65]
    same_bits(out[:64, :64], whole_call(p, {"inp": corner}, "nearest")[:64, :64])


# --- bad input, refused before any task runs ----------------------------------------------------

def test_bad_input_is_refused_before_any_task_runs(pipes):
    p = pipes["uint8"]
    x = da.from_array(np.zeros((20, 20), np.uint8), chunks=10)
    with pytest.raises(TypeError, match=r"hb.dask.map_pipeline\(\): input 'inp' of hb_dask_uint8 is float32, the "
                                        r"pipeline takes uint8; convert it first"):
        hb.dask.map_pipeline(p, x.astype(np.float32), boundary="nearest")
    with pytest.raises(ValueError, match=r"input 'inp' of hb_dask_uint8 has 3 axes, the pipeline takes 2"):
        hb.dask.map_pipeline(p, x[None], boundary="nearest")
    unknown = x[x[:, 0] == 0]  # rows chosen by value: their count is unknown until computed
    with pytest.raises(ValueError, match=r"input 'inp' has unknown chunk sizes; call x.compute_chunk_sizes\(\)"):
        hb.dask.map_pipeline(p, unknown, boundary="nearest")
    with pytest.raises(TypeError, match=r"hb_dask_own_boundary\(\): argument 'width' is missing"):
        hb.dask.map_pipeline(pipes["own_boundary"], x, height=20, offset=0)
    with pytest.raises(TypeError, match=r"input 'inp' of hb_dask_uint8 is missing"):
        hb.dask.map_pipeline(p, boundary="nearest")
    with pytest.raises(TypeError, match=r"hb_dask_uint8 has no input or scalar named 'out'; its inputs and "
                                        r"scalars are 'inp' \(outputs are returned, never passed\)"):
        hb.dask.map_pipeline(p, x, out=x)
    with pytest.raises(ValueError, match=r"boundary 'mirror' is not one of 'none', 'nearest'"):
        hb.dask.map_pipeline(p, x, boundary="mirror")
    with pytest.raises(ValueError, match=r"hb_dask_uint8 reads input 'inp' over mins \(-1, -1\), shape \(12, 12\) "
                                         r"for the output chunk \(0, 0\), outside the input's shape \(20, 20\), "
                                         r"and boundary is 'none'"):
        hb.dask.map_pipeline(p, x)


@pytest.mark.parametrize("boundary, kind", [(True, "bool"), (False, "bool"), ([0], "list"), (b"nearest", "bytes"),
                                             ({0: None}, "NoneType"), (("nearest", True), "bool")])
def test_a_boundary_neither_a_name_nor_a_number_is_a_type_error(pipes, boundary, kind):
    """A bool is no constant to pad with (a bug took True as the constant 1, and anything not a
    bool as a constant; dask's map_overlap pads with True, which docs/dask.md says we refuse),
    nor are a list or bytes, nor None for one axis."""
    x = da.from_array(np.zeros((20, 20), np.uint8), chunks=10)
    with pytest.raises(TypeError, match=rf"^hb.dask.map_pipeline\(\): boundary must be 'none', 'nearest', "
                                        rf"'reflect', 'periodic' or a number \(or one of those per axis, in a "
                                        rf"tuple or a dict\), not {kind}$"):
        hb.dask.map_pipeline(pipes["uint8"], x, boundary=boundary)


def test_a_region_leaving_only_past_the_far_edge_is_refused(pipes):
    """A pipeline clamping its reads to a width one larger than the array reads one column past
    the last and never before the first: with boundary='none' that is refused before any task
    runs (a bug only looked for regions starting before the first element)."""
    a = random_bits((64, 80), "uint8", seed=12)
    x = da.from_array(a, chunks=(17, 30))
    with pytest.raises(ValueError, match=r"hb_dask_own_boundary reads input 'inp' over mins \(0, 59\), shape "
                                         r"\(18, 22\) for the output chunk \(0, 2\), outside the input's shape "
                                         r"\(64, 80\), and boundary is 'none'"):
        hb.dask.map_pipeline(pipes["own_boundary"], x, width=81, height=64, offset=0)
    with pytest.raises(ValueError, match=r"over mins \(50, 0\), shape \(15, 31\) for the output chunk \(3, 0\), "
                                         r"outside the input's shape \(64, 80\)"):
        hb.dask.map_pipeline(pipes["own_boundary"], x, width=80, height=65, offset=0)
    got = hb.dask.map_pipeline(pipes["own_boundary"], x, width=80, height=64, offset=0)  # the true size: inside
    same_bits(got.compute(), whole_call(pipes["own_boundary"], {"inp": a}, width=80, height=64, offset=0))


def test_an_empty_array_reads_nothing_outside_so_boundary_none_is_not_refused(pipes):
    """An array of no rows: its output chunks have no element and read nothing, so the pipeline's
    reach along x is no reason to refuse (a bug refused any region leaving the input, empty or
    not). The result is empty, like the input."""
    p = pipes["across"]
    assert p.required_regions({}, {"dask_across": ((0, 0), (0, 10))})["inp"] == ((0, -1), (0, 12))
    a = np.zeros((0, 20), np.uint8)
    out = hb.dask.map_pipeline(p, da.from_array(a, chunks=(5, 10)))
    assert out.chunks == ((0,), (10, 10))
    got = out.compute()
    assert got.shape == (0, 20) and got.dtype == np.uint8
    # Rows present: the same reach leaves the input, and is refused.
    with pytest.raises(ValueError, match=r"hb_dask_across reads input 'inp' over mins \(0, -1\), shape \(3, 12\) "
                                         r"for the output chunk \(0, 0\), outside the input's shape \(3, 20\)"):
        hb.dask.map_pipeline(p, da.from_array(np.zeros((3, 20), np.uint8), chunks=(5, 10)))


def test_a_region_of_one_row_leaving_the_input_is_refused(pipes):
    """An array of one row: the region each chunk reads has one row and leaves the input along x,
    which boundary='none' refuses before any task runs (a bug took an axis of one element for
    an empty region, which reads nothing)."""
    with pytest.raises(ValueError, match=r"hb_dask_across reads input 'inp' over mins \(0, -1\), shape \(1, 12\) "
                                         r"for the output chunk \(0, 0\), outside the input's shape \(1, 20\)"):
        hb.dask.map_pipeline(pipes["across"], da.from_array(np.zeros((1, 20), np.uint8), chunks=(5, 10)))
    a = random_bits((1, 20), "uint8", seed=21)
    got = hb.dask.map_pipeline(pipes["across"], da.from_array(a, chunks=(5, 10)), boundary="nearest").compute()
    same_bits(got, whole_call(pipes["across"], {"inp": a}, boundary="nearest"))


@pytest.mark.parametrize("compute", [
    lambda out: out.compute(),
    lambda out: hb.dask.compute(out, scheduler="sync"),  # no task of it left running after the test
], ids=["compute", "hb.dask.compute"])
def test_a_halide_error_in_one_chunk_names_the_chunk(pipes, compute):
    a = np.zeros((30, 40), np.uint8)
    a[25, 33] = 255
    out = hb.dask.map_pipeline(pipes["strict"], da.from_array(a, chunks=(10, 20)))
    with pytest.raises(hb.PipelineError, match=r"(?s)255.* \(hb.dask.map_pipeline: the output chunk \(2, 1\) "
                                               r"at mins \(20, 20\), shape \(10, 20\)\)") as e:
        compute(out)
    assert e.value.code == -27  # halide_error_code_requirement_failed


# --- the bounds query map_pipeline asks --------------------------------------------------------

def test_required_regions_answers_with_the_regions_read_and_written(pipes):
    p = pipes["uint8"]  # a 3 x 3 stencil, vectorized by 8 along x (the last axis)
    assert p.required_regions({}, {"dask_blur_u8": ((10, 20), (4, 16))}) == {
        "inp": ((9, 19), (6, 18)), "dask_blur_u8": ((10, 20), (4, 16))}
    # A chunk narrower than the vectors: the schedule writes 8 columns, shifted inwards.
    narrow = p.required_regions({}, {"dask_blur_u8": ((0, 30), (2, 3))})
    assert narrow["dask_blur_u8"] == ((0, 25), (2, 8)) and narrow["inp"] == ((-1, 24), (4, 10))
    two = pipes["two_inputs"].required_regions({"gain": 2.0}, {"dask_two_inputs": ((0, 0), (5, 8))})
    assert two["a"] == ((0, -2), (5, 12)) and two["b"] == ((1, 0), (5, 8))


def test_required_regions_refuses_what_it_cannot_ask(pipes):
    p = pipes["uint8"]
    with pytest.raises(TypeError, match=r"hb_dask_uint8\(\): argument 'dask_blur_u8': no region asked for; pass "
                                        r"the output's \(mins, shape\)"):
        p.required_regions({}, {})
    with pytest.raises(ValueError, match=r"argument 'dask_blur_u8': a region of 3 axes for a buffer of 2"):
        p.required_regions({}, {"dask_blur_u8": ((0, 0, 0), (1, 1, 1))})
    with pytest.raises(TypeError, match=r"a region is \(mins, shape\), two sequences of ints, not \(0, 1\)"):
        p.required_regions({}, {"dask_blur_u8": (0, 1)})
    with pytest.raises(ValueError, match=r"min 2147483647 of axis 0 \(extent 2\) leaves Halide's int32"):
        p.required_regions({}, {"dask_blur_u8": ((2**31 - 1, 0), (2, 2))})
    with pytest.raises(TypeError, match=r"argument 'gain' is missing"):
        pipes["two_inputs"].required_regions({}, {"dask_two_inputs": ((0, 0), (5, 8))})


def test_a_region_as_large_as_a_chunk_but_shifted_by_the_boundary_is_not_the_chunk(pipes):
    # Chunks of 8 rows, a pipeline reading one row up: the first chunk's region is rows -1..6,
    # eight rows all taken from chunk 0 ('nearest' repeats row 0): shaped like the chunk, not it.
    x = np.arange(16 * 8, dtype=np.float32).reshape(16, 8)
    p = pipes["stencil3d"]
    a = np.repeat(x[None], 3, axis=0)
    got = hb.dask.map_pipeline(p, da.from_array(a, chunks=(3, 8, 8)), boundary="nearest").compute()
    same_bits(got, whole_call(p, {"inp": a}, "nearest"))


def test_a_region_shaped_like_one_input_chunk_but_padded_is_not_that_chunk(pipes):
    """Output chunks of 8 over input chunks of 10: the first output chunk's 3 x 3 blur reads rows
    and columns -1..8, ten of each, all from input chunk (0, 0) ('nearest' repeats row and column
    0). Shaped like that chunk and starting at its first element, yet not the chunk: a bug handed
    the chunk as it is whenever the sources started at the chunk's start."""
    a = random_bits((20, 20), "uint8", seed=13)
    p = pipes["uint8"]
    assert p.required_regions({}, {"dask_blur_u8": ((0, 0), (8, 8))})["inp"] == ((-1, -1), (10, 10))
    out = hb.dask.map_pipeline(p, da.from_array(a, chunks=10), boundary="nearest", chunks=((8, 12), (8, 12)))
    same_bits(out.compute(), whole_call(p, {"inp": a}, "nearest"))


# --- empty axes and per-axis boundaries ----------------------------------------------------------

@pytest.mark.parametrize("which, boundary", [("uint8", b) for b in ("none", "nearest", "reflect", "periodic", 3)] +
                         [("strict", "none")])
@pytest.mark.parametrize("shape, chunks", [((0, 20), (5, 10)), ((20, 0), (10, 5)), ((0, 0), 5)], ids=str)
def test_a_pipeline_over_an_empty_axis_returns_the_empty_result(pipes, which, shape, chunks, boundary):
    """An output chunk with no element runs no task of the pipeline and reads no input: a halo
    over an empty axis is no error, whatever the boundary (bugs: 'nearest' and 'reflect' filled
    the region with None, 'periodic' divided by the empty extent, and a pointwise pipeline got an
    empty NumPy array's zero strides, inside a task at compute())."""
    out = hb.dask.map_pipeline(pipes[which], da.from_array(np.zeros(shape, np.uint8), chunks=chunks),
                               boundary=boundary)
    assert out.shape == shape
    got = out.compute()
    assert got.shape == shape and got.dtype == np.uint8


@pytest.mark.parametrize("boundary", ["nearest", "reflect", "periodic", {0: "nearest", 1: 0}])
def test_an_empty_input_read_beyond_its_edge_with_no_element_to_take_is_refused(pipes, boundary):
    """Output chunks with elements read rows of input 'b', which has none: no element to repeat,
    mirror or wrap (numpy.pad refuses the same), refused before any task runs."""
    a = da.from_array(np.ones((20, 20), np.float32), chunks=10)
    b = da.from_array(np.zeros((0, 20), np.float32), chunks=10)
    name = boundary if isinstance(boundary, str) else boundary[0]
    with pytest.raises(ValueError, match=rf"hb_dask_two_inputs reads input 'b' over mins \(1, -?\d+\), shape "
                                         rf"\(10, \d+\) for the output chunk \(0, 0\), and the input is empty along "
                                         rf"axis 0, with no element for boundary '{name}' to take; pass a constant "
                                         r"boundary for that axis"):
        hb.dask.map_pipeline(pipes["two_inputs"], a, b, 0.5, boundary=boundary)


def test_an_empty_input_with_a_constant_boundary_reads_the_constant(pipes):
    a = random_bits((20, 24), "float32", seed=30)
    a = np.nan_to_num(a, nan=0, posinf=1, neginf=-1).clip(-1e4, 1e4).astype(np.float32)
    b = np.zeros((0, 24), np.float32)
    got = hb.dask.map_pipeline(pipes["two_inputs"], da.from_array(a, chunks=(7, 10)), b, 0.5, boundary=3).compute()
    same_bits(got, whole_call(pipes["two_inputs"], {"a": a, "b": b}, boundary=3, gain=0.5))


PER_AXIS = [("periodic", "nearest"), {0: 3, 1: "nearest"}, {0: "reflect", np.int64(1): 7}, (5, 7),
            {0: 9, 1: "periodic"}]


@pytest.mark.parametrize("boundary", PER_AXIS, ids=str)
def test_a_boundary_per_axis_pads_as_dask_does(pipes, boundary):
    """A tuple or dict of boundaries, one per axis: the result equals one call on the array that
    dask's own boundary padding (dask.array.overlap.boundaries, axis by axis: where two constants
    meet in a corner, the later axis's wins) makes."""
    a = random_bits((30, 41), "uint8", seed=31)
    got = hb.dask.map_pipeline(pipes["uint8"], da.from_array(a, chunks=(11, 16)), boundary=boundary).compute()
    kind = boundary if isinstance(boundary, dict) else dict(enumerate(boundary))
    padded = da.overlap.boundaries(da.from_array(a, chunks=(11, 16)), {0: 1, 1: 1}, kind).compute()
    whole = pipes["uint8"](hb.Buffer.from_host(padded).translated((-1, -1)), hb.Buffer(a.shape, "uint8"))
    same_bits(got, np.asarray(whole))


def test_none_and_axes_left_out_of_a_dict_mean_none(pipes):
    a = random_bits((30, 41), "uint8", seed=32)
    x = da.from_array(a, chunks=(11, 16))
    with pytest.raises(ValueError, match=r"hb_dask_uint8 reads input 'inp' over mins \(-1, -1\), shape \(13, 18\) "
                                         r"for the output chunk \(0, 0\), outside the input's shape \(30, 41\), "
                                         r"and boundary is 'none'; pass"):
        hb.dask.map_pipeline(pipes["uint8"], x, boundary=None)
    with pytest.raises(ValueError, match=r"outside the input's shape \(30, 41\), and boundary is 'none' along "
                                         r"axis 0; pass"):
        hb.dask.map_pipeline(pipes["uint8"], x, boundary={1: "nearest"})
    scalars = {"width": 41, "height": 30, "offset": 2}  # a pipeline staying inside by itself
    same_bits(hb.dask.map_pipeline(pipes["own_boundary"], x, boundary=None, **scalars).compute(),
              whole_call(pipes["own_boundary"], {"inp": a}, **scalars))


@pytest.mark.parametrize("boundary, message", [
    (("nearest",), r"boundary \('nearest',\) gives 1 axes, the arrays have 2; give one boundary per axis"),
    ({2: "nearest"}, r"boundary names axis 2, the arrays have axes 0 to 1; key the dict by those"),
    ({-1: "nearest"}, r"boundary names axis -1, the arrays have axes 0 to 1"),
    ({"y": "nearest"}, r"boundary names axis 'y', the arrays have axes 0 to 1"),
    ({True: "nearest"}, r"boundary names axis True, the arrays have axes 0 to 1"),
    ({0: "mirror"}, r"boundary 'mirror' is not one of 'none', 'nearest'"),
])
def test_a_boundary_per_axis_that_names_no_axis_is_refused(pipes, boundary, message):
    x = da.from_array(np.zeros((20, 20), np.uint8), chunks=10)
    with pytest.raises(ValueError, match=r"^hb.dask.map_pipeline\(\): " + message):
        hb.dask.map_pipeline(pipes["uint8"], x, boundary=boundary)


@pytest.mark.parametrize("constant", [np.nan, np.float32(np.nan), np.inf, -np.inf, -1, 256, -1.0, 256.0, 1e10,
                                      np.int64(300), 2**70, np.complex64(1)], ids=repr)
def test_a_constant_an_integer_input_cannot_hold_is_refused_before_any_task_runs(pipes, constant):
    """NaN, an infinity, a number beyond uint8's range: no uint8 value. dask's map_overlap pads with
    what NumPy's cast makes of it, with a RuntimeWarning (NaN: 0 for uint8, the lowest int32 for
    int32, on x86-64); here it is refused, naming the fix (a bug raised NumPy's own ValueError from
    a task for float('nan'), and padded with 0 for np.float32('nan'))."""
    x = da.from_array(np.zeros((20, 30), np.uint8), chunks=10)
    with pytest.raises(ValueError, match=r"^hb.dask.map_pipeline\(\): hb_dask_uint8 reads input 'inp' \(uint8\) beyond "
                                         r"its edge for the output chunk \(0, 0\), and boundary "
                                         + re.escape(str(constant)) + r" is no uint8 value; pass a constant from 0 "
                                         r"to 255$"):
        hb.dask.map_pipeline(pipes["uint8"], x, boundary=constant)
    with pytest.raises(ValueError, match=r"beyond its edge along axis 1 for the output chunk \(0, 0\), and boundary "
                                         + re.escape(str(constant)) + " is no uint8 value"):
        hb.dask.map_pipeline(pipes["uint8"], x, boundary={0: "nearest", 1: constant})


@pytest.mark.parametrize("constant, value", [(2.7, 2), (255.9, 255), (-0.9, 0), (np.float32(0.5), 0), (255, 255),
                                             (0, 0), (np.uint64(7), 7)], ids=str)
def test_a_constant_goes_to_an_integer_input_as_numpy_converts_it(pipes, constant, value):
    """An integer input drops a constant's fraction, as NumPy and dask's map_overlap do; the
    ends of its range are values of it."""
    a = random_bits((30, 41), "uint8", seed=34)
    got = hb.dask.map_pipeline(pipes["uint8"], da.from_array(a, chunks=(11, 16)), boundary=constant).compute()
    same_bits(got, whole_call(pipes["uint8"], {"inp": a}, value))


def test_a_constant_an_integer_input_cannot_hold_is_taken_along_an_axis_it_is_not_read_beyond(pipes):
    """dask_across reads beyond its input along axis 1 only: NaN as axis 0's boundary is never
    written into its input, so it is no error."""
    a = random_bits((30, 41), "uint8", seed=35)
    got = hb.dask.map_pipeline(pipes["across"], da.from_array(a, chunks=(11, 16)),
                               boundary={0: np.nan, 1: "nearest"}).compute()
    same_bits(got, whole_call(pipes["across"], {"inp": a}, "nearest"))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("constant", [np.nan, -np.inf, 1e30], ids=repr)
def test_a_float_input_takes_nan_and_the_infinities_as_constants(pipes, dtype, constant):
    a = random_bits((30, 41), dtype, seed=36)
    a = np.nan_to_num(a.astype(np.float32), nan=0, posinf=1, neginf=-1).clip(-1e4, 1e4).astype(a.dtype)
    got = hb.dask.map_pipeline(pipes[dtype], da.from_array(a, chunks=(11, 16)), boundary=constant).compute()
    same_bits(got, whole_call(pipes[dtype], {"inp": a}, constant))


def test_chunks_of_one_element_reach_a_pointwise_pipeline_whole(pipes):
    """A region that is one chunk of extent 1 along an axis is handed over as that chunk (a bug
    looked at the region's second element to recognise it)."""
    a = random_bits((6, 10), "uint8", seed=33) % 255  # no 255: dask_strict's require holds
    got = hb.dask.map_pipeline(pipes["strict"], da.from_array(a, chunks=(1, 5))).compute()
    same_bits(got, a)


# --- hb.dask.compute: results allocated once, chunks written in place ---------------------------

@pytest.fixture(params=["threads", "sync", "pool"])
def in_process_scheduler(request):
    """The schedulers that run tasks in this process; 'pool': a thread pool of our own."""
    if request.param != "pool":
        yield request.param
        return
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        yield pool


class ChunkCalls:
    """The output chunks' pipeline calls seen since the test began, by pipeline: another test's
    failed computation may leave tasks of its own pipeline running on dask's threads."""

    def __init__(self):
        self.calls = []

    def of(self, pipeline):
        """The pipeline's calls, in order: (chunk index, {output: the ndarray its buffer shows})."""
        return [(index, shown) for name, index, shown in self.calls if name == pipeline.name]

    def clear(self):
        self.calls.clear()


@pytest.fixture
def chunk_calls(monkeypatch):
    seen = ChunkCalls()
    real = hb.dask._call

    def spy(pipeline, args, index, mins, shape):
        real(pipeline, args, index, mins, shape)
        outputs = [a["name"] for a in pipeline.arguments if a["kind"] == "output_buffer"]
        seen.calls.append((pipeline.name, index, {name: np.asarray(args[name]) for name in outputs}))

    monkeypatch.setattr(hb.dask, "_call", spy)
    return seen


@pytest.mark.parametrize("chunks, out_chunks", [
    (IRREGULAR, None),                    # uneven; chunks 3 wide, narrower than the vectors of 8
    ((32, 48), None),
    ((128, 143), None),                   # one chunk
    ((30, 40), ((100, 28), (64, 64, 15))),  # output chunked otherwise than the input
], ids=["irregular", "regular", "one", "rechunked"])
@pytest.mark.parametrize("boundary", ["nearest", "reflect", "periodic", 3])
def test_compute_gives_the_values_of_dask_compute(pipes, chunks, out_chunks, boundary, in_process_scheduler):
    a = random_bits((128, 143), "uint8", seed=40)
    out = hb.dask.map_pipeline(pipes["uint8"], da.from_array(a, chunks=chunks), boundary=boundary, chunks=out_chunks)
    got = hb.dask.compute(out, scheduler=in_process_scheduler)
    assert isinstance(got, tuple) and len(got) == 1 and type(got[0]) is np.ndarray
    same_bits(got[0], out.compute(scheduler="sync"))
    same_bits(got[0], whole_call(pipes["uint8"], {"inp": a}, boundary))


def test_every_scheduler_of_this_process_writes_the_chunks_in_place(pipes, in_process_scheduler, chunk_calls):
    a = random_bits((64, 96), "uint8", seed=51)
    y = hb.dask.map_pipeline(pipes["uint8"], da.from_array(a, chunks=(32, 48)), boundary="nearest")
    (got,) = hb.dask.compute(y, scheduler=in_process_scheduler)
    same_bits(got, whole_call(pipes["uint8"], {"inp": a}, "nearest"))
    calls = chunk_calls.of(pipes["uint8"])
    assert len(calls) == 4 and all(np.shares_memory(shown["dask_blur_u8"], got) for _, shown in calls)


def test_compute_of_a_bfloat16_3d_and_two_input_pipeline(pipes):
    a = random_bits((128, 143), "bfloat16", seed=41)
    a = np.nan_to_num(a.astype(np.float32), nan=0, posinf=1, neginf=-1).clip(-1e4, 1e4).astype(a.dtype)
    out = hb.dask.map_pipeline(pipes["bfloat16"], da.from_array(a, chunks=IRREGULAR), boundary="reflect")
    same_bits(hb.dask.compute(out)[0], whole_call(pipes["bfloat16"], {"inp": a}, "reflect"))
    c = np.random.default_rng(42).standard_normal((9, 20, 31)).astype(np.float32)
    out = hb.dask.map_pipeline(pipes["stencil3d"], da.from_array(c, chunks=((4, 5), (7, 13), (16, 15))),
                               boundary="nearest")
    same_bits(hb.dask.compute(out)[0], whole_call(pipes["stencil3d"], {"inp": c}, "nearest"))
    rng = np.random.default_rng(43)
    f, g = rng.standard_normal((40, 60)).astype(np.float32), rng.standard_normal((40, 60)).astype(np.float32)
    out = hb.dask.map_pipeline(pipes["two_inputs"], da.from_array(f, chunks=(15, 25)), da.from_array(g, chunks=(7, 60)),
                               gain=0.5, boundary="periodic")
    same_bits(hb.dask.compute(out)[0], whole_call(pipes["two_inputs"], {"a": f, "b": g}, "periodic", gain=0.5))


def test_compute_writes_each_chunk_straight_into_the_out_given(pipes, chunk_calls):
    """The pipeline's output buffer for each chunk is a view of `out` itself: no chunk array, no
    copy, no full-size intermediate; the result is `out`."""
    a = random_bits((96, 128), "uint8", seed=44)
    y = hb.dask.map_pipeline(pipes["uint8"], da.from_array(a, chunks=(32, 64)), boundary="nearest")
    target = np.empty(a.shape, np.uint8)
    (got,) = hb.dask.compute(y, out=target)
    assert got is target
    same_bits(target, whole_call(pipes["uint8"], {"inp": a}, "nearest"))
    calls = chunk_calls.of(pipes["uint8"])
    assert sorted(index for index, _ in calls) == sorted(np.ndindex(3, 2))  # each chunk once
    for index, shown in calls:
        written = shown["dask_blur_u8"]
        assert written.shape == (32, 64) and np.shares_memory(written, target), index
        assert written.__array_interface__["data"][0] == target[index[0] * 32:, index[1] * 64:].ctypes.data


@pytest.mark.skipif(bool(os.environ.get("HALIDE_BUFFER_SANITIZER")),
                    reason="ASan allocates outside NumPy's traced allocator")
def test_compute_makes_no_full_size_array(pipes):
    """NumPy's allocations while computing into an `out` given (traced with tracemalloc) stay far
    below the array's size: the chunks' input regions only. dask's own compute() concatenates
    the chunks into a new array of the full size."""
    import tracemalloc

    a = random_bits((4096, 4096), "uint8", seed=45)  # 16 MiB: far above what other threads allocate meanwhile
    y = hb.dask.map_pipeline(pipes["uint8"], da.from_array(a, chunks=512), boundary="nearest")
    target = np.empty(a.shape, np.uint8)

    def peak(run):
        tracemalloc.start()
        try:
            run()
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    ours = peak(lambda: hb.dask.compute(y, out=target, scheduler="sync"))
    assert ours < a.nbytes / 4, f"{ours} bytes allocated for a {a.nbytes}-byte result"
    assert peak(lambda: y.compute(scheduler="sync")) >= a.nbytes  # what the bound tells apart
    same_bits(target, y.compute(scheduler="sync"))


def test_compute_into_a_view_with_dense_rows_and_into_one_without(pipes, chunk_calls):
    """An `out` that is a part of a larger array is written in place when its rows are dense (as
    Halide takes an output); one whose rows are not (Fortran order, every other column) is
    written through a buffer of each chunk, and gets the same values."""
    a = random_bits((60, 70), "uint8", seed=46)
    y = hb.dask.map_pipeline(pipes["uint8"], da.from_array(a, chunks=(25, 30)), boundary="nearest")
    expected = whole_call(pipes["uint8"], {"inp": a}, "nearest")
    big = np.zeros((64, 80), np.uint8)
    (got,) = hb.dask.compute(y, out=big[2:62, 5:75])
    same_bits(got, expected)
    assert not big[:2].any() and not big[62:].any() and not big[:, :5].any() and not big[:, 75:].any()
    assert all(np.shares_memory(shown["dask_blur_u8"], big) for _, shown in chunk_calls.of(pipes["uint8"]))
    chunk_calls.clear()
    for target in (np.asfortranarray(np.zeros(a.shape, np.uint8)), np.zeros((60, 140), np.uint8)[:, ::2]):
        (got,) = hb.dask.compute(y, out=target)
        assert got is target
        same_bits(target, expected)
        assert not any(np.shares_memory(shown["dask_blur_u8"], target) for _, shown in chunk_calls.of(pipes["uint8"]))


def test_compute_of_two_outputs_runs_each_chunk_once(pipes, chunk_calls):
    a = random_bits((50, 41), "uint8", seed=47)
    p = pipes["two_outputs"]
    across, down = hb.dask.map_pipeline(p, da.from_array(a, chunks=(12, 17)), boundary="nearest", chunks=(20, 41))
    expected = whole_call(p, {"inp": a}, "nearest")
    down_out = np.empty(a.shape, np.uint8)
    got = hb.dask.compute(across, down, out=(None, down_out))
    assert got[1] is down_out
    same_bits(got[0], expected[0])
    same_bits(got[1], expected[1])
    calls = chunk_calls.of(p)
    assert sorted(index for index, _ in calls) == [(0, 0), (1, 0), (2, 0)]
    for _, shown in calls:  # both outputs written in place
        assert np.shares_memory(shown["across"], got[0]) and np.shares_memory(shown["down"], got[1])
    # One output alone; the same output twice (two results, each its own memory); in either order.
    same_bits(hb.dask.compute(down)[0], expected[1])
    first, second = hb.dask.compute(across, across)
    assert not np.shares_memory(first, second)
    same_bits(first, expected[0])
    same_bits(second, expected[0])
    got = hb.dask.compute(down, across)
    same_bits(got[0], expected[1])
    same_bits(got[1], expected[0])


def test_compute_stores_any_other_dask_array_chunk_by_chunk(pipes):
    """What map_pipeline did not return (an expression of its output, a slice, a rechunk, another
    array, its output changed in place) is computed by dask and stored chunk by chunk, in the same
    graph as the rest."""
    a = random_bits((60, 70), "uint8", seed=48)
    y = hb.dask.map_pipeline(pipes["uint8"], da.from_array(a, chunks=(25, 30)), boundary="nearest")
    expected = whole_call(pipes["uint8"], {"inp": a}, "nearest")
    sliced, plus, rechunked = y[5:, ::3], (y.astype(np.uint16) + 1), y.rechunk((60, 7))
    got = hb.dask.compute(y, sliced, plus, rechunked, da.ones((3, 4), chunks=2))
    same_bits(got[0], expected)
    same_bits(got[1], expected[5:, ::3])
    same_bits(got[2], expected.astype(np.uint16) + 1)
    same_bits(got[3], expected)
    same_bits(got[4], np.ones((3, 4)))
    changed = hb.dask.map_pipeline(pipes["uint8"], da.from_array(a, chunks=(25, 30)), boundary="nearest")
    changed[0, 0] = 7  # dask changes the array in place: its graph is no longer map_pipeline's
    expected = expected.copy()
    expected[0, 0] = 7
    same_bits(hb.dask.compute(changed)[0], expected)


def test_compute_on_a_cluster_of_processes_fills_the_out_given(pipes, cluster):
    """Tasks on other processes cannot write into this process's memory: the arrays are computed
    there as dask computes them, and copied into `out`."""
    a = random_bits((60, 70), "uint8", seed=49)
    y = hb.dask.map_pipeline(pipes["uint8"], da.from_array(a, chunks=(25, 30)), boundary="nearest")
    target = np.zeros(a.shape, np.uint8)
    (got,) = hb.dask.compute(y, out=target, scheduler=cluster)
    assert got is target
    same_bits(target, whole_call(pipes["uint8"], {"inp": a}, "nearest"))
    across, down = hb.dask.map_pipeline(pipes["two_outputs"], da.from_array(a, chunks=25), boundary=0)
    expected = whole_call(pipes["two_outputs"], {"inp": a}, 0)
    got = hb.dask.compute(across, down, scheduler=cluster)
    same_bits(got[0], expected[0])
    same_bits(got[1], expected[1])


@pytest.fixture(scope="module")
def process_pool():
    """An executor of two worker processes, spawned: a fork of this process, which runs dask's and
    the OpenCL runtime's threads, could copy a lock one of them holds."""
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield pool


class InlineExecutor(concurrent.futures.Executor):
    """An executor of one's own (neither threads nor processes dask knows): runs each task as it is
    submitted."""

    def submit(self, fn, /, *args, **kwargs):
        future = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as e:
            future.set_exception(e)
        return future


def own_get(dsk, keys, **kwargs):
    """A get function of one's own: where it runs the tasks is its own affair."""
    return dask.threaded.get(dsk, keys, **kwargs)


# Each way dask takes a scheduler -> whether its tasks run on threads of this process, so that
# hb.dask.compute can write in place there.
SCHEDULERS = {
    "ThreadPoolExecutor": True,
    "ProcessPoolExecutor": False,
    "an Executor of one's own": False,
    "dask.threaded.get": True,
    "dask.get": True,
    "dask.multiprocessing.get": False,
    "a get function of one's own": False,
    "threads, pool=ThreadPoolExecutor": True,
    "threads, pool=multiprocessing ThreadPool": True,
    "threads, pool=ProcessPoolExecutor": False,
    "threads, pool=multiprocessing Pool": False,
    "dask.config pool=ProcessPoolExecutor": False,
    "dask.config scheduler=ProcessPoolExecutor": False,
}


@pytest.fixture(params=list(SCHEDULERS))
def any_scheduler(request):
    """compute()'s keyword arguments for one way dask takes a scheduler (dask.config set as it
    says while the test runs), and whether the tasks run on threads of this process."""
    name = request.param
    spawn = multiprocessing.get_context("spawn")
    with contextlib.ExitStack() as stack:
        if name == "ThreadPoolExecutor":
            kwargs = {"scheduler": stack.enter_context(concurrent.futures.ThreadPoolExecutor(3))}
        elif name == "ProcessPoolExecutor":
            kwargs = {"scheduler": request.getfixturevalue("process_pool")}
        elif name == "an Executor of one's own":
            kwargs = {"scheduler": InlineExecutor()}
        elif name == "dask.threaded.get":
            kwargs = {"scheduler": dask.threaded.get}
        elif name == "dask.get":
            kwargs = {"scheduler": dask.get}
        elif name == "dask.multiprocessing.get":
            kwargs = {"scheduler": dask.multiprocessing.get, "num_workers": 2}
        elif name == "a get function of one's own":
            kwargs = {"scheduler": own_get}
        elif name == "threads, pool=ThreadPoolExecutor":
            kwargs = {"scheduler": "threads", "pool": stack.enter_context(concurrent.futures.ThreadPoolExecutor(3))}
        elif name == "threads, pool=multiprocessing ThreadPool":
            kwargs = {"scheduler": "threads", "pool": stack.enter_context(multiprocessing.pool.ThreadPool(3))}
        elif name == "threads, pool=ProcessPoolExecutor":
            kwargs = {"scheduler": "threads", "pool": request.getfixturevalue("process_pool")}
        elif name == "threads, pool=multiprocessing Pool":
            kwargs = {"scheduler": "threads", "pool": stack.enter_context(spawn.Pool(2))}
        elif name == "dask.config pool=ProcessPoolExecutor":
            kwargs = {}
            stack.enter_context(dask.config.set(scheduler="threads", pool=request.getfixturevalue("process_pool")))
        else:
            assert name == "dask.config scheduler=ProcessPoolExecutor", name
            kwargs = {}
            stack.enter_context(dask.config.set(scheduler=request.getfixturevalue("process_pool")))
        yield kwargs, SCHEDULERS[name]


def test_compute_writes_every_element_whichever_way_dask_is_given_the_scheduler(pipes, any_scheduler, chunk_calls):
    """Every scheduler dask.compute takes gives every element: the chunks written in place where
    the tasks run on threads of this process, else computed as dask computes them and copied (a
    bug took the threaded scheduler on a pool of processes for threads: the tasks wrote copies of
    the results in the workers, and compute() returned the results as allocated)."""
    kwargs, in_place = any_scheduler
    a = random_bits((64, 96), "uint8", seed=52)
    y = hb.dask.map_pipeline(pipes["uint8"], da.from_array(a, chunks=(32, 48)), boundary="nearest")
    across, down = hb.dask.map_pipeline(pipes["two_outputs"], da.from_array(a, chunks=(40, 50)), boundary=0)
    target = np.full(a.shape, 0xA5, np.uint8)  # what a result no task wrote would hold
    halved = da.from_array(a, chunks=(20, 30)) // 2  # not map_pipeline's array: stored chunk by chunk
    got = hb.dask.compute(y, across, down, halved, out=(target, None, None, None), **kwargs)
    assert got[0] is target
    same_bits(target, whole_call(pipes["uint8"], {"inp": a}, "nearest"))
    expected = whole_call(pipes["two_outputs"], {"inp": a}, 0)
    same_bits(got[1], expected[0])
    same_bits(got[2], expected[1])
    same_bits(got[3], a // 2)
    blur_calls, two_calls = chunk_calls.of(pipes["uint8"]), chunk_calls.of(pipes["two_outputs"])
    if in_place:  # each chunk once, here, into the results
        assert len(blur_calls) == len(two_calls) == 4
        assert all(np.shares_memory(shown["dask_blur_u8"], target) for _, shown in blur_calls)
        assert all(np.shares_memory(shown["across"], got[1]) and np.shares_memory(shown["down"], got[2])
                   for _, shown in two_calls)
    else:  # dask's own: each chunk an array of its own, in whichever process ran it
        assert not any(np.shares_memory(chunk, result) for _, shown in blur_calls + two_calls
                       for chunk in shown.values() for result in got)


def test_compute_of_an_opencl_pipeline_brings_each_chunk_home_once(tmp_path, dev):
    p = compile_and_load(tmp_path, c_compiler(), *blur_func(hl.UInt(8), "dask_compute_opencl", gpu=True),
                         "hb_dask_compute_opencl", target=OPENCL_TARGET)
    a = random_bits((64, 96), "uint8", seed=50)
    y = hb.dask.map_pipeline(p, da.from_array(a, chunks=(32, 48)), boundary="nearest")
    target = np.zeros(a.shape, np.uint8)
    before = hb.transfers()
    hb.dask.compute(y, out=target, scheduler="synchronous")
    moved = hb.transfers() - before
    # 4 chunks, each home once: a buffer of the chunk, not a view of out, whose span on the device
    # would be rows as long as out's
    assert moved.to_host == 4 and moved.to_host_bytes == a.nbytes
    same_bits(target, whole_call(p, {"inp": a}, "nearest"))


@pytest.mark.parametrize("shape, chunks", [((0, 20), (5, 10)), ((20, 0), (10, 5)), ((0, 0), 5)], ids=str)
def test_compute_of_an_empty_array_runs_nothing_and_returns_it_empty(pipes, shape, chunks, chunk_calls):
    y = hb.dask.map_pipeline(pipes["uint8"], da.from_array(np.zeros(shape, np.uint8), chunks=chunks),
                             boundary="reflect")
    (got,) = hb.dask.compute(y)
    assert got.shape == shape and got.dtype == np.uint8
    target = np.empty(shape, np.uint8)
    assert hb.dask.compute(y, da.zeros(shape, np.uint8, chunks=chunks), out=(target, None))[0] is target
    assert chunk_calls.of(pipes["uint8"]) == []
    assert hb.dask.compute() == ()


def test_compute_refuses_what_it_cannot_write_before_any_task_runs(pipes, chunk_calls):
    y = hb.dask.map_pipeline(pipes["uint8"], da.from_array(np.zeros((20, 30), np.uint8), chunks=10),
                             boundary="nearest")
    across, down = hb.dask.map_pipeline(pipes["two_outputs"], da.from_array(np.zeros((20, 30), np.uint8), chunks=10),
                                        boundary="nearest")
    fix = r"; pass np.empty\(x.shape, x.dtype\), or None to allocate it$"
    cases = [
        (ValueError, r"out has shape \(30, 20\), its array \(20, 30\)" + fix, (y,), np.empty((30, 20), np.uint8)),
        (TypeError, r"out is float32, its array uint8" + fix, (y,), np.empty((20, 30), np.float32)),
        (TypeError, r"out\[1\] is Buffer, not a NumPy array" + fix, (across, down),
         (None, hb.Buffer((20, 30), "uint8"))),
        (TypeError, r"out\[0\] is list, not a NumPy array", (across, down), ([[0] * 30] * 20, None)),
        (ValueError, r"out is read-only; pass a writable array, or None to allocate it$", (y,),
         np.broadcast_to(np.uint8(0), (20, 30))),
        (TypeError, r"out is one array for 2 arrays; pass a tuple of one per array \(None: allocate that one\)$",
         (across, down), np.empty((20, 30), np.uint8)),
        (ValueError, r"out gives 1 arrays for 2; give one per array \(None: allocate that one\)$", (across, down),
         (np.empty((20, 30), np.uint8),)),
        (TypeError, r"out must be a NumPy array, or a tuple of one per array \(None: allocate that one\), not int$",
         (y,), 3),
    ]
    shared = np.empty((20, 60), np.uint8)
    cases.append((ValueError, r"out\[0\] and out\[1\] share memory; give each array memory of its own$",
                  (across, down), (shared[:, :30], shared[:, 29:59])))
    for error, message, arrays, out in cases:
        with pytest.raises(error, match=r"^hb.dask.compute\(\): " + message):
            hb.dask.compute(*arrays, out=out)
    with pytest.raises(TypeError, match=r"^hb.dask.compute\(\): argument 1 is ndarray, not a dask array; pass dask "
                                        r"arrays \(the outputs of hb.dask.map_pipeline, or any other\)$"):
        hb.dask.compute(y, np.zeros(3))
    x = da.from_array(np.zeros((20, 30), np.uint8), chunks=10)
    with pytest.raises(ValueError, match=r"^hb.dask.compute\(\): argument 0 has unknown chunk sizes, so its result "
                                         r"cannot be allocated first; call x.compute_chunk_sizes\(\) first$"):
        hb.dask.compute(x[x[:, 0] == 0])
    with pytest.raises(TypeError, match=r"^hb.dask.compute\(\): the chunks of argument 0 are numpy.ma.MaskedArray, "
                                        r"not NumPy arrays; call its compute\(\)$"):
        hb.dask.compute(da.ma.masked_equal(x, 0))
    assert chunk_calls.of(pipes["uint8"]) == chunk_calls.of(pipes["two_outputs"]) == []
    # Interleaved parts of one array share none of it: allowed.
    both = np.empty((20, 60), np.uint8)
    got = hb.dask.compute(across, down, out=(both[:, ::2], both[:, 1::2]))
    assert got[0].base is both and got[1].base is both
