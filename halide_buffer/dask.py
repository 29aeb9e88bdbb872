"""Halide AOT pipelines over dask arrays: ``map_pipeline``, with halos from Halide's own bounds query,
and ``compute``, which brings results home as NumPy arrays allocated once.

For each output chunk, the pipeline's bounds query (``Pipeline.required_regions``) says which
region of each input it reads; exactly that region, assembled from the neighbouring chunks,
is handed to the pipeline as a Buffer at its true global position (its mins). Where a region
leaves an input, ``boundary`` says what lies there (dask's meanings); ``"none"`` refuses.
``compute`` runs the same tasks with each chunk's output buffer a view of the result's memory.

Install with ``pip install 'halide_buffer[dask]'``. See docs/dask.md.
"""

from __future__ import annotations

import concurrent.futures
import functools
import itertools
import math
import multiprocessing.pool
import operator
import uuid
from typing import Any

import dask
import dask.array as da
import dask.local
import dask.threaded
import ml_dtypes
import numpy as np
from dask.base import get_scheduler, tokenize
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph

from ._core import Buffer, Pipeline, PipelineError, _argument, dtype

__all__ = ["compute", "map_pipeline"]

# dask's boundary names -> numpy.pad's modes (dask's 'reflect' repeats the edge element).
_PAD_MODES = {"nearest": "edge", "reflect": "symmetric", "periodic": "wrap"}
_NAMES = {mode: name for name, mode in _PAD_MODES.items()}
_ENTRY = "hb.dask.map_pipeline()"
_COMPUTE = "hb.dask.compute()"
# What map_pipeline planned, on each array it returns (the attribute travels with no other array:
# a slice, a rechunk or a persisted copy of it is an ordinary dask array to compute()).
_PLAN_ATTRIBUTE = "_halide_buffer_plan"


