"""Halide AOT pipelines over dask arrays: ``map_pipeline``, with halos from Halide's own bounds query.

For each output chunk, the pipeline's bounds query (``Pipeline.required_regions``) says which
region of each input it reads; exactly that region, assembled from the neighbouring chunks,
is handed to the pipeline as a Buffer at its true global position (its mins). Where a region
leaves an input, ``boundary`` says what lies there (dask's meanings); ``"none"`` refuses.

Install with ``pip install 'halide_buffer[dask]'``. See docs/dask.md.
"""

from __future__ import annotations

import functools
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
_ENTRY = "hb.dask.map_pipeline()"


def map_pipeline(pipeline: Pipeline, *inputs: Any, chunks: Any = None, boundary: Any = "none",
                 **kwargs: Any) -> da.Array | tuple[da.Array, ...]:
    """Runs ``pipeline`` chunk by chunk over dask arrays; returns its output(s) as dask arrays.

    Arguments go by position (the pipeline's inputs and scalars, in its order) or by name, as
    for a call of the pipeline; input buffers are dask arrays (NumPy arrays are wrapped), scalars
    pass through. Every output has the shape of the first input buffer, chunked as ``chunks``
    (default: that input's chunks), and the dtype the pipeline declares. ``boundary``:
    ``"none"`` (a region leaving an input is an error), ``"nearest"``, ``"reflect"``,
    ``"periodic"``, or a constant.
    """
    bound = _bind(pipeline, inputs, kwargs)
    buffers = {name: value for name, value in bound.items() if _kind(pipeline, name) == "input_buffer"}
    scalars = {name: value for name, value in bound.items() if _kind(pipeline, name) == "input_scalar"}
    if not buffers:
        raise TypeError(f"{_ENTRY}: {pipeline.name} takes no input buffer to chunk over; call the pipeline "
                        "itself")
    pad_mode = _pad_mode(boundary)
    outputs = [a for a in pipeline.arguments if a["kind"] == "output_buffer"]
    first = next(iter(buffers.values()))
    out_chunks = da.core.normalize_chunks(first.chunks if chunks is None else chunks, first.shape,
                                          dtype=np.dtype(dtype(outputs[0]["dtype"]).numpy))
    for a in outputs:
        if a["dimensions"] != first.ndim:
            raise ValueError(f"{_ENTRY}: output '{a['name']}' of {pipeline.name} has {a['dimensions']} axes, "
                             f"the first input {first.ndim}; every output takes the first input's shape")

    blocks = _blocks(out_chunks)
    regions = {index: pipeline.required_regions(scalars, {a["name"]: (mins, shape) for a in outputs})
               for index, (mins, shape) in blocks.items()}
    padded = {name: _padded(pipeline, name, x, regions, pad_mode, boundary) for name, x in buffers.items()}

    token = tokenize(pipeline.library_path, pipeline.name, sorted(scalars.items()), boundary, out_chunks,
                     *(x.name for x in buffers.values()))
    name = f"halide-{pipeline.name}-{token}"
    layer, pieces = {}, []
    for index, (mins, shape) in blocks.items():
        keys, piece_mins = [], []
        for input_name, (x, pad) in padded.items():
            lo, extent = regions[index][input_name]
            piece = x[tuple(slice(m + p, m + p + e) for m, p, e in zip(lo, pad, extent))]
            piece = piece.rechunk(piece.shape or ())  # one ndarray: the region as the pipeline reads it
            pieces.append(piece)
            keys.append((piece.name,) + (0,) * piece.ndim)
            piece_mins.append(tuple(lo))
        written = tuple(regions[index][a["name"]] for a in outputs)  # may be larger than the chunk
        run = functools.partial(_run_block, pipeline, tuple(padded), tuple(piece_mins), scalars,
                                tuple((a["name"], a["dtype"]) for a in outputs), written, mins, shape, index)
        layer[(name,) + index] = (run,) + tuple(keys)
    graph = HighLevelGraph.from_collections(name, layer, dependencies=pieces)
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


def _pad_mode(boundary: Any) -> str | None:
    """numpy.pad's mode for a dask boundary name (None: 'none'), 'constant' for a number."""
    if isinstance(boundary, str):
        if boundary == "none":
            return None
        if boundary in _PAD_MODES:
            return _PAD_MODES[boundary]
        raise ValueError(f"{_ENTRY}: boundary {boundary!r} is not one of 'none', 'nearest', 'reflect', "
                         "'periodic' or a constant")
    if isinstance(boundary, (int, float, np.number)) and not isinstance(boundary, bool):
        return "constant"
    raise TypeError(f"{_ENTRY}: boundary must be 'none', 'nearest', 'reflect', 'periodic' or a number, not "
                    f"{type(boundary).__name__}")


def _blocks(chunks: tuple) -> dict:
    """{block index: (mins, shape)} of every output chunk, mins in the array's coordinates."""
    starts = [np.cumsum((0,) + tuple(c)).tolist() for c in chunks]
    blocks = {}
    for index in np.ndindex(*(len(c) for c in chunks)):
        blocks[index] = (tuple(starts[a][i] for a, i in enumerate(index)),
                         tuple(chunks[a][i] for a, i in enumerate(index)))
    return blocks


def _padded(pipeline: Pipeline, name: str, x: da.Array, regions: dict, mode: str | None,
            boundary: Any) -> tuple[da.Array, tuple[int, ...]]:
    """The input padded as far as any block's region leaves it, and the padding before each axis."""
    before, after = [0] * x.ndim, [0] * x.ndim
    leaving = None
    for index, needed in regions.items():
        lo, extent = needed[name]
        if any(e == 0 for e in extent):
            continue
        for axis, (m, e, n) in enumerate(zip(lo, extent, x.shape)):
            if m < 0 or m + e > n:
                leaving = leaving or (index, lo, extent)
            before[axis] = max(before[axis], -m)
            after[axis] = max(after[axis], m + e - n)
    if leaving is None:
        return x, tuple(before)
    if mode is None:
        index, lo, extent = leaving
        raise ValueError(f"{_ENTRY}: {pipeline.name} reads input '{name}' over mins {tuple(lo)}, shape "
                         f"{tuple(extent)} for the output chunk {index}, outside the input's shape "
                         f"{x.shape}, and boundary is 'none'; pass boundary='nearest', 'reflect', 'periodic' "
                         "or a constant, or write the pipeline to stay inside (docs/dask.md)")
    pad = list(zip(before, after))
    if mode == "constant":
        return da.pad(x, pad, mode=mode, constant_values=boundary), tuple(before)
    return da.pad(x, pad, mode=mode), tuple(before)


def _meta(argument: dict, ndim: int) -> np.ndarray:
    return np.empty((0,) * ndim, dtype=dtype(argument["dtype"]).numpy)


def _run_block(pipeline, names, piece_mins, scalars, outputs, written, mins, shape, index, *pieces):
    """One output chunk: the pipeline on the pieces (at their global mins) writing the regions its
    bounds query named (``written``: the chunk, or more), the chunk's part home as ndarrays."""
    args = dict(scalars)
    for input_name, lo, piece in zip(names, piece_mins, pieces):
        piece = np.asarray(piece)
        if piece.ndim and piece.strides[-1] != piece.itemsize:  # Halide expects dense rows by default
            piece = np.ascontiguousarray(piece)
        args[input_name] = Buffer.from_host(piece).translated(lo)
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
