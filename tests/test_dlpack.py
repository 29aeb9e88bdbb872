"""DLPack both ways with the real consumers and producers: NumPy, PyTorch (CPU), JAX (CPU).
Every dtype each peer supports, bits compared exactly; versions, flags, leases, ownership."""

import ctypes
import gc
import os
import subprocess
import sys
import weakref

import ml_dtypes
import numpy as np
import pytest
import torch

import halide_buffer as hb

import cuda_standin
from common import (ALL_DTYPES, DLTensor, ExchangeAPI, Moves, NONE, bits_of, counts, down, filled, live_counts,
                    random_bits)

READ_ONLY, IS_COPIED, PADDED = 1, 2, 4

ctypes.pythonapi.PyCapsule_GetPointer.restype = ctypes.c_void_p
ctypes.pythonapi.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
ctypes.pythonapi.PyCapsule_GetName.restype = ctypes.c_char_p
ctypes.pythonapi.PyCapsule_GetName.argtypes = [ctypes.py_object]


def capsule_name(capsule):
    return ctypes.pythonapi.PyCapsule_GetName(capsule).decode()


def versioned_header(capsule):
    """(major, minor, flags, data address) of a 'dltensor_versioned' capsule."""
    address = ctypes.pythonapi.PyCapsule_GetPointer(capsule, b"dltensor_versioned")
    major, minor = (ctypes.c_uint32 * 2).from_address(address)
    flags = ctypes.c_uint64.from_address(address + 24).value
    data = ctypes.c_void_p.from_address(address + 32).value
    return major, minor, flags, data


def versioned_device(capsule):
    """The (device type, device id) of a 'dltensor_versioned' capsule's tensor."""
    address = ctypes.pythonapi.PyCapsule_GetPointer(capsule, b"dltensor_versioned")
    return tuple((ctypes.c_int32 * 2).from_address(address + 40))


def data_address(b):
    return np.asarray(b).__array_interface__["data"][0]


NUMPY_DTYPES = [t.name for t in hb.dtypes() if t.format]  # NumPy's DLPack carries no ml_dtypes type
TORCH_DTYPES = {
    "bool": torch.bool, "int8": torch.int8, "int16": torch.int16, "int32": torch.int32,
    "int64": torch.int64, "uint8": torch.uint8, "uint16": torch.uint16, "uint32": torch.uint32,
    "uint64": torch.uint64, "float16": torch.float16, "float32": torch.float32,
    "float64": torch.float64, "complex64": torch.complex64, "complex128": torch.complex128,
    "bfloat16": torch.bfloat16, "float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2,
    "float8_e4m3fnuz": torch.float8_e4m3fnuz, "float8_e5m2fnuz": torch.float8_e5m2fnuz,
    "float8_e8m0fnu": torch.float8_e8m0fnu,
}
FLOAT8 = [n for n in ALL_DTYPES if n.startswith("float8_")]


def torch_bits(t):
    """A tensor's raw bytes as a NumPy uint8 array shaped like it plus one axis of bytes."""
    raw = t.contiguous().view(torch.uint8).numpy()
    return raw.reshape(tuple(t.shape) + (t.element_size(),))


# --- NumPy ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", NUMPY_DTYPES)
def test_numpy_both_ways_exactly(name):
    b, src = filled((3, 5), name)
    a = np.from_dlpack(b)
    assert a.dtype == src.dtype and a.__array_interface__["data"][0] == data_address(b)
    np.testing.assert_array_equal(bits_of(a), bits_of(src))
    back = hb.from_dlpack(src)
    assert back.dtype == name and data_address(back) == src.__array_interface__["data"][0]
    np.testing.assert_array_equal(bits_of(np.asarray(back)), bits_of(src))