def map_pipeline(pipeline: Pipeline, *inputs: Any, chunks: Any = None, boundary: Any = "none",
                 **kwargs: Any) -> da.Array | tuple[da.Array, ...]:
    """Runs ``pipeline`` chunk by chunk over dask arrays; returns its output(s) as dask arrays.

    Arguments go by position (the pipeline's inputs and scalars, in its order) or by name, as
    for a call of the pipeline; input buffers are dask arrays, or anything else a call of the
    pipeline takes (NumPy arrays, tensors of any dtype, hl.Buffers, ...: wrapped, its host data
    brought home when it is on a device), scalars pass through. Every output has the shape of the
    first input buffer, chunked as ``chunks`` (default: that input's chunks), and the dtype the
    pipeline declares. ``boundary``:
    ``"none"`` (a region leaving an input is an error; ``None`` means it too), ``"nearest"``,
    ``"reflect"``, ``"periodic"``, or a constant; or one of those per axis, as a tuple or a dict
    of axis -> boundary (axes not in the dict: ``"none"``), as dask's ``map_overlap`` takes them.
    A constant goes to each input as NumPy converts it (an integer input drops a fraction); one
    that an integer input read beyond its edge cannot hold (NaN, an infinity, a number beyond its
    range) is a ``ValueError``, where dask's ``map_overlap`` pads with whatever NumPy's cast makes
    of it, with a ``RuntimeWarning``. A bool is a ``TypeError``, not the constant 1.
    An output chunk with no element runs no task of the pipeline: it is empty. ``compute(*outputs)``
    brings the outputs home as NumPy arrays, each chunk written in place by the pipeline.
    """
    bound = _bind(pipeline, inputs, kwargs)
    buffers = {name: value for name, value in bound.items() if _kind(pipeline, name) == "input_buffer"}
    scalars = {name: value for name, value in bound.items() if _kind(pipeline, name) == "input_scalar"}
    if not buffers:
        raise TypeError(f"{_ENTRY}: {pipeline.name} takes no input buffer to chunk over; call the pipeline "
                        "itself")
    outputs = [a for a in pipeline.arguments if a["kind"] == "output_buffer"]
    first = next(iter(buffers.values()))
    modes = _boundaries(boundary, first.ndim)
    out_chunks = da.core.normalize_chunks(first.chunks if chunks is None else chunks, first.shape,
                                          dtype=np.dtype(dtype(outputs[0]["dtype"]).numpy))
    for a in outputs:
        if a["dimensions"] != first.ndim:
            raise ValueError(f"{_ENTRY}: output '{a['name']}' of {pipeline.name} has {a['dimensions']} axes, "
                             f"the first input {first.ndim}; every output takes the first input's shape")

    blocks = _blocks(out_chunks)
    # Each input covers its whole array: a pipeline clamping to its input's own bounds is answered
    # with regions clipped to the array. An empty output chunk asks nothing: it computes nothing.
    covered = {name: ((0,) * x.ndim, x.shape) for name, x in buffers.items()}
    regions = {index: pipeline.required_regions(scalars, {a["name"]: (mins, shape) for a in outputs}, covered)
               for index, (mins, shape) in blocks.items() if 0 not in shape}
    for input_name, x in buffers.items():
        _check_readable(pipeline, input_name, x, regions, modes)
        _check_constants(pipeline, input_name, x, regions, modes)

    token = tokenize(pipeline.library_path, pipeline.name, sorted(scalars.items()), modes, out_chunks,
                     *(x.name for x in buffers.values()))
    name = f"halide-{pipeline.name}-{token}"
    # One task per output chunk: it takes the input chunks its regions touch and cuts the regions
    # out of them itself (no intermediate arrays, no padded copy of the inputs).
    tasks = {}
    for index, (mins, shape) in blocks.items():
        if index not in regions:  # no element: no task of the pipeline, no input read
            continue
        plans, keys = [], []
        for input_name, x in buffers.items():
            plan = _RegionPlan(x, *regions[index][input_name], modes)
            plans.append((input_name, plan))
            keys.extend((x.name,) + chunk for chunk in plan.chunks)
        written = tuple(regions[index][a["name"]] for a in outputs)  # may be larger than the chunk
        tasks[index] = (tuple(plans), tuple(keys), written)
    planned = _Planned(pipeline, scalars, tuple((a["name"], a["dtype"]) for a in outputs), blocks, tasks,
                       list(buffers.values()))
    layer = {}
    for index, (mins, shape) in blocks.items():
        if index not in tasks:
            layer[(name,) + index] = (_empty_block, tuple(a["dtype"] for a in outputs), shape)
            continue
        plans, keys, written = tasks[index]
        run = functools.partial(_run_block, pipeline, plans, scalars, planned.outputs, written, mins, shape, index)
        layer[(name,) + index] = (run,) + keys
    graph = HighLevelGraph.from_collections(name, layer, dependencies=planned.inputs)
    if len(outputs) == 1:
        results = [da.Array(graph, name, out_chunks, meta=_meta(outputs[0], first.ndim))]
    else:
        results = []
        for k, a in enumerate(outputs):  # each output: its item of every block's tuple
            out_name = f"{name}-{a['name']}"
            getters = {(out_name,) + index: (operator.getitem, (name,) + index, k) for index in blocks}
            out_graph = HighLevelGraph({**graph.layers, out_name: getters},
                                       {**graph.dependencies, out_name: {name}})
            results.append(da.Array(out_graph, out_name, out_chunks, meta=_meta(a, first.ndim)))
    for k, result in enumerate(results):
        setattr(result, _PLAN_ATTRIBUTE, (planned, k, result.name))
    return results[0] if len(results) == 1 else tuple(results)


