"""hb.aot: every kind of object a pipeline call takes as a buffer, and where each output's result is.

A call takes our Buffers, NumPy arrays and buffer-protocol objects, objects offering Halide's
typed capsule (``_get_halide_buffer_t_capsule()``), ``halide.Buffer``, pyopencl arrays, DLPack
producers (PyTorch of every dtype, JAX) and ``__array__``. The foreign-output rule: an output
that is not one of our Buffers holds the result when the call returns, in its own memory, whatever
device the pipeline ran on, whether or not the caller keeps what the call returns: host memory
gets exactly one counted download after an OpenCL pipeline, a pyopencl array keeps the result in
its device memory. Our Buffers keep the lazy rule (device dirty, no copy until read), and an
hl.Buffer or a typed capsule keeps its own residency state (its flags say where the data is).

Each kind runs through the same add (``gpuadd_func``: output = uint8(input + offset)) built for
the host and for OpenCL (PoCL); bfloat16 through ``affine_bf16_func`` on the host.
"""

import ctypes
import gc

import halide as hl  # required test dependency: the test fails, not skips, without it
import numpy as np
import pytest
import torch

import halide_buffer as hb

from common import HalideBufferT, Moves, NONE, down, halide_dims, live_counts, up
from pipelines import (OPENCL_TARGET, affine_bf16_func, c_compiler, compile_and_load, gpuadd_func, random_bf16,
                       random_u8)

pytestmark = pytest.mark.needs_halide

SHAPE = (16, 24)  # NumPy order: Halide's (x, y) extents are (24, 16)
NBYTES = SHAPE[0] * SHAPE[1]
OFFSET = 3
CAPSULE_NAME = b"halide.halide_buffer_t.v21"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    directory = tmp_path_factory.mktemp("aot_arguments")
    cc = c_compiler()
    return {
        "host": compile_and_load(directory, cc, *gpuadd_func(False), "hb_args_add_host"),
        "opencl": compile_and_load(directory, cc, *gpuadd_func(True), "hb_args_add_opencl", target=OPENCL_TARGET),
        "bf16": compile_and_load(directory, cc, *affine_bf16_func(), "hb_args_bf16"),
    }


@pytest.fixture(params=["host", "opencl"])
def add(request, built):
    """The add, on the host and on OpenCL."""
    return built[request.param]


def on_opencl(p):
    return p.device_api == "opencl"


def image(seed):
    return random_u8(np.random.default_rng(seed), SHAPE)


def added(a):
    return ((a.astype(np.int64) + OFFSET) % 256).astype(np.uint8)


def capsule_of(pointer):
    """A PyCapsule of Halide's typed-capsule name around a halide_buffer_t address (no destructor)."""
    new = ctypes.pythonapi.PyCapsule_New
    new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new(pointer, CAPSULE_NAME, None)


def capsule_pointer(capsule):
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return get(capsule, CAPSULE_NAME)


class HandsOnCapsule:
    """An object whose only way in is Halide's typed capsule: that of the object it holds (one of
    our Buffers, or an hl.Buffer's halide_buffer_t in a capsule made here)."""

    def __init__(self, held):
        self.held = held

    def _get_halide_buffer_t_capsule(self):
        if isinstance(self.held, hb.Buffer):
            return self.held._get_halide_buffer_t_capsule()
        return capsule_of(self.held._get_raw_halide_buffer_t())


class DLPackOnly:
    """A DLPack producer with nothing but __dlpack__ (no exchange API, no buffer protocol)."""

    def __init__(self, tensor):
        self.tensor = tensor

    def __dlpack__(self, **kwargs):
        return self.tensor.__dlpack__(**kwargs)


def torch_u8(a):
    return torch.from_numpy(a.copy())


# ---------------------------------------------------------------------------------------------
# Host memory outputs: the result is there when the call returns
# ---------------------------------------------------------------------------------------------

# Each kind of output over host memory: a factory giving (the argument, a reader of its memory).


def ndarray_output():
    a = np.zeros(SHAPE, np.uint8)
    return a, lambda: a


