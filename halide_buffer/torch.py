"""Halide AOT pipelines as PyTorch custom ops: ``op(pipeline, name=None, backward=None, output_shapes=None)``.

``op`` registers a pipeline loaded with ``hb.aot.load`` as the operator
``halide_buffer::<name>`` through ``torch.library`` and returns its overload. The op takes the
pipeline's inputs (tensors for its input buffers, numbers for its scalars, in the pipeline's
order or by name) and returns its outputs as new tensors on the inputs' device, sized as a call
of the pipeline sizes an output it is not given (``Pipeline.output_regions``: the region the
pipeline fixes, else the largest whose required input regions lie within the inputs) or by the
user's ``output_shapes``. The same sizes are its fake kernel, so ``torch.compile(fullgraph=True)``
traces it without a graph break, and ``torch.library.opcheck`` passes. ``backward``, a second
pipeline computing the gradients (HelloPyTorch's convention: the forward's inputs by name and
``d_<output>`` in, ``d_<input>`` out), becomes the op's autograd formula.

Install PyTorch to use it (``pip install torch``); ``import halide_buffer`` never imports torch.
See docs/torch.md.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from typing import Any

try:
    import torch
except ImportError as e:
    raise ImportError(f"hb.torch needs PyTorch; pip install torch (import torch: {e})") from e

from . import cuda as _cuda
from ._core import Pipeline, _innermost_steps_one, from_dlpack

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
# few shapes, and each new one costs a few bounds queries.
_SIZES_CACHED = 256

# HelloPyTorch's convention for a gradient pipeline: d_<output> in, d_<input> out.
_GRADIENT = "d_"

# The ops registered in this process: name -> _Op. One Library fragment per op keeps its
# registrations alive as long as the process.
_ops: dict[str, _Op] = {}
_lock = threading.Lock()


def op(pipeline: Pipeline, name: str | None = None, backward: Pipeline | None = None,
       output_shapes: Callable[..., Any] | None = None) -> torch._ops.OpOverload:
    """The pipeline as the PyTorch operator ``halide_buffer::<name>``; returns its overload
    (the same object as ``torch.ops.halide_buffer.<name>.default``).

    ``name`` defaults to ``pipeline.name``. The op's schema is the pipeline's inputs in its order
    (``Tensor`` for an input buffer, ``int``, ``float`` or ``bool`` for a scalar), every one
    required; it returns the outputs, each a new contiguous tensor on the inputs' device, of the
    pipeline's dtype, sized as a call of the pipeline sizes an output it is not given
    (``Pipeline.output_regions()``: the region the pipeline fixes, else the largest region whose
    required input regions lie within the inputs), or by ``output_shapes``: a function called
    with the op's arguments (a shape for each tensor, the value of each scalar) returning each
    output's shape (one shape for one output), the output then placed at 0 in Halide's
    coordinates. Inputs whose last axis is not dense are made contiguous first (Halide pipelines
    take dimension 0, NumPy's and torch's last axis, with stride 1).

    ``backward``: the pipeline of the gradients (HelloPyTorch's convention): its inputs are any of
    this pipeline's inputs, by name, and ``d_<output>`` for the outputs' gradients; its outputs
    are ``d_<input>`` for the input buffers that get a gradient, each of its input's dtype and
    axes. It becomes the op's autograd formula (``torch.library.register_autograd``), so
    ``loss.backward()``, ``torch.autograd.gradcheck`` and ``torch.compile`` of a training step
    work; the inputs it gives no gradient get none. Without it, a tensor that requires grad
    raises ``RuntimeError`` while grad mode is on. Tensors on a device the pipeline cannot compute
    on raise ``ValueError``, the wrong dtype ``TypeError``; a backward breaking the convention
    ``ValueError`` here, naming the argument.

    Registering the same pipeline (same library, function, backward and output_shapes) under the
    same name again returns the op registered first; anything else under a name taken raises
    ``ValueError``.
    """
    if not isinstance(pipeline, Pipeline):
        raise TypeError(f"{_ENTRY}: pipeline must be a halide_buffer.aot.Pipeline (from hb.aot.load()), not "
                        f"{type(pipeline).__name__}; pass hb.aot.load(library_path, function_name)")
    if backward is not None and not isinstance(backward, Pipeline):
        raise TypeError(f"{_ENTRY}: backward must be a halide_buffer.aot.Pipeline (the gradients' pipeline, from "
                        f"hb.aot.load()), not {type(backward).__name__}; pass hb.aot.load(library_path, "
                        f"function_name) or leave it out")
    if output_shapes is not None and not callable(output_shapes):
        raise TypeError(f"{_ENTRY}: output_shapes must be a function of the op's arguments returning each "
                        f"output's shape, not {type(output_shapes).__name__}; pass e.g. "
                        f"output_shapes=lambda inp: inp")
    if name is None:
        name = pipeline.name
    if not isinstance(name, str) or not name.isidentifier() or not name.isascii():
        raise ValueError(f"{_ENTRY}: the op name {name!r} is not an identifier; pass a name of letters, digits "
                         f"and '_' (the op becomes halide_buffer::<name>)")
    with _lock:
        registered = _ops.get(name)
        if registered is not None:
            if registered.same(pipeline, backward, output_shapes):
                return registered.overload
            raise ValueError(f"{_ENTRY}: halide_buffer::{name} is already the op of {registered.describe()}; pass "
                             f"another name (name='...') for {_described(pipeline, backward, output_shapes)}")
        registered = _Op(pipeline, name, backward, output_shapes)
        _ops[name] = registered
        return registered.overload


def _described(pipeline: Pipeline, backward: Pipeline | None, output_shapes: Any) -> str:
    """A pipeline, its backward and its output_shapes, for a message."""
    text = f"{pipeline.name} of {pipeline.library_path}"
    if backward is not None:
        text += f" with the backward {backward.name} of {backward.library_path}"
    if output_shapes is not None:
        text += f" with output_shapes={getattr(output_shapes, '__qualname__', output_shapes)!s}"
    return text


class _Op:
    """One registered op: the pipeline, the layout of its arguments, its two kernels, and its
    gradient when it has one."""

    def __init__(self, pipeline: Pipeline, name: str, backward: Pipeline | None = None,
                 output_shapes: Callable[..., Any] | None = None) -> None:
        self.pipeline = pipeline
        self.name = name
        self.backward = backward
        self.output_shapes = output_shapes
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
        self.inputs = inputs
        # (position in the op's arguments, name, torch dtype, axes) of each input buffer;
        # (position, name) of each scalar; (name, torch dtype, axes) of each output.
        self.buffers = [(i, a["name"], _torch_dtype(pipeline, a), a["dimensions"])
                        for i, a in enumerate(inputs) if a["kind"] == "input_buffer"]
        self.scalars = [(i, a["name"]) for i, a in enumerate(inputs) if a["kind"] == "input_scalar"]
        self.outputs = [(a["name"], _torch_dtype(pipeline, a), a["dimensions"]) for a in outputs]
        self.is_buffer = [a["kind"] == "input_buffer" for a in inputs]
        self.on_host = pipeline.device_api != "cuda"  # host and OpenCL pipelines take CPU tensors
        self.regions = functools.lru_cache(maxsize=_SIZES_CACHED)(self._ask_regions)
        gradient = _Gradient(self, backward) if backward is not None else None  # checked before registering
        self.library, self.overload = self._register()
        if gradient is not None:
            gradient.register(self.library)

    def same(self, pipeline: Pipeline, backward: Pipeline | None, output_shapes: Any) -> bool:
        return (_same_pipeline(pipeline, self.pipeline) and _same_function(output_shapes, self.output_shapes)
                and (backward is None) == (self.backward is None)
                and (backward is None or _same_pipeline(backward, self.backward)))

    def describe(self) -> str:
        return _described(self.pipeline, self.backward, self.output_shapes)

    # -- registration ---------------------------------------------------------------------------

    def schema_parameters(self) -> str:
        """The op's parameters in a schema: its inputs in the pipeline's order."""
        return ", ".join(f"{'Tensor' if a['kind'] == 'input_buffer' else _SCALAR_SCHEMA[a['dtype']]} {a['name']}"
                         for a in self.inputs)

    def _register(self) -> tuple[torch.library.Library, torch._ops.OpOverload]:
        library = torch.library.Library(_NAMESPACE, "FRAGMENT")
        _define(library, f"{self.name}({self.schema_parameters()}) -> {_returns(len(self.outputs))}", self.describe())
        # One kernel for every backend, so that a tensor on a device the pipeline cannot reach gets
        # our error naming the argument, not the dispatcher's "could not run ... with arguments
        # from the 'CUDA' backend". Its autograd formula, when it has one, is _Gradient's; else
        # _check() refuses inputs that require grad while grad mode is on (the forward of an
        # autograd formula runs with grad mode off).
        library.impl(self.name, self._run, "CompositeExplicitAutograd")
        # The fake kernel serves FakeTensorMode (torch.compile, opcheck) and meta tensors.
        torch.library.register_fake(f"{_NAMESPACE}::{self.name}", self._fake, lib=library)
        return library, getattr(getattr(torch.ops, _NAMESPACE), self.name).default

    # -- the kernels ----------------------------------------------------------------------------

    def _run(self, *args: Any) -> Any:
        """The real kernel: outputs allocated by torch on the inputs' device, then the call."""
        device, shapes, mins = self.checked_sizes(args)
        outs = [torch.empty(shape, dtype=dtype, device=device)
                for shape, (_, dtype, _) in zip(shapes, self.outputs)]
        call = [_passable(t) if is_buffer else t for t, is_buffer in zip(args, self.is_buffer)]
        _call(self.pipeline, device, call, {}, outs, mins)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def checked_sizes(self, args: Sequence[Any]) -> tuple[torch.device, list[Any], list[tuple[int, ...]] | None]:
        """(device, output shapes, output mins or None) of a real call on the op's inputs `args`,
        after _check()'s checks. A host pipeline sized by the rule does them in one pass, at the
        cost of a few attribute reads per tensor: any doubt goes to _check(), which raises naming
        the argument."""
        if self.on_host and self.output_shapes is None:
            grad = torch.is_grad_enabled()
            key = list(args)
            for i, _, dtype, ndim in self.buffers:
                t = args[i]
                if t.dtype != dtype or t.dim() != ndim or not t.is_cpu or (grad and t.requires_grad):
                    self._check(args, fake=False)
                key[i] = t.shape
            shapes, mins = self.regions(tuple(key))
            return _CPU, shapes, mins
        device = self._check(args, fake=False)
        shapes, mins = self.sizes(args, fake=False)
        return device, shapes, mins

    def _fake(self, *args: Any) -> Any:
        """The fake kernel: the same checks and the same sizes (the bounds queries' on sizes made
        concrete: symbolic sizes are specialized, Halide answers about numbers; output_shapes' on
        the sizes as they are)."""
        device = self._check(args, fake=True)
        shapes, _ = self.sizes(args, fake=True)
        outs = [torch.empty(shape, dtype=dtype, device=device) for shape, (_, dtype, _) in zip(shapes, self.outputs)]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def sizes(self, args: Sequence[Any], fake: bool) -> tuple[list[Any], list[tuple[int, ...]] | None]:
        """(shape of each output, mins of each output or None when all are 0) for the op's
        arguments."""
        if self.output_shapes is not None:
            return self._given_shapes(args, fake), None
        return self.regions(self._key(args, fake))

    def _key(self, args: Sequence[Any], fake: bool) -> tuple[Any, ...]:
        """What the output regions depend on: every input's shape, every scalar's value."""
        if fake:
            return tuple(tuple(_concrete(n) for n in a.shape) if is_buffer else _concrete(a)
                         for a, is_buffer in zip(args, self.is_buffer))
        return tuple(a.shape if is_buffer else a for a, is_buffer in zip(args, self.is_buffer))

    def _check(self, args: Sequence[Any], fake: bool) -> torch.device:
        """The device of the call, after checking each input tensor's dtype, axes, grad and device."""
        grad = torch.is_grad_enabled()
        device = None
        first = None
        for i, name, dtype, ndim in self.buffers:
            t = args[i]
            _check_tensor(self.entry, name, t, dtype, ndim)
            if grad and t.requires_grad:
                raise RuntimeError(f"{self.entry}: argument '{name}' requires grad, and the op has no backward; "
                                   f"pass {name}.detach(), or make the op with its gradients' pipeline: "
                                   f"hb.torch.op(pipeline, backward=gradient_pipeline)")
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
            raise ValueError(f"{self.entry}: {what}; size the outputs yourself: hb.torch.op(pipeline, "
                             f"output_shapes=...) with a function of the inputs' shapes and the scalars returning "
                             f"each output's shape; or call the pipeline itself with an output tensor") from e
        mins = [regions[name][0] for name, _, _ in self.outputs]
        shapes = [regions[name][1] for name, _, _ in self.outputs]
        placed = None if all(not any(m) for m in mins) else mins
        return shapes, placed

    def _given_shapes(self, args: Sequence[Any], fake: bool) -> list[Any]:
        """output_shapes' answer for these arguments, checked: one shape per output, of its axes,
        no negative extent (what a symbolic size will be is torch's to check)."""
        got = self.output_shapes(*(a.shape if is_buffer else a for a, is_buffer in zip(args, self.is_buffer)))
        shapes = [got] if len(self.outputs) == 1 and _is_shape(got) else got
        if not isinstance(shapes, (list, tuple)) or len(shapes) != len(self.outputs):
            count = len(shapes) if isinstance(shapes, (list, tuple)) else type(got).__name__
            raise ValueError(f"{self.entry}: output_shapes returned {got!r} ({count} shapes) for "
                             f"{len(self.outputs)} output(s) ({', '.join(n for n, _, _ in self.outputs)}); return one "
                             f"shape per output, in the pipeline's order")
        out = []
        for shape, (name, _, ndim) in zip(shapes, self.outputs):
            if not _is_shape(shape) or len(shape) != ndim:
                raise ValueError(f"{self.entry}: output_shapes gave output '{name}' the shape {shape!r}, where the "
                                 f"pipeline writes {ndim} axes; return a tuple of {ndim} ints for it")
            if any(isinstance(n, int) and n < 0 for n in shape):
                raise ValueError(f"{self.entry}: output_shapes gave output '{name}' the shape {tuple(shape)!r}, with "
                                 f"a negative extent; return extents of 0 or more")
            out.append(tuple(shape))
        return out


class _Gradient:
    """The gradient of an op: its backward pipeline as the op ``<name>_backward`` (the forward's
    inputs and each d_<output> in, each d_<input> out), registered as the op's autograd formula."""

    def __init__(self, forward: _Op, pipeline: Pipeline) -> None:
        self.forward = forward
        self.pipeline = pipeline
        self.name = f"{forward.name}_backward"
        self.entry = f"{_NAMESPACE}::{self.name}()"
        where = f"{_ENTRY}: backward {pipeline.name}"
        if pipeline.device_api != forward.pipeline.device_api:
            raise ValueError(f"{where} computes with {pipeline.device_api or 'the host'}, {forward.pipeline.name} "
                             f"with {forward.pipeline.device_api or 'the host'}; pass a backward built for the "
                             f"forward's target")
        inputs = {a["name"]: a for a in forward.inputs}
        outputs = {_GRADIENT + name: (name, dtype, ndim) for name, dtype, ndim in forward.outputs}
        arguments = pipeline.arguments
        # (argument name, forward input position) of what it takes of the forward's inputs; the
        # d_<output>s it takes, by output position; (forward input position, name) of what it gives.
        self.takes: list[tuple[str, int]] = []
        self.gradients_in: list[int | None] = [None] * len(forward.outputs)
        self.gives: list[tuple[int, str]] = []
        positions = {a["name"]: i for i, a in enumerate(forward.inputs)}
        output_names = [n for n, _, _ in forward.outputs]
        for a in arguments:
            if a["kind"] == "output_buffer":
                self._check_gives(where, a, inputs, positions)
            elif a["name"] in outputs:
                _, dtype, ndim = outputs[a["name"]]
                if a["kind"] != "input_buffer" or _torch_dtype(pipeline, a) != dtype or a["dimensions"] != ndim:
                    raise ValueError(f"{where} takes '{a['name']}' as {_kind_text(a)}, where the gradient of output "
                                     f"'{outputs[a['name']][0]}' is a {dtype} tensor of {ndim} axes; pass a backward "
                                     f"taking it so")
                self.gradients_in[output_names.index(outputs[a["name"]][0])] = len(self.takes)
                self.takes.append((a["name"], -1))
            elif a["name"] in inputs:
                f = inputs[a["name"]]
                if (a["kind"], a["dtype"], a["dimensions"]) != (f["kind"], f["dtype"], f["dimensions"]):
                    raise ValueError(f"{where} takes '{a['name']}' as {_kind_text(a)}, where {forward.pipeline.name} "
                                     f"takes it as {_kind_text(f)}; pass a backward taking the forward's inputs as "
                                     f"they are")
                self.takes.append((a["name"], positions[a["name"]]))
            else:
                raise ValueError(f"{where} takes '{a['name']}', which is neither an input of "
                                 f"{forward.pipeline.name} ({', '.join(inputs) or 'none'}) nor the gradient of one of "
                                 f"its outputs ({', '.join(outputs)}); name its inputs as HelloPyTorch's gradient "
                                 f"generators do")
        if all(g is None for g in self.gradients_in):
            raise ValueError(f"{where} takes no output's gradient ({', '.join(outputs)}); pass the pipeline of the "
                             f"gradients, taking d_<output> for the outputs of {forward.pipeline.name}")
        if not self.gives:
            raise ValueError(f"{where} gives no gradient (an output d_<input> for an input of "
                             f"{forward.pipeline.name}); pass the pipeline of the gradients")
        # For each of the backward's inputs in its own order: (forward input position, -1) for one
        # of the forward's inputs, (-1, output index) for the gradient of an output.
        self.order = [(position, -1) if position >= 0 else (-1, self.gradients_in.index(j))
                      for j, (_, position) in enumerate(self.takes)]
        self.outputs_last = all(a["kind"] == "output_buffer" for a in arguments[len(self.takes):])
        self.overload: torch._ops.OpOverload | None = None
        self.forward_tensors = [i for i, _, _, _ in forward.buffers]
        self.forward_scalars = [i for i, _ in forward.scalars]

    def _check_gives(self, where: str, a: dict[str, Any], inputs: dict[str, dict[str, Any]],
                     positions: dict[str, int]) -> None:
        """A backward output: d_<input> for an input buffer of the forward, of its dtype and axes."""
        name = a["name"].removeprefix(_GRADIENT) if a["name"].startswith(_GRADIENT) else None
        f = inputs.get(name) if name else None
        if f is None or f["kind"] != "input_buffer":
            buffers = ", ".join(_GRADIENT + n for n, x in inputs.items() if x["kind"] == "input_buffer")
            raise ValueError(f"{where} gives '{a['name']}', which names no input buffer of "
                             f"{self.forward.pipeline.name}; name each output d_<input> ({buffers or 'none'})")
        if (a["dtype"], a["dimensions"]) != (f["dtype"], f["dimensions"]):
            raise ValueError(f"{where} gives '{a['name']}' as {_kind_text(a)}, where its input '{name}' is "
                             f"{_kind_text(f)}; a gradient has its input's dtype and axes")
        self.gives.append((positions[name], a["name"]))

    def register(self, library: torch.library.Library) -> None:
        forward = self.forward
        params = forward.schema_parameters()
        grads = ", ".join(f"Tensor {_GRADIENT}{n}" for n, _, _ in forward.outputs)
        _define(library, f"{self.name}({params}{', ' if params else ''}{grads}) -> {_returns(len(self.gives))}",
                f"the backward {self.pipeline.name} of {self.pipeline.library_path}")
        library.impl(self.name, self._run, "CompositeExplicitAutograd")
        torch.library.register_fake(f"{_NAMESPACE}::{self.name}", self._fake, lib=library)
        self.overload = getattr(getattr(torch.ops, _NAMESPACE), self.name).default
        torch.library.register_autograd(f"{_NAMESPACE}::{forward.name}", self._backward,
                                        setup_context=self._setup_context, lib=library)

    # -- autograd -------------------------------------------------------------------------------

    def _setup_context(self, ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        """What the backward needs: the forward's inputs (tensors saved, scalars kept)."""
        ctx.save_for_backward(*(inputs[i] for i in self.forward_tensors))
        ctx.scalars = [inputs[i] for i in self.forward_scalars] if self.forward_scalars else ()

    def _backward(self, ctx: Any, *grads: Any) -> tuple[Any, ...]:
        """The gradients of the forward's inputs (None for those the backward gives none). Every
        output's gradient is a tensor: autograd materializes an unused output's as zeros."""
        forward = self.forward
        args: list[Any] = [None] * len(forward.inputs)
        for i, t in zip(self.forward_tensors, ctx.saved_tensors):
            args[i] = t
        for i, v in zip(self.forward_scalars, ctx.scalars):
            args[i] = v
        got = self.overload(*args, *grads)
        got = got if isinstance(got, tuple) else (got,)
        out: list[Any] = [None] * len(forward.inputs)
        for (i, _), g in zip(self.gives, got):
            out[i] = g
        return tuple(out)

    # -- the kernels ----------------------------------------------------------------------------

    def _split(self, args: tuple[Any, ...], fake: bool) -> tuple[torch.device, list[Any], list[Any]]:
        """The device, the forward's inputs and the outputs' gradients of a call, checked."""
        forward = self.forward
        n = len(forward.inputs)
        inputs, grads = list(args[:n]), list(args[n:])
        device = forward._check(inputs, fake)
        for g, (name, dtype, ndim) in zip(grads, forward.outputs):
            self._check_gradient(g, name, dtype, ndim, device)
        return device, inputs, grads

    def _check_gradient(self, g: Any, name: str, dtype: torch.dtype, ndim: int, device: torch.device) -> None:
        """An output's gradient: a tensor of the output's dtype and axes, on the inputs' device."""
        _check_tensor(self.entry, _GRADIENT + name, g, dtype, ndim)
        if g.device != device:
            raise ValueError(f"{self.entry}: argument '{_GRADIENT}{name}' is on {g.device}, the inputs on "
                             f"{device}; pass tensors on one device")

    def _run(self, *args: Any) -> Any:
        forward = self.forward
        n = len(forward.inputs)
        inputs, grads = args[:n], args[n:]
        device, shapes, mins = forward.checked_sizes(inputs)
        for g, (name, dtype, ndim), shape in zip(grads, forward.outputs, shapes):
            if g.dtype != dtype or g.dim() != ndim or g.device != device:
                self._check_gradient(g, name, dtype, ndim, device)
            if g.shape != shape:
                raise ValueError(f"{self.entry}: the gradient of output '{name}' has the shape {tuple(g.shape)}, "
                                 f"the output {tuple(shape)}; pass a gradient of the output's shape")
        outs = [torch.empty(inputs[i].shape, dtype=inputs[i].dtype, device=device) for i, _ in self.gives]
        if mins is None and self.outputs_last:
            # Every argument at its place: the backward's inputs in its own order, then its outputs.
            call = [_passable(grads[k]) if k >= 0 else self.forward_input(inputs, i) for i, k in self.order]
            _call(self.pipeline, device, call, {}, outs, None)
        else:
            named: dict[str, Any] = {}
            for (name, _), (i, k) in zip(self.takes, self.order):
                if k >= 0:
                    named[name] = (_passable(grads[k]), mins[k] if mins else None)
                else:
                    named[name] = self.forward_input(inputs, i)
            _call(self.pipeline, device, [], named, outs, None, [name for _, name in self.gives])
        return outs[0] if len(outs) == 1 else tuple(outs)

    def forward_input(self, inputs: Sequence[Any], i: int) -> Any:
        """The forward's input `i` as the backward takes it."""
        return _passable(inputs[i]) if self.forward.is_buffer[i] else inputs[i]

    def _fake(self, *args: Any) -> Any:
        device, inputs, _ = self._split(args, fake=True)
        outs = [torch.empty(inputs[i].shape, dtype=inputs[i].dtype, device=device) for i, _ in self.gives]
        return outs[0] if len(outs) == 1 else tuple(outs)


# -- calls --------------------------------------------------------------------------------------


def _call(pipeline: Pipeline, device: torch.device, positional: list[Any], named: dict[str, Any],
          outs: list[torch.Tensor], mins: list[tuple[int, ...]] | None, out_names: list[str] | None = None) -> None:
    """Calls the pipeline: `positional` arguments, then `named` ones (a tensor placed at mins
    given as (tensor, mins)), then the outputs `outs` (by position, or by `out_names`) placed at
    `mins`. On a CUDA stream other than the default, every tensor goes as a Buffer of a device
    of that stream; an OpenCL output placed at mins comes home into its tensor."""
    if mins is None and not named and device.type != "cuda":
        pipeline(*positional, *outs)  # nothing to wrap or place
        return
    on = _current_stream_device(device) if device.type == "cuda" else None
    call = [_wrapped(a, on) for a in positional]
    kwargs = {}
    for name, value in named.items():
        if isinstance(value, tuple):
            tensor, at = value
            kwargs[name] = _placed(_wrapped(tensor, on), at) if at is not None else _wrapped(tensor, on)
        else:
            kwargs[name] = _wrapped(value, on)
    given = [_wrapped(t, on) for t in outs]
    if mins is not None:
        given = [_placed(t, m) for t, m in zip(given, mins)]
    if out_names is None:
        pipeline(*call, *given, **kwargs)
    else:
        pipeline(*call, **kwargs, **dict(zip(out_names, given)))
    if mins is not None and device.type == "cpu":
        for b in given:  # an OpenCL pipeline's output comes home into the tensor's memory
            b.copy_to_host()


def _passable(t: torch.Tensor) -> torch.Tensor:
    """A tensor as a pipeline takes it. Halide pipelines take dimension 0 (the last axis) with
    stride 1 unless told otherwise (the rule is the core's, asked here: _innermost_steps_one), and
    a tensor made of broadcasts or a step slice has another: as torch ops do, they compute on a
    dense copy. A contiguous tensor meets the rule without asking. With grad mode off (_check let
    it through) no graph is recorded: the pipeline reads the data, which a tensor that requires
    grad exports only detached."""
    if not t.is_contiguous() and not _innermost_steps_one(t.shape, t.stride()):
        t = t.contiguous()
    return t.detach() if t.requires_grad else t


def _current_stream_device(device: torch.device) -> Any:
    """The halide_buffer CUDA device of torch's current stream on `device`, or None on the default
    stream (the legacy default stream, which halide_buffer's default CUDA device uses too): on
    another, the tensors go wrapped on a device of that stream, so the pipeline runs ordered after
    what torch queued there, and what torch queues next sees its results."""
    stream = torch.cuda.current_stream(device)
    if stream.cuda_stream == 0:
        return None
    return _cuda.device(device.index, stream=stream)


def _wrapped(value: Any, on: Any) -> Any:
    return from_dlpack(value, device=on) if on is not None and isinstance(value, torch.Tensor) else value


def _placed(t: Any, mins: tuple[int, ...]) -> Any:
    """A tensor at the coordinates the pipeline uses: a tensor's indices start at 0, Halide's
    region at its mins, so the tensor goes as a Buffer of its memory placed there."""
    b = from_dlpack(t) if isinstance(t, torch.Tensor) else t
    if any(mins):
        b.set_min(*mins)
    return b


# -- small rules --------------------------------------------------------------------------------


def _same_pipeline(a: Pipeline, b: Pipeline) -> bool:
    """One pipeline: the same library file and function (not only the same names)."""
    return (a.library_path, a.name) == (b.library_path, b.name)


def _same_function(a: Any, b: Any) -> bool:
    """One function: the same object, or the same code over the same captured values (a lambda
    written in a function that runs twice)."""
    if a is b:
        return True
    code_a, code_b = getattr(a, "__code__", None), getattr(b, "__code__", None)
    if code_a is None or code_a is not code_b or a.__defaults__ != b.__defaults__:
        return False
    cells_a, cells_b = a.__closure__ or (), b.__closure__ or ()
    return all(x.cell_contents is y.cell_contents for x, y in zip(cells_a, cells_b))


def _define(library: torch.library.Library, schema: str, what: str) -> None:
    try:
        library.define(schema)
    except RuntimeError as e:
        raise ValueError(f"{_ENTRY}: torch refuses the schema {schema!r} made from {what} "
                         f"({str(e).splitlines()[0]}); pass another name, or rename the pipeline's arguments "
                         f"(a torch schema cannot use names such as 'in')") from e


def _returns(n: int) -> str:
    return "Tensor" if n == 1 else "(" + ", ".join(["Tensor"] * n) + ")"


def _check_tensor(entry: str, name: str, t: Any, dtype: torch.dtype, ndim: int) -> None:
    """TypeError or ValueError naming the argument unless `t` is a tensor of `dtype` and `ndim` axes."""
    if t.dtype != dtype:
        raise TypeError(f"{entry}: argument '{name}' is a {t.dtype} tensor where the pipeline takes "
                        f"{dtype}; pass {name}.to({dtype})")
    if t.dim() != ndim:
        raise ValueError(f"{entry}: argument '{name}': {t.dim()} axes where the pipeline takes "
                         f"{ndim}; pass a tensor of {ndim} axes")


def _kind_text(a: dict[str, Any]) -> str:
    if a["kind"] == "input_scalar":
        return f"a {a['dtype']} scalar"
    return f"a {a['dtype']} buffer of {a['dimensions']} axes"


def _is_shape(v: Any) -> bool:
    return isinstance(v, (tuple, list, torch.Size)) and all(isinstance(n, (int, torch.SymInt)) for n in v)


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