def test_numpy_read_only_both_ways():
    src = np.arange(6, dtype=np.int16)
    src.flags.writeable = False
    b = hb.from_dlpack(src)  # NumPy sets the read-only flag: the buffer refuses writes
    assert b.readonly
    with pytest.raises(BufferError, match="read-only"):
        b.numpy(writable=True)
    exported = np.from_dlpack(hb.Buffer.from_host(src))
    assert not exported.flags.writeable  # our read-only flag, honoured by NumPy
    with pytest.raises(BufferError, match=r"__dlpack__\(\): the buffer is read-only, which a legacy capsule "
                                          r"cannot say; call __dlpack__\(max_version=\(1, 0\)\), or copy=True"):
        hb.Buffer.from_host(src).__dlpack__()


def test_strided_and_negative_strides_travel_as_they_are():
    a = np.arange(24, dtype=np.float32).reshape(4, 6)[::-1, ::2]
    b = hb.from_dlpack(a)
    assert b.strides == a.strides
    np.testing.assert_array_equal(np.asarray(b), a)
    np.testing.assert_array_equal(np.from_dlpack(b[1:, ::-1]), a[1:, ::-1])


def test_zero_size_and_zero_dim_tensors():
    for a in (np.zeros((0, 3), np.float32), np.array(7.5, np.float64)):
        b = hb.from_dlpack(a)
        assert b.shape == a.shape
        np.testing.assert_array_equal(np.from_dlpack(b), a)


# --- PyTorch -------------------------------------------------------------------------------------

@pytest.mark.needs_torch
@pytest.mark.parametrize("name", list(TORCH_DTYPES))
def test_torch_both_ways_exactly(name):
    b, src = filled((3, 5), name)
    t = torch.from_dlpack(b)
    assert t.dtype == TORCH_DTYPES[name] and t.data_ptr() == data_address(b)
    np.testing.assert_array_equal(torch_bits(t), bits_of(src))
    back = hb.from_dlpack(t)
    assert back.dtype == name and data_address(back) == t.data_ptr()
    np.testing.assert_array_equal(bits_of(np.asarray(back)), bits_of(src))


@pytest.mark.needs_torch
@pytest.mark.parametrize("name", ["float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz"])
def test_float8_codes_pytorch_lacks_are_refused_by_pytorch(name):
    b, _ = filled((3, 5), name)
    with pytest.raises(BufferError, match="Unsupported"):
        torch.from_dlpack(b)


@pytest.mark.needs_torch
def test_a_torch_write_is_a_host_write():
    b = hb.Buffer((4,), "float32")
    b.copy_to_device()
    b.set_device_dirty()
    t = torch.from_dlpack(b)  # the lease downloads first, then marks the host dirty
    assert b.host_dirty() and not b.device_dirty() and b.transfers.to_host == 1
    t += 2
    b.copy_to_device()
    np.testing.assert_array_equal(hb.opencl.as_array(b, writable=False).get(), [2, 2, 2, 2])


@pytest.mark.needs_torch
def test_the_producer_lives_as_long_as_the_buffer_and_its_views():
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    alive = weakref.ref(t)
    b = hb.from_dlpack(t)
    view = b[1:, ::2]
    del t, b
    gc.collect()
    assert alive() is not None
    np.testing.assert_array_equal(np.asarray(view), np.arange(12, dtype=np.float32).reshape(3, 4)[1:, ::2])
    del view
    gc.collect()
    assert alive() is None


