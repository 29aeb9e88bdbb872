"""Halide AOT pipelines as PyTorch custom ops: ``op(pipeline, name=None)``.

``op`` registers a pipeline loaded with ``hb.aot.load`` as the operator
``halide_buffer::<name>`` through ``torch.library`` and returns its overload. The op takes the
pipeline's inputs (tensors for its input buffers, numbers for its scalars, in the pipeline's
order or by name) and returns its outputs as new tensors on the inputs' device, sized by
Halide's own bounds query. The same query is its fake kernel, so ``torch.compile(fullgraph=True)``
traces it without a graph break, and ``torch.library.opcheck`` passes.

Install PyTorch to use it (``pip install torch``); ``import halide_buffer`` never imports torch.
See docs/torch.md.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

try:
    import torch
except ImportError as e:
    raise ImportError(f"hb.torch needs PyTorch; pip install torch (import torch: {e})") from e

from . import cuda as _cuda
from ._core import Pipeline, from_dlpack

__all__ = ["op"]

_NAMESPACE = "halide_buffer"
_ENTRY = "hb.torch.op()"
_CPU = torch.device("cpu")

# The schema type of each scalar type a pipeline's Param can have: torch schemas know int (64
# bits), float (double) and bool; the pipeline's call converts and range-checks the value.
_SCALAR_SCHEMA = {
    "bool": "bool",
    "int8": "int", "int16": "int", "int32": "int", "int64": "int",
    "uint8": "int", "uint16": "int", "uint32": "int", "uint64": "int",
    "float16": "float", "bfloat16": "float", "float32": "float", "float64": "float",
}

# Sizes for at most this many distinct (input shapes, scalars) per op: a model calls an op with a
# few shapes, and each new one costs two bounds queries.
_SIZES_CACHED = 256

# The ops registered in this process: name -> _Op. One Library fragment per op keeps its
# registrations alive as long as the process.
_ops: dict[str, _Op] = {}
_lock = threading.Lock()


def op(pipeline: Pipeline, name: str | None = None) -> torch._ops.OpOverload:
    """The pipeline as the PyTorch operator ``halide_buffer::<name>``; returns its overload
    (the same object as ``torch.ops.halide_buffer.<name>.default``).

    ``name`` defaults to ``pipeline.name``. The op's schema is the pipeline's inputs in its order
    (``Tensor`` for an input buffer, ``int``, ``float`` or ``bool`` for a scalar), every one
    required; it returns the outputs, each a new contiguous tensor on the inputs' device, of the
    dtype and shape Halide's bounds query gives (the pipeline must fix its outputs' sizes from its
    inputs, scalars or constants). Inputs whose last axis is not dense are made contiguous first
    (Halide pipelines take dimension 0, NumPy's and torch's last axis, with stride 1). Tensors that
    require grad raise ``RuntimeError`` while grad mode is on (no backward is defined), tensors on
    a device the pipeline cannot compute on ``ValueError``, the wrong dtype ``TypeError``.

    Registering the same pipeline (same library path and function) under the same name again
    returns the op registered first; another pipeline under a name taken raises ``ValueError``.
    """
    if not isinstance(pipeline, Pipeline):
        raise TypeError(f"{_ENTRY}: pipeline must be a halide_buffer.aot.Pipeline (from hb.aot.load()), not "
                        f"{type(pipeline).__name__}; pass hb.aot.load(library_path, function_name)")
    if name is None:
        name = pipeline.name
    if not isinstance(name, str) or not name.isidentifier() or not name.isascii():
        raise ValueError(f"{_ENTRY}: the op name {name!r} is not an identifier; pass a name of letters, digits "
                         f"and '_' (the op becomes halide_buffer::<name>)")
    with _lock:
        registered = _ops.get(name)
        if registered is not None:
            if registered.same_pipeline(pipeline):
                return registered.overload
            raise ValueError(f"{_ENTRY}: halide_buffer::{name} is already the op of {registered.describe()}; pass "
                             f"another name (name='...') for {pipeline.name} of {pipeline.library_path}")
        registered = _Op(pipeline, name)
        _ops[name] = registered
        return registered.overload


class _Op:
    """One registered op: the pipeline, the layout of its arguments, its two kernels."""

    def __init__(self, pipeline: Pipeline, name: str) -> None:
        self.pipeline = pipeline
        self.name = name
        self.entry = f"{_NAMESPACE}::{name}()"  # how its errors name it
        arguments = pipeline.arguments
        outputs = [a for a in arguments if a["kind"] == "output_buffer"]
        inputs = [a for a in arguments if a["kind"] != "output_buffer"]
        # Halide places outputs after every input; the call passes them last by position.
        if arguments[len(inputs):] != outputs:
            raise ValueError(f"{_ENTRY}: {pipeline.name} has an output before an input; rebuild it with "
                             f"Halide's compile_to_object, which places outputs last")
        for a in inputs:
            if a["kind"] == "input_scalar" and a["dtype"] not in _SCALAR_SCHEMA:
                raise ValueError(f"{_ENTRY}: {pipeline.name}'s scalar '{a['name']}' has the type {a['dtype']}, "
                                 f"which a torch schema cannot carry; give the pipeline numeric or bool Params")
        # (position in the op's arguments, name, torch dtype, axes) of each input buffer;
        # (position, name) of each scalar; (name, torch dtype, axes) of each output.
        self.buffers = [(i, a["name"], _torch_dtype(pipeline, a), a["dimensions"])
                        for i, a in enumerate(inputs) if a["kind"] == "input_buffer"]
        self.scalars = [(i, a["name"]) for i, a in enumerate(inputs) if a["kind"] == "input_scalar"]
        self.outputs = [(a["name"], _torch_dtype(pipeline, a), a["dimensions"]) for a in outputs]
        self.is_buffer = [a["kind"] == "input_buffer" for a in inputs]
        self.on_host = pipeline.device_api != "cuda"  # host and OpenCL pipelines take CPU tensors
        self.regions = functools.lru_cache(maxsize=_SIZES_CACHED)(self._ask_regions)
        self.library, self.overload = self._register(inputs)

    def same_pipeline(self, pipeline: Pipeline) -> bool:
        return (pipeline.library_path, pipeline.name) == (self.pipeline.library_path, self.pipeline.name)

    def describe(self) -> str:
        return f"{self.pipeline.name} of {self.pipeline.library_path}"

    # -- registration ---------------------------------------------------------------------------

    def _register(self, inputs: list[dict[str, Any]]) -> tuple[torch.library.Library, torch._ops.OpOverload]:
        params = ", ".join(f"{'Tensor' if a['kind'] == 'input_buffer' else _SCALAR_SCHEMA[a['dtype']]} {a['name']}"
                           for a in inputs)
        returns = "Tensor" if len(self.outputs) == 1 else "(" + ", ".join(["Tensor"] * len(self.outputs)) + ")"
        schema = f"{self.name}({params}) -> {returns}"
        library = torch.library.Library(_NAMESPACE, "FRAGMENT")
        try:
            library.define(schema)
        except RuntimeError as e:
            raise ValueError(f"{_ENTRY}: torch refuses the schema {schema!r} made from {self.describe()} "
                             f"({str(e).splitlines()[0]}); pass another name, or rename the pipeline's arguments "
                             f"(a torch schema cannot use names such as 'in')") from e
        # One kernel for every backend, so that a tensor on a device the pipeline cannot reach gets
        # our error naming the argument, not the dispatcher's "could not run ... with arguments
        # from the 'CUDA' backend". No autograd kernel: _check() refuses inputs that require grad
        # while grad mode is on, until a user registers a backward (torch.library.register_autograd,
        # whose forward runs with grad mode off).
        library.impl(self.name, self._run, "CompositeExplicitAutograd")
        # The fake kernel serves FakeTensorMode (torch.compile, opcheck) and meta tensors.
        torch.library.register_fake(f"{_NAMESPACE}::{self.name}", self._fake, lib=library)
        return library, getattr(getattr(torch.ops, _NAMESPACE), self.name).default

    # -- the kernels ----------------------------------------------------------------------------

    def _run(self, *args: Any) -> Any:
        """The real kernel: outputs allocated by torch on the inputs' device, then the call."""
        if self.on_host:
            # The checks of _check() in one pass, at the cost of a few attribute reads per tensor:
            # any doubt goes to _check(), which raises naming the argument.
            grad = torch.is_grad_enabled()
            key = list(args)
            for i, _, dtype, ndim in self.buffers:
                t = args[i]
                if t.dtype != dtype or t.dim() != ndim or not t.is_cpu or (grad and t.requires_grad):
                    self._check(args, fake=False)
                key[i] = t.shape
            device = _CPU
        else:
            device = self._check(args, fake=False)
            key = self._key(args, fake=False)
        shapes, mins = self.regions(tuple(key))
        outs = [torch.empty(shape, dtype=dtype, device=device)
                for shape, (_, dtype, _) in zip(shapes, self.outputs)]
        call = list(args)
        for i, _, _, _ in self.buffers:
            t = call[i]
            # Halide pipelines take dimension 0 (the last axis) with stride 1 unless told otherwise,
            # and a tensor made of broadcasts or a step slice has another: as torch ops do, they
            # compute on a dense copy.
            if not t.is_contiguous() and t.dim() and t.stride(-1) != 1 and t.size(-1) > 1:
                t = call[i] = t.contiguous()
            # With grad mode off (_check let it through) no graph is recorded: the pipeline reads
            # the data, which a tensor that requires grad exports only detached.
            if t.requires_grad:
                call[i] = t.detach()
        given = outs
        if not self.on_host:
            call, given = self._on_current_stream(call, outs, device)
        if mins is not None:
            given = [_placed(t, m) for t, m in zip(given, mins)]
        self.pipeline(*call, *given)
        if mins is not None and self.on_host:
            for b in given:  # an OpenCL pipeline's output comes home into the tensor's memory
                b.copy_to_host()
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _fake(self, *args: Any) -> Any:
        """The fake kernel: the same checks and the same bounds query, on sizes made concrete
        (symbolic sizes are specialized: Halide answers about numbers)."""
        device = self._check(args, fake=True)
        shapes, _ = self.regions(self._key(args, True))
        outs = [torch.empty(shape, dtype=dtype, device=device) for shape, (_, dtype, _) in zip(shapes, self.outputs)]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _key(self, args: tuple[Any, ...], fake: bool) -> tuple[Any, ...]:
        """What the output regions depend on: every input's shape, every scalar's value."""
        if fake:
            return tuple(tuple(_concrete(n) for n in a.shape) if is_buffer else _concrete(a)
                         for a, is_buffer in zip(args, self.is_buffer))
        return tuple(a.shape if is_buffer else a for a, is_buffer in zip(args, self.is_buffer))

    def _check(self, args: tuple[Any, ...], fake: bool) -> torch.device:
        """The device of the call, after checking each input tensor's dtype, axes, grad and device."""
        grad = torch.is_grad_enabled()
        device = None
        first = None
        for i, name, dtype, ndim in self.buffers:
            t = args[i]
            if t.dtype != dtype:
                raise TypeError(f"{self.entry}: argument '{name}' is a {t.dtype} tensor where the pipeline takes "
                                f"{dtype}; pass {name}.to({dtype})")
            if t.dim() != ndim:
                raise ValueError(f"{self.entry}: argument '{name}': {t.dim()} axes where the pipeline takes "
                                 f"{ndim}; pass a tensor of {ndim} axes")
            if grad and t.requires_grad:
                raise RuntimeError(f"{self.entry}: argument '{name}' requires grad; halide_buffer ops have no "
                                   f"backward yet; pass {name}.detach() (or give the op one: "
                                   f"torch.library.register_autograd(\"{_NAMESPACE}::{self.name}\", ...))")
            if device is None:
                device, first = t.device, name
                self._check_device(name, device, fake)
            elif t.device != device:
                raise ValueError(f"{self.entry}: argument '{name}' is on {t.device}, argument '{first}' on "
                                 f"{device}; pass tensors on one device")
        return device if device is not None else self._default_device()

    def _check_device(self, name: str, device: torch.device, fake: bool) -> None:
        kind = self.pipeline.device_api
        if fake and device.type == "meta":
            return  # shapes only: nothing runs
        if kind == "cuda":
            if device.type != "cuda":
                raise ValueError(f"{self.entry}: argument '{name}' is on {device}, where the pipeline computes "
                                 f"with CUDA; pass {name}.cuda()")
        elif device.type != "cpu":
            what = "an OpenCL pipeline, which takes CPU tensors" if kind == "opencl" else "a host pipeline"
            raise ValueError(f"{self.entry}: argument '{name}' is on {device}, where {self.pipeline.name} is "
                             f"{what}; pass {name}.cpu()")

    def _default_device(self) -> torch.device:
        """Where the outputs of an op without input tensors go."""
        if self.pipeline.device_api == "cuda":
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")

    # -- sizes ----------------------------------------------------------------------------------

    def _ask_regions(self, key: tuple[Any, ...]) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]] | None]:
        """(shape of each output, mins of each output or None when all are 0) for inputs of these
        shapes and these scalars: Pipeline.output_regions(), the rule of a call's omitted outputs."""
        scalars = {name: key[i] for i, name in self.scalars}
        covered = {name: ((0,) * len(key[i]), key[i]) for i, name, _, _ in self.buffers}
        try:
            regions = self.pipeline.output_regions(scalars, covered)  # as a call sizes an output not given
        except ValueError as e:
            # The call's refusal says "pass an output buffer"; an op has none to take.
            what = str(e).removeprefix(f"{self.pipeline.name}(): ").removesuffix("; pass an output buffer")
            source = self.buffers[0][1] if self.buffers else "inp"
            raise ValueError(f"{self.entry}: {what}; an op allocates its outputs, so the pipeline must fix their "
                             f"bounds (e.g. output_buffer().dim(i).set_bounds({source}.dim(i).min(), "
                             f"{source}.dim(i).extent()) in each dimension); else call the pipeline itself with an "
                             f"output tensor") from e
        mins = [regions[name][0] for name, _, _ in self.outputs]
        shapes = [regions[name][1] for name, _, _ in self.outputs]
        placed = None if all(not any(m) for m in mins) else mins
        return shapes, placed

    # -- CUDA ----------------------------------------------------------------------------------

    def _on_current_stream(self, call: list[Any], outs: list[torch.Tensor],
                           device: torch.device) -> tuple[list[Any], list[Any]]:
        """The arguments of a call on torch's current stream. On the default stream (the legacy
        default stream, which halide_buffer's default CUDA device uses too) the tensors go as
        they are; on another, each is wrapped on a device of that stream, so the pipeline runs
        ordered after what torch queued there, and what torch queues next sees its results."""
        stream = torch.cuda.current_stream(device)
        if stream.cuda_stream == 0:
            return call, outs
        on = _cuda.device(device.index, stream=stream)
        wrap = [from_dlpack(a, device=on) if isinstance(a, torch.Tensor) else a for a in call]
        return wrap, [from_dlpack(t, device=on) for t in outs]


def _placed(t: Any, mins: tuple[int, ...]) -> Any:
    """An output at the coordinates the pipeline writes: a tensor's indices start at 0, Halide's
    region at its mins, so the tensor goes as a Buffer of its memory placed there."""
    b = from_dlpack(t) if isinstance(t, torch.Tensor) else t
    if any(mins):
        b.set_min(*mins)
    return b


def _concrete(v: Any) -> Any:
    """A size or scalar as a Python number: symbolic ones (torch.compile's dynamic shapes) are
    specialized, guarding the compiled graph on their value."""
    if isinstance(v, torch.SymInt):
        return int(v)
    if isinstance(v, torch.SymFloat):
        return float(v)
    if isinstance(v, torch.SymBool):
        return bool(v)
    return v


def _torch_dtype(pipeline: Pipeline, argument: dict[str, Any]) -> torch.dtype:
    """The torch dtype of a buffer argument: the same name as in halide_buffer's dtype table."""
    dtype = getattr(torch, argument["dtype"], None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"{_ENTRY}: {pipeline.name}'s buffer '{argument['name']}' has the dtype "
                         f"{argument['dtype']}, which torch has no dtype for; give the pipeline buffers of a type "
                         f"torch has")
    return dtype
