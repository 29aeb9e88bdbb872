"""PyTorch tensors whose memory does not hold their values: lazy negations and conjugates.

A lazily negated tensor (``is_neg()``: ``z.conj().imag``, ``t._neg_view()``) keeps the values'
negatives in memory, and a lazily conjugated one (``is_conj()``: ``z.conj()``) their conjugates.
torch's ``__dlpack__`` and its DLPack exchange API export a negated view as its memory, so a
consumer that takes it as it is reads the values negated. halide_buffer reads such an input with
its values, through one copy (``resolve_neg()`` / ``resolve_conj()``): in pipeline calls, in
``hb.from_dlpack`` (``copy=None`` or ``True``; ``copy=False`` refuses), in ``hb.dask.map_pipeline``
and in ``hb.torch.op``; it refuses one as a pipeline's output, where the results would read
negated (or conjugated) through the view.

The pipelines are generated with the ``halide`` wheel (tests/pipelines.py); they read their input
at any stride, since ``z.conj().imag`` is every other float of ``z``'s memory.
"""

import halide as hl  # required test dependency: the test fails, not skips, without it
import numpy as np
import pytest
import torch

import halide_buffer as hb
import halide_buffer.dask as hbd
import halide_buffer.torch as hbt

from pipelines import c_compiler, compile_and_load, output_bounds_follow

pytestmark = [pytest.mark.needs_torch, pytest.mark.needs_halide]

COMPLEX = [1 + 2j, 3 - 1j, -5 + 4j, 0.5 - 0.25j, -7 - 8j]


def twice_func():
    """negv_twice(x) = inp(x) * 2 in float32 (exact), at any input stride."""
    x = hl.Var("x")
    inp = hl.ImageParam(hl.Float(32), 1, "inp")
    inp.dim(0).set_stride(hl.Expr())
    out = hl.Func("negv_twice")
    out[x] = inp[x] * 2
    output_bounds_follow(out, inp)
    return out, [inp]


def bits_func():
    """negv_bits(x) = inp(x), 64 bits at a time: a complex64 tensor's elements as they are (our
    complex64 carries Halide's uint64)."""
    x = hl.Var("x")
    inp = hl.ImageParam(hl.UInt(64), 1, "inp")
    inp.dim(0).set_stride(hl.Expr())
    out = hl.Func("negv_bits")
    out[x] = inp[x]
    output_bounds_follow(out, inp)
    return out, [inp]


@pytest.fixture(scope="module")
def pipes(tmp_path_factory):
    directory = tmp_path_factory.mktemp("negated_views")
    cc = c_compiler()
    return {
        "twice": compile_and_load(directory, cc, *twice_func(), "negv_twice"),
        "bits": compile_and_load(directory, cc, *bits_func(), "negv_bits"),
    }


def complex_tensor():
    return torch.tensor(COMPLEX, dtype=torch.complex64)


def conj_imag():
    """z.conj().imag: negated (is_neg()), every other float32 of z's memory."""
    return complex_tensor().conj().imag


def neg_view():
    """t._neg_view(): negated and contiguous."""
    return torch.tensor([1.5, -2.0, 3.0, -0.5, 0.0, 9.0])._neg_view()


NEGATED = {"conj_imag": conj_imag, "neg_view": neg_view}


@pytest.fixture(params=sorted(NEGATED))
def negated(request):
    t = NEGATED[request.param]()
    assert t.is_neg()
    return t


def values_of(t):
    """What the tensor holds as torch reads it (its values), as an ndarray."""
    return t.resolve_conj().resolve_neg().numpy()


# ---------------------------------------------------------------------------------------------
# Pipeline calls
# ---------------------------------------------------------------------------------------------


def test_a_negated_input_of_a_call_is_read_with_its_values(pipes, negated):
    want = values_of(negated) * 2
    np.testing.assert_array_equal(np.asarray(pipes["twice"](negated)), want)
    out = torch.empty(negated.shape)
    assert pipes["twice"](negated, out) is out
    np.testing.assert_array_equal(out.numpy(), want)
    assert negated.is_neg()  # the input is left as it was


def test_a_negated_input_given_by_name_with_a_buffer_output_is_read_with_its_values(pipes, negated):
    out = hb.Buffer(tuple(negated.shape), "float32")
    pipes["twice"](inp=negated, negv_twice=out)
    np.testing.assert_array_equal(np.asarray(out), values_of(negated) * 2)


def test_a_negated_output_is_refused_and_left_unchanged(pipes, negated):
    before = values_of(negated)
    with pytest.raises(BufferError, match=r"^negv_twice\(\): argument 'negv_twice': the Tensor is a lazily negated "
                                          r"view \(is_neg\(\)\), whose memory holds its values negated, so the "
                                          r"pipeline's results would read negated through it; pass a tensor that is "
                                          r"no such view \(torch.empty_like\(t\)\), or leave the output out"):
        pipes["twice"](torch.ones(negated.shape), negated)
    np.testing.assert_array_equal(values_of(negated), before)  # nothing written through the view


