"""Buffer.from_host against buffer-protocol exporters that describe their memory wrongly.

The exporter is tests/fuzz/exporter.c (the from_host fuzz harness's), built here as a CPython
extension: its Py_buffer carries whatever fields the test sets, over memory the test owns. A
broken description must be a clear error naming the exporter, never a crash, a C++ message or
a read outside the memory; every view taken is released exactly once.
"""

import ctypes
import pathlib
import subprocess
import sys
import sysconfig

import numpy as np
import pytest

import halide_buffer as hb

from pipelines import c_compiler

SOURCE = pathlib.Path(__file__).parent / "fuzz" / "exporter.c"


@pytest.fixture(scope="module")
def exporter(tmp_path_factory):
    directory = tmp_path_factory.mktemp("exporter")
    out = directory / ("fuzz_exporter" + sysconfig.get_config_var("EXT_SUFFIX"))
    built = subprocess.run([c_compiler(), "-shared", "-fPIC", "-I" + sysconfig.get_paths()["include"],
                            str(SOURCE), "-o", str(out)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    sys.path.insert(0, str(directory))
    try:
        import fuzz_exporter
    finally:
        sys.path.remove(str(directory))
    memory = (ctypes.c_uint8 * 64)(*range(64))

    def make(*, ndim, shape, strides=None, itemsize=1, fmt=b"B", length=64, address=None):
        address = ctypes.addressof(memory) if address is None else address
        return fuzz_exporter.Exporter(address, length, False, itemsize, fmt, ndim, shape, strides, None, False)

    make.memory = memory
    return make


@pytest.mark.parametrize("ndim, shape", [(-1, None), (-(2**31), None), (65, tuple([1] * 65)), (2, None),
                                         (3, None)], ids=["ndim-1", "ndim-int-min", "ndim-65", "no-shape-2d",
                                                          "no-shape-3d"])
def test_an_exporter_with_an_impossible_ndim_or_no_shape_is_refused(exporter, ndim, shape):
    e = exporter(ndim=ndim, shape=shape)
    with pytest.raises(BufferError, match=rf"^Buffer.from_host\(\): fuzz_exporter\.Exporter's buffer has ndim {ndim}.*; the "
                                          r"exporter is broken"):
        hb.Buffer.from_host(e)
    assert e.gets == e.releases == 1


def test_no_format_means_bytes_only_for_an_itemsize_of_one(exporter):
    e = exporter(ndim=1, shape=(4,), strides=(4,), itemsize=4, fmt=None)
    with pytest.raises(TypeError, match=r"^Buffer.from_host\(\): buffer format 'B' with itemsize 4 is not "
                                        r"supported"):
        hb.Buffer.from_host(e)
    ok = exporter(ndim=1, shape=(4,), strides=(1,), itemsize=1, fmt=None)
    assert np.asarray(hb.Buffer.from_host(ok)).tolist() == [0, 1, 2, 3]


def test_a_one_axis_exporter_without_shape_is_read_by_its_length(exporter):
    e = exporter(ndim=1, shape=None, length=8)
    assert np.asarray(hb.Buffer.from_host(e, copy=True)).tolist() == list(range(8))


def test_a_huge_shape_without_strides_is_refused_not_overflowed(exporter):
    e = exporter(ndim=3, shape=(2**31 - 1, 2**31 - 1, 2**31 - 1), strides=None)
    with pytest.raises(ValueError, match=r"^Buffer.from_host\(\): the shape has more than 2\*\*63 elements"):
        hb.Buffer.from_host(e)


@pytest.mark.parametrize("copy", [False, True])
@pytest.mark.parametrize("address, shape, strides, what", [
    (0, (6,), (4,), "NULL data for 6 elements"),
    (2**64 - 8, (6,), (4,), "data and strides reach beyond the address space"),
    (8, (6,), (-4,), "data and strides reach beyond the address space"),
    (4096, (3, 2), (2**62, 4), "the strides reach beyond the address space"),
], ids=["null", "past-2**64", "below-0", "stride-overflow"])
def test_memory_no_address_can_hold_is_refused(exporter, copy, address, shape, strides, what):
    e = exporter(ndim=len(shape), shape=shape, strides=strides, itemsize=4, fmt=b"i", length=24, address=address)
    with pytest.raises(BufferError, match=rf"^Buffer.from_host\(\): {what}; the memory's description is broken"):
        hb.Buffer.from_host(e, copy=copy)
    assert e.gets == e.releases == 1


def test_no_elements_need_no_memory(exporter):
    e = exporter(ndim=2, shape=(0, 3), strides=(12, 4), itemsize=4, fmt=b"i", length=0, address=0)
    assert hb.Buffer.from_host(e).shape == (0, 3)