def compute(*arrays: da.Array, out: Any = None, scheduler: Any = None, **kwargs: Any) -> tuple[np.ndarray, ...]:
    """Computes dask arrays into NumPy arrays, each allocated once; returns them in a tuple, one per
    array, as ``dask.compute`` does.

    An array ``map_pipeline`` returned is computed with the pipeline writing each chunk straight
    into its place in the result (its output buffer is a view of the result): no chunk array, no
    copy, no concatenation. Outputs of one ``map_pipeline`` call given together run each chunk
    once. Any other dask array is stored chunk by chunk into its result (``dask.array.store``).

    ``out``: the arrays to write, which are then the results: a NumPy array for one array, or a
    tuple of one per array (``None`` for one to allocate); each writable, of its array's shape
    and dtype. Chunks are written while other chunks may still be read, so an ``out`` must share
    no memory with what the arrays are computed from. ``scheduler`` and ``kwargs`` go to dask as
    for ``dask.compute``. The tasks write in place where they run in this process: the synchronous
    scheduler, the threaded one on its own threads or on a ``pool`` of threads (given, or set in
    ``dask.config``: a ``concurrent.futures.ThreadPoolExecutor``, a ``multiprocessing.pool.ThreadPool``),
    and a ``ThreadPoolExecutor`` given as ``scheduler``. Any other scheduler may run them in other
    processes, which cannot write into this process's memory (``dask.distributed``, ``"processes"``,
    a ``ProcessPoolExecutor`` as ``scheduler`` or as the threaded scheduler's ``pool``, a get
    function of one's own): there the arrays are computed as ``dask.compute`` computes them, and
    copied into the ``out`` given.
    """
    for i, a in enumerate(arrays):
        if not isinstance(a, da.Array):
            raise TypeError(f"{_COMPUTE}: argument {i} is {type(a).__name__}, not a dask array; pass dask arrays "
                            "(the outputs of hb.dask.map_pipeline, or any other)")
        if type(a._meta) is not np.ndarray:
            raise TypeError(f"{_COMPUTE}: the chunks of argument {i} are {type(a._meta).__module__}."
                            f"{type(a._meta).__name__}, not NumPy arrays; call its compute()")
        if any(math.isnan(c) for axis in a.chunks for c in axis):
            raise ValueError(f"{_COMPUTE}: argument {i} has unknown chunk sizes, so its result cannot be allocated "
                             "first; call x.compute_chunk_sizes() first")
    given = _outs(arrays, out)
    if not _in_this_process(get_scheduler(scheduler=scheduler, collections=list(arrays)), kwargs):
        computed = dask.compute(*arrays, scheduler=scheduler, **kwargs)
        for target, result in zip(given, computed):
            if target is not None:
                np.copyto(target, result)
        return tuple(result if target is None else target for target, result in zip(given, computed))

    results = tuple(np.empty(a.shape, a.dtype) if target is None else target for a, target in zip(arrays, given))
    groups, others = {}, []
    for a, result in zip(arrays, results):
        mark = vars(a).get(_PLAN_ATTRIBUTE)
        if mark is not None and mark[2] == a.name:  # still the array map_pipeline returned
            planned, k, _ = mark
            groups.setdefault(id(planned), (planned, tuple([] for _ in planned.outputs)))[1][k].append(result)
        else:
            others.append((a, result))
    work = [_stored(planned, targets) for planned, targets in groups.values()]
    if others:  # disjoint regions of NumPy arrays: no lock needed
        work.append(da.store([a for a, _ in others], [r for _, r in others], lock=False, compute=False))
    if work:
        dask.compute(*work, scheduler=scheduler, **kwargs)
    return results


def _outs(arrays: tuple, out: Any) -> list:
    """compute()'s out as one NumPy array or None per array, checked."""
    if out is None:
        return [None] * len(arrays)
    if isinstance(out, np.ndarray):
        if len(arrays) != 1:
            raise TypeError(f"{_COMPUTE}: out is one array for {len(arrays)} arrays; pass a tuple of one per array "
                            "(None: allocate that one)")
        out = (out,)
    elif not isinstance(out, (tuple, list)):
        raise TypeError(f"{_COMPUTE}: out must be a NumPy array, or a tuple of one per array (None: allocate that "
                        f"one), not {type(out).__name__}")
    if len(out) != len(arrays):
        raise ValueError(f"{_COMPUTE}: out gives {len(out)} arrays for {len(arrays)}; give one per array (None: "
                         "allocate that one)")
    for i, (a, target) in enumerate(zip(arrays, out)):
        what = "out" if len(arrays) == 1 else f"out[{i}]"
        if target is None:
            continue
        if not isinstance(target, np.ndarray):
            raise TypeError(f"{_COMPUTE}: {what} is {type(target).__name__}, not a NumPy array; pass "
                            "np.empty(x.shape, x.dtype), or None to allocate it")
        if target.shape != a.shape:
            raise ValueError(f"{_COMPUTE}: {what} has shape {target.shape}, its array {a.shape}; pass "
                             "np.empty(x.shape, x.dtype), or None to allocate it")
        if target.dtype != a.dtype:
            raise TypeError(f"{_COMPUTE}: {what} is {target.dtype}, its array {a.dtype}; pass "
                            "np.empty(x.shape, x.dtype), or None to allocate it")
        if not target.flags.writeable:
            raise ValueError(f"{_COMPUTE}: {what} is read-only; pass a writable array, or None to allocate it")
    for (i, first), (j, second) in itertools.combinations(enumerate(out), 2):
        if first is not None and second is not None and np.shares_memory(first, second):
            raise ValueError(f"{_COMPUTE}: out[{i}] and out[{j}] share memory; give each array memory of its own")
    return list(out)