def memoryview_output():
    memory = bytearray(NBYTES)
    return memoryview(memory).cast("B", SHAPE), lambda: np.frombuffer(memory, np.uint8).reshape(SHAPE)


def torch_output():
    t = torch.zeros(SHAPE, dtype=torch.uint8)
    return t, lambda: t.numpy()


def dlpack_only_output():
    t = torch.zeros(SHAPE, dtype=torch.uint8)
    return DLPackOnly(t), lambda: t.numpy()


def float8_output():
    """A float8_e4m3fn tensor: Halide's uint8, so the add takes it; its bits are the result."""
    t = torch.zeros(SHAPE, dtype=torch.float8_e4m3fn)
    return t, lambda: t.view(torch.uint8).numpy()


HOST_OUTPUTS = {"ndarray": ndarray_output, "memoryview of a bytearray": memoryview_output,
                "torch tensor": torch_output, "DLPack-only producer": dlpack_only_output,
                "float8 torch tensor": float8_output}


@pytest.mark.parametrize("result", ["kept", "deleted", "not bound"])
@pytest.mark.parametrize("kind", list(HOST_OUTPUTS))
def test_a_host_memory_output_holds_the_result_when_the_call_returns(add, kind, result):
    src = image(1)
    out, memory = HOST_OUTPUTS[kind]()
    moved = Moves()
    if result == "not bound":
        add(src, OFFSET, out)
    else:
        returned = add(src, OFFSET, out)
        if result == "deleted":
            del returned
            gc.collect()
    # Brought home once after an OpenCL pipeline (the input went up once); nothing on the host.
    assert moved() == ((1, NBYTES, 1, NBYTES) if on_opencl(add) else NONE)
    np.testing.assert_array_equal(memory(), added(src))
    if result == "kept":  # what the call returned is the object given, as NumPy's out= returns it
        assert returned is out
        assert moved() == NONE


def test_several_host_outputs_of_several_kinds_each_hold_their_result(built):
    """One output of each kind, each given to its own call whose result nobody binds: each is
    home when its call returns, one download apiece."""
    p = built["opencl"]
    src = image(2)
    outs = [maker() for maker in HOST_OUTPUTS.values()]
    moved = Moves()
    for out, _ in outs:
        p(src, OFFSET, out)
    assert moved() == (len(outs), len(outs) * NBYTES, len(outs), len(outs) * NBYTES)
    for (_, memory), kind in zip(outs, HOST_OUTPUTS):
        np.testing.assert_array_equal(memory(), added(src), err_msg=kind)


# ---------------------------------------------------------------------------------------------
# Inputs of every kind
# ---------------------------------------------------------------------------------------------


class ArrayLike:
    """An object offering nothing but __array__."""

    def __init__(self, a):
        self.a = a

    def __array__(self, dtype=None, copy=None):
        return self.a


def jax_input(a):
    import jax.numpy as jnp

    return jnp.asarray(a)


INPUTS = {
    "ndarray": lambda a: a,
    "bytes": lambda a: memoryview(a.tobytes()).cast("B", SHAPE),
    "torch tensor": torch_u8,
    "float8 torch tensor": lambda a: torch_u8(a).view(torch.float8_e4m3fn),
    "DLPack-only producer": lambda a: DLPackOnly(torch_u8(a)),
    "JAX array": jax_input,
    "hl.Buffer": lambda a: hl.Buffer(a.copy()),
    "our Buffer's capsule": lambda a: HandsOnCapsule(hb.Buffer.from_host(a, copy=True)),
    "an hl.Buffer's capsule": lambda a: HandsOnCapsule(hl.Buffer(a.copy())),
    "__array__ only": lambda a: ArrayLike(a),
}


@pytest.mark.parametrize("kind", list(INPUTS))
def test_an_input_of_every_host_kind_is_read(add, kind):
    src = image(3)
    given = INPUTS[kind](src)
    out = np.zeros(SHAPE, np.uint8)
    moved = Moves()
    add(given, OFFSET, out)
    np.testing.assert_array_equal(out, added(src))
    assert moved() == ((1, NBYTES, 1, NBYTES) if on_opencl(add) else NONE)


