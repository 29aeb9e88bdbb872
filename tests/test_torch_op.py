"""hb.torch.op: a Halide AOT pipeline as a PyTorch custom op (torch.library).

Every pipeline is generated with the ``halide`` wheel and loaded with ``hb.aot.load`` (see
tests/pipelines.py). The op's results are compared bit for bit with PyTorch computing the same
arithmetic on the same tensors; its outputs are sized by Halide's bounds query, which is also its
fake kernel, so torch.compile traces it without a graph break and opcheck passes.

Without a GPU, the device checks run on fake CUDA tensors (FakeTensorMode makes them on any
machine) and on CPU tensors for a CUDA pipeline; the test at the end, skipped here, computes on
CUDA tensors where tests/gpu/run_checks.sh runs it.
"""

import re
import subprocess
import sys
import textwrap

import halide as hl  # required test dependency: the test fails, not skips, without it
import numpy as np
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import halide_buffer as hb
import halide_buffer.torch as hbt

from pipelines import (OPENCL_TARGET, TARGET, brighter_func, brighter_opencl_func, c_compiler, compile_and_load,
                       output_bounds_follow, random_bf16, random_u8)

pytestmark = [pytest.mark.needs_torch, pytest.mark.needs_halide]

# Float pipelines are compiled strict: Halide otherwise contracts a * b + c into one fused
# multiply-add (the target has FMA), one rounding where torch rounds twice, and float32 results
# differ from torch's in the last bit (651 of 4096 normal values for x * 3 + 1).
STRICT = TARGET + "-strict_float"

# torch 2.13's inductor imports torch.jit.script_method, which the same release deprecates; the
# suite turns warnings into errors.
INDUCTOR_IMPORT = "ignore:`torch.jit.script_method` is deprecated:DeprecationWarning"


# ---------------------------------------------------------------------------------------------
# Pipelines
# ---------------------------------------------------------------------------------------------


def affine_u8_func():
    """out = inp * 2 + offset on uint8, wrapping as torch's uint8 arithmetic does."""
    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(hl.UInt(8), 2, "inp")
    offset = hl.Param(hl.UInt(8), "offset")
    out = hl.Func("affine_u8")
    out[x, y] = inp[x, y] * hl.u8(2) + offset
    out.vectorize(x, 16, hl.TailStrategy.GuardWithIf)  # any width, an empty one too (docs/aot.md)
    output_bounds_follow(out, inp)
    return out, [inp, offset]


def affine_float_func(kind):
    """out = inp * 3 + 1 in the element type itself, two operations each rounded, as torch
    computes them: bfloat16 arithmetic is Halide's emulation (each operation in float32, rounded to
    bfloat16 to nearest even), as torch's on a CPU; float32 needs the strict_float target, without
    which Halide fuses the two into one FMA, rounded once (see STRICT)."""
    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(kind, 2, "inp")
    out = hl.Func("affine_float")
    out[x, y] = inp[x, y] * hl.cast(kind, 3) + hl.cast(kind, 1)
    out.vectorize(x, 8, hl.TailStrategy.GuardWithIf)
    output_bounds_follow(out, inp)
    return out, [inp]


def sum3_func():
    """out(x, y) = uint16 inp(x) + inp(x + 1) + inp(x + 2): a valid stencil, two columns
    narrower than its input."""
    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(hl.UInt(8), 2, "inp")
    out = hl.Func("sum3")
    out[x, y] = hl.u16(inp[x, y]) + hl.u16(inp[x + 1, y]) + hl.u16(inp[x + 2, y])
    out.output_buffer().dim(0).set_bounds(inp.dim(0).min(), inp.dim(0).extent() - 2)
    out.output_buffer().dim(1).set_bounds(inp.dim(1).min(), inp.dim(1).extent())
    return out, [inp]


