"""hb.torch.op on generators as they are written: outputs whose bounds nobody set.

The op sizes each output as a call of the pipeline sizes one it is not given (aot_sizes.h): the
largest region whose required input regions lie within the inputs (an elementwise output: the
input's shape; a boundary-free 3 x 3 blur: 2 less, its tensor indexed from 0 at the region's mins;
a 2x upsampler: twice). Eager, opcheck, torch.compile(fullgraph=True) with static and dynamic
shapes, and meta tensors; ``output_shapes`` sizes the outputs where the rule cannot.
"""

import re

import numpy as np
import pytest
import torch

import halide_buffer as hb
import halide_buffer.torch as hbt

from pipelines import (TARGET, c_compiler, compile_and_load, compile_and_load_each, gather_func, random_bf16,
                       unsized_add_func, unsized_blur_func, upsample2_func)

pytestmark = [pytest.mark.needs_torch, pytest.mark.needs_halide]

STRICT = TARGET + "-strict_float"
INDUCTOR_IMPORT = "ignore:`torch.jit.script_method` is deprecated:DeprecationWarning"


@pytest.fixture(scope="module")
def pipes(tmp_path_factory):
    directory = tmp_path_factory.mktemp("torch_unsized")
    made = {
        "add": unsized_add_func("tu_add"),
        "add_bf16": unsized_add_func("tu_add_bf16", "bfloat16"),
        "blur": unsized_blur_func("tu_blur"),
        "upsample": upsample2_func("tu_upsample"),
        "gather": gather_func("tu_gather"),
    }
    return compile_and_load_each(directory, made, "hb_tu_", target=STRICT)


@pytest.fixture(scope="module")
def ops(pipes):
    return {key: hbt.op(p) for key, p in pipes.items()}


def floats(shape, seed):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def box3(t):
    """The boundary-free 3 x 3 mean, summed in Halide's order (dy outer, dx inner)."""
    h, w = t.shape
    total = torch.zeros((h - 2, w - 2))
    for dy in (0, 1, 2):
        for dx in (0, 1, 2):
            total = total + t[dy:dy + h - 2, dx:dx + w - 2]
    return total / 9


def test_elementwise_stencil_upsampler_and_bfloat16_ops_are_sized_as_users_expect(ops):
    t = floats((9, 13), 1)
    torch.testing.assert_close(ops["add"](t, 0.5), t + 0.5, rtol=0, atol=0)
    torch.testing.assert_close(ops["blur"](t), box3(t), rtol=1e-6, atol=1e-6)
    assert ops["blur"](t).shape == (7, 11)
    torch.testing.assert_close(ops["upsample"](t), t.repeat_interleave(2, 0).repeat_interleave(2, 1), rtol=0, atol=0)
    b = torch.from_numpy(random_bf16(np.random.default_rng(2), (5, 17)).view(np.int16)).view(torch.bfloat16)
    got = ops["add_bf16"](b, 1.0)
    assert got.dtype == torch.bfloat16 and got.shape == (5, 17)
    assert torch.equal(got.view(torch.int16), (b + 1).view(torch.int16))  # torch rounds the same way


def test_meta_tensors_get_the_sizes_the_rule_gives(ops):
    out = ops["upsample"](torch.empty((6, 11), device="meta"))
    assert out.device.type == "meta" and out.shape == (12, 22)
    assert ops["blur"](torch.empty((6, 11), device="meta")).shape == (4, 9)


def test_opcheck_passes(ops):
    for key, args in [("add", (floats((4, 9), 3), 2.0)), ("blur", (floats((6, 7), 4),)),
                      ("upsample", (floats((3, 5), 5),))]:
        result = torch.library.opcheck(ops[key], args)
        assert set(result.values()) == {"SUCCESS"}, (key, result)


@pytest.mark.filterwarnings(INDUCTOR_IMPORT)
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_torch_compile_fullgraph_over_several_shapes(ops, dynamic):
    def model(t):
        return ops["upsample"](ops["blur"](t)) + 1

    compiled = torch.compile(model, fullgraph=True, dynamic=dynamic)
    for shape in [(8, 10), (9, 12), (12, 7)]:
        t = floats(shape, sum(shape))
        torch.testing.assert_close(compiled(t), model(t))
        assert compiled(t).shape == (2 * (shape[0] - 2), 2 * (shape[1] - 2))


def test_a_lookup_table_too_small_for_its_indices_says_how_to_size_the_output(ops):
    idx = torch.zeros(40, dtype=torch.uint8)
    with pytest.raises(ValueError, match=re.escape(
            "halide_buffer::hb_tu_gather(): output 'tu_gather': no region of it lies within the inputs")) as e:
        ops["gather"](idx, floats((100,), 6))
    assert "; size the outputs yourself: hb.torch.op(pipeline, output_shapes=...)" in str(e.value)
    lut = floats((256,), 7)
    torch.testing.assert_close(ops["gather"](idx + 3, lut), lut[3].expand(40), rtol=0, atol=0)
    # A 1-D step slice (last-axis stride 2) is made dense first, as a 2-D one is.
    spread = torch.arange(80, dtype=torch.uint8)
    torch.testing.assert_close(ops["gather"](spread[::2], lut), lut[spread[::2].long()], rtol=0, atol=0)


