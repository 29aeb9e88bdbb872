"""Halide pipelines over dask arrays: what ``hb.dask.map_pipeline`` costs beside dask-image's
filter on the same cluster, how it scales from one worker to two, and what chunking adds to one
whole-image call of the same pipeline, in one run.

Run:  python benchmarks/bench_dask.py [--size N] [--chunk N] [--repeat R] [--json PATH]
      python benchmarks/bench_dask.py --size 2048 --chunk 512   # a quick run

It needs the ``halide`` wheel, a C compiler, dask, distributed and dask-image (the test
install); without them it exits with status 2. The pipeline is a 3x3 box blur of a uint8
image: the nine neighbours summed in uint16, divided by 9, cast to uint8, scheduled
``vectorize(x, 32).parallel(y, 64)``. It is compiled with ``Func.compile_to_object`` for the
explicit target of ``bench_pipelines.py`` and linked into a shared library in a temporary
directory for ``hb.aot.load``; worker processes load it again from there when the pipeline is unpickled.
The image is ``--size`` square (default 8192), random, as a dask array of ``--chunk`` square
chunks (default 2048; it must divide ``--size`` and be at least 64, the rows the schedule's
parallel loop takes at a time). The pipeline reads one pixel beyond each side of its output, so
``map_pipeline`` runs with ``boundary="nearest"``.

* On a ``distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True)``:
  ``map_pipeline(p, x, boundary="nearest")`` (ours) against dask-image's
  ``uniform_filter(x, size=3, mode="nearest")`` (the peer, SciPy's filter per chunk with dask's
  overlap). The target: ours >= 3x as fast.
* Ours on a second cluster of one worker (``n_workers=1``), the same otherwise: the scaling
  from one worker process to two (informational).
* Ours with dask's threaded scheduler (``compute(scheduler="threads")``, dask's default for
  arrays) against one call of the same pipeline on the whole image (the reference): what
  chunking costs. Both start from the image in memory and end with the blurred image in new
  memory: the whole-image call pads the image by one pixel (``np.pad(..., mode="edge")``),
  wraps it at mins (-1, -1) (``Buffer.from_host(...).translated((-1, -1))``) and calls the
  pipeline into a new output ``Buffer``. The target: <= 1.3x the whole-image call. The bare
  call ``p(padded, out)`` on Buffers made once (no padding, no new memory) is an informational
  row: the pipeline's own time.
* Ours through ``hb.dask.compute(map_pipeline(p, x, boundary="nearest"))`` with the threaded
  scheduler, against the same whole-image call: each chunk's task runs the pipeline straight into
  its place in one result allocated first, with no chunk array and no concatenation. The target:
  <= 1.3x the whole-image call.

Every case is timed warm: ``repeat`` rounds (default 7) of one computation each, after one
warm-up round, the rounds of all cases interleaved; the best round is the figure, the median
says how noisy the run was. A round on a cluster is building the graph and computing it with
the input already persisted on the workers (``client.persist`` and ``wait`` before timing, so
nothing is sent from the client): ``wait(client.persist(y))``, the result left in the workers'
memory. A threaded round builds the graph and computes it into one ndarray (the chunks
assembled by dask, or written in place by ``hb.dask.compute``), from the image in memory. The
Halide runtime in each process runs the pipeline's parallel loop on its own thread pool (one
thread per core), so a single worker uses every core for the pipeline itself.

Before timing, the script checks the results: ours on each engine and the whole-image call must
be bit-identical to a NumPy reference (the nine edge-padded neighbours summed in uint16, // 9);
dask-image computes in floating point and truncates after each axis, so it may differ by one:
its largest difference from ours is printed, and must be at most 1. A failed check is a
``WARNING:`` line and exit status 1. Nothing here is a pass/fail test of speed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

import halide_buffer as hb

from bench_pipelines import TARGET, BuildError, c_compiler, run_tool
from bench_common import (Case, cases_json, environment, environment_line, noisy_timings, paired, print_ms_table,
                          print_noise_note, run_cases, write_json)

NAME = "hb_bench_box3"
SPEEDUP_TARGET = 3.0      # dask-image's time / ours, on the two-worker cluster
CHUNKING_TARGET = 1.3     # ours with the threaded scheduler / one whole-image call (padding included)
MAX_PEER_DIFFERENCE = 1   # dask-image's rounding may differ from integer division by one


def box3_func(hl):
    """out(x, y) = uint8((sum of the 3x3 neighbourhood, in uint16) / 9), vectorised and parallel."""
    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(hl.UInt(8), 2, "inp")
    total = hl.u16(0)
    for dy in (-1, 0, 1):
        for dx in (-1, 0, 1):
            total = total + hl.u16(inp[x + dx, y + dy])
    out = hl.Func(NAME)
    out[x, y] = hl.u8(total / 9)
    out.vectorize(x, 32).parallel(y, 64)
    return out, [inp]


def build_box3(hl, workdir: Path):
    """The pipeline's shared library, loaded with hb.aot.load."""
    cc = c_compiler()
    if not cc:
        raise BuildError("no C compiler (gcc, cc, clang or $CC) to link the pipeline")
    func, args = box3_func(hl)
    obj, library = workdir / f"{NAME}.o", workdir / f"lib{NAME}.so"
    try:
        func.compile_to_object(str(obj), args, NAME, hl.Target(TARGET))
    except Exception as e:  # noqa: BLE001 - Halide raises its own error types
        raise BuildError(f"Halide's compile_to_object failed: {type(e).__name__}: {e}") from e
    run_tool([*cc, "-shared", "-o", str(library), str(obj), "-lpthread", "-ldl", "-lm"],
             f"linking lib{NAME}.so")
    return hb.aot.load(library, NAME)