def constant_region_func(gpu=False):
    """out(x, y) = inp(x, y) * 2 over the constant region x in [4, 52), y in [3, 23); in 8x8 GPU
    tiles when `gpu`."""
    x, y, xo, yo, xi, yi = (hl.Var(n) for n in ("x", "y", "xo", "yo", "xi", "yi"))
    inp = hl.ImageParam(hl.UInt(8), 2, "inp")
    out = hl.Func("constant_region")
    out[x, y] = inp[x, y] * hl.u8(2)
    if gpu:
        out.gpu_tile(x, y, xo, yo, xi, yi, 8, 8)
    out.output_buffer().dim(0).set_bounds(4, 48)
    out.output_buffer().dim(1).set_bounds(3, 20)
    return out, [inp]


def prefix_func():
    """out(x) = inp(x) + 1 (int32) for x in [0, n): a scalar sizes the output."""
    x = hl.Var("x")
    inp = hl.ImageParam(hl.Int(32), 1, "inp")
    n = hl.Param(hl.Int(32), "n")
    out = hl.Func("prefix")
    out[x] = inp[x] + 1
    out.output_buffer().dim(0).set_bounds(0, n)
    return out, [inp, n]


def ramp_func():
    """out(x, y) = x + y * k (int32) over the constant region 16 x 8: an op with no input tensor."""
    x, y = hl.Var("x"), hl.Var("y")
    k = hl.Param(hl.Int(32), "k")
    out = hl.Func("ramp")
    out[x, y] = x + y * k
    out.output_buffer().dim(0).set_bounds(0, 16)
    out.output_buffer().dim(1).set_bounds(0, 8)
    return out, [k]


def tiled_func():
    """out = inp + 1 vectorized by 16, its bounds not fixed: it computes whatever it is asked for."""
    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(hl.UInt(8), 2, "inp")
    out = hl.Func("tiled")
    out[x, y] = inp[x, y] + hl.u8(1)
    out.vectorize(x, 16)
    return out, [inp]


def split_pipeline():
    """Two outputs of two types: low = inp & 15 (uint8), centred = int16(inp) - 128."""
    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(hl.UInt(8), 2, "inp")
    low, centred = hl.Func("low"), hl.Func("centred")
    low[x, y] = inp[x, y] & hl.u8(15)
    centred[x, y] = hl.i16(inp[x, y]) - hl.i16(128)
    output_bounds_follow(low, inp)
    output_bounds_follow(centred, inp)
    return hl.Pipeline([low, centred]), [inp]


def add_func():
    """out = a + b on uint8, sized like a."""
    x, y = hl.Var("x"), hl.Var("y")
    a, b = hl.ImageParam(hl.UInt(8), 2, "a"), hl.ImageParam(hl.UInt(8), 2, "b")
    out = hl.Func("add")
    out[x, y] = a[x, y] + b[x, y]
    output_bounds_follow(out, a)
    return out, [a, b]


def brighter_cuda_func():
    """brighter_func (in + 10 in 8x8 GPU tiles), sized like its input."""
    out, args = brighter_func()
    output_bounds_follow(out, args[0])
    return out, args


@pytest.fixture(scope="module")
def pipes(tmp_path_factory):
    directory = tmp_path_factory.mktemp("torch_op_pipelines")
    cc = c_compiler()
    built = {}
    for key, (func, args), target in [
        ("affine_u8", affine_u8_func(), TARGET),
        ("affine_f32", affine_float_func(hl.Float(32)), STRICT),
        ("affine_bf16", affine_float_func(hl.BFloat(16)), STRICT),
        ("sum3", sum3_func(), TARGET),
        ("constant_region", constant_region_func(), TARGET),
        ("constant_region_opencl", constant_region_func(gpu=True), OPENCL_TARGET),
        ("prefix", prefix_func(), TARGET),
        ("ramp", ramp_func(), TARGET),
        ("tiled", tiled_func(), TARGET),
        ("split", split_pipeline(), TARGET),
        ("add", add_func(), TARGET),
        ("brighter_opencl", brighter_opencl_func(), OPENCL_TARGET),
        ("brighter_cuda", brighter_cuda_func(), TARGET + "-cuda"),
    ]:
        built[key] = compile_and_load(directory, cc, func, args, f"hb_torch_{key}", target=target)
    return built


