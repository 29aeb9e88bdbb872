"""What a call asks of an argument's type, read once per type, and the arrays a host pipeline
borrows for one call.

A call tries an object only for the kinds of argument its type offers (an attribute its class or a
base defines), read on the type's first sight and again whenever the class changes; an object
whose class offers nothing but has a ``__dict__`` is asked one by one, as before. A host
pipeline's NumPy arrays and CPU tensors are borrowed: described for the call alone, with no
Buffer, the direct way at any size (``_live_counts()["direct_calls"]``), results in their memory
when it returns.
"""

import halide as hl  # required test dependency: the test fails, not skips, without it
import numpy as np
import pytest
import torch

import halide_buffer as hb

from pipelines import c_compiler, compile_and_load

pytestmark = [pytest.mark.needs_halide, pytest.mark.needs_torch]

SMALL, LARGE = (6, 10), (200, 128)  # 240 B; 102,400 B: over the direct way's 64 KiB for Buffers


def any_stride_add_func():
    """out(x, y) = inp(x, y) + k in float32, input and output at any strides (transposed, stepped,
    reversed), the output sized like the input."""
    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(hl.Float(32), 2, "inp")
    k = hl.Param(hl.Float(32), "k")
    out = hl.Func("at_add")
    out[x, y] = inp[x, y] + k
    inp.dim(0).set_stride(hl.Expr())
    out.output_buffer().dim(0).set_stride(hl.Expr())
    return out, [inp, k]


@pytest.fixture(scope="module")
def add(tmp_path_factory):
    return compile_and_load(tmp_path_factory.mktemp("argument_types"), c_compiler(), *any_stride_add_func(), "at_add")


def values(shape, seed=3):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def direct_calls():
    return hb._core._live_counts()["direct_calls"]


def no_memory_refused(add):
    return rf"^{add.name}\(\): argument 'inp': \w+ holds no memory a pipeline can take"


def test_a_class_that_gains_memory_after_its_first_sight_is_taken_then(add):
    a = values(SMALL)

    class Late:
        pass

    with pytest.raises(TypeError, match=no_memory_refused(add)):
        add(Late(), 1.0)
    Late.__array__ = lambda self, dtype=None, copy=None: a  # the class changes: read again
    np.testing.assert_array_equal(np.asarray(add(Late(), 1.0)), a + 1)
    del Late.__array__
    with pytest.raises(TypeError, match=no_memory_refused(add)):
        add(Late(), 1.0)


def test_an_object_whose_class_offers_nothing_is_asked_for_its_own_attributes(add):
    a = values(SMALL)

    class Plain:
        pass

    own = Plain()
    own.__array__ = lambda dtype=None, copy=None: a  # on the object alone
    np.testing.assert_array_equal(np.asarray(add(own, 2.0)), a + 2)
    with pytest.raises(TypeError, match=no_memory_refused(add)):
        add(Plain(), 2.0)  # the same class, another object: nothing of its own


def test_many_types_seen_once_each_are_all_taken(add):
    """More types than the table keeps (512): it starts again, and every one is still read."""
    a = values(SMALL)
    for i in range(600):
        kind = type(f"Kind{i}", (), {"__array__": lambda self, dtype=None, copy=None: a})
        got = add(kind(), float(i))
        assert np.asarray(got)[0, 0] == a[0, 0] + np.float32(i)


@pytest.mark.parametrize("shape", [SMALL, LARGE])
@pytest.mark.parametrize("kind", ["ndarray", "tensor"])
def test_arrays_are_borrowed_the_direct_way_at_any_size(add, kind, shape):
    a = values(shape)
    inp, out = (a, np.zeros(shape, np.float32)) if kind == "ndarray" else (torch.from_numpy(a), torch.zeros(shape))
    before = direct_calls()
    assert add(inp, 0.5, out) is out
    assert direct_calls() == before + 1
    np.testing.assert_array_equal(np.asarray(out), a + np.float32(0.5))


@pytest.mark.parametrize("view", ["transposed", "reversed", "stepped"])
def test_a_strided_ndarray_is_read_and_written_where_numpy_says(add, view):
    base = values((12, 20))
    take = {"transposed": lambda x: x.T, "reversed": lambda x: x[::-1, ::-1], "stepped": lambda x: x[::2, 1::3]}[view]
    inp = take(base)
    out_base = np.zeros((40, 40), np.float32)
    out = out_base[1:1 + inp.shape[0] * 2:2, 3:3 + inp.shape[1]]  # a stepped output view
    before = direct_calls()
    add(inp, 1.0, out)
    assert direct_calls() == before + 1
    np.testing.assert_array_equal(out, inp + 1)
    rest = out_base.copy()
    rest[1:1 + inp.shape[0] * 2:2, 3:3 + inp.shape[1]] = 0
    assert not rest.any(), "written outside the output view"