def test_a_conjugated_input_of_a_call_is_read_with_its_values(pipes):
    z = complex_tensor().conj()
    out = torch.empty(z.shape, dtype=torch.complex64)
    pipes["bits"](z, out)  # each element's 64 bits copied: the conjugates, as z's values are
    np.testing.assert_array_equal(out.numpy(), np.conj(np.array(COMPLEX, np.complex64)))
    assert z.is_conj()


def test_a_conjugated_output_is_refused_and_left_unchanged(pipes):
    z = complex_tensor().conj()
    with pytest.raises(BufferError, match=r"^negv_bits\(\): argument 'negv_bits': the Tensor is a lazily conjugated "
                                          r"view \(is_conj\(\)\), whose memory holds its values' conjugates, so the "
                                          r"pipeline's results would read conjugated through it; pass a tensor"):
        pipes["bits"](torch.zeros(len(COMPLEX), dtype=torch.complex64), z)
    np.testing.assert_array_equal(values_of(z), np.conj(np.array(COMPLEX, np.complex64)))


def test_a_negated_input_that_requires_grad_is_still_refused_as_requiring_grad(pipes):
    t = torch.ones(4, requires_grad=True)._neg_view()
    assert t.is_neg() and t.requires_grad
    with pytest.raises(TypeError, match=r"^negv_twice\(\): argument 'inp': the Tensor requires grad.*x.detach\(\)"):
        pipes["twice"](t)


# ---------------------------------------------------------------------------------------------
# hb.from_dlpack
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("copy", [None, True])
def test_from_dlpack_reads_a_negated_view_with_its_values_through_a_copy(negated, copy):
    want = values_of(negated)
    b = hb.from_dlpack(negated, copy=copy)
    np.testing.assert_array_equal(np.asarray(b), want)
    b.numpy(writable=True)[...] = 42  # the copy is the buffer's own: the tensor keeps its values
    np.testing.assert_array_equal(values_of(negated), want)
    assert negated.is_neg()


def test_from_dlpack_refuses_a_negated_view_without_a_copy(negated):
    with pytest.raises(BufferError, match=r"^from_dlpack\(\): the Tensor is a lazily negated view \(is_neg\(\)\), "
                                          r"whose memory holds its values negated, so they can be read only through "
                                          r"a copy; pass copy=None or copy=True \(one copy, as x.resolve_neg\(\) "
                                          r"makes\)$"):
        hb.from_dlpack(negated, copy=False)


@pytest.mark.parametrize("copy", [None, True])
def test_from_dlpack_reads_a_conjugated_view_with_its_values_through_a_copy(copy):
    z = complex_tensor().conj()
    b = hb.from_dlpack(z, copy=copy)
    np.testing.assert_array_equal(np.asarray(b), np.conj(np.array(COMPLEX, np.complex64)))
    b.numpy(writable=True)[...] = 0
    np.testing.assert_array_equal(values_of(z), np.conj(np.array(COMPLEX, np.complex64)))


def test_from_dlpack_refuses_a_conjugated_view_without_a_copy():
    with pytest.raises(BufferError, match=r"^from_dlpack\(\): the Tensor is a lazily conjugated view \(is_conj\(\)\), "
                                          r"whose memory holds its values' conjugates, so they can be read only "
                                          r"through a copy; pass copy=None or copy=True \(one copy, as "
                                          r"x.resolve_conj\(\) makes\)$"):
        hb.from_dlpack(complex_tensor().conj(), copy=False)


def test_from_dlpack_reads_a_view_both_negated_and_conjugated_with_its_values():
    z = complex_tensor().conj()._neg_view()
    assert z.is_conj() and z.is_neg()
    np.testing.assert_array_equal(np.asarray(hb.from_dlpack(z)), -np.conj(np.array(COMPLEX, np.complex64)))


def test_from_dlpack_still_shares_the_memory_of_a_tensor_that_is_no_lazy_view():
    t = torch.arange(6, dtype=torch.float32)
    b = hb.from_dlpack(t)
    b.numpy(writable=True)[0] = 42
    assert t[0] == 42


# ---------------------------------------------------------------------------------------------
# hb.dask and hb.torch
# ---------------------------------------------------------------------------------------------


def test_map_pipeline_reads_a_negated_tensor_input_with_its_values(pipes, negated):
    # A tensor is an input as a call takes it (dask arrays cannot hold torch chunks: da.from_array
    # does not take a torch dtype).
    got = hbd.map_pipeline(pipes["twice"], negated).compute()
    np.testing.assert_array_equal(got, values_of(negated) * 2)


def test_an_op_computes_on_the_values_of_a_negated_input(pipes, negated):
    op = hbt.op(pipes["twice"])
    np.testing.assert_array_equal(op(negated).numpy(), values_of(negated) * 2)