@pytest.mark.needs_torch
def test_packed_float4_from_torch_unpacks_on_request():
    x2 = torch.tensor([0x21, 0x7F, 0x09], dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    with pytest.raises(BufferError, match=r"from_dlpack\(\): the float4_e2m1fn values are packed \(4 bits each, "
                                          r"several to a byte\), which no NumPy dtype can view; pass copy=True"):
        hb.from_dlpack(x2)
    b = hb.from_dlpack(x2, copy=True)
    assert b.shape == (3, 2) and b.dtype == "float4_e2m1fn"
    # DLPack's packing: the low nibble is the first value.
    assert np.asarray(b).view(np.uint8).tolist() == [[1, 2], [0xF, 0x7], [0x9, 0x0]]


# --- The float8 cases of ExecuTorch's change, reproduced ---------------------------------------

class DLPackOnly:
    """A producer with only __dlpack__ (no __dlpack_device__, no exchange API), recording calls."""

    def __init__(self, tensor):
        self.tensor, self.calls = tensor, []

    def __dlpack__(self, **kwargs):
        self.calls.append(kwargs)
        return self.tensor.__dlpack__(**kwargs)


@pytest.mark.needs_torch
@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("route", ["wrapper", "legacy capsule", "versioned capsule"])
def test_executorch_float8_cases(name, route):
    src = random_bits((2, 8), name, seed=5)
    t = torch.from_numpy(src.view(np.uint8)).view(TORCH_DTYPES[name])
    producer = {"wrapper": lambda: DLPackOnly(t), "legacy capsule": lambda: t.__dlpack__(),
                "versioned capsule": lambda: t.__dlpack__(max_version=(1, 0))}[route]()
    b = hb.from_dlpack(producer)
    assert b.dtype == name and data_address(b) == t.data_ptr()
    np.testing.assert_array_equal(bits_of(np.asarray(b)), bits_of(src))
    if route == "wrapper":  # what we ask a producer for: the newest version we read
        assert producer.calls == [{"max_version": (1, 3)}]


@pytest.mark.needs_torch
@pytest.mark.parametrize("name", ["float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu"])
def test_float8_variants_arrive_as_themselves(name):
    t = torch.zeros(3, dtype=TORCH_DTYPES[name])
    assert hb.from_dlpack(t).dtype == name


@pytest.mark.needs_torch
def test_a_float8_buffer_to_torch_and_back_is_the_same_memory_labelled_1_1():
    b, src = filled((3, 5), "float8_e4m3fn")
    assert versioned_header(b.__dlpack__(max_version=(1, 0)))[:2] == (1, 1)
    back = hb.from_dlpack(torch.from_dlpack(b))
    assert data_address(back) == data_address(b)
    np.testing.assert_array_equal(bits_of(np.asarray(back)), bits_of(src))



@pytest.mark.parametrize("max_version", [None, (1, 0)], ids=["legacy", "versioned"])
@pytest.mark.parametrize("made", ["owned", "wrapped"])
def test_our_capsule_dropped_unconsumed_releases_its_storage(max_version, made):
    """A capsule of our own that no consumer takes: dropping it deletes the tensor, which lets go
    of the storage and of the array it wraps."""
    gc.collect()  # storages of earlier tests that only garbage still holds
    before = live_counts()
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    alive = weakref.ref(a)
    b = hb.Buffer.from_host(a) if made == "wrapped" else hb.Buffer.from_host(a, copy=True)
    del a
    capsule = b.__dlpack__(max_version=max_version)
    assert capsule_name(capsule) == ("dltensor" if max_version is None else "dltensor_versioned")
    del b
    gc.collect()
    assert live_counts()["storages"] == before["storages"] + 1  # the capsule's tensor holds it
    assert (alive() is not None) == (made == "wrapped")
    del capsule
    gc.collect()
    assert live_counts() == before
    assert alive() is None

def test_copy_requests_are_passed_to_the_producer():
    producer = DLPackOnly(np.arange(3.0))
    out = hb.from_dlpack(producer, copy=True)
    assert producer.calls == [{"max_version": (1, 3), "copy": True}]
    assert data_address(out) != producer.tensor.__array_interface__["data"][0]  # NumPy copied, once


# --- JAX (legacy capsules only) --------------------------------------------------------------------

@pytest.mark.needs_jax
@pytest.mark.parametrize("name", ["bfloat16"] + FLOAT8)
def test_jax_both_ways_exactly(name):
    import jax.numpy as jnp

    b, src = filled((3, 5), name)
    j = jnp.from_dlpack(b)
    assert j.dtype == src.dtype
    np.testing.assert_array_equal(bits_of(np.asarray(j)), bits_of(src))
    back = hb.from_dlpack(j)
    assert back.dtype == name
    np.testing.assert_array_equal(bits_of(np.asarray(back)), bits_of(src))


@pytest.mark.needs_jax
def test_jax_packed_float4_unpacks_on_request():
    import jax.numpy as jnp

    values = np.array([0.5, 1, 1.5, 2, 3, 4, 6, -1], dtype=ml_dtypes.float4_e2m1fn)
    j = jnp.asarray(values)
    with pytest.raises(BufferError, match="packed"):
        hb.from_dlpack(j)
    np.testing.assert_array_equal(np.asarray(hb.from_dlpack(j, copy=True)).view(np.uint8), values.view(np.uint8))


# --- __dlpack__: versions, flags, arguments ------------------------------------------------------

@pytest.mark.parametrize("name", ALL_DTYPES)
def test_every_dtype_exports_versioned_with_the_lowest_label(name):
    b, _ = filled((3, 5), name)
    t = hb.dtype(name)
    capsule = b.__dlpack__(max_version=(1, 3))
    assert capsule_name(capsule) == "dltensor_versioned"
    major, minor, flags, data = versioned_header(capsule)
    newer = t.dlpack_type[0] >= 7 or t.dlpack_padded
    assert (major, minor) == (1, 1 if newer else 0)
    assert flags == (PADDED if t.dlpack_padded else 0) and data == data_address(b)
    back = hb.from_dlpack(capsule)  # our own capsule comes back: the same memory
    assert back.dtype == name and data_address(back) == data


@pytest.mark.parametrize("name", [t.name for t in hb.dtypes() if t.dlpack_padded])
def test_sub_byte_dtypes_need_a_versioned_capsule(name):
    b, _ = filled((3, 5), name)
    with pytest.raises(BufferError, match=rf"__dlpack__\(\): {name} is stored one element per byte, which only "
                                          r"a versioned capsule can say .* call __dlpack__\(max_version=\(1, 1\)\)"):
        b.__dlpack__()
    with pytest.raises(BufferError):
        b.__dlpack__(max_version=(0, 8))


def test_legacy_and_versioned_requests():
    b, _ = filled((3, 5), "float32")
    assert capsule_name(b.__dlpack__()) == "dltensor"
    assert capsule_name(b.__dlpack__(max_version=(0, 9))) == "dltensor"
    assert capsule_name(b.__dlpack__(max_version=(1, 0))) == "dltensor_versioned"
    assert capsule_name(b.__dlpack__(max_version=(2, 0))) == "dltensor_versioned"  # minor versions are compatible
    assert b.__dlpack_device__() == (1, 0)


@pytest.mark.parametrize("ordinal", [0, 1])
def test_dlpack_device_names_the_cuda_device_of_a_buffer_on_one(ordinal):
    """__dlpack_device__() is (2, ordinal) while the buffer has a CUDA device copy: a consumer that
    asks __dlpack__ for that device gets the device memory, with no download (a buffer on a device
    reported as (1, 0) would be downloaded for it); (1, 0) again once the device copy is freed.
    Against the CUDA driver stand-in."""
    if not cuda_standin.active():
        pytest.skip(cuda_standin.why_inactive())
    b, src = filled((3, 4), "float32")
    assert b.__dlpack_device__() == (1, 0)
    b.copy_to_device(hb.cuda.device(ordinal))
    b.set_device_dirty()  # a kernel wrote the device copy: the host copy is stale
    assert b.__dlpack_device__() == (2, ordinal)
    moves = Moves(b)
    capsule = b.__dlpack__(max_version=(1, 0), dl_device=b.__dlpack_device__())
    assert versioned_device(capsule) == (2, ordinal)
    assert moves() == NONE and b.device_dirty()
    del capsule
    np.testing.assert_array_equal(np.asarray(b), src)
    assert moves() == down(src.nbytes)
    assert b.__dlpack_device__() == (2, ordinal)  # the device copy is still there, now in sync
    b.device_free()
    assert b.__dlpack_device__() == (1, 0)


def test_copy_true_copies_and_says_so_copy_false_never_copies():
    b, src = filled((3, 5), "int32")
    major, minor, flags, data = versioned_header(b.__dlpack__(max_version=(1, 0), copy=True))
    assert flags == IS_COPIED and data != data_address(b)
    assert versioned_header(b.__dlpack__(max_version=(1, 0), copy=False))[3] == data_address(b)
    copied = np.from_dlpack(b, copy=True)
    copied[0, 0] += 1
    assert np.asarray(b)[0, 0] == src[0, 0]


@pytest.mark.parametrize("kwargs, error, message", [
    ({"stream": 1}, BufferError, r"__dlpack__\(\): stream must be None for data on the CPU, not 1"),
    ({"dl_device": (2, 0)}, BufferError, r"__dlpack__\(\): dl_device \(2, 0\) is not where the data is \(1, 0\)"),
    ({"dl_device": (1, 3)}, BufferError, r"dl_device \(1, 3\) is not where the data is"),
    ({"dl_device": "cpu"}, TypeError, r"__dlpack__\(\): dl_device must be a tuple of two ints such as \(1, 0\)"),
    ({"max_version": 1}, TypeError, r"__dlpack__\(\): max_version must be a tuple of two ints such as \(1, 0\)"),
    ({"copy": "yes"}, TypeError, r"__dlpack__\(\): copy must be True, False or None, not 'yes'"),
])
def test_dlpack_arguments_are_checked(kwargs, error, message):
    b, _ = filled((3, 5), "float32")
    with pytest.raises(error, match=message):
        b.__dlpack__(**kwargs)
    assert b.host_dirty() and live_counts()["storages"] >= 1
    assert capsule_name(b.__dlpack__(dl_device=(1, 0))) == "dltensor"


def test_a_cpu_export_is_a_writable_lease_unless_read_only():
    b = hb.Buffer((2,), "float32")
    b.copy_to_device()
    b.set_device_dirty()
    np.from_dlpack(b)
    assert b.host_dirty() and not b.device_dirty()


# --- the C exchange API (DLPack 1.3) ---------------------------------------------------------------

def exchange_api(cls):
    capsule = cls.__dlpack_c_exchange_api__
    assert capsule_name(capsule) == "dlpack_exchange_api"
    return ExchangeAPI.from_address(ctypes.pythonapi.PyCapsule_GetPointer(capsule, b"dlpack_exchange_api"))


# The table's functions need the GIL: ctypes.PYFUNCTYPE keeps it.
FROM_PY = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(ctypes.c_void_p))
TO_PY = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.py_object))
STREAM = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p))