def test_a_transposed_tensor_and_a_strided_tensor_output(add):
    a = values((10, 6))
    inp = torch.from_numpy(a).T
    base = torch.zeros(6, 20)
    out = base[:, ::2]
    add(inp, 3.0, out)
    np.testing.assert_array_equal(out.numpy(), a.T + 3)
    assert not base[:, 1::2].any()


def test_an_ndarray_subclass_is_borrowed_and_returned(add):
    class Tagged(np.ndarray):
        pass

    a = values(SMALL)
    out = np.zeros(SMALL, np.float32).view(Tagged)
    assert add(a.view(Tagged), 1.0, out) is out
    np.testing.assert_array_equal(np.asarray(out), a + 1)


def test_a_tensor_subclass_of_its_own_type_is_borrowed(add):
    a = values(SMALL)
    inp = torch.nn.Parameter(torch.from_numpy(a), requires_grad=False)
    out = torch.zeros(SMALL)
    before = direct_calls()
    add(inp, 1.0, out)
    assert direct_calls() == before + 1
    np.testing.assert_array_equal(out.numpy(), a + 1)
    with pytest.raises(TypeError, match=r"at_add\(\): argument 'inp': the Parameter requires grad"):
        add(torch.nn.Parameter(torch.from_numpy(a)), 1.0, out)


def test_a_tensor_offering_halide_s_capsule_is_taken_through_the_capsule(add):
    """Halide's typed capsule comes before anything else an object offers: a tensor subclass with
    _get_halide_buffer_t_capsule() is not borrowed through its DLPack exchange API."""
    a, other = values(SMALL, seed=4), values(SMALL, seed=5)

    class CapsuleTensor(torch.Tensor):
        def _get_halide_buffer_t_capsule(self):
            return self.source._get_halide_buffer_t_capsule()

    t = torch.Tensor._make_subclass(CapsuleTensor, torch.from_numpy(a))
    t.source = hb.Buffer.from_host(other, copy=True)
    out = np.zeros(SMALL, np.float32)
    add(t, 1.0, out)
    np.testing.assert_array_equal(out, other + 1)


def test_borrowed_and_lent_arguments_in_one_call(add):
    """A Buffer that takes the lent way (its halide_buffer_t handed out) beside a borrowed output,
    and a borrowed input beside an output the call allocates."""
    a = values(SMALL)
    inp = hb.Buffer.from_host(a, copy=True)
    inp._get_raw_halide_buffer_t()
    out = np.zeros(SMALL, np.float32)
    before = direct_calls()
    add(inp, 4.0, out)
    assert direct_calls() == before
    np.testing.assert_array_equal(out, a + 4)
    made = add(torch.from_numpy(a), 5.0)
    assert isinstance(made, hb.Buffer) and made.shape == SMALL
    np.testing.assert_array_equal(np.asarray(made), a + 5)


def test_what_a_description_cannot_say_takes_the_general_way_and_its_refusals(add):
    big_endian = values(SMALL).astype(">f4")
    with pytest.raises(ValueError, match=r"big-endian"):
        add(big_endian, 1.0, np.zeros(SMALL, np.float32))
    memory = np.zeros(300, np.uint8)  # rows 42 bytes apart: 5 * 42 + 40 bytes reached, from byte 2
    odd = np.lib.stride_tricks.as_strided(memory[2:262].view(np.float32), SMALL, (SMALL[1] * 4 + 2, 4))
    with pytest.raises(ValueError, match=r"stride 42 bytes is not a multiple of the itemsize 4"):
        add(odd, 1.0, np.zeros(SMALL, np.float32))
    empty = np.zeros((0, 5), np.float32)
    assert add(empty, 1.0, np.zeros((0, 5), np.float32)).shape == (0, 5)
    with pytest.raises(TypeError, match=r"at_add\(\): argument 'inp': a float64 buffer where the pipeline takes float32"):
        add(np.zeros(SMALL), 1.0, np.zeros(SMALL, np.float32))
