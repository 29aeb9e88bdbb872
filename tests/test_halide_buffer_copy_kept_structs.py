"""halide_buffer_copy from a halide_buffer_t kept across operations brings the current data (PoCL).

Foreign code keeps structs of ours: a copy of one we handed out, or a crop Halide's runtime made
of it (halide_device_crop, as Halide's Runtime::Buffer does for a crop). Their flags are those of
when they were made; the buffer's storage has moved on since (written on the device or on the
host). Halide's halide_buffer_copy (the runtime of a real OpenCL pipeline library, through
ctypes) decides from the struct's flags which copy to read, and asks our interface's buffer_copy
wherever the struct has a device copy of ours that it does not call stale: ours then reads the
copy the storage says is current, not the one the struct's old flags name.

Not asked, and so not tested here: a struct whose old flags call its host copy current, copied to
host memory while the device copy is newer: Halide's runtime copies host to host itself, without
asking any interface (docs/devices.md says to take the struct again, or copy_to_host(), first).
"""

import ctypes

import numpy as np
import pytest

import halide_buffer as hb

from common import HalideBufferT, raw_buffer
from pipelines import TARGET, brighter_func, build, c_compiler

pytestmark = pytest.mark.needs_halide

SHAPE = (8, 16)
OLD, NEW = 1, 9


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    """halide_buffer_copy and halide_device_crop of an OpenCL pipeline library's Halide runtime."""
    hb.opencl.device()  # opens the OpenCL loader process-wide, where the pipeline's runtime looks
    lib = build(tmp_path_factory.mktemp("kept_structs"), c_compiler(), *brighter_func(), "hb_kept_structs",
                target=TARGET + "-opencl").lib
    for name in ("halide_buffer_copy", "halide_device_crop"):
        fn = getattr(lib, name)
        fn.argtypes = [ctypes.c_void_p] * (4 if name == "halide_buffer_copy" else 3)
        fn.restype = ctypes.c_int
    return lib


@pytest.fixture(params=[False, True], ids=["copying", "zero-copy"])
def device(request):
    d = hb.opencl.device(zero_copy=request.param)
    if request.param and not d.zero_copy:
        pytest.skip(f"{d!r} does not report host-unified memory: no zero-copy to test")
    return d


def kept_copy(raw, runtime, how):
    """A struct of foreign code's own made from `raw` now: a copy of it (with dimensions of its
    own), or a crop of all of it by Halide's runtime. Returned with what keeps it alive."""
    kept = HalideBufferT()
    ctypes.pointer(kept)[0] = raw
    dims = (type(raw.dim[0]) * raw.dimensions)(*(raw.dim[i] for i in range(raw.dimensions)))
    kept.dim = ctypes.cast(dims, type(kept.dim))
    if how == "a crop Halide's runtime made":
        kept.device, kept.device_interface = 0, None
        assert runtime.halide_device_crop(None, ctypes.addressof(raw), ctypes.addressof(kept)) == 0
    return kept, dims


START = {
    "in sync": lambda b: None,
    "host dirty": lambda b: b.numpy(writable=True).__setitem__(Ellipsis, OLD),
    "device dirty": lambda b: hb.opencl.as_array(b).finish(),  # a writable device lease
}
CHANGE = {
    "written on the device": lambda b: hb.opencl.as_array(b).fill(np.uint8(NEW)).finish(),
    "written on the host": lambda b: b.numpy(writable=True).__setitem__(Ellipsis, NEW),
}
# Halide's runtime copies these host to host itself (see the module's docstring).
NOT_ASKED = {("in sync", "written on the device", False), ("host dirty", "written on the device", False)}
CASES = [(start, change, to_device) for start in START for change in CHANGE for to_device in (False, True)
         if (start, change, to_device) not in NOT_ASKED]


@pytest.mark.parametrize("how", ["a copy of the struct", "a crop Halide's runtime made"])
@pytest.mark.parametrize("start, change, to_device", CASES,
                         ids=[f"{s}, then {c}, to the {'device' if d else 'host'}" for s, c, d in CASES])
def test_a_kept_struct_copies_the_current_data(runtime, device, how, start, change, to_device):
    src = hb.Buffer.from_host(np.full(SHAPE, OLD, np.uint8), copy=True)
    src.copy_to_device(device)
    START[start](src)
    kept, _dims = kept_copy(raw_buffer(src), runtime, how)
    CHANGE[change](src)
    dst = hb.Buffer(SHAPE, "uint8")
    if to_device:
        dst.copy_to_device(device)
    dst_raw = raw_buffer(dst)
    interface = dst_raw.device_interface if to_device else None
    assert runtime.halide_buffer_copy(None, ctypes.addressof(kept), interface, ctypes.addressof(dst_raw)) == 0
    np.testing.assert_array_equal(np.asarray(dst), np.full(SHAPE, NEW, np.uint8))
    np.testing.assert_array_equal(np.asarray(src), np.full(SHAPE, NEW, np.uint8))  # the source's data kept