def _in_this_process(get: Any, kwargs: dict) -> bool:
    """Whether dask's get function (with compute()'s keyword arguments) runs tasks in this process,
    where they can write into its arrays: the synchronous scheduler; the threaded one on threads of
    this process (its ``pool``, given or configured, may be processes); an executor of threads
    given as the scheduler. Anything else (processes, a cluster, a get function of one's own) may
    run them elsewhere."""
    if get is dask.local.get_sync:
        return True
    if get is dask.threaded.get:
        return _threads_of_this_process(kwargs.get("pool") or dask.config.get("pool", None))
    if isinstance(get, functools.partial) and get.func is dask.local.get_async and get.args:
        return _threads_of_this_process(getattr(get.args[0], "__self__", None))  # the executor's submit
    return False


def _threads_of_this_process(pool: Any) -> bool:
    """Whether a pool the threaded scheduler submits to (None: dask's own) is threads of this process:
    a ThreadPoolExecutor or multiprocessing's ThreadPool. A process pool, of either kind, is not."""
    return pool is None or isinstance(pool, (concurrent.futures.ThreadPoolExecutor, multiprocessing.pool.ThreadPool))


def _stored(planned: _Planned, targets: tuple) -> Delayed:
    """The tasks of one map_pipeline call writing each output chunk into the arrays of ``targets``
    (for each output, the arrays it goes to), and one task after them all."""
    name = f"halide-store-{planned.pipeline.name}-{uuid.uuid4().hex}"
    targets = tuple(tuple(arrays) for arrays in targets)
    layer = {}
    for index, (plans, keys, written) in planned.tasks.items():
        mins, shape = planned.blocks[index]
        run = functools.partial(_store_block, planned.pipeline, plans, planned.scalars, planned.outputs, written,
                                mins, shape, index, targets)
        layer[(name,) + index] = (run,) + keys
    layer[name] = (_all_stored, list(layer))
    return Delayed(name, HighLevelGraph.from_collections(name, layer, dependencies=planned.inputs))


def _all_stored(_: list) -> None:
    return None


class _Planned:
    """One map_pipeline call's tasks, kept with the arrays it returns for compute(): the pipeline,
    its scalars and outputs ((name, dtype) each), every output chunk ({index: (mins, shape)}), and
    for each chunk with elements the input regions' plans, the input chunks' keys and the region of
    each output the pipeline writes ({index: (plans, keys, written)})."""

    def __init__(self, pipeline: Pipeline, scalars: dict, outputs: tuple, blocks: dict, tasks: dict,
                 inputs: list):
        self.pipeline, self.scalars, self.outputs = pipeline, scalars, outputs
        self.blocks, self.tasks, self.inputs = blocks, tasks, inputs


def _kind(pipeline: Pipeline, name: str) -> str:
    return next(a["kind"] for a in pipeline.arguments if a["name"] == name)


def _bind(pipeline: Pipeline, inputs: tuple, kwargs: dict) -> dict:
    """{argument name: value} for the pipeline's inputs and scalars, checked before any task runs."""
    takes = [a for a in pipeline.arguments if a["kind"] != "output_buffer"]
    names = ", ".join(f"'{a['name']}'" for a in takes)
    if len(inputs) > len(takes):
        raise TypeError(f"{_ENTRY}: {pipeline.name} takes {len(takes)} inputs and scalars ({names}), "
                        f"{len(inputs)} given; outputs are returned, never passed")
    bound = {a["name"]: value for a, value in zip(takes, inputs)}
    for key, value in kwargs.items():
        if not any(a["name"] == key for a in takes):
            raise TypeError(f"{_ENTRY}: {pipeline.name} has no input or scalar named '{key}'; its inputs and scalars "
                            f"are {names} (outputs are returned, never passed)")
        if key in bound:
            raise TypeError(f"{_ENTRY}: got two values for '{key}'; pass it by position or by name, not both")
        bound[key] = value
    for a in takes:
        if a["kind"] == "input_buffer":
            if a["name"] not in bound:
                raise TypeError(f"{_ENTRY}: input '{a['name']}' of {pipeline.name} is missing; pass a dask "
                                f"array of {a['dtype']} with {a['dimensions']} axes")
            bound[a["name"]] = _dask_input(pipeline, a, bound[a["name"]])
    return bound


