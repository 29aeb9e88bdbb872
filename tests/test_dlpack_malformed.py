"""hb.from_dlpack against hand-made DLPack tensors, malformed ones above all.

Every tensor here is built with ctypes, the way a C producer would build it: a
DLManagedTensor (legacy, capsule "dltensor") or DLManagedTensorVersioned (capsule
"dltensor_versioned") struct in memory that stays alive until the interpreter exits, with its
shape, strides and data beside it, wrapped in a capsule by PyCapsule_New. The capsule's
destructor follows the producer's rule: it calls the tensor's deleter only when the capsule
still has the name it was made with (a consumer that took the tensor renamed it to "used_...").

One deleter callback serves every tensor and counts its calls per struct, so each case checks
the ownership rules as well as the error: once the capsule, the buffer and every view are
gone, every deleter ran exactly once (or never, for a tensor with a NULL deleter). A check that
fails must leave the capsule unrenamed (its own destructor deletes the tensor); a tensor of
another major version, or one refused after it was taken, is deleted at once.

The capsule destructor is a Python callback, which ctypes cannot run while a Python exception
is pending: the tests drop capsules (and producers holding one) with `del`, never as the
temporaries of a call that raises.

The positive controls at the top show that the harness itself describes tensors correctly.
"""

import ctypes
import gc
import os
import pathlib
import re
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest

import halide_buffer as hb

from common import DLTensor

# ---------------------------------------------------------------------------------------------
# The DLPack ABI in ctypes (layouts of csrc/abi/dlpack_abi.h)
# ---------------------------------------------------------------------------------------------


class DLManagedTensor(ctypes.Structure):
    _fields_ = [
        ("dl_tensor", DLTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),  # void (*)(DLManagedTensor *)
    ]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("major", ctypes.c_uint32),
        ("minor", ctypes.c_uint32),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),  # void (*)(DLManagedTensorVersioned *)
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


assert ctypes.sizeof(DLTensor) == 48
assert ctypes.sizeof(DLManagedTensor) == 64
assert ctypes.sizeof(DLManagedTensorVersioned) == 80

READ_ONLY, IS_COPIED, SUBBYTE_PADDED = 1, 2, 4
CPU, CUDA, CUDA_HOST, OPENCL, ROCM, ROCM_HOST, CUDA_MANAGED = 1, 2, 3, 4, 10, 11, 13
INT, UINT, FLOAT, HANDLE, BFLOAT, COMPLEX, BOOL = 0, 1, 2, 3, 4, 5, 6
FLOAT6_E2M3FN, FLOAT4_E2M1FN = 15, 17

# ---------------------------------------------------------------------------------------------
# The producer: deleters, capsules, tensors
# ---------------------------------------------------------------------------------------------

DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

DELETES = Counter()  # struct address -> deleter calls
TENSORS = {}  # struct address -> Tensor (what a capsule's destructor deletes)
KEEP_ALIVE = []  # callbacks, names and tensor memory: alive until the interpreter exits


def _on_delete(address):
    DELETES[address] += 1


def _capsule_get(name, restype, argtypes):
    """A private prototype of a C API function: ctypes.pythonapi's own function objects are
    shared with every other module, whose argtypes must stay as they set them."""
    return ctypes.PYFUNCTYPE(restype, *argtypes)((name, ctypes.pythonapi))


_new_capsule = _capsule_get("PyCapsule_New", ctypes.py_object, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p])
_set_context = _capsule_get("PyCapsule_SetContext", ctypes.c_int, [ctypes.py_object, ctypes.c_void_p])
_get_name = _capsule_get("PyCapsule_GetName", ctypes.c_void_p, [ctypes.c_void_p])
_get_context = _capsule_get("PyCapsule_GetContext", ctypes.c_void_p, [ctypes.c_void_p])
_get_pointer = _capsule_get("PyCapsule_GetPointer", ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_void_p])


def _destroy_capsule(capsule):
    """The producer's capsule destructor: delete the tensor unless a consumer renamed the capsule.

    The context holds the name pointer the capsule was made with (NULL for a nameless one); a
    consumer's rename points the name elsewhere.
    """
    name = _get_name(capsule)
    if name != _get_context(capsule):
        return
    TENSORS[_get_pointer(capsule, name)].delete()


DELETER_FN = DELETER(_on_delete)
DESTRUCTOR_FN = CAPSULE_DESTRUCTOR(_destroy_capsule)
KEEP_ALIVE += [DELETER_FN, DESTRUCTOR_FN]
DELETER_ADDRESS = ctypes.cast(DELETER_FN, ctypes.c_void_p).value
DESTRUCTOR_ADDRESS = ctypes.cast(DESTRUCTOR_FN, ctypes.c_void_p).value

_NAMES = {}  # capsule name -> its NUL-terminated bytes, alive for good


def _name_address(name):
    if name is None:
        return None
    if name not in _NAMES:
        _NAMES[name] = ctypes.create_string_buffer(name.encode())
    return ctypes.addressof(_NAMES[name])


def capsule_name(capsule):
    """The capsule's current name (None when it has none)."""
    address = _get_name(id(capsule))
    return None if address is None else ctypes.string_at(address).decode()


FROM_ARRAY = object()  # a field taken from the tensor's values
NULL = None


def _int64s(values):
    if values is NULL:
        return NULL, None
    a = (ctypes.c_int64 * max(len(values), 1))(*values)
    return ctypes.addressof(a), a