def test_our_exchange_api_table():
    api = exchange_api(hb.Buffer)
    assert (api.major, api.minor, api.prev_api) == (1, 3, None)
    assert all([api.managed_tensor_allocator, api.managed_tensor_from_py_object_no_sync,
                api.managed_tensor_to_py_object_no_sync, api.current_work_stream])
    b, src = filled((3, 5), "bfloat16")
    managed = ctypes.c_void_p()
    assert FROM_PY(api.managed_tensor_from_py_object_no_sync)(b, ctypes.byref(managed)) == 0
    assert ctypes.c_void_p.from_address(managed.value + 32).value == data_address(b)
    out = ctypes.py_object()
    assert TO_PY(api.managed_tensor_to_py_object_no_sync)(managed.value, ctypes.byref(out)) == 0
    assert isinstance(out.value, hb.Buffer) and data_address(out.value) == data_address(b)
    np.testing.assert_array_equal(bits_of(np.asarray(out.value)), bits_of(src))
    stream = ctypes.c_void_p(1)
    assert STREAM(api.current_work_stream)(1, 0, ctypes.byref(stream)) == 0 and not stream.value
    with pytest.raises(TypeError, match="expected a halide_buffer.Buffer"):
        FROM_PY(api.managed_tensor_from_py_object_no_sync)(np.zeros(2), ctypes.byref(managed))


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def managed_description(address):
    """What the versioned managed tensor at `address` tells its consumer: its version, flags,
    device, dtype, shape and strides (in elements), and its data address."""
    major, minor = (ctypes.c_uint32 * 2).from_address(address)
    t = DLTensor.from_address(address + 32)
    axes = (lambda pointer: tuple((ctypes.c_int64 * t.ndim).from_address(pointer)) if t.ndim else ())
    return {"version": (major, minor), "flags": ctypes.c_uint64.from_address(address + 24).value,
            "device": (t.device.device_type, t.device.device_id), "byte_offset": t.byte_offset,
            "dtype": (t.dtype.code, t.dtype.bits, t.dtype.lanes), "shape": axes(t.shape),
            "strides": axes(t.strides), "data": t.data}