def test_a_float8_tensor_through_a_uint8_pipeline_is_bit_exact(add):
    """float8_e4m3fn carries Halide's uint8: every byte, NaNs included, goes through as bits."""
    assert hb.dtype("float8_e4m3fn").halide_type == hb.dtype("uint8").halide_type
    bits = np.arange(NBYTES, dtype=np.int64).astype(np.uint8).reshape(SHAPE)  # every pattern
    t = torch.from_numpy(bits.copy()).view(torch.float8_e4m3fn)
    out = torch.full(SHAPE, float("nan"), dtype=torch.float8_e4m3fn)
    add(t, OFFSET, out)
    np.testing.assert_array_equal(out.view(torch.uint8).numpy(), added(bits))
    np.testing.assert_array_equal(t.view(torch.uint8).numpy(), bits)  # the input is left alone


def test_bfloat16_tensors_match_torch_bit_for_bit(built):
    """affine_bf16: bfloat16(float(in) * 3 + float(x) * 0.25), against torch computing the same
    in float32 and rounding once to bfloat16."""
    p = built["bf16"]
    bits = random_bf16(np.random.default_rng(4), SHAPE).view(np.int16)
    t = torch.from_numpy(bits.copy()).view(torch.bfloat16)
    out = torch.full(SHAPE, float("nan"), dtype=torch.bfloat16)
    x = torch.arange(SHAPE[1], dtype=torch.float32)[None, :]  # Halide's x runs along the last axis
    expected = (t.to(torch.float32) * 3 + x * 0.25).to(torch.bfloat16)
    moved = Moves()
    p(t, out)
    assert moved() == NONE
    assert torch.equal(out.view(torch.int16), expected.view(torch.int16))
    given = torch.zeros(SHAPE, dtype=torch.bfloat16)
    assert p(t, given) is given  # the tensor given is the result
    assert torch.equal(given.view(torch.int16), expected.view(torch.int16))


# ---------------------------------------------------------------------------------------------
# Device memory: pyopencl arrays
# ---------------------------------------------------------------------------------------------


def test_pyopencl_arrays_in_and_out_of_an_opencl_pipeline_move_nothing(built, queue):
    import pyopencl.array as cla

    p = built["opencl"]
    src = image(5)
    inp, out = cla.to_device(queue, src), cla.zeros(queue, SHAPE, np.uint8)
    queue.finish()
    moved = Moves()
    p(inp, OFFSET, out)
    assert moved() == NONE  # computed where both already are
    np.testing.assert_array_equal(out.get(queue=queue), added(src))
    # A host input goes up once; the result still stays in the array's memory.
    out2 = cla.zeros(queue, SHAPE, np.uint8)
    queue.finish()
    returned = p(src, OFFSET, out2)
    del returned
    gc.collect()
    assert moved() == up(NBYTES)
    np.testing.assert_array_equal(out2.get(queue=queue), added(src))


def test_a_pyopencl_output_of_a_host_pipeline_is_uploaded_once(built, queue):
    import pyopencl.array as cla

    p = built["host"]
    src = image(6)
    out = cla.zeros(queue, SHAPE, np.uint8)
    queue.finish()
    moved = Moves()
    p(src, OFFSET, out)
    uploads = moved()[:2]
    # (The host pipeline is given a current host copy of the output first, as of any buffer: a
    # download that is not asserted here.)
    assert uploads == (1, NBYTES)
    np.testing.assert_array_equal(out.get(queue=queue), added(src))


def test_a_pyopencl_input_of_a_host_pipeline_comes_down_once(built, queue):
    import pyopencl.array as cla

    p = built["host"]
    src = image(7)
    inp = cla.to_device(queue, src)
    queue.finish()
    out = np.zeros(SHAPE, np.uint8)
    moved = Moves()
    p(inp, OFFSET, out)
    assert moved() == down(NBYTES)
    np.testing.assert_array_equal(out, added(src))


# ---------------------------------------------------------------------------------------------
# Outputs that keep their own rule: our Buffers, hl.Buffer, typed capsules
# ---------------------------------------------------------------------------------------------