@pytest.fixture(scope="module")
def ops(pipes):
    """Each pipeline as an op, under its own name (halide_buffer::hb_torch_<key>)."""
    return {key: hbt.op(p) for key, p in pipes.items()}


def u8(shape, seed):
    return torch.from_numpy(random_u8(np.random.default_rng(seed), shape))


def bf16(shape, seed):
    """Finite bfloat16 values of both signs over 40 binades, every mantissa pattern, zeros."""
    bits = random_bf16(np.random.default_rng(seed), shape).view(np.uint16).astype(np.int16)
    return torch.from_numpy(bits).view(torch.bfloat16)


BITS = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def same_bits(got, expected):
    """Bit-for-bit equality: floats compared as their bits (no NaN or -0 leniency)."""
    assert got.dtype == expected.dtype and got.shape == expected.shape
    if got.is_floating_point():
        got, expected = (t.contiguous().view(BITS[t.element_size()]) for t in (got, expected))
    assert torch.equal(got, expected)


# ---------------------------------------------------------------------------------------------
# Eager: results and sizes
# ---------------------------------------------------------------------------------------------


def test_the_op_is_registered_under_the_pipelines_name(pipes, ops):
    f = ops["affine_u8"]
    assert f is torch.ops.halide_buffer.hb_torch_affine_u8.default
    assert str(f._schema) == "halide_buffer::hb_torch_affine_u8(Tensor inp, int offset) -> Tensor"
    assert str(ops["split"]._schema) == "halide_buffer::hb_torch_split(Tensor inp) -> (Tensor, Tensor)"


def test_uint8_equals_torchs_arithmetic_by_position_and_name(ops):
    t = u8((37, 45), 1)
    expected = t * 2 + 200  # uint8 wraps modulo 256 in both
    same_bits(ops["affine_u8"](t, 200), expected)
    same_bits(ops["affine_u8"](inp=t, offset=200), expected)
    same_bits(torch.ops.halide_buffer.hb_torch_affine_u8(t, offset=200), expected)


def test_float32_equals_torchs_arithmetic(ops):
    t = torch.from_numpy(np.random.default_rng(2).standard_normal((19, 33)).astype(np.float32)) * 1e3
    same_bits(ops["affine_f32"](t), t * 3 + 1)


def test_bfloat16_equals_torchs_arithmetic_bit_for_bit(ops):
    """torch computes bfloat16 * 3 + 1 on a CPU as two operations, each in float32 rounded to
    bfloat16 (to nearest, ties to even); Halide's bfloat16 emulation rounds the same way. (A
    pipeline rounding once, bfloat16(float(inp) * 3 + 1), differs in 362 of 4096 such values.)"""
    t = bf16((41, 29), 3)
    same_bits(ops["affine_bf16"](t), t * 3 + 1)


def test_outputs_are_new_tensors_on_the_inputs_device(ops):
    t = u8((8, 16), 4)
    out = ops["affine_u8"](t, 1)
    assert out.device == t.device and out.is_contiguous() and out.data_ptr() != t.data_ptr()
    assert not out.requires_grad


def test_an_output_narrower_than_its_input_is_sized_by_the_bounds_query(ops):
    t = u8((6, 11), 5)
    got = ops["sum3"](t)
    assert got.shape == (6, 9) and got.dtype == torch.uint16
    wide = t.to(torch.int32)
    same_bits(got, (wide[:, :-2] + wide[:, 1:-1] + wide[:, 2:]).to(torch.uint16))
    # An input one column wide: the output's extent is -1, an empty output (nothing runs).
    assert ops["sum3"](t[:, :1]).shape == (6, 0)


def test_an_output_at_other_coordinates_comes_back_indexed_from_zero(ops):
    """The pipeline writes x in [4, 52), y in [3, 23): the tensor holds that region at [0, 48)."""
    t = u8((30, 60), 6)
    got = ops["constant_region"](t)
    assert got.shape == (20, 48)
    same_bits(got, t[3:23, 4:52] * 2)


def test_an_opencl_output_at_other_coordinates_comes_home_into_the_tensor(ops):
    t = u8((30, 60), 14)
    same_bits(ops["constant_region_opencl"](t), t[3:23, 4:52] * 2)