def export_seen(b, way):
    """`b` exported one way (a versioned capsule of __dlpack__, or our exchange API's
    managed_tensor_from_py_object_no_sync), as the consumer sees it while it holds the tensor:
    the tensor's description (its data as an offset from where the buffer's current copy is) and
    the buffer's flags and transfers after the export."""
    cuda = b.__dlpack_device__()[0] == 2
    if way == "capsule":
        capsule = b.__dlpack__(max_version=(1, 3), **({"stream": -1} if cuda else {}))
        address = ctypes.pythonapi.PyCapsule_GetPointer(capsule, b"dltensor_versioned")
    else:
        managed = ctypes.c_void_p()
        assert FROM_PY(exchange_api(hb.Buffer).managed_tensor_from_py_object_no_sync)(b, ctypes.byref(managed)) == 0
        address = managed.value
    seen = managed_description(address)
    residency = (b.host_dirty(), b.device_dirty(), counts(b.transfers))
    if way == "exchange":
        DELETER(ctypes.c_void_p.from_address(address + 16).value)(address)
    home = b.__cuda_array_interface__["data"][0] if cuda else data_address(b)
    if seen["data"] is not None:
        seen["data"] -= home
    return seen, residency


def read_only_ramp():
    a = np.arange(15, dtype=np.float32).reshape(3, 5)
    a.flags.writeable = False
    return hb.Buffer.from_host(a)