def test_our_buffer_output_stays_on_the_device_until_read(built):
    p = built["opencl"]
    src = image(8)
    out = hb.Buffer(SHAPE, "uint8")
    moved = Moves()
    assert p(src, OFFSET, out) is out
    assert moved() == up(NBYTES) and out.device_dirty()
    np.testing.assert_array_equal(np.asarray(out), added(src))
    assert moved() == down(NBYTES)


@pytest.mark.parametrize("route", ["hl.Buffer", "its capsule"])
def test_an_hl_buffer_output_keeps_its_own_residency(add, route):
    """Left on the device after an OpenCL pipeline (Halide's flags say device_dirty, nothing came
    down); the hl.Buffer's own copy_to_host() gives the result. On the host it is there."""
    src = image(9)
    h = hl.Buffer(hl.UInt(8), [SHAPE[1], SHAPE[0]])
    given = h if route == "hl.Buffer" else HandsOnCapsule(h)
    moved = Moves()
    returned = add(src, OFFSET, given)
    assert isinstance(returned, hb.Buffer) and returned.shape == SHAPE
    if on_opencl(add):
        assert moved() == up(NBYTES)
        assert h.device_dirty() and returned.device_dirty()  # one residency state
        h.copy_to_host()
        assert not h.device_dirty()
    else:
        assert moved() == NONE and not h.device_dirty()
    np.testing.assert_array_equal(np.asarray(h), added(src))


def test_our_buffer_handed_on_as_a_capsule_is_that_buffer(built):
    """An object handing on one of our Buffers' capsules is that Buffer's residency state: the
    result stays on the device, marked in that Buffer, and comes down once when it is read."""
    p = built["opencl"]
    src = image(10)
    out = hb.Buffer(SHAPE, "uint8")
    moved = Moves()
    returned = p(src, OFFSET, HandsOnCapsule(out))
    assert moved() == up(NBYTES)
    assert out.device_dirty() and returned.shares_storage_with(out)
    np.testing.assert_array_equal(np.asarray(out), added(src))
    assert moved() == down(NBYTES)
    # As an input, device dirty on our device: used there as it is.
    again = hb.Buffer(SHAPE, "uint8")
    p(HandsOnCapsule(out), OFFSET, again)
    assert moved() == NONE
    np.testing.assert_array_equal(np.asarray(again), added(added(src)))


def test_our_capsule_keeps_the_buffer_alive():
    gc.collect()
    before = live_counts()
    b = hb.Buffer((3, 4), "float32")
    b.numpy(writable=True)[...] = np.arange(12, dtype=np.float32).reshape(3, 4)
    capsule = b._get_halide_buffer_t_capsule()
    pointer = capsule_pointer(capsule)
    assert pointer == b._get_raw_halide_buffer_t()
    del b
    gc.collect()
    raw = HalideBufferT.from_address(pointer)  # still the view's struct, its memory still held
    assert (raw.type.code, raw.type.bits, raw.type.lanes) == (2, 32, 1)
    assert halide_dims(raw) == [(0, 4, 1), (0, 3, 4)]
    assert list((ctypes.c_float * 12).from_address(raw.host)) == list(range(12))
    assert live_counts()["storages"] == before["storages"] + 1
    del raw, capsule
    gc.collect()
    assert live_counts() == before


# ---------------------------------------------------------------------------------------------
# Refusals: each names the argument, and nothing is written
# ---------------------------------------------------------------------------------------------


def grad_refused(p, argument):
    return (rf"^{p.name}\(\): argument '{argument}': the Tensor requires grad, and a Halide pipeline computes no "
            r"gradient; pass x.detach\(\)$")


def test_a_tensor_that_requires_grad_is_refused_naming_the_argument(add):
    needs_grad = torch.zeros(SHAPE, dtype=torch.float32, requires_grad=True)  # refused before its type is
    with pytest.raises(TypeError, match=grad_refused(add, "input")):
        add(needs_grad, OFFSET, np.zeros(SHAPE, np.uint8))
    with pytest.raises(TypeError, match=grad_refused(add, add.argument_names[2].replace("$", "[$]"))):
        add(image(11), OFFSET, needs_grad)