def test_a_scalar_that_sizes_the_output_is_asked_about_every_time(ops):
    t = torch.arange(10, dtype=torch.int32)
    assert torch.equal(ops["prefix"](t, 3), t[:3] + 1)
    assert torch.equal(ops["prefix"](t, 7), t[:7] + 1)  # same input shape, another scalar
    assert torch.equal(ops["prefix"](t, 3), t[:3] + 1)


def test_an_op_of_scalars_alone_allocates_on_the_cpu(ops):
    """No input tensor names a device: a host pipeline's outputs go to the CPU."""
    got = ops["ramp"](3)
    assert got.device == torch.device("cpu") and got.shape == (8, 16) and got.dtype == torch.int32
    same_bits(got, torch.arange(16, dtype=torch.int32)[None, :] + 3 * torch.arange(8, dtype=torch.int32)[:, None])
    torch.library.opcheck(ops["ramp"], (3,))  # the fake kernel too: a CPU output of the same shape
    with FakeTensorMode():
        fake = ops["ramp"](3)
    assert fake.device == torch.device("cpu") and fake.shape == (8, 16)


def test_two_outputs_come_back_as_a_tuple(ops):
    t = u8((5, 9), 7)
    low, centred = ops["split"](t)
    same_bits(low, t & 15)
    same_bits(centred, t.to(torch.int16) - 128)


def test_an_empty_input_gives_an_empty_output(ops):
    got = ops["affine_u8"](torch.zeros((0, 7), dtype=torch.uint8), 1)
    assert got.shape == (0, 7) and got.dtype == torch.uint8


def test_an_opencl_pipeline_takes_cpu_tensors(ops):
    """It computes on the OpenCL device (PoCL here); its output comes home into the tensor."""
    t = u8((24, 40), 8)
    same_bits(ops["brighter_opencl"](t), t + 10)


def test_a_pipeline_that_does_not_fix_its_output_size_gets_the_largest_region_within_its_input(ops):
    """tiled (vectorized by 16, no bounds set): any region at least 16 wide reads only itself."""
    t = u8((8, 32), 9)
    same_bits(ops["tiled"](t), t + 1)
    with pytest.raises(ValueError, match=r"^halide_buffer::hb_torch_tiled\(\): output 'tiled[^']*': no region of it "
                                         r"lies within the inputs .*; size the outputs yourself: hb\.torch\.op\("
                                         r"pipeline, output_shapes=\.\.\.\)"):
        ops["tiled"](u8((8, 10), 9))  # narrower than one vector


def test_a_pipeline_error_keeps_its_type_through_the_dispatcher(ops):
    """constant_region reads x up to 51: a narrower input is Halide's error, not a crash."""
    with pytest.raises(hb.PipelineError, match="hb_torch_constant_region"):
        ops["constant_region"](u8((30, 10), 10))


# ---------------------------------------------------------------------------------------------
# Strides
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("view", [
    lambda t: t.t(),                                 # transposed: last-axis stride 40
    lambda t: t[:, ::2],                             # step slice: last-axis stride 2
    lambda t: t[:, :1].expand(40, 7),                # broadcast along the last axis: stride 0
], ids=["transposed", "step slice", "last axis broadcast"])
def test_an_input_whose_last_axis_is_not_dense_is_made_dense(ops, view):
    x = view(u8((40, 40), 11))
    assert x.stride(-1) != 1
    same_bits(ops["affine_u8"](x, 3), x * 2 + 3)


@pytest.mark.parametrize("view", [
    lambda t: t[3:30, 5:25],                         # a window: rows of the wider tensor
    lambda t: t[:1].expand(40, 40),                  # broadcast along the first axis: stride 0
    lambda t: t.t()[::2, :1],                        # a one-element last axis of stride 40: it never steps
    lambda t: t.t()[:, :1],                          # the same, a tensor torch calls contiguous
], ids=["window", "first axis broadcast", "one-element last axis of stride 40", "contiguous, last axis of stride 40"])
def test_an_input_whose_last_axis_is_dense_goes_as_it_is(ops, view, monkeypatch):
    x = view(u8((40, 40), 12))
    monkeypatch.setattr(torch.Tensor, "contiguous", lambda self, *a, **k: pytest.fail("copied a dense-last-axis input"))
    same_bits(ops["affine_u8"](x, 5), (x.clone() * 2 + 5))


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------