def on_cuda(b, newer):
    b.copy_to_device(hb.cuda.device())
    if newer:
        b.set_device_dirty()
    return b


def opencl_newer():
    b, _ = filled((3, 5), "int16")
    b.copy_to_device()
    b.set_device_dirty()
    return b


EXPORTED = {
    "owned": lambda: filled((3, 5), "float32")[0],
    "read-only": read_only_ramp,
    "a view with steps and a backward axis": lambda: filled((4, 6), "bfloat16")[0][::-1, ::2],
    "padded sub-byte": lambda: filled((3, 4), "float4_e2m1fn")[0],
    "empty": lambda: hb.Buffer((0, 3), "uint8"),
    "device copy newer (OpenCL)": opencl_newer,
    "device copy newer (CUDA)": lambda: on_cuda(filled((3, 5), "int16")[0], True),
    "read-only, on CUDA": lambda: on_cuda(read_only_ramp(), False),
}


@pytest.mark.parametrize("name", EXPORTED)
def test_dlpack_and_the_exchange_api_export_a_buffer_alike(name):
    """__dlpack__ and our exchange API are one export (interop/dlpack.cpp's run_export()): the
    same tensor (flags for read-only and padded, device, layout, memory) and the same lease (a
    download where the device copy is newer, a writer's mark unless read-only). The CUDA cases
    run against the driver stand-in."""
    if "CUDA" in name and not cuda_standin.active():
        pytest.skip(cuda_standin.why_inactive())
    made = EXPORTED[name]
    capsule, exchange = export_seen(made(), "capsule"), export_seen(made(), "exchange")
    assert capsule == exchange