def _dask_input(pipeline: Pipeline, argument: dict, value: Any) -> da.Array:
    name, want = argument["name"], dtype(argument["dtype"])
    x = value if isinstance(value, da.Array) else da.from_array(_host_array(value, name))
    if dtype(x.dtype) is not want:
        raise TypeError(f"{_ENTRY}: input '{name}' of {pipeline.name} is {np.dtype(x.dtype)}, the pipeline takes "
                        f"{want.name}; convert it first (x.astype(...))")
    if x.ndim != argument["dimensions"]:
        raise ValueError(f"{_ENTRY}: input '{name}' of {pipeline.name} has {x.ndim} axes, the pipeline takes "
                         f"{argument['dimensions']}")
    if any(math.isnan(c) for axis in x.chunks for c in axis):
        raise ValueError(f"{_ENTRY}: input '{name}' has unknown chunk sizes; call x.compute_chunk_sizes() first")
    return x


def _host_array(value: Any, name: str) -> np.ndarray:
    """Any argument a pipeline call takes (a tensor of any dtype, an hl.Buffer, a pyopencl array, an
    object with Halide's typed capsule, ...), as an ndarray of its exact dtype: its memory when it
    is on the host, else a copy brought home."""
    return np.asarray(_argument(value, "hb.dask.map_pipeline", name))


def _boundaries(boundary: Any, ndim: int) -> tuple:
    """(numpy.pad mode, constant) for each axis (mode None: 'none'), from one boundary for every
    axis or one per axis (a tuple of ndim, or a dict of axis -> boundary, missing axes 'none'),
    with dask's map_overlap meanings (None: 'none')."""
    if boundary is None:
        boundary = "none"
    if isinstance(boundary, tuple):
        if len(boundary) != ndim:
            raise ValueError(f"{_ENTRY}: boundary {boundary!r} gives {len(boundary)} axes, the arrays have {ndim}; "
                             "give one boundary per axis, or a dict of axis -> boundary")
        boundary = dict(enumerate(boundary))
    if isinstance(boundary, dict):
        by_axis = {}
        for key, value in boundary.items():
            axis = key if isinstance(key, (int, np.integer)) and not isinstance(key, bool) else None
            if axis is None or not 0 <= axis < ndim:
                raise ValueError(f"{_ENTRY}: boundary names axis {key!r}, the arrays have axes 0 to {ndim - 1}; "
                                 "key the dict by those")
            by_axis[int(axis)] = value
        return tuple(_pad_mode(by_axis.get(axis, "none")) for axis in range(ndim))
    return (_pad_mode(boundary),) * ndim


def _pad_mode(boundary: Any) -> tuple:
    """(numpy.pad's mode, constant) for one axis's boundary: a dask name (mode None: 'none'), or
    a number ('constant')."""
    if isinstance(boundary, str):
        if boundary == "none":
            return None, None
        if boundary in _PAD_MODES:
            return _PAD_MODES[boundary], None
        raise ValueError(f"{_ENTRY}: boundary {boundary!r} is not one of 'none', 'nearest', 'reflect', "
                         "'periodic' or a constant")
    if isinstance(boundary, (int, float, np.number)) and not isinstance(boundary, bool):
        return "constant", boundary
    raise TypeError(f"{_ENTRY}: boundary must be 'none', 'nearest', 'reflect', 'periodic' or a number (or one "
                    f"of those per axis, in a tuple or a dict), not {type(boundary).__name__}")