def test_an_input_that_requires_grad_is_refused_naming_it(ops):
    x = torch.ones((4, 8), dtype=torch.float32, requires_grad=True)
    with pytest.raises(RuntimeError, match=re.escape(
            "halide_buffer::hb_torch_affine_f32(): argument 'inp' requires grad, and the op has no backward; pass "
            "inp.detach(), or make the op with its gradients' pipeline: hb.torch.op(pipeline, "
            "backward=gradient_pipeline)")):
        ops["affine_f32"](x)
    same_bits(ops["affine_f32"](x.detach()), torch.full((4, 8), 4.0))
    with torch.no_grad():  # no graph is recorded: nothing to refuse
        same_bits(ops["affine_f32"](x), torch.full((4, 8), 4.0))


def test_a_backward_registered_by_the_user_is_used(pipes):
    """torch.library.register_autograd on the op (one of its own: registrations last as long as
    the process): the forward runs with grad mode off, so the op computes; opcheck agrees."""
    f = hbt.op(pipes["affine_f32"], name="hb_torch_affine_f32_trained")
    torch.library.register_autograd("halide_buffer::hb_torch_affine_f32_trained", lambda ctx, grad: grad * 3,
                                    setup_context=lambda ctx, inputs, output: None)
    x = torch.linspace(-2, 2, 32).reshape(4, 8).requires_grad_()
    y = f(x)
    same_bits(y.detach(), x.detach() * 3 + 1)
    (y * torch.arange(8.0)).sum().backward()
    same_bits(x.grad, (torch.arange(8.0) * 3).expand(4, 8))
    result = torch.library.opcheck(f, (torch.ones((4, 8), requires_grad=True),))
    assert set(result.values()) == {"SUCCESS"}, result


def test_the_wrong_dtype_or_axes_are_refused_naming_the_argument(ops):
    with pytest.raises(TypeError, match=re.escape(
            "halide_buffer::hb_torch_affine_u8(): argument 'inp' is a torch.float32 tensor where the pipeline takes "
            "torch.uint8; pass inp.to(torch.uint8)")):
        ops["affine_u8"](torch.zeros((4, 4)), 1)
    same_bits(ops["affine_u8"](torch.full((4, 4), 7.0).to(torch.uint8), 1), torch.full((4, 4), 15, dtype=torch.uint8))
    with pytest.raises(ValueError, match=re.escape(
            "halide_buffer::hb_torch_affine_u8(): argument 'inp': 3 axes where the pipeline takes 2; pass a tensor "
            "of 2 axes")):
        ops["affine_u8"](torch.zeros((2, 4, 4), dtype=torch.uint8), 1)


def test_a_scalar_out_of_its_types_range_is_refused_by_the_pipeline(ops):
    with pytest.raises(ValueError, match="offset"):
        ops["affine_u8"](u8((4, 16), 13), 256)


def test_a_tensor_on_a_device_a_host_pipeline_cannot_reach_is_refused(ops):
    """A CUDA tensor (fake: this machine has no GPU) for a host pipeline, in fake mode, which
    runs the same checks as the real kernel."""
    with FakeTensorMode():
        x = torch.empty((4, 16), dtype=torch.uint8, device="cuda")
        with pytest.raises(ValueError, match=re.escape(
                "halide_buffer::hb_torch_affine_u8(): argument 'inp' is on cuda:0, where hb_torch_affine_u8 is a "
                "host pipeline; pass inp.cpu()")):
            ops["affine_u8"](x, 1)
        assert ops["affine_u8"](x.cpu(), 1).device.type == "cpu"


