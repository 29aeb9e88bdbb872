"""Halide AOT pipelines over dask arrays: ``map_pipeline``, with halos from Halide's own bounds query.

For each output chunk, the pipeline's bounds query (``Pipeline.required_regions``) says which
region of each input it reads; exactly that region, assembled from the neighbouring chunks,
is handed to the pipeline as a Buffer at its true global position (its mins). Where a region
leaves an input, ``boundary`` says what lies there (dask's meanings); ``"none"`` refuses.

Install with ``pip install 'halide_buffer[dask]'``. See docs/dask.md.
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
from typing import Any

import dask.array as da
import numpy as np
from dask.base import tokenize
from dask.highlevelgraph import HighLevelGraph

from ._core import Buffer, Pipeline, PipelineError, dtype

__all__ = ["map_pipeline"]

# dask's boundary names -> numpy.pad's modes (dask's 'reflect' repeats the edge element).
_PAD_MODES = {"nearest": "edge", "reflect": "symmetric", "periodic": "wrap"}
_NAMES = {mode: name for name, mode in _PAD_MODES.items()}
_ENTRY = "hb.dask.map_pipeline()"


def map_pipeline(pipeline: Pipeline, *inputs: Any, chunks: Any = None, boundary: Any = "none",
                 **kwargs: Any) -> da.Array | tuple[da.Array, ...]:
    """Runs ``pipeline`` chunk by chunk over dask arrays; returns its output(s) as dask arrays.

    Arguments go by position (the pipeline's inputs and scalars, in its order) or by name, as
    for a call of the pipeline; input buffers are dask arrays (NumPy arrays are wrapped), scalars
    pass through. Every output has the shape of the first input buffer, chunked as ``chunks``
    (default: that input's chunks), and the dtype the pipeline declares. ``boundary``:
    ``"none"`` (a region leaving an input is an error; ``None`` means it too), ``"nearest"``,
    ``"reflect"``, ``"periodic"``, or a constant; or one of those per axis, as a tuple or a dict
    of axis -> boundary (axes not in the dict: ``"none"``), as dask's ``map_overlap`` takes them.
    An output chunk with no element runs no task of the pipeline: it is empty.
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

    token = tokenize(pipeline.library_path, pipeline.name, sorted(scalars.items()), modes, out_chunks,
                     *(x.name for x in buffers.values()))
    name = f"halide-{pipeline.name}-{token}"
    layer = {}
    for index, (mins, shape) in blocks.items():
        if index not in regions:  # no element: empty arrays, no input read
            layer[(name,) + index] = (_empty_block, tuple(a["dtype"] for a in outputs), shape)
            continue
        # One task per output chunk: it takes the input chunks its regions touch and cuts the
        # regions out of them itself (no intermediate arrays, no padded copy of the inputs).
        plans, keys = [], []
        for input_name, x in buffers.items():
            plan = _RegionPlan(x, *regions[index][input_name], modes)
            plans.append((input_name, plan))
            keys.extend((x.name,) + chunk for chunk in plan.chunks)
        written = tuple(regions[index][a["name"]] for a in outputs)  # may be larger than the chunk
        run = functools.partial(_run_block, pipeline, tuple(plans), scalars,
                                tuple((a["name"], a["dtype"]) for a in outputs), written, mins, shape, index)
        layer[(name,) + index] = (run,) + tuple(keys)
    graph = HighLevelGraph.from_collections(name, layer, dependencies=list(buffers.values()))
    if len(outputs) == 1:
        return da.Array(graph, name, out_chunks, meta=_meta(outputs[0], first.ndim))
    results = []
    for k, a in enumerate(outputs):  # each output: its item of every block's tuple
        out_name = f"{name}-{a['name']}"
        getters = {(out_name,) + index: (operator.getitem, (name,) + index, k) for index in blocks}
        out_graph = HighLevelGraph({**graph.layers, out_name: getters},
                                   {**graph.dependencies, out_name: {name}})
        results.append(da.Array(out_graph, out_name, out_chunks, meta=_meta(a, first.ndim)))
    return tuple(results)


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
    x = value if isinstance(value, da.Array) else da.from_array(np.asarray(value))
    if dtype(x.dtype) is not want:
        raise TypeError(f"{_ENTRY}: input '{name}' of {pipeline.name} is {np.dtype(x.dtype)}, the pipeline takes "
                        f"{want.name}; convert it first (x.astype(...))")
    if x.ndim != argument["dimensions"]:
        raise ValueError(f"{_ENTRY}: input '{name}' of {pipeline.name} has {x.ndim} axes, the pipeline takes "
                         f"{argument['dimensions']}")
    if any(math.isnan(c) for axis in x.chunks for c in axis):
        raise ValueError(f"{_ENTRY}: input '{name}' has unknown chunk sizes; call x.compute_chunk_sizes() first")
    return x


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


def _run_block(pipeline, plans, scalars, outputs, written, mins, shape, index, *chunks):
    """One output chunk: each input's region cut out of its chunks, the pipeline on those regions
    (at their global mins) writing the regions its bounds query named (``written``: the chunk,
    or more), and the chunk's part home as ndarrays."""
    args = dict(scalars)
    taken = 0
    for input_name, plan in plans:
        piece = plan.assemble(chunks[taken:taken + len(plan.chunks)])
        taken += len(plan.chunks)
        args[input_name] = Buffer.from_host(piece).translated(plan.lo)
    results = {}
    for (output_name, output_dtype), (lo, extent) in zip(outputs, written):
        results[output_name] = Buffer(extent, output_dtype).translated(lo)
    try:
        pipeline(**args, **results)
    except PipelineError as e:
        error = PipelineError(f"{e} (hb.dask.map_pipeline: the output chunk {index} at mins {mins}, shape {shape})")
        error.code = getattr(e, "code", None)
        raise error from e
    arrays = []
    for (output_name, _), (lo, extent) in zip(outputs, written):
        whole = np.asarray(results[output_name])  # comes home once
        if tuple(extent) != tuple(shape):  # written beyond the chunk: keep only the chunk
            whole = whole[tuple(slice(m - w, m - w + n) for m, n, w in zip(mins, shape, lo))].copy()
        arrays.append(whole)
    return arrays[0] if len(arrays) == 1 else tuple(arrays)