@pytest.mark.needs_torch
def test_torch_tensors_come_in_through_torchs_exchange_api():
    class NoDLPack(torch.Tensor):  # keeps torch's exchange API; its __dlpack__ must not be needed
        def __dlpack__(self, *args, **kwargs):
            raise AssertionError("the capsule path was taken")

    t = torch.arange(6, dtype=torch.float32).as_subclass(NoDLPack)
    b = hb.from_dlpack(t)
    np.testing.assert_array_equal(np.asarray(b), np.arange(6))
    assert data_address(b) == t.data_ptr()


@pytest.mark.needs_torch
def test_a_cpu_tensor_comes_in_through_torchs_table_without_a_cuda_driver(tmp_path):
    """A CPU tensor has no stream to order on: its import asks nothing of CUDA, so it works in a
    process with no driver at all. (Run elsewhere than the repository: an installed wheel's
    tests must import the wheel, not the tree's sources.)"""
    script = ("import numpy as np, torch, halide_buffer as hb; "
              "print(np.asarray(hb.from_dlpack(torch.arange(3.0))).tolist())")
    env = dict(os.environ, HALIDE_BUFFER_CUDA_LIBRARY="/nonexistent/libcuda.so.1")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[0.0, 1.0, 2.0]"


@pytest.mark.needs_torch
def test_tensors_torch_itself_refuses_to_export_are_still_refused():
    # (A lazy conjugate, which torch's __dlpack__ refuses too, is read through a copy of its
    # values: tests/test_negated_views.py.)
    with pytest.raises(BufferError, match="require gradient"):
        hb.from_dlpack(torch.ones(2, requires_grad=True))


# --- ownership and leaks -----------------------------------------------------------------------

@pytest.mark.needs_torch
@pytest.mark.skipif(bool(os.environ.get("HALIDE_BUFFER_SANITIZER")),
                    reason="RSS under AddressSanitizer measures its quarantine and shadow memory, not our leaks")
def test_round_trips_leak_nothing():
    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096

    b, _ = filled((8, 8), "float32")
    src = np.arange(16.0)
    for _ in range(2000):  # warm up caches and allocators
        hb.from_dlpack(torch.from_dlpack(b))
    gc.collect()
    before, storages = rss(), live_counts()["storages"]
    for _ in range(100_000):
        t = torch.from_dlpack(b)
        np.from_dlpack(hb.from_dlpack(t)[1:])
        hb.from_dlpack(src.__dlpack__())
    gc.collect()
    assert live_counts()["storages"] == storages
    assert rss() - before < 16 * 2**20, f"RSS grew by {(rss() - before) / 2**20:.1f} MiB"


# --- the same tensor raises the same exception on every path -------------------------------------

TORCH_REFUSED = {
    "sparse-coo": lambda: torch.eye(3).to_sparse(),
    "sparse-csr": lambda: torch.eye(3).to_sparse_csr(),
    "quantized": lambda: torch.quantize_per_tensor(torch.rand(3), 0.1, 0, torch.quint8),
}


@pytest.mark.needs_torch
@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta state")
@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor.*deprecated")
@pytest.mark.parametrize("make", TORCH_REFUSED.values(), ids=TORCH_REFUSED.keys())
def test_a_tensor_pytorch_refuses_to_export_raises_pytorchs_own_error(make):
    t = make()
    with pytest.raises(Exception) as theirs:
        t.__dlpack__()
    with pytest.raises(type(theirs.value)) as ours:
        hb.from_dlpack(t)
    assert str(ours.value) == str(theirs.value) and "\n" not in str(ours.value)  # no C++ frames