def _blocks(chunks: tuple) -> dict:
    """{block index: (mins, shape)} of every output chunk, mins in the array's coordinates."""
    starts = [np.cumsum((0,) + tuple(c)).tolist() for c in chunks]
    blocks = {}
    for index in np.ndindex(*(len(c) for c in chunks)):
        blocks[index] = (tuple(starts[a][i] for a, i in enumerate(index)),
                         tuple(chunks[a][i] for a, i in enumerate(index)))
    return blocks


def _check_readable(pipeline: Pipeline, name: str, x: da.Array, regions: dict, modes: tuple) -> None:
    """ValueError naming the first output chunk whose region of input `name` leaves it along an
    axis whose boundary is 'none', or reaches along an axis where the input has no element to
    repeat, mirror or wrap (numpy.pad refuses those too)."""
    for index, needed in regions.items():
        lo, extent = needed[name]
        if 0 in extent:
            continue
        for axis, (m, e, n) in enumerate(zip(lo, extent, x.shape)):
            mode = modes[axis][0]
            if mode is None and (m < 0 or m + e > n):
                raise ValueError(f"{_ENTRY}: {pipeline.name} reads input '{name}' over mins {tuple(lo)}, shape "
                                 f"{tuple(extent)} for the output chunk {index}, outside the input's shape "
                                 f"{x.shape}, and boundary is 'none'{_along(axis, modes)}; pass boundary='nearest', "
                                 "'reflect', 'periodic' or a constant, or write the pipeline to stay inside "
                                 "(docs/dask.md)")
            if n == 0 and mode != "constant":
                raise ValueError(f"{_ENTRY}: {pipeline.name} reads input '{name}' over mins {tuple(lo)}, shape "
                                 f"{tuple(extent)} for the output chunk {index}, and the input is empty along "
                                 f"axis {axis}, with no element for boundary {_NAMES[mode]!r} to take; pass a "
                                 "constant boundary for that axis")


def _check_constants(pipeline: Pipeline, name: str, x: da.Array, regions: dict, modes: tuple) -> None:
    """ValueError naming the first output chunk whose region of input `name` leaves it along an axis
    whose boundary is a constant the input's dtype does not hold (see _holds). NumPy's cast would
    make a value up there, one C leaves undefined and CPUs differ on (dask's map_overlap pads with
    it, with a RuntimeWarning)."""
    for axis, (mode, constant) in enumerate(modes):
        if mode != "constant" or _holds(x.dtype, constant):
            continue
        for index, needed in regions.items():
            lo, extent = needed[name]
            if 0 not in extent and (lo[axis] < 0 or lo[axis] + extent[axis] > x.shape[axis]):
                low, high = _integer_range(x.dtype)
                raise ValueError(f"{_ENTRY}: {pipeline.name} reads input '{name}' ({x.dtype}) beyond its edge"
                                 f"{_along(axis, modes)} for the output chunk {index}, and boundary {constant} is no "
                                 f"{x.dtype} value; pass a constant from {low} to {high}")


def _holds(array_dtype: np.dtype, constant: Any) -> bool:
    """Whether a dtype holds a boundary constant as NumPy converts it: an integer dtype a real,
    finite number whose whole part (the fraction dropped, as NumPy casts) lies in its range; any
    other dtype (floats take NaN and the infinities) every number."""
    bounds = _integer_range(array_dtype)
    if bounds is None:
        return True
    if isinstance(constant, np.complexfloating):
        return False
    if isinstance(constant, (int, np.integer)):
        return bounds[0] <= int(constant) <= bounds[1]
    value = float(constant)
    return math.isfinite(value) and bounds[0] <= math.trunc(value) <= bounds[1]


def _integer_range(array_dtype: np.dtype) -> tuple[int, int] | None:
    """(lowest, highest) value of an integer dtype (ml_dtypes' int4 and the like too); None for any other."""
    try:
        info = ml_dtypes.iinfo(array_dtype)
    except ValueError:
        return None
    return int(info.min), int(info.max)


def _along(axis: int, modes: tuple) -> str:
    """' along axis k' where the boundary differs between axes, else nothing."""
    return f" along axis {axis}" if len(set(modes)) > 1 else ""


