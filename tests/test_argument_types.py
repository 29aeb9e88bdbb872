"""What a call asks of an argument's type, read once per type, and the arrays a host pipeline
borrows for one call.

A call tries an object only for the kinds of argument its type offers (an attribute its class or a
base defines), read on the type's first sight and again whenever the class changes; an object
whose class offers nothing but has a ``__dict__`` is asked one by one, as before. A host
pipeline's NumPy arrays and CPU tensors are borrowed: described for the call alone, with no
Buffer, the direct way at any size (``_live_counts()["direct_calls"]``), results in their memory
when it returns.
"""

import ctypes

import halide as hl  # required test dependency: the test fails, not skips, without it
import numpy as np
import pytest
import torch

import halide_buffer as hb

from common import DLDataType, DLDevice, DLTensor, ExchangeAPI
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
    for dtype in (np.complex64, np.complex128):  # no Halide type: no description, whatever the last call's was
        add(values(SMALL), 1.0, np.zeros(SMALL, np.float32))
        with pytest.raises(TypeError, match=rf"at_add\(\): argument 'inp': a {np.dtype(dtype).name} buffer where the "
                                            r"pipeline takes float32"):
            add(np.zeros(SMALL, dtype), 1.0, np.zeros(SMALL, np.float32))


# --- a producer of its own: an exchange API describing its memory without handing it over -------

# Called with the GIL held (PYFUNCTYPE), as the exchange API's functions are.
DESCRIBE = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(DLTensor))
MANAGED = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(ctypes.c_void_p))


def describe(obj, out):
    """The producer's shape and strides (NULL when it has none)."""
    out.contents.data, out.contents.device = obj.values.ctypes.data, DLDevice(1, 0)
    out.contents.ndim, out.contents.dtype = len(obj.extents), DLDataType(2, 32, 1)  # float32
    out.contents.shape, out.contents.byte_offset = ctypes.addressof(obj.extents), 0
    out.contents.strides = ctypes.addressof(obj.strides) if obj.strides is not None else None
    return 0


KEPT = [DESCRIBE(describe), MANAGED(lambda obj, out: -1)]  # owning imports refused: borrowing only
API = ExchangeAPI(1, 3, None, None, ctypes.cast(KEPT[1], ctypes.c_void_p), None,
                  ctypes.cast(KEPT[0], ctypes.c_void_p), None)


def capsule_of(api):
    new = ctypes.pythonapi.PyCapsule_New
    new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new(ctypes.addressof(api), b"dlpack_exchange_api", None)


class CProducer:
    """A float32 array offered through __dlpack__ and an exchange API of its type's own, described
    with the shape and element strides given (NULL strides when none are)."""

    __dlpack_c_exchange_api__ = capsule_of(API)

    def __init__(self, values, strides=None, shape=None):
        self.values = np.ascontiguousarray(values, np.float32)
        shape = self.values.shape if shape is None else shape
        self.extents = (ctypes.c_int64 * len(shape))(*shape)
        self.strides = None if strides is None else (ctypes.c_int64 * len(strides))(*strides)

    def __dlpack__(self, **kwargs):
        return self.values.__dlpack__(**kwargs)


@pytest.mark.parametrize("shape", [SMALL, LARGE, (1, 7)])
@pytest.mark.parametrize("order", ["C", "transposed"])
def test_a_producer_s_description_is_read_with_its_strides(add, shape, order):
    a = values(shape)
    h, w = shape
    described, strides, seen = ((h, w), (w, 1), a) if order == "C" else ((w, h), (1, w), a.T)
    out = np.zeros(described, np.float32)
    before = direct_calls()
    add(CProducer(a, strides, described), 2.0, out)
    assert direct_calls() == before + 1  # borrowed: the direct way at any size
    np.testing.assert_array_equal(out, seen + 2)


def test_a_producer_s_description_without_strides_is_refused_as_every_import_refuses_it(add):
    """DLPack 1.2 and later require strides: a borrowed description without them is refused as
    the general way refuses it (check_import()), naming the pipeline, and nothing is written."""
    out = np.zeros(SMALL, np.float32)
    with pytest.raises(BufferError, match=r"^at_add\(\): NULL strides in a DLPack 1\.3 tensor"):
        add(CProducer(values(SMALL)), 2.0, out)
    assert not out.any()


def test_a_stride_that_is_no_whole_number_of_elements_is_refused_beside_a_single_element_axis(add):
    """The rule for an axis of one element (any stride) is that axis' own: a stepping axis of 6
    bytes beside it is still refused."""
    memory = np.zeros(64, np.uint8)
    odd = np.lib.stride_tricks.as_strided(memory[2:34].view(np.float32), (3, 1), (6, 4))
    with pytest.raises(ValueError, match=r"stride 6 bytes is not a multiple of the itemsize 4"):
        add(odd, 1.0, np.zeros((3, 1), np.float32))


def test_a_description_reaching_beyond_the_address_space_is_refused(add):
    """A broken producer's description (strides past the address space) is not borrowed: the call
    refuses it as the general way does, naming the pipeline, and writes nothing."""
    add(values(SMALL, seed=9), 1.0, np.zeros(SMALL, np.float32))  # the scratch holds a description that would fit
    out = np.zeros(SMALL, np.float32)
    with pytest.raises(BufferError, match=r"^at_add\(\): the strides reach beyond the address space; the producer "
                                          r"sent a malformed tensor"):
        add(CProducer(values(SMALL), strides=(2**59, 1)), 3.0, out)  # bytes fit int64, their reach does not
    assert not out.any()