def test_tensors_on_two_devices_are_refused(ops):
    """A CPU tensor beside a meta one: torch picks the meta kernel (the fake one), which refuses."""
    a = torch.empty((4, 16), dtype=torch.uint8, device="meta")
    with pytest.raises(ValueError, match=re.escape(
            "halide_buffer::hb_torch_add(): argument 'b' is on cpu, argument 'a' on meta; pass tensors on one "
            "device")):
        ops["add"](a, torch.zeros((4, 16), dtype=torch.uint8))
    assert ops["add"](a, torch.zeros((4, 16), dtype=torch.uint8, device="meta")).shape == (4, 16)


def test_a_cuda_pipeline_refuses_cpu_tensors(ops):
    with pytest.raises(ValueError, match=re.escape(
            "halide_buffer::hb_torch_brighter_cuda(): argument 'inp' is on cpu, where the pipeline computes with "
            "CUDA; pass inp.cuda()")):
        ops["brighter_cuda"](torch.zeros((24, 40), dtype=torch.uint8))


def test_meta_tensors_get_the_outputs_shapes(ops):
    out = ops["sum3"](torch.empty((6, 11), dtype=torch.uint8, device="meta"))
    assert out.device.type == "meta" and out.shape == (6, 9) and out.dtype == torch.uint16


# ---------------------------------------------------------------------------------------------
# Registration
# ---------------------------------------------------------------------------------------------


def test_registering_the_same_pipeline_again_returns_the_same_op(pipes, ops, tmp_path):
    again = hb.aot.load(pipes["affine_u8"].library_path, pipes["affine_u8"].name)
    assert hbt.op(again) is ops["affine_u8"]
    assert hbt.op(again, name="hb_torch_affine_u8") is ops["affine_u8"]


def test_another_pipeline_under_a_taken_name_is_refused(pipes, ops):
    with pytest.raises(ValueError, match=r"^hb\.torch\.op\(\): halide_buffer::hb_torch_affine_u8 is already the op "
                                         r"of hb_torch_affine_u8 of .*libhb_torch_affine_u8\.so; pass another name"):
        hbt.op(pipes["sum3"], name="hb_torch_affine_u8")
    other = hbt.op(pipes["sum3"], name="hb_torch_sum3_again")
    assert other is torch.ops.halide_buffer.hb_torch_sum3_again.default and other is not ops["sum3"]
    assert other(torch.ones((2, 5), dtype=torch.uint8)).shape == (2, 3)


def test_bad_arguments_to_op_are_refused(pipes):
    with pytest.raises(TypeError, match=r"^hb\.torch\.op\(\): pipeline must be a halide_buffer\.aot\.Pipeline"):
        hbt.op(lambda x: x)
    for name in ("has space", "ns::name", "", "dotted.name", 3):
        with pytest.raises(ValueError, match=r"^hb\.torch\.op\(\): the op name .* is not an identifier"):
            hbt.op(pipes["sum3"], name=name)


# ---------------------------------------------------------------------------------------------
# torch.compile and opcheck
# ---------------------------------------------------------------------------------------------


def test_opcheck_passes(ops):
    for f, args in [(ops["affine_u8"], (u8((8, 16), 20), 7)), (ops["affine_bf16"], (bf16((8, 16), 21),)),
                    (ops["split"], (u8((5, 9), 22),)), (ops["sum3"], (u8((6, 11), 23),)),
                    (ops["prefix"], (torch.arange(10, dtype=torch.int32), 4))]:
        result = torch.library.opcheck(f, args)
        assert set(result.values()) == {"SUCCESS"}, (f, result)


@pytest.mark.filterwarnings(INDUCTOR_IMPORT)
def test_torch_compile_fullgraph_has_no_graph_break_and_computes_the_same(ops):
    f = ops["affine_u8"]

    def model(x):
        return (f(x, 9).to(torch.int32) * 3).sum(dim=1)

    x = u8((16, 32), 30)
    assert torch._dynamo.explain(model)(x).graph_break_count == 0
    compiled = torch.compile(model, fullgraph=True)
    assert torch.equal(compiled(x), ((x * 2 + 9).to(torch.int32) * 3).sum(dim=1))