def _source_indices(lo: int, extent: int, n: int, mode: str | None) -> np.ndarray:
    """For each position of [lo, lo + extent) along an axis of n elements, the element it takes
    (numpy.pad's modes; -1 where a constant goes)."""
    i = np.arange(lo, lo + extent, dtype=np.int64)
    if mode == "edge":
        return np.clip(i, 0, n - 1)
    if mode == "wrap":
        return i % n
    if mode == "symmetric":
        j = i % (2 * n)
        return np.where(j < n, j, 2 * n - 1 - j)
    if mode == "constant":
        return np.where((i >= 0) & (i < n), i, -1)
    return i  # 'none': checked inside


def _runs(positions: np.ndarray, sources: np.ndarray) -> list[tuple[slice, slice]]:
    """Splits (position, source) pairs into runs where both go up by one: slice pairs to copy."""
    breaks = np.nonzero((np.diff(positions) != 1) | (np.diff(sources) != 1))[0] + 1
    return [(slice(int(p[0]), int(p[-1]) + 1), slice(int(q[0]), int(q[-1]) + 1))
            for p, q in zip(np.split(positions, breaks), np.split(sources, breaks))]


class _RegionPlan:
    """How one input's region for one output chunk is cut out of the input's chunks: which
    chunks it touches (block indices) and, in the task, the copies from each."""

    def __init__(self, x: da.Array, lo, extent, modes: tuple):
        self.lo, self.extent, self.modes, self.shape = tuple(lo), tuple(extent), modes, x.shape
        self.starts = tuple(tuple(np.cumsum((0,) + c).tolist()) for c in x.chunks)
        self.dtype = x.dtype
        per_axis = []  # the chunks each axis's source elements lie in
        for axis, src in enumerate(self._sources()):
            taken = src[src >= 0]
            per_axis.append(np.unique(np.searchsorted(self.starts[axis], taken, side="right") - 1).tolist())
        self.chunks = list(itertools.product(*per_axis))  # block indices of the input's chunks

    def _sources(self) -> list[np.ndarray]:
        return [_source_indices(m, e, n, mode) for m, e, n, (mode, _) in zip(self.lo, self.extent, self.shape,
                                                                            self.modes)]

    def assemble(self, chunks: list[np.ndarray]) -> np.ndarray:
        """The region as one ndarray, from the chunks listed in self.chunks (in that order)."""
        sources = self._sources()
        outside = any((s < 0).any() for s in sources)
        if len(chunks) == 1 and chunks[0].shape == self.extent and all(
                s[0] == self.starts[axis][b] and (np.diff(s) == 1).all()
                for axis, (s, b) in enumerate(zip(sources, self.chunks[0]))):
            return np.ascontiguousarray(chunks[0])  # the region is the chunk: no copy (unless rows are not dense)
        out = np.empty(self.extent, self.dtype)
        if outside:  # constants first, axis by axis, as dask pads: where two meet, the later axis's
            for axis, (src, (_, constant)) in enumerate(zip(sources, self.modes)):
                where = np.nonzero(src < 0)[0]
                if where.size:
                    out[(slice(None),) * axis + (where,)] = constant
        for block, chunk in zip(self.chunks, chunks):
            runs = []
            for axis, b in enumerate(block):
                c0, c1 = self.starts[axis][b], self.starts[axis][b + 1]
                src = sources[axis]
                positions = np.nonzero((src >= c0) & (src < c1))[0]
                runs.append(_runs(positions, src[positions] - c0))
            for pieces in itertools.product(*runs):
                out[tuple(dst for dst, _ in pieces)] = chunk[tuple(src for _, src in pieces)]
        return out


def _empty_block(dtypes: tuple, shape: tuple):
    """An output chunk with no element: an empty array of each output."""
    arrays = tuple(np.empty(shape, dtype(d).numpy) for d in dtypes)
    return arrays[0] if len(arrays) == 1 else arrays


def _meta(argument: dict, ndim: int) -> np.ndarray:
    return np.empty((0,) * ndim, dtype=dtype(argument["dtype"]).numpy)


def _input_buffers(plans: tuple, scalars: dict, chunks: tuple) -> dict:
    """The pipeline's inputs and scalars for one output chunk: each input's region cut out of its
    chunks, as a Buffer at the region's global mins."""
    args = dict(scalars)
    taken = 0
    for input_name, plan in plans:
        piece = plan.assemble(chunks[taken:taken + len(plan.chunks)])
        taken += len(plan.chunks)
        args[input_name] = Buffer.from_host(piece).translated(plan.lo)
    return args