class Tensor:
    """One managed tensor in ctypes memory, built from `values` (an ndarray) and overrides.

    Every DLTensor field can be replaced: `data` (an address or NULL), `shape` and `strides`
    (lists, or NULL), `ndim`, `dtype` ((code, bits, lanes)), `device` ((type, id)),
    `byte_offset`; `versioned` picks the struct, `version` and `flags` fill the versioned
    header, `deleter=False` leaves the deleter NULL.
    """

    def __init__(self, values=None, *, versioned=True, version=(1, 3), flags=0, data=FROM_ARRAY,
                 shape=FROM_ARRAY, strides=FROM_ARRAY, ndim=FROM_ARRAY, dtype=FROM_ARRAY,
                 device=(CPU, 0), byte_offset=0, deleter=True):
        if values is None:
            values = np.arange(6, dtype=np.int32).reshape(2, 3)
        self.values = values
        self.versioned = versioned
        if versioned:
            self.struct = DLManagedTensorVersioned()
            self.struct.major, self.struct.minor = version
            self.struct.flags = flags
        else:
            self.struct = DLManagedTensor()
        self.struct.deleter = DELETER_ADDRESS if deleter else None
        t = self.struct.dl_tensor
        t.data = values.ctypes.data if data is FROM_ARRAY else data
        t.device.device_type, t.device.device_id = device
        if shape is FROM_ARRAY:
            shape = list(values.shape)
        if strides is FROM_ARRAY:
            strides = [s // values.itemsize for s in values.strides]
        t.ndim = (0 if shape is NULL else len(shape)) if ndim is FROM_ARRAY else ndim
        if dtype is FROM_ARRAY:
            dtype = hb.dtype(values.dtype).dlpack_type
        t.dtype.code, t.dtype.bits, t.dtype.lanes = dtype
        t.shape, self._shape = _int64s(shape)
        t.strides, self._strides = _int64s(strides)
        t.byte_offset = byte_offset
        self.address = ctypes.addressof(self.struct)
        TENSORS[self.address] = self
        KEEP_ALIVE.append(self)

    @property
    def deletes(self):
        """How many times the deleter ran for this tensor."""
        return DELETES[self.address]

    def delete(self):
        """What the producer's capsule destructor does: call the deleter, if there is one."""
        if self.struct.deleter:
            DELETER(self.struct.deleter)(self.address)

    def capsule(self, name=FROM_ARRAY):
        """A new capsule owning the tensor (named for its struct unless `name` says otherwise)."""
        if name is FROM_ARRAY:
            name = "dltensor_versioned" if self.versioned else "dltensor"
        address = _name_address(name)
        c = _new_capsule(self.address, address, DESTRUCTOR_ADDRESS)
        if address is not None:
            _set_context(c, address)
        return c


class Producer:
    """A tensor library's object: __dlpack__ hands out a new capsule of its tensor."""

    def __init__(self, tensor):
        self.tensor = tensor
        self.calls = []

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        self.calls.append({"max_version": max_version, "copy": copy})
        return self.tensor.capsule()


def settle():
    """Collects garbage so that everything already dropped has been destroyed."""
    gc.collect()
    gc.collect()


def fails(exception, message):
    """pytest.raises for an exception whose message starts with `message`, taken literally."""
    return pytest.raises(exception, match="^" + re.escape(message))


# ---------------------------------------------------------------------------------------------
# Positive controls: the harness describes tensors correctly
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("versioned", [False, True], ids=["legacy", "versioned"])
def test_well_formed_tensor_imports_without_copy_and_is_deleted_once_when_last_view_dies(versioned):
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = Tensor(values, versioned=versioned)
    capsule = t.capsule()
    b = hb.from_dlpack(capsule)
    assert capsule_name(capsule) == ("used_dltensor_versioned" if versioned else "used_dltensor")
    assert b.shape == (3, 4) and b.dtype == hb.dtype("float32")
    assert not b.readonly
    a = np.asarray(b)
    assert a.ctypes.data == values.ctypes.data
    np.testing.assert_array_equal(a, values)
    row = b[1]
    column = b.sliced(1, 2)
    del capsule, b, a
    settle()
    assert t.deletes == 0  # the views still use the memory
    np.testing.assert_array_equal(np.asarray(row), values[1])
    del row
    settle()
    assert t.deletes == 0
    np.testing.assert_array_equal(np.asarray(column), values[:, 2])
    del column
    settle()
    assert t.deletes == 1


@pytest.mark.parametrize("versioned", [False, True], ids=["legacy", "versioned"])
def test_unused_capsule_is_deleted_by_its_own_destructor(versioned):
    t = Tensor(versioned=versioned)
    capsule = t.capsule()
    del capsule
    settle()
    assert t.deletes == 1


def test_writes_through_the_import_reach_the_producer_memory():
    values = np.zeros(4, dtype=np.int64)
    t = Tensor(values)
    b = hb.from_dlpack(t.capsule())
    b.numpy(writable=True)[2] = 7
    assert values[2] == 7
    del b
    settle()
    assert t.deletes == 1


def test_read_only_flag_gives_a_read_only_buffer():
    values = np.arange(5, dtype=np.uint16)
    t = Tensor(values, flags=READ_ONLY)
    b = hb.from_dlpack(t.capsule())
    assert b.readonly
    np.testing.assert_array_equal(b.numpy(), values)
    with fails(BufferError, "numpy(): the buffer wraps read-only memory"):
        b.numpy(writable=True)
    del b
    settle()
    assert t.deletes == 1


@pytest.mark.parametrize("versioned", [False, True], ids=["legacy", "versioned"])
def test_byte_offset_is_honoured(versioned):
    values = np.arange(10, dtype=np.int32)
    t = Tensor(values, versioned=versioned, shape=[2, 3], strides=[3, 1], byte_offset=3 * 4)
    b = hb.from_dlpack(t.capsule())
    a = np.asarray(b)
    assert a.ctypes.data == values.ctypes.data + 12
    np.testing.assert_array_equal(a, values[3:9].reshape(2, 3))
    del b, a
    settle()
    assert t.deletes == 1


@pytest.mark.parametrize("versioned", [False, True], ids=["legacy", "versioned"])
def test_zero_size_tensor_with_null_data(versioned):
    t = Tensor(np.zeros((0, 3), dtype=np.float64), versioned=versioned, data=NULL)
    b = hb.from_dlpack(t.capsule())
    assert b.shape == (0, 3) and b.size == 0
    assert np.asarray(b).shape == (0, 3)
    del b
    settle()
    assert t.deletes == 1


@pytest.mark.parametrize("versioned", [False, True], ids=["legacy", "versioned"])
def test_zero_dim_tensor_without_shape_or_strides(versioned):
    values = np.array(2.5, dtype=np.float64)
    t = Tensor(values, versioned=versioned, shape=NULL, strides=NULL)
    b = hb.from_dlpack(t.capsule())
    assert b.shape == () and b.ndim == 0
    assert np.asarray(b)[()] == 2.5
    del b
    settle()
    assert t.deletes == 1


def test_negative_strides_walk_backwards_from_byte_offset():
    values = np.arange(12, dtype=np.int16).reshape(3, 4)
    # The element at index (0, 0) is values[2, 3]: both axes reversed.
    t = Tensor(values, strides=[-4, -1], byte_offset=11 * 2)
    b = hb.from_dlpack(t.capsule())
    np.testing.assert_array_equal(np.asarray(b), values[::-1, ::-1])
    assert np.asarray(b).ctypes.data == values.ctypes.data + 22
    del b
    settle()
    assert t.deletes == 1


@pytest.mark.parametrize(
    "versioned, version",
    [(False, None), (True, (1, 0)), (True, (1, 1))],
    ids=["legacy", "versioned-1.0", "versioned-1.1"],
)
def test_null_strides_before_1_2_mean_c_contiguous(versioned, version):
    values = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    kwargs = {"version": version} if versioned else {}
    t = Tensor(values, versioned=versioned, strides=NULL, **kwargs)
    b = hb.from_dlpack(t.capsule())
    assert b.is_c_contiguous
    assert np.asarray(b).ctypes.data == values.ctypes.data
    np.testing.assert_array_equal(np.asarray(b), values)
    del b
    settle()
    assert t.deletes == 1


@pytest.mark.parametrize("versioned", [False, True], ids=["legacy", "versioned"])
def test_a_tensor_with_the_most_axes_imports(versioned):
    # 64 axes, NumPy's limit and ours: the largest ndim a producer may send (65 is refused below).
    values = np.arange(2, dtype=np.int16).reshape((1,) * 63 + (2,))
    t = Tensor(values, versioned=versioned)
    b = hb.from_dlpack(t.capsule())
    assert b.ndim == 64 and b.shape == (1,) * 63 + (2,)
    np.testing.assert_array_equal(np.asarray(b), values)
    del b
    settle()
    assert t.deletes == 1


@pytest.mark.parametrize("versioned", [False, True], ids=["legacy", "versioned"])
def test_null_deleter_is_legal_and_nothing_is_called(versioned):
    values = np.arange(3, dtype=np.int8)
    t = Tensor(values, versioned=versioned, deleter=False)
    capsule = t.capsule()
    b = hb.from_dlpack(capsule)
    np.testing.assert_array_equal(np.asarray(b), values)
    del capsule, b
    settle()
    assert t.deletes == 0


@pytest.mark.parametrize("ordinal", [0, 1])
def test_a_cuda_tensor_is_taken_and_a_device_refusal_deletes_it_once(ordinal):
    """CUDA tensors pass the checks (the CUDA backend wraps them); here the memory is the host's,
    so the backend refuses: no driver, or (with one) a pointer the driver does not know."""
    t = Tensor(device=(CUDA, ordinal))
    capsule = t.capsule()
    message = (r"no CUDA driver found" if not hb.cuda.is_available()
               else r"CUDA_ERROR_INVALID_VALUE \(1\): cuPointerGetAttribute; pass a live CUDA device pointer")
    with pytest.raises(hb.DeviceError, match=message):
        hb.from_dlpack(capsule)
    assert capsule_name(capsule) == "used_dltensor_versioned"
    settle()
    assert t.deletes == 1


@pytest.mark.skipif(not hb.cuda.is_available(), reason="no CUDA driver: the refusal comes before the ordinal is looked up")
@pytest.mark.parametrize("ordinal", [-1, 4096])
def test_a_cuda_tensor_on_a_device_this_machine_lacks_is_refused_by_from_dlpack(ordinal):
    t = Tensor(device=(CUDA, ordinal))
    capsule = t.capsule()
    with pytest.raises(BufferError, match=rf"^from_dlpack\(\): the data is on CUDA device {ordinal}, which this machine "
                                          rf"does not have \(cuda.device\(\): there is no CUDA device {ordinal}; "):
        hb.from_dlpack(capsule)
    assert capsule_name(capsule) == "used_dltensor_versioned"
    settle()
    assert t.deletes == 1


def test_null_deleter_in_a_refused_tensor_is_not_called():
    t = Tensor(deleter=False, device=(OPENCL, 0))
    capsule = t.capsule()
    with fails(BufferError, "from_dlpack(): the tensor is on DLPack device (4, 0)"):
        hb.from_dlpack(capsule)
    del capsule
    settle()
    assert t.deletes == 0


@pytest.mark.parametrize("device", [(CUDA_HOST, 0), (ROCM_HOST, 1)], ids=["cuda-host", "rocm-host"])
def test_pinned_host_memory_is_read_in_place(device):
    values = np.arange(4, dtype=np.float32)
    t = Tensor(values, device=device)
    b = hb.from_dlpack(t.capsule())
    assert np.asarray(b).ctypes.data == values.ctypes.data
    del b
    settle()
    assert t.deletes == 1


def test_copy_true_copies_and_releases_the_producer_at_once():
    values = np.arange(6, dtype=np.int32)
    t = Tensor(values)
    b = hb.from_dlpack(t.capsule(), copy=True)
    settle()
    assert t.deletes == 1  # the copy needs the producer no longer
    assert np.asarray(b).ctypes.data != values.ctypes.data
    np.testing.assert_array_equal(np.asarray(b), values)
    del b
    settle()
    assert t.deletes == 1


def test_producer_copy_is_not_copied_again():
    values = np.arange(6, dtype=np.int32)
    t = Tensor(values, flags=IS_COPIED)
    b = hb.from_dlpack(t.capsule(), copy=True)
    assert np.asarray(b).ctypes.data == values.ctypes.data
    assert not b.external_writes
    del b
    settle()
    assert t.deletes == 1


def test_padded_sub_byte_tensor_imports_one_per_byte():
    values = np.array([1, 7, 0, 15], dtype=np.uint8)
    t = Tensor(values, flags=SUBBYTE_PADDED, dtype=(UINT, 4, 1))
    b = hb.from_dlpack(t.capsule())
    assert b.dtype == hb.dtype("uint4")
    assert np.asarray(b).ctypes.data == values.ctypes.data
    np.testing.assert_array_equal(np.asarray(b).view(np.uint8), values)
    del b
    settle()
    assert t.deletes == 1


@pytest.mark.parametrize(
    "versioned, dtype, packed, shape, unpacked, name",
    [
        # PyTorch's float4_e2m1fn_x2: two values per byte, low nibble first.
        (True, (FLOAT4_E2M1FN, 4, 2), [0x21, 0x43], [2], [[1, 2], [3, 4]], "float4_e2m1fn"),
        # uint4 packed one after another, as JAX sends it (legacy: no padded flag to say otherwise).
        (False, (UINT, 4, 1), [0x21, 0x43], [4], [1, 2, 3, 4], "uint4"),
        # 6-bit values 1, 42, 63, 21 in three bytes: the middle two straddle a byte boundary.
        (False, (FLOAT6_E2M3FN, 6, 1), [0x81, 0xFA, 0x57], [4], [1, 42, 63, 21], "float6_e2m3fn"),
    ],
    ids=["float4x2-versioned", "uint4-legacy", "float6-legacy-straddling"],
)
def test_packed_sub_byte_tensor_needs_copy_true_and_is_unpacked(versioned, dtype, packed, shape, unpacked, name):
    values = np.array(packed, dtype=np.uint8)
    t = Tensor(values, versioned=versioned, dtype=dtype, shape=shape, strides=[1])
    capsule = t.capsule()
    with fails(BufferError, f"from_dlpack(): the {name} values are packed ("):
        hb.from_dlpack(capsule)
    # The capsule was taken before the refusal, so its tensor is already deleted, and only once.
    assert capsule_name(capsule).startswith("used_")
    settle()
    assert t.deletes == 1
    t2 = Tensor(values, versioned=versioned, dtype=dtype, shape=shape, strides=[1])
    b = hb.from_dlpack(t2.capsule(), copy=True)
    assert b.dtype == hb.dtype(name)
    np.testing.assert_array_equal(np.asarray(b).view(np.uint8), unpacked)
    del capsule, b
    settle()
    assert t.deletes == 1 and t2.deletes == 1


_UNPACK_AT_A_PAGE_END = """
import ctypes, mmap, sys
import numpy as np
import halide_buffer as hb
from test_dlpack_malformed import FLOAT4_E2M1FN, UINT, Tensor
libc = ctypes.CDLL(None)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
page = mmap.PAGESIZE
base = libc.mmap(None, 2 * page, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
assert base not in (None, ctypes.c_void_p(-1).value)
assert libc.mprotect(base + page, page, 0) == 0  # PROT_NONE: the byte after the tensor faults
end = (ctypes.c_uint8 * 2).from_address(base + page - 2)
end[:] = [0x21, 0x43]
values = np.ctypeslib.as_array(end)
for dtype, shape in (((UINT, 4, 1), [4]), ((FLOAT4_E2M1FN, 4, 2), [2])):
    t = Tensor(values, versioned=False, dtype=dtype, shape=shape, strides=[1])
    print(np.asarray(hb.from_dlpack(t.capsule(), copy=True)).view(np.uint8).ravel().tolist())
"""


def test_unpacking_reads_no_byte_past_the_packed_tensor():
    # The last value of a packed tensor ends at the end of its last byte: the byte after it is
    # not the tensor's and need not exist (bug: a value ending exactly on a byte boundary read the
    # next byte too). The tensor here ends where an inaccessible page begins, in a child process.
    tests = str(pathlib.Path(__file__).parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([sys.executable, "-c", _UNPACK_AT_A_PAGE_END], capture_output=True, text=True, env=env,
                         timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split("\n")[:2] == ["[1, 2, 3, 4]", "[1, 2, 3, 4]"]


# ---------------------------------------------------------------------------------------------
# Malformed tensors: refused before the capsule is taken
# ---------------------------------------------------------------------------------------------

HUGE = 2**62
NEAR_TOP = 2**64 - 64  # a data address 64 bytes below the end of the address space

# (id, Tensor keyword arguments, exception, message prefix)
MALFORMED = [
    # Where the data is
    ("device-opencl", dict(device=(OPENCL, 0)), BufferError,
     "from_dlpack(): the tensor is on DLPack device (4, 0), which neither the host nor a backend of "
     "halide_buffer can read; copy it to the CPU first (e.g. tensor.cpu())"),
    ("device-rocm", dict(device=(ROCM, 0)), BufferError, "from_dlpack(): the tensor is on DLPack device (10, 0),"),
    ("device-cpu-id-7", dict(device=(CPU, 7)), BufferError,
     "from_dlpack(): a CPU tensor with device id 7 (DLPack's CPU device is (1, 0)); the producer sent a "
     "malformed tensor"),
    ("device-cpu-id-minus-1", dict(device=(CPU, -1)), BufferError,
     "from_dlpack(): a CPU tensor with device id -1"),
    ("device-cuda-managed", dict(device=(CUDA_MANAGED, 0)), BufferError,
     "from_dlpack(): the tensor is on DLPack device (13, 0),"),
    ("device-99", dict(device=(99, 0)), BufferError, "from_dlpack(): the tensor is on DLPack device (99, 0),"),
    ("device-0", dict(device=(0, 0)), BufferError, "from_dlpack(): the tensor is on DLPack device (0, 0),"),
    ("device-negative", dict(device=(-1, 0)), BufferError, "from_dlpack(): the tensor is on DLPack device (-1, 0),"),
    # Axes
    ("ndim-minus-1", dict(ndim=-1), BufferError,
     "from_dlpack(): ndim -1 is outside 0..64; the producer sent a malformed tensor"),
    ("ndim-65", dict(ndim=65), BufferError, "from_dlpack(): ndim 65 is outside 0..64;"),
    ("ndim-int32-min", dict(ndim=-(2**31)), BufferError, "from_dlpack(): ndim -2147483648 is outside 0..64;"),
    ("ndim-65-null-shape", dict(ndim=65, shape=NULL), BufferError, "from_dlpack(): ndim 65 is outside 0..64;"),
    ("null-shape", dict(shape=NULL, ndim=2), BufferError,
     "from_dlpack(): the tensor has 2 axes but no shape; the producer sent a malformed tensor"),
    ("null-shape-legacy", dict(shape=NULL, ndim=1, versioned=False), BufferError,
     "from_dlpack(): the tensor has 1 axes but no shape;"),
    ("null-strides-1.2", dict(strides=NULL, version=(1, 2)), BufferError,
     "from_dlpack(): NULL strides in a DLPack 1.2 tensor (allowed only before 1.2); the producer "
     "sent a malformed tensor"),
    ("null-strides-1.3", dict(strides=NULL, version=(1, 3)), BufferError,
     "from_dlpack(): NULL strides in a DLPack 1.3 tensor (allowed only before 1.2);"),
    ("null-strides-1.7", dict(strides=NULL, version=(1, 7)), BufferError,
     "from_dlpack(): NULL strides in a DLPack 1.7 tensor"),
    # one axis is enough to need strides
    ("null-strides-1.2-one-axis", dict(values=np.arange(3, dtype=np.int32), strides=NULL, version=(1, 2)),
     BufferError, "from_dlpack(): NULL strides in a DLPack 1.2 tensor (allowed only before 1.2);"),
    # Element types
    ("code-18", dict(dtype=(18, 8, 1)), BufferError,
     "from_dlpack(): no dtype of the table has the DLPack type (code 18, bits 8, lanes 1); convert "
     "the tensor to one of: bool, int8,"),
    ("code-99", dict(dtype=(99, 32, 1)), BufferError,
     "from_dlpack(): no dtype of the table has the DLPack type (code 99, bits 32, lanes 1);"),
    ("opaque-handle", dict(dtype=(HANDLE, 64, 1)), BufferError,
     "from_dlpack(): no dtype of the table has the DLPack type (code 3, bits 64, lanes 1);"),
    ("float-bits-24", dict(dtype=(FLOAT, 24, 1)), BufferError,
     "from_dlpack(): no dtype of the table has the DLPack type (code 2, bits 24, lanes 1);"),
    ("float-bits-0", dict(dtype=(FLOAT, 0, 1)), BufferError,
     "from_dlpack(): no dtype of the table has the DLPack type (code 2, bits 0, lanes 1);"),
    ("int32-lanes-4", dict(dtype=(INT, 32, 4)), BufferError,
     "from_dlpack(): no dtype of the table has the DLPack type (code 0, bits 32, lanes 4);"),
    ("float32-lanes-0", dict(dtype=(FLOAT, 32, 0)), BufferError,
     "from_dlpack(): no dtype of the table has the DLPack type (code 2, bits 32, lanes 0);"),
    ("bool-bits-16", dict(dtype=(BOOL, 16, 1)), BufferError,
     "from_dlpack(): no dtype of the table has the DLPack type (code 6, bits 16, lanes 1);"),
    ("bool-bits-1", dict(dtype=(BOOL, 1, 1)), BufferError,
     "from_dlpack(): no dtype of the table has the DLPack type (code 6, bits 1, lanes 1);"),
    ("complex-bits-32", dict(dtype=(COMPLEX, 32, 1)), BufferError,
     "from_dlpack(): no dtype of the table has the DLPack type (code 5, bits 32, lanes 1);"),
    ("bfloat-bits-32", dict(dtype=(BFLOAT, 32, 1)), BufferError,
     "from_dlpack(): no dtype of the table has the DLPack type (code 4, bits 32, lanes 1);"),
    # lanes 0 of a sub-byte type without the padded flag: no packing, and no value per byte either
    ("float4-lanes-0", dict(dtype=(FLOAT4_E2M1FN, 4, 0)), BufferError,
     "from_dlpack(): no dtype of the table has the DLPack type (code 17, bits 4, lanes 0);"),
    ("float6-lanes-0", dict(dtype=(FLOAT6_E2M3FN, 6, 0)), BufferError,
     "from_dlpack(): no dtype of the table has the DLPack type (code 15, bits 6, lanes 0);"),
    ("int4-lanes-0", dict(dtype=(INT, 4, 0)), BufferError,
     "from_dlpack(): no dtype of the table has the DLPack type (code 0, bits 4, lanes 0);"),
    ("uint2-lanes-0-legacy", dict(dtype=(UINT, 2, 0), versioned=False), BufferError,
     "from_dlpack(): no dtype of the table has the DLPack type (code 1, bits 2, lanes 0);"),
    ("float4-lanes-3", dict(dtype=(FLOAT4_E2M1FN, 4, 3)), BufferError,
     "from_dlpack(): no dtype of the table has the DLPack type (code 17, bits 4, lanes 3);"),
    ("padded-float4-lanes-2", dict(dtype=(FLOAT4_E2M1FN, 4, 2), flags=SUBBYTE_PADDED), BufferError,
     "from_dlpack(): no dtype of the table has the DLPack type (code 17, bits 4, lanes 2);"),
    # Shapes
    ("negative-extent", dict(shape=[2, -3]), BufferError,
     "from_dlpack(): negative extent -3 in the shape; the producer sent a malformed tensor"),
    ("negative-extent-legacy", dict(shape=[-1], strides=[1], versioned=False), BufferError,
     "from_dlpack(): negative extent -1 in the shape;"),
    ("negative-extent-after-zero", dict(shape=[0, -5], data=NULL), BufferError,
     "from_dlpack(): negative extent -5 in the shape;"),
    ("extent-int64-min", dict(shape=[-(2**63)], strides=[1]), BufferError,
     "from_dlpack(): negative extent -9223372036854775808 in the shape;"),
    ("element-count-overflow", dict(shape=[2**32, 2**32], strides=[1, 1]), BufferError,
     "from_dlpack(): the shape has more than 2**63 elements; the producer sent a malformed tensor"),
    ("element-count-overflow-3d", dict(shape=[3, 2**31, 2**31], strides=[1, 1, 1]), BufferError,
     "from_dlpack(): the shape has more than 2**63 elements;"),
    ("element-count-int64-max-squared", dict(shape=[2**63 - 1, 2], strides=[1, 1]), BufferError,
     "from_dlpack(): the shape has more than 2**63 elements;"),
    # Data
    ("null-data", dict(data=NULL), BufferError,
     "from_dlpack(): NULL data for a tensor of 6 elements; the producer sent a malformed tensor"),
    ("null-data-zero-dim", dict(data=NULL, shape=[], strides=[]), BufferError,
     "from_dlpack(): NULL data for a tensor of 1 elements;"),
    ("null-data-legacy", dict(data=NULL, versioned=False), BufferError,
     "from_dlpack(): NULL data for a tensor of 6 elements;"),
    # Strides and offsets beyond the address space
    ("stride-times-itemsize-overflows", dict(shape=[2, 3], strides=[HUGE, 1]), BufferError,
     "from_dlpack(): the strides reach beyond the address space; the producer sent a malformed tensor"),
    ("stride-times-extent-overflows", dict(shape=[2**40, 1], strides=[2**40, 1]), BufferError,
     "from_dlpack(): the strides reach beyond the address space;"),
    ("negative-stride-overflows", dict(shape=[2, 3], strides=[-HUGE, 1]), BufferError,
     "from_dlpack(): the strides reach beyond the address space;"),
    ("strides-sum-overflows", dict(shape=[2, 2], strides=[2**60, 2**60]), BufferError,
     "from_dlpack(): the strides reach beyond the address space;"),
    ("stride-int64-min", dict(shape=[3, 1], strides=[-(2**63), 1]), BufferError,
     "from_dlpack(): the strides reach beyond the address space;"),
    ("byte-offset-near-2-64", dict(byte_offset=2**64 - 8), BufferError,
     "from_dlpack(): data, byte_offset and strides reach beyond the address space; the producer "
     "sent a malformed tensor"),
    ("byte-offset-max", dict(byte_offset=2**64 - 1), BufferError,
     "from_dlpack(): data, byte_offset and strides reach beyond the address space;"),
    ("data-near-top-last-element-past-end", dict(data=NEAR_TOP, shape=[100], strides=[1]), BufferError,
     "from_dlpack(): data, byte_offset and strides reach beyond the address space;"),
    ("data-plus-offset-near-top", dict(data=4096, byte_offset=2**64 - 4096 - 8, shape=[4], strides=[1]),
     BufferError, "from_dlpack(): data, byte_offset and strides reach beyond the address space;"),
    ("negative-stride-below-zero", dict(data=8, shape=[4], strides=[-1]), BufferError,
     "from_dlpack(): data, byte_offset and strides reach beyond the address space;"),
    # the lowest of 4 int32 elements (12 bytes before the first) would start one byte below address 0
    ("negative-stride-one-byte-below-zero", dict(data=11, shape=[4], strides=[-1]), BufferError,
     "from_dlpack(): data, byte_offset and strides reach beyond the address space;"),
    ("negative-reach-exactly-int64-min", dict(shape=[2], strides=[-(2**62)], values=np.zeros(2, np.int16)),
     BufferError, "from_dlpack(): the strides reach beyond the address space;"),
    ("negative-stride-below-zero-legacy", dict(data=8, shape=[2, 3], strides=[-3, 1], versioned=False),
     BufferError, "from_dlpack(): data, byte_offset and strides reach beyond the address space;"),
]


@pytest.mark.parametrize("kwargs, exception, message", [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_malformed_tensor_is_refused_and_left_to_its_capsule(kwargs, exception, message):
    t = Tensor(**kwargs)
    capsule = t.capsule()
    name = capsule_name(capsule)
    with fails(exception, message):
        hb.from_dlpack(capsule)
    assert capsule_name(capsule) == name  # not taken: the capsule still owns the tensor
    assert t.deletes == 0
    del capsule
    settle()
    assert t.deletes == 1


@pytest.mark.parametrize("kwargs, exception, message", [c[1:] for c in MALFORMED[::4]],
                         ids=[c[0] for c in MALFORMED[::4]])
def test_malformed_tensor_from_a_producer_is_refused_and_deleted_once(kwargs, exception, message):
    t = Tensor(**kwargs)
    producer = Producer(t)
    with fails(exception, message):
        hb.from_dlpack(producer)
    assert producer.calls == [{"max_version": (1, 3), "copy": None}]
    settle()  # the producer's capsule died with the call
    assert t.deletes == 1


@pytest.mark.parametrize("copy", [None, False, True])
def test_malformed_tensor_is_refused_whatever_copy_asks(copy):
    t = Tensor(shape=[2, -3])
    capsule = t.capsule()
    with fails(BufferError, "from_dlpack(): negative extent -3 in the shape;"):
        hb.from_dlpack(capsule, copy=copy)
    del capsule
    settle()
    assert t.deletes == 1


# ---------------------------------------------------------------------------------------------
# Malformed tensors that pass the DLPack checks but not the buffer's own limits: refused after
# the capsule is taken, so the deleter runs at once
# ---------------------------------------------------------------------------------------------

TAKEN_THEN_REFUSED = [
    ("extent-over-int32", dict(shape=[2**31], strides=[1]), ValueError,
     "from_dlpack(): extent 2147483648 exceeds Halide's int32 limit (2**31 - 1); split the axis"),
    ("stride-over-int32", dict(shape=[2, 3], strides=[2**31, 1]), ValueError,
     "from_dlpack(): stride 8589934592 bytes exceeds Halide's int32 element strides; pass copy=True "
     "for a contiguous copy"),
    ("zero-size-huge-extents-null-strides", dict(shape=[0, 2**40, 2**40], strides=NULL, data=NULL, versioned=False),
     ValueError, "from_dlpack(): extent 1099511627776 exceeds Halide's int32 limit (2**31 - 1); split the axis"),
    ("packed-float4-without-copy", dict(dtype=(FLOAT4_E2M1FN, 4, 2), shape=[6], strides=[1]), BufferError,
     "from_dlpack(): the float4_e2m1fn values are packed (4 bits each, several to a byte), which no "
     "NumPy dtype can view; pass copy=True to unpack them one per byte"),
    ("packed-int4-legacy-without-copy", dict(dtype=(INT, 4, 1), shape=[6], strides=[1], versioned=False),
     BufferError, "from_dlpack(): the int4 values are packed (4 bits each"),
    ("packed-uint2-without-copy", dict(dtype=(UINT, 2, 1), shape=[6], strides=[1]), BufferError,
     "from_dlpack(): the uint2 values are packed (2 bits each"),
]


@pytest.mark.parametrize("kwargs, exception, message", [c[1:] for c in TAKEN_THEN_REFUSED],
                         ids=[c[0] for c in TAKEN_THEN_REFUSED])
def test_tensor_refused_after_it_was_taken_is_deleted_at_once(kwargs, exception, message):
    t = Tensor(**kwargs)
    capsule = t.capsule()
    with fails(exception, message):
        hb.from_dlpack(capsule)
    assert capsule_name(capsule).startswith("used_")
    settle()
    assert t.deletes == 1
    del capsule
    settle()
    assert t.deletes == 1


@pytest.mark.parametrize("dtype", [(FLOAT6_E2M3FN, 6, 4), (INT, 4, 4), (UINT, 2, 8)],
                         ids=["float6x4-3-bytes", "int4x4-2-bytes", "uint2x8-2-bytes"])
def test_packed_elements_wider_than_a_byte_reaching_past_the_address_space_are_refused(dtype):
    # 1000 elements of 2 or 3 bytes from 2000 bytes below the top: the last ones wrap around.
    # (Never with copy=True: unpacking would read the wrapped addresses.)
    t = Tensor(data=2**64 - 2000, dtype=dtype, shape=[1000], strides=[1])
    capsule = t.capsule()
    with pytest.raises(BufferError) as refused:
        hb.from_dlpack(capsule)
    del capsule
    settle()
    assert t.deletes == 1
    assert "reach beyond the address space" in str(refused.value)


# ---------------------------------------------------------------------------------------------
# Versions
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "version, garbage",
    [((2, 0), {}), ((2, 5), {"ndim": -7, "device": (CUDA, 0), "data": NULL}), ((0, 9), {}),
     ((2**32 - 1, 0), {"shape": NULL, "ndim": 3})],
    ids=["2.0", "2.5-with-garbage-fields", "0.9", "major-uint32-max"],
)
def test_other_major_version_is_deleted_at_once_and_refused(version, garbage):
    t = Tensor(version=version, **garbage)
    capsule = t.capsule()
    with fails(BufferError, f"from_dlpack(): the tensor follows DLPack {version[0]}.{version[1]}, whose layout "
                            "this version (1.x) cannot read; export it as DLPack 1.x"):
        hb.from_dlpack(capsule)
    assert t.deletes == 1  # right away, not when the capsule dies
    assert capsule_name(capsule) == "used_dltensor_versioned"
    del capsule
    settle()
    assert t.deletes == 1


def test_other_major_version_with_null_deleter_is_refused():
    t = Tensor(version=(2, 0), deleter=False)
    capsule = t.capsule()
    with fails(BufferError, "from_dlpack(): the tensor follows DLPack 2.0,"):
        hb.from_dlpack(capsule)
    del capsule
    settle()
    assert t.deletes == 0


def test_newer_minor_version_is_read():
    values = np.arange(3, dtype=np.int32)
    t = Tensor(values, version=(1, 9))
    b = hb.from_dlpack(t.capsule())
    np.testing.assert_array_equal(np.asarray(b), values)
    del b
    settle()
    assert t.deletes == 1


# ---------------------------------------------------------------------------------------------
# Capsule names
# ---------------------------------------------------------------------------------------------

WRONG_NAMES = [
    ("capitalised", "DLTensor", False),
    ("trailing-space", "dltensor ", False),
    ("versioned-typo", "dltensor_versioned_", True),
    ("legacy-struct-in-versioned-name-prefix", "dltensor_v", False),
    ("empty", "", True),
    ("exchange-api", "dlpack_exchange_api", True),
    ("unused-prefix", "unused_dltensor", False),
]


@pytest.mark.parametrize("name, versioned", [c[1:] for c in WRONG_NAMES], ids=[c[0] for c in WRONG_NAMES])
def test_capsule_with_a_wrong_name_is_refused(name, versioned):
    t = Tensor(versioned=versioned)
    capsule = t.capsule(name)
    with fails(BufferError, f"from_dlpack(): a capsule named '{name}' is no DLPack tensor; pass an object "
                            "with __dlpack__ or a 'dltensor'/'dltensor_versioned' capsule"):
        hb.from_dlpack(capsule)
    assert capsule_name(capsule) == name
    del capsule
    settle()
    assert t.deletes == 1


def test_capsule_without_a_name_is_refused():
    t = Tensor()
    capsule = t.capsule(None)
    with fails(BufferError, "from_dlpack(): a capsule named '' is no DLPack tensor;"):
        hb.from_dlpack(capsule)
    assert capsule_name(capsule) is None
    del capsule
    settle()
    assert t.deletes == 1


@pytest.mark.parametrize("name", ["used_dltensor", "used_dltensor_versioned"])
def test_capsule_made_with_a_used_name_is_refused(name):
    t = Tensor(versioned=name.endswith("versioned"))
    capsule = t.capsule(name)
    with fails(BufferError, f"from_dlpack(): the capsule was already consumed (named '{name}'); a DLPack "
                            "capsule can be taken once: call __dlpack__() again"):
        hb.from_dlpack(capsule)
    del capsule
    settle()
    assert t.deletes == 1  # still the name it was made with: its destructor deleted it


@pytest.mark.parametrize("versioned", [False, True], ids=["legacy", "versioned"])
def test_capsule_taken_twice_is_refused_the_second_time(versioned):
    values = np.arange(4, dtype=np.float64)
    t = Tensor(values, versioned=versioned)
    capsule = t.capsule()
    b = hb.from_dlpack(capsule)
    used = "used_dltensor_versioned" if versioned else "used_dltensor"
    with fails(BufferError, f"from_dlpack(): the capsule was already consumed (named '{used}');"):
        hb.from_dlpack(capsule)
    np.testing.assert_array_equal(np.asarray(b), values)  # the first import is unharmed
    del capsule
    settle()
    assert t.deletes == 0
    del b
    settle()
    assert t.deletes == 1


# ---------------------------------------------------------------------------------------------
# Producers and arguments
# ---------------------------------------------------------------------------------------------


class RaisesValueError:
    def __dlpack__(self, **kwargs):
        raise ValueError("producer: cannot export this tensor")


class RaisesTypeErrorAlways:
    def __dlpack__(self, *args, **kwargs):
        raise TypeError("producer: broken either way")


class OldProducer:
    """A producer from before max_version: __dlpack__(stream=None) only, legacy capsules."""

    def __init__(self, tensor):
        self.tensor = tensor
        self.calls = 0

    def __dlpack__(self, stream=None):
        self.calls += 1
        return self.tensor.capsule()


class ReturnsInt:
    def __dlpack__(self, **kwargs):
        return 42


class ReturnsNone:
    def __dlpack__(self, **kwargs):
        return None


class ReturnsBuffer:
    """A producer returning another producer instead of a capsule."""

    def __dlpack__(self, **kwargs):
        return hb.Buffer([2], "int8")


class ReturnsUsedCapsule:
    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, **kwargs):
        return self.capsule


def test_producer_value_error_propagates():
    with pytest.raises(ValueError, match="^" + re.escape("producer: cannot export this tensor") + "$"):
        hb.from_dlpack(RaisesValueError())


def test_producer_type_error_on_both_calls_propagates():
    with pytest.raises(TypeError, match="^producer: broken either way$"):
        hb.from_dlpack(RaisesTypeErrorAlways())


@pytest.mark.parametrize("copy", [None, True])
def test_producer_without_max_version_is_called_again_without_keywords(copy):
    values = np.arange(5, dtype=np.int64)
    t = Tensor(values, versioned=False)
    producer = OldProducer(t)
    b = hb.from_dlpack(producer, copy=copy)
    assert producer.calls == 1  # the first call failed on its keywords before running
    np.testing.assert_array_equal(np.asarray(b), values)
    same = np.asarray(b).ctypes.data == values.ctypes.data
    assert same == (copy is None)  # a producer that could not be asked to copy is copied from
    del b
    settle()
    assert t.deletes == 1


def test_producer_is_asked_for_the_newest_version_and_copy():
    values = np.arange(5, dtype=np.int64)
    t = Tensor(values)
    producer = Producer(t)
    b = hb.from_dlpack(producer, copy=False)
    assert producer.calls == [{"max_version": (1, 3), "copy": False}]
    assert np.asarray(b).ctypes.data == values.ctypes.data
    del b
    settle()
    assert t.deletes == 1


@pytest.mark.parametrize(
    "producer, returned",
    [(ReturnsInt(), "int"), (ReturnsNone(), "NoneType"), (ReturnsBuffer(), "halide_buffer._core.Buffer")],
    ids=["int", "none", "buffer"],
)
def test_producer_returning_no_capsule_is_a_type_error(producer, returned):
    name = type(producer).__name__
    with fails(TypeError, f"from_dlpack(): {name}.__dlpack__() returned {returned}, not a DLPack capsule; "
                          "the producer is broken"):
        hb.from_dlpack(producer)


def test_producer_returning_a_used_capsule_is_refused():
    values = np.arange(3, dtype=np.int32)
    t = Tensor(values)
    capsule = t.capsule()
    b = hb.from_dlpack(capsule)
    with fails(BufferError, "from_dlpack(): the capsule was already consumed (named 'used_dltensor_versioned');"):
        hb.from_dlpack(ReturnsUsedCapsule(capsule))
    del capsule, b
    settle()
    assert t.deletes == 1


def test_producer_returning_a_wrongly_named_capsule_is_refused():
    t = Tensor()
    producer = ReturnsUsedCapsule(t.capsule("tensor"))
    with fails(BufferError, "from_dlpack(): a capsule named 'tensor' is no DLPack tensor;"):
        hb.from_dlpack(producer)
    assert t.deletes == 0
    del producer
    settle()
    assert t.deletes == 1


@pytest.mark.parametrize(
    "obj, type_name",
    [(object(), "object"), (42, "int"), ([1, 2, 3], "list"), (None, "NoneType"), (b"dltensor", "bytes")],
    ids=["object", "int", "list", "none", "bytes"],
)
def test_object_without_dlpack_or_capsule_is_a_type_error(obj, type_name):
    with fails(TypeError, f"from_dlpack(): {type_name} has no __dlpack__ and is no DLPack capsule; pass a "
                          "tensor of a DLPack library"):
        hb.from_dlpack(obj)


@pytest.mark.parametrize("copy", [1, 0, "yes", 1.0, np.bool_(True), [True]], ids=repr)
def test_copy_that_is_not_a_bool_is_a_type_error_and_leaves_the_capsule(copy):
    t = Tensor()
    capsule = t.capsule()
    with fails(TypeError, f"from_dlpack(): copy must be True, False or None, not {copy!r}"):
        hb.from_dlpack(capsule, copy=copy)
    assert capsule_name(capsule) == "dltensor_versioned"
    del capsule
    settle()
    assert t.deletes == 1


def test_copy_that_is_not_a_bool_is_refused_before_the_producer_is_called():
    producer = Producer(Tensor())
    with fails(TypeError, "from_dlpack(): copy must be True, False or None, not 'no'"):
        hb.from_dlpack(producer, copy="no")
    assert producer.calls == []


# ---------------------------------------------------------------------------------------------
# Strides no step takes: never multiplied by an index, but still within range once in bytes
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape, strides, expected", [
    ([1, 3], [2**61, 1], (0, 4)),          # 2**61 elements of 4 bytes: 2**63 bytes, past int64
    ([1, 3], [2**62, 1], (0, 4)),
    ([1, 3], [-(2**63), 1], (0, 4)),
    ([3, 1], [1, 2**61], (4, 0)),
    ([1, 3], [5, 1], (20, 4)),             # a stride in range is kept as the producer gave it
], ids=["2**61", "2**62", "int64-min", "inner-axis", "in-range"])
def test_an_unused_huge_stride_becomes_zero(shape, strides, expected):
    values = np.arange(3, dtype=np.int32).reshape(shape)
    t = Tensor(values, shape=shape, strides=strides)
    b = hb.from_dlpack(t.capsule())
    assert b.strides == expected
    assert np.asarray(b).tolist() == values.tolist()
    copied = hb.from_dlpack(Tensor(values, shape=shape, strides=strides).capsule(), copy=True)
    assert np.asarray(copied).tolist() == values.tolist()


def test_the_lowest_element_starting_at_address_0_is_within_the_address_space():
    """The boundary of 'negative-stride-one-byte-below-zero': 4 int32 elements walking back from
    address 12 end at address 0, the lowest byte there is. The import only describes the memory
    (nothing reads it here)."""
    t = Tensor(np.zeros(4, np.int32), data=12, shape=[4], strides=[-1])
    b = hb.from_dlpack(t.capsule())
    assert b.shape == (4,) and b.strides == (-4,)
    del b
    settle()
    assert t.deletes == 1


def test_an_empty_tensor_whose_c_contiguous_strides_pass_int64_gets_stride_0_in_front():
    """NULL strides mean C-contiguous ones, products of the extents behind each axis; an empty
    tensor's extents may multiply past int64 (its element count is 0 all the same). Every axis in
    front of the one where the product overflows gets stride 0, never the product wrapped around:
    4 * (2**31 - 1)**2 wraps to 4 - 2**34, which would show as a stride of 1 byte on the 0 axis.
    The (2**31 - 1)**2 elements' stride of axis 1 fits int64 but not Halide's int32: as any stride
    no index multiplies, it becomes the itemsize."""
    big = 2**31 - 1
    t = Tensor(np.zeros(0, np.int8), data=NULL, shape=[0, 4, big, big], strides=NULL, versioned=False)
    b = hb.from_dlpack(t.capsule())
    assert b.shape == (0, 4, big, big) and b.size == 0
    assert b.strides == (0, 1, big, 1)
    del b
    settle()
    assert t.deletes == 1


@pytest.mark.parametrize("copy", [None, True])
def test_an_empty_tensor_with_huge_strides_imports_empty(copy):
    t = Tensor(np.zeros(0, np.int32), shape=[0, 3], strides=[2**61, 2**61])
    b = hb.from_dlpack(t.capsule(), copy=copy)
    assert b.shape == (0, 3) and b.size == 0 and np.asarray(b).shape == (0, 3)
    assert all(abs(s) < 2**62 for s in b.strides)


# ---------------------------------------------------------------------------------------------
# A producer's __dlpack_device__: a pair of ints in DLPack's 32-bit fields, or its type is named
# ---------------------------------------------------------------------------------------------


class OddDevice:
    """A producer whose __dlpack_device__ returns `where`; its __dlpack__ is never reached."""

    def __init__(self, where):
        self.where = where
        self.exported = False

    def __dlpack__(self, **kwargs):
        self.exported = True
        return np.zeros(3).__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.where


@pytest.mark.parametrize("where, exception, what", [
    ((2, "x"), TypeError, "whose fields are not both ints"),
    (("2", 0), TypeError, "whose fields are not both ints"),
    ((2.0, 0), TypeError, "whose fields are not both ints"),
    ((True, 0), TypeError, "whose fields are not both ints"),
    ((2, 2**70), ValueError, "whose fields do not fit DLPack's 32-bit device type and id"),
    ((2**31, 0), ValueError, "whose fields do not fit DLPack's 32-bit device type and id"),
    ((1, -(2**31) - 1), ValueError, "whose fields do not fit DLPack's 32-bit device type and id"),
    ((2,), TypeError, "not a (device type, device id) tuple"),
    ([2, 0], TypeError, "not a (device type, device id) tuple"),
    (None, TypeError, "not a (device type, device id) tuple"),
], ids=["id-str", "type-str", "type-float", "type-bool", "id-2**70", "type-2**31", "id-below-int32", "one-field",
        "list", "none"])
def test_a_producer_device_that_is_no_pair_of_int32_names_the_producer(where, exception, what):
    producer = OddDevice(where)
    with fails(exception, f"from_dlpack(): OddDevice.__dlpack_device__() returned {where!r}, {what}; "
                          "the producer is broken"):
        hb.from_dlpack(producer)
    assert not producer.exported