@pytest.mark.filterwarnings(INDUCTOR_IMPORT)
def test_torch_compile_with_two_outputs_and_another_size(ops):
    """The fake kernel sizes a narrower output; with dynamic shapes the sizes are specialized."""
    sum3, split = ops["sum3"], ops["split"]

    def model(x):
        low, centred = split(x)
        return sum3(low).to(torch.int32) + centred[:, 2:]

    compiled = torch.compile(model, fullgraph=True, dynamic=True)
    for shape in [(6, 11), (9, 20)]:
        x = u8(shape, 31)
        assert torch.equal(compiled(x), model(x))


def test_compiling_with_an_input_that_requires_grad_is_refused(ops):
    x = torch.ones((4, 8), requires_grad=True)
    # Dynamo reports the fake kernel's error inside its own (quotes escaped).
    with pytest.raises(Exception, match="hb_torch_affine_f32.*requires grad, and the op has no backward"):
        torch.compile(lambda t: ops["affine_f32"](t) + 1, fullgraph=True, backend="aot_eager")(x)


# ---------------------------------------------------------------------------------------------
# torch stays optional
# ---------------------------------------------------------------------------------------------


def run_python(code):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120)


def test_importing_halide_buffer_does_not_import_torch():
    done = run_python("""
        import sys
        import halide_buffer
        print('torch' in sys.modules)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_without_torch_hb_torch_says_what_to_install():
    """torch unimportable (None in sys.modules, as if not installed): import halide_buffer works,
    hb.torch raises ImportError saying what to install, both as an attribute and imported."""
    done = run_python("""
        import sys
        sys.modules['torch'] = None
        import halide_buffer as hb
        for how in ('attribute', 'import'):
            try:
                hb.torch if how == 'attribute' else __import__('halide_buffer.torch')
            except ImportError as e:
                print(how, type(e).__name__, e)
            else:
                print(how, 'imported')
    """)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2
    for how, line in zip(("attribute", "import"), lines):
        assert line.startswith(f"{how} ImportError hb.torch needs PyTorch; pip install torch"), line


def test_hb_torch_is_reachable_as_an_attribute():
    done = run_python("""
        import halide_buffer as hb
        print(hb.torch.op.__module__)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "halide_buffer.torch"


# ---------------------------------------------------------------------------------------------
# CUDA (a GPU machine: tests/gpu/run_checks.sh)
# ---------------------------------------------------------------------------------------------


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (not available here)")
@pytest.mark.filterwarnings(INDUCTOR_IMPORT)
def test_a_cuda_pipeline_on_cuda_tensors(tmp_path):
    """Outputs on the inputs' GPU: in fake mode (a CUDA pipeline's bounds query loads its kernels,
    so even shapes need a GPU), for real on torch's default stream and on a side stream, and in a
    compiled graph. It builds its own pipeline: tests/gpu/run_checks.sh runs it alone."""
    func, args = brighter_cuda_func()
    f = hbt.op(compile_and_load(tmp_path, c_compiler(), func, args, "hb_torch_brighter_gpu", target=TARGET + "-cuda"))
    with FakeTensorMode():
        out = f(torch.empty((24, 40), dtype=torch.uint8, device="cuda"))
        assert out.device.type == "cuda" and out.shape == (24, 40) and out.dtype == torch.uint8
    x = u8((300, 517), 40).cuda()
    got = f(x)
    assert got.device == x.device
    same_bits(got, x + 10)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        y = x * 3            # queued on the side stream: the op must run after it
        got = f(y) + 1       # and what torch queues next there must see the op's output
    side.synchronize()
    same_bits(got, y + 11)
    compiled = torch.compile(lambda t: f(t) * 2, fullgraph=True, backend="aot_eager")
    same_bits(compiled(x), (x + 10) * 2)
    # A real CUDA tensor for a host pipeline (only fake ones exist on a machine without a GPU).
    func, args = affine_u8_func()
    host = hbt.op(compile_and_load(tmp_path, c_compiler(), func, args, "hb_torch_affine_u8_gpu_machine"))
    with pytest.raises(ValueError, match=re.escape(
            "argument 'inp' is on cuda:0, where hb_torch_affine_u8_gpu_machine is a host pipeline; pass inp.cpu()")):
        host(x, 1)