def _call(pipeline: Pipeline, args: dict, index: tuple, mins: tuple, shape: tuple) -> None:
    """The pipeline on one output chunk; a PipelineError names the chunk."""
    try:
        pipeline(**args)
    except PipelineError as e:
        error = PipelineError(f"{e} (hb.dask.map_pipeline: the output chunk {index} at mins {mins}, shape {shape})")
        error.code = getattr(e, "code", None)
        raise error from e


def _chunk_of(whole: np.ndarray, lo: tuple, mins: tuple, shape: tuple) -> np.ndarray:
    """The chunk at (mins, shape) of a region at mins lo (a view)."""
    return whole[tuple(slice(m - w, m - w + n) for m, n, w in zip(mins, shape, lo))]


def _run_block(pipeline, plans, scalars, outputs, written, mins, shape, index, *chunks):
    """One output chunk: each input's region cut out of its chunks, the pipeline on those regions
    (at their global mins) writing the regions its bounds query named (``written``: the chunk,
    or more), and the chunk's part home as ndarrays."""
    args = _input_buffers(plans, scalars, chunks)
    results = {}
    for (output_name, output_dtype), (lo, extent) in zip(outputs, written):
        results[output_name] = Buffer(extent, output_dtype).translated(lo)
    _call(pipeline, {**args, **results}, index, mins, shape)
    arrays = []
    for (output_name, _), (lo, extent) in zip(outputs, written):
        whole = np.asarray(results[output_name])  # comes home once
        if tuple(extent) != tuple(shape):  # written beyond the chunk: keep only the chunk
            whole = _chunk_of(whole, lo, mins, shape).copy()
        arrays.append(whole)
    return arrays[0] if len(arrays) == 1 else tuple(arrays)


def _store_block(pipeline, plans, scalars, outputs, written, mins, shape, index, targets, *chunks):
    """One output chunk written into compute()'s results (``targets``: for each output, the arrays
    it goes to; none for an output not asked for). A host pipeline writes straight into the first
    array of an output when it writes exactly the chunk (a pipeline writing more, whole vectors
    past a narrow chunk, would write over its neighbours) and that array's rows are dense (Halide's
    default for an output). Otherwise the pipeline writes a buffer of the region it writes, from
    which the chunk is copied: a device pipeline too, whose output would otherwise be the span of
    the chunk's rows in the whole array, allocated on the device and brought home. Further arrays
    of the same output get a copy."""
    where = tuple(slice(m, m + n) for m, n in zip(mins, shape)) + (Ellipsis,)  # a view, even of 0 axes
    args = _input_buffers(plans, scalars, chunks)
    in_place = not _on_a_device(pipeline)
    buffers, direct = {}, set()
    for (output_name, output_dtype), (lo, extent), arrays in zip(outputs, written, targets):
        if (in_place and arrays and tuple(lo) == tuple(mins) and tuple(extent) == tuple(shape)
                and _dense_rows(arrays[0])):
            # The task alone writes this region while it runs: no standing lease to upload it for.
            buffers[output_name] = Buffer.from_host(arrays[0][where], external_writes=False).translated(mins)
            direct.add(output_name)
        else:
            buffers[output_name] = Buffer(extent, output_dtype).translated(lo)
    _call(pipeline, {**args, **buffers}, index, mins, shape)
    for (output_name, _), (lo, extent), arrays in zip(outputs, written, targets):
        if output_name in direct:
            chunk, rest = arrays[0][where], arrays[1:]
        else:  # comes home once
            chunk, rest = (_chunk_of(np.asarray(buffers[output_name]), lo, mins, shape) if arrays else None), arrays
        for array in rest:
            array[where] = chunk


def _on_a_device(pipeline: Pipeline) -> bool:
    """Whether the pipeline computes on a device (OpenCL or CUDA)."""
    return pipeline.device_api is not None


def _dense_rows(array: np.ndarray) -> bool:
    """Whether the array's last axis (Halide's first dimension) is dense, as Halide takes an output."""
    return array.ndim == 0 or array.strides[-1] == array.itemsize