def reference(img):
    """The exact result: the nine edge-padded neighbours summed in uint16, // 9."""
    h, w = img.shape
    padded = np.pad(img, 1, mode="edge").astype(np.uint16)
    total = sum(padded[dy:dy + h, dx:dx + w] for dy in range(3) for dx in range(3))
    return (total // 9).astype(np.uint8)


def padded_input(img):
    """The whole image, padded by one pixel, as a Buffer at mins (-1, -1)."""
    return hb.Buffer.from_host(np.pad(img, 1, mode="edge")).translated((-1, -1))


def whole_image(p, img):
    """One call of the pipeline on the whole image, padding included."""
    out = hb.Buffer(img.shape, "uint8")
    p(padded_input(img), out)
    return out


def check(problems, what, got, want):
    got = np.asarray(got)
    if got.shape != want.shape or got.dtype != want.dtype or not np.array_equal(got, want):
        problems.append(f"{what} is not bit-identical to the NumPy reference")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=8192, help="the image's side, in pixels (default 8192)")
    ap.add_argument("--chunk", type=int, default=2048, help="the chunks' side, in pixels (default 2048)")
    ap.add_argument("--repeat", type=int, default=7, help="rounds; the best counts (default 7)")
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    args = ap.parse_args(argv)
    if args.chunk < 64 or args.size % args.chunk:
        ap.error("--chunk must be at least 64 and divide --size")

    try:
        import dask
        import dask.array as da
        import distributed
        import halide as hl
        from dask_image.ndfilters import uniform_filter
        from distributed import Client, LocalCluster, wait

        from halide_buffer.dask import compute, map_pipeline
    except ImportError as e:
        print(f"needs the halide wheel, dask, distributed and dask-image (the test install): {e}",
              file=sys.stderr)
        return 2

    shape, chunks = (args.size, args.size), (args.chunk, args.chunk)
    img = np.random.default_rng(15).integers(0, 256, shape, dtype=np.uint8)
    with tempfile.TemporaryDirectory(prefix="hb_bench_dask_", ignore_cleanup_errors=True) as tmp:
        try:
            p = build_box3(hl, Path(tmp))
        except BuildError as e:
            print(f"cannot build the pipeline: {e}", file=sys.stderr)
            return 2

        def cluster(n):
            # No dashboard, and the scheduler's HTTP routes on a free port.
            return LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None,
                                scheduler_kwargs={"dashboard": False, "dashboard_address": ":0"})

        def persisted(client, y):
            """y computed on the client's cluster, left there."""
            with client.as_current():
                wait(client.persist(y))

        with cluster(2) as c2, Client(c2, set_as_default=False) as client2, \
                cluster(1) as c1, Client(c1, set_as_default=False) as client1:
            with warnings.catch_warnings():  # the image goes to the workers in the graph, once, untimed
                warnings.filterwarnings("ignore", message="Sending large graph", category=UserWarning)
                x2, x1 = (client.persist(da.from_array(img, chunks=chunks)) for client in (client2, client1))
            for client, x in ((client2, x2), (client1, x1)):
                persisted(client, x)
            xt = da.from_array(img, chunks=chunks)

            def ours(x):
                return map_pipeline(p, x, boundary="nearest")

            def peer(x):
                return uniform_filter(x, size=3, mode="nearest")

            want = reference(img)
            problems = []
            check(problems, "one whole-image call", whole_image(p, img), want)
            check(problems, "ours, threaded scheduler", ours(xt).compute(scheduler="threads"), want)
            check(problems, "ours through hb.dask.compute, threaded scheduler",
                  compute(ours(xt), scheduler="threads")[0], want)
            mine = client2.compute(ours(x2)).result()
            check(problems, "ours, 2 workers", mine, want)
            check(problems, "ours, 1 worker", client1.compute(ours(x1)).result(), want)
            theirs = client2.compute(peer(x2)).result()
            peer_difference = int(np.abs(theirs.astype(np.int16) - mine.astype(np.int16)).max())
            if peer_difference > MAX_PEER_DIFFERENCE:
                problems.append(f"dask-image's uniform_filter differs from ours by up to {peer_difference} "
                                f"(at most {MAX_PEER_DIFFERENCE} expected from its rounding)")
            del mine, theirs
            tasks = {"ours": len(ours(xt).__dask_graph__()), "peer": len(peer(xt).__dask_graph__())}

            padded, out = padded_input(img), hb.Buffer(shape, "uint8")
            cases = [
                Case("cluster2_ours", "2 workers: map_pipeline(p, x, boundary='nearest')",
                     lambda: persisted(client2, ours(x2)), {}, "ours", ref="cluster2_peer"),
                Case("cluster2_peer", "2 workers: dask-image uniform_filter  [peer]",
                     lambda: persisted(client2, peer(x2)), {}, "peer", ref="cluster2_peer"),
                Case("cluster1_ours", "1 worker: map_pipeline(p, x, boundary='nearest')",
                     lambda: persisted(client1, ours(x1)), {}, "info", ref="cluster2_ours"),
                Case("threads_ours", "threads: map_pipeline(...).compute()",
                     lambda: ours(xt).compute(scheduler="threads"), {}, "ours", ref="whole"),
                Case("threads_hb_compute", "threads: hb.dask.compute(map_pipeline(...)), chunks written in place",
                     lambda: compute(ours(xt), scheduler="threads"), {}, "ours", ref="whole"),
                Case("threads_persist", "threads: map_pipeline(...).persist(), result left in chunks",
                     lambda: ours(xt).persist(scheduler="threads"), {}, "info", ref="whole"),
                Case("whole", "np.pad + one whole-image call, new output  [reference]",
                     lambda: whole_image(p, img), {}, "reference", ref="whole"),
                Case("bare", "p(padded, out), Buffers made once",
                     lambda: p(padded, out), {}, "info", ref="whole"),
            ]
            run_cases(cases, 1, args.repeat)
    by_key = {c.key: c for c in cases}
    best = {k: c.rounds_ns.best for k, c in by_key.items()}

    print(f"Halide pipelines over dask arrays: 3x3 box blur, uint8 {args.size}x{args.size} in "
          f"{args.chunk}x{args.chunk} chunks, best of {args.repeat} rounds (one warm-up round first)")
    print(f"{environment_line()}, dask {dask.__version__}, distributed {distributed.__version__}")
    print("cluster rounds: graph + wait(client.persist(y)), input persisted on the workers, result left "
          "there; threaded: graph + compute() or hb.dask.compute() into one ndarray")
    print()
    print_ms_table(cases, by_key)

    ratios = {
        "speedup_cluster2": best["cluster2_peer"] / best["cluster2_ours"],
        "speedup_cluster2_paired": paired(by_key, "cluster2_peer", "cluster2_ours"),
        "scaling_1_to_2_workers": best["cluster1_ours"] / best["cluster2_ours"],
        "scaling_1_to_2_workers_paired": paired(by_key, "cluster1_ours", "cluster2_ours"),
        "chunking_threads": best["threads_ours"] / best["whole"],
        "chunking_threads_paired": paired(by_key, "threads_ours", "whole"),
        "chunking_threads_vs_bare_call": best["threads_ours"] / best["bare"],
        "chunking_threads_hb_compute": best["threads_hb_compute"] / best["whole"],
        "chunking_threads_hb_compute_paired": paired(by_key, "threads_hb_compute", "whole"),
        "chunking_threads_persist": best["threads_persist"] / best["whole"],
    }
    met = {"speedup_cluster2": ratios["speedup_cluster2"] >= SPEEDUP_TARGET,
           "chunking_threads": ratios["chunking_threads"] <= CHUNKING_TARGET,
           "chunking_threads_hb_compute": ratios["chunking_threads_hb_compute"] <= CHUNKING_TARGET}
    print(f"2 workers, dask-image / ours: {ratios['speedup_cluster2']:.2f}x as fast "
          f"({ratios['speedup_cluster2_paired']:.2f}x paired; target >= {SPEEDUP_TARGET:.1f}x: "
          f"{'met' if met['speedup_cluster2'] else 'NOT met'})")
    print(f"ours, 1 worker / 2 workers: {ratios['scaling_1_to_2_workers']:.2f}x "
          f"({ratios['scaling_1_to_2_workers_paired']:.2f}x paired; informational: the pipeline "
          f"is parallel inside each worker too)")
    print(f"ours, threaded scheduler / np.pad + one whole-image call: {ratios['chunking_threads']:.2f}x "
          f"({ratios['chunking_threads_paired']:.2f}x paired; target <= {CHUNKING_TARGET:.1f}x: "
          f"{'met' if met['chunking_threads'] else 'NOT met'}); "
          f"{ratios['chunking_threads_vs_bare_call']:.2f}x the bare call p(padded, out)")
    print(f"ours through hb.dask.compute, threaded / np.pad + one whole-image call: "
          f"{ratios['chunking_threads_hb_compute']:.2f}x ({ratios['chunking_threads_hb_compute_paired']:.2f}x "
          f"paired; target <= {CHUNKING_TARGET:.1f}x: {'met' if met['chunking_threads_hb_compute'] else 'NOT met'})")
    print(f"ours, threaded, result left in chunks (persist) / np.pad + one whole-image call: "
          f"{ratios['chunking_threads_persist']:.2f}x (informational: compute() adds assembling one ndarray)")
    print(f"dask-image vs ours: largest difference {peer_difference} (at most {MAX_PEER_DIFFERENCE}: SciPy "
          f"truncates to uint8 after each axis, ours divides the integer sum once)")
    print(f"tasks in the graph for {(args.size // args.chunk) ** 2} chunks, input chunks included: "
          f"ours {tasks['ours']}, dask-image {tasks['peer']}")
    for problem in problems:
        print(f"WARNING: {problem}")
    noisy = noisy_timings(cases)
    print_noise_note(noisy, "a paired ratio disagrees with the ratio of the bests")

    if args.json:
        write_json(args.json, {
            "benchmark": "dask",
            "size": args.size,
            "chunk": args.chunk,
            "repeat": args.repeat,
            "target_string": TARGET,
            "environment": {**environment(), "dask": dask.__version__, "distributed": distributed.__version__},
            "cases": cases_json(cases),
            "ratios": ratios,
            "target": {"speedup_cluster2_min": SPEEDUP_TARGET, "chunking_threads_max": CHUNKING_TARGET,
                       "chunking_threads_hb_compute_max": CHUNKING_TARGET, "met": met},
            "peer_max_difference": peer_difference,
            "graph_tasks": tasks,
            "problems": problems,
            "noisy": noisy,
        })
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