def test_a_detached_tensor_is_taken(built):
    p = built["bf16"]
    inp = torch.ones(SHAPE, dtype=torch.bfloat16, requires_grad=True)
    out = torch.zeros(SHAPE, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match=grad_refused(p, "inp")):
        p(inp, out)
    assert not out.any()
    p(inp.detach(), out)  # what the message says to do
    x = torch.arange(SHAPE[1], dtype=torch.float32)[None, :]
    assert torch.equal(out, (3 + x * 0.25).expand(SHAPE).to(torch.bfloat16))


def test_an_object_holding_no_memory_is_refused_naming_the_argument(add):
    out_name = add.argument_names[2]
    with pytest.raises(TypeError, match=rf"^{add.name}\(\): argument 'input': object holds no memory a "
                                        r"pipeline can take; pass a halide_buffer.Buffer, a NumPy array"):
        add(object(), OFFSET, np.zeros(SHAPE, np.uint8))
    with pytest.raises(TypeError, match=rf"argument '{out_name.replace('$', '[$]')}': object holds no memory"):
        add(image(12), OFFSET, object())


class NamedCapsule:
    """A typed-capsule provider whose capsule bears another name (another ABI version)."""

    def __init__(self, name):
        self.name = name
        self.pointer = ctypes.c_void_p(1)  # never read: the name is checked first

    def _get_halide_buffer_t_capsule(self):
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return new(self.pointer, self.name, None)


def test_a_capsule_of_another_name_is_refused_naming_the_argument(add):
    out = np.zeros(SHAPE, np.uint8)
    for name in (b"halide.halide_buffer_t.v20", b"dltensor"):
        with pytest.raises(ValueError, match=rf"^{add.name}\(\): argument 'input': NamedCapsule._get_halide_buffer_t"
                                             rf"_capsule\(\) returned a capsule named '{name.decode()}', not "
                                             r"'halide.halide_buffer_t.v21'"):
            add(NamedCapsule(name), OFFSET, out)
    assert not out.any()


def test_a_capsule_method_returning_no_capsule_is_a_type_error(add):
    class Broken:
        def _get_halide_buffer_t_capsule(self):
            return 7

    with pytest.raises(TypeError, match=rf"^{add.name}\(\): argument 'input': Broken._get_halide_buffer_t_capsule"
                                        r"\(\) returned int, not a capsule"):
        add(Broken(), OFFSET, np.zeros(SHAPE, np.uint8))


def test_what_the_capsule_method_raises_propagates(add):
    raised = KeyError("the provider's own error")

    class Failing:
        def _get_halide_buffer_t_capsule(self):
            raise raised

    for args in [(Failing(), OFFSET, np.zeros(SHAPE, np.uint8)), (image(13), OFFSET, Failing())]:
        with pytest.raises(KeyError) as info:
            add(*args)
        assert info.value is raised


def read_only_ndarray():
    base = np.zeros(SHAPE, np.uint8)
    view = base.view()
    view.flags.writeable = False
    return view, lambda: base


def read_only_bytes():
    memory = bytes(NBYTES)
    return memoryview(memory).cast("B", SHAPE), lambda: np.frombuffer(memory, np.uint8).reshape(SHAPE)


@pytest.mark.parametrize("make", [read_only_ndarray, read_only_bytes], ids=["read-only ndarray", "bytes"])
def test_read_only_output_memory_is_refused_and_not_written(add, make):
    out, memory = make()
    with pytest.raises(hb.ReadOnlyError, match=rf"^{add.name}\(\): argument '[^']+': the output's memory is "
                                               r"read-only, and the pipeline writes it; pass writable memory"):
        add(image(14), OFFSET, out)
    assert not memory().any()


def test_a_jax_array_is_refused_as_an_output(built):
    import jax.numpy as jnp

    p = built["host"]
    out = jnp.array(np.zeros(SHAPE, np.uint8), copy=True)
    try:
        p(image(15), OFFSET, out)
    except (BufferError, TypeError) as e:
        assert "read-only" in str(e) or "immutable" in str(e), str(e)
    else:
        raise AssertionError("the JAX array was taken as an output")
    assert not np.asarray(out).any()