@pytest.mark.filterwarnings(INDUCTOR_IMPORT)
def test_output_shapes_sizes_the_outputs_symbolic_shapes_included(pipes):
    """output_shapes gets the shapes and the scalars; under dynamic shapes its sizes stay symbolic."""
    calls = []

    def doubled(inp):
        calls.append(type(inp[0]).__name__)
        return (inp[0] * 2, inp[1] * 2)

    up = hbt.op(pipes["upsample"], name="hb_tu_upsample_shaped", output_shapes=doubled)
    t = floats((3, 4), 8)
    torch.testing.assert_close(up(t), t.repeat_interleave(2, 0).repeat_interleave(2, 1), rtol=0, atol=0)
    compiled = torch.compile(lambda t: up(t) * 2, fullgraph=True, dynamic=True)
    for shape in [(3, 4), (5, 7), (6, 2)]:
        t = floats(shape, shape[0])
        torch.testing.assert_close(compiled(t), up(t) * 2)
    assert "SymInt" in calls  # the fake kernel asked with symbolic sizes


def test_output_shapes_that_break_the_outputs_are_refused_at_the_call(pipes):
    cases = [
        (lambda inp: [(2, 2), (2, 2)], "output_shapes returned [(2, 2), (2, 2)] (2 shapes) for 1 output(s) "
                                       "(tu_upsample); return one shape per output"),
        (lambda inp: (inp[0], -1), "output_shapes gave output 'tu_upsample' the shape (3, -1), with a negative "
                                   "extent; return extents of 0 or more"),
        (lambda inp: (4,), "output_shapes gave output 'tu_upsample' the shape (4,), where the pipeline writes 2 "
                           "axes; return a tuple of 2 ints for it"),
    ]
    for k, (shapes, message) in enumerate(cases):
        f = hbt.op(pipes["upsample"], name=f"hb_tu_upsample_bad_{k}", output_shapes=shapes)
        with pytest.raises(ValueError, match=re.escape(f"halide_buffer::hb_tu_upsample_bad_{k}(): {message}")):
            f(floats((3, 4), 9))
    with pytest.raises(TypeError, match=r"^hb\.torch\.op\(\): output_shapes must be a function"):
        hbt.op(pipes["upsample"], name="hb_tu_upsample_bad", output_shapes=(6, 8))


def test_an_op_of_the_same_name_from_another_library_is_not_the_first_librarys(tmp_path):
    """Two libraries at two paths, each with a pipeline named hb_tu_twin: the second is refused under
    the taken name, not handed the first's op; under a name of its own it is an op of its own."""
    cc = c_compiler()
    ops = []
    for k, directory in enumerate([tmp_path / "one", tmp_path / "two"]):
        directory.mkdir()
        func, args = unsized_add_func("tu_twin")
        lib = compile_and_load(directory, cc, func, args, "hb_tu_twin")
        ops.append(lib)
    first = hbt.op(ops[0])
    with pytest.raises(ValueError, match=r"halide_buffer::hb_tu_twin is already the op of hb_tu_twin of "
                                         r".*/one/libhb_tu_twin\.so; pass another name .* for hb_tu_twin of "
                                         r".*/two/libhb_tu_twin\.so"):
        hbt.op(ops[1])
    second = hbt.op(ops[1], name="hb_tu_twin_two")
    t = floats((2, 3), 10)
    assert second is not first
    torch.testing.assert_close(second(t, 2.0), t + 2, rtol=0, atol=0)
    torch.testing.assert_close(first(t, 1.0), t + 1, rtol=0, atol=0)


def test_a_cuda_call_goes_on_a_device_of_torchs_current_stream_unless_it_is_the_default(monkeypatch):
    """Which halide_buffer CUDA device a call's tensors are wrapped on (no GPU here: torch's current
    stream and hb.cuda.device are stood in for; tests/gpu/run_checks.sh computes on real streams)."""
    class Stream:
        def __init__(self, handle):
            self.cuda_stream = handle

    made = []
    monkeypatch.setattr(hbt._cuda, "device", lambda index, stream: made.append((index, stream)) or ("device", index))
    default = Stream(0)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: default)
    assert hbt._current_stream_device(torch.device("cuda", 1)) is None and made == []
    other = Stream(0x5000)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: other)
    assert hbt._current_stream_device(torch.device("cuda", 1)) == ("device", 1)
    assert made == [(1, other)]
