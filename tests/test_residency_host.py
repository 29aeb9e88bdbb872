"""The host side of the residency rules (docs/architecture.md): flags, leases, raw halide_buffer_t."""

import numpy as np
import pytest

import halide_buffer as hb

from common import HOST_DIRTY, HalideBufferT, raw_buffer


def test_construction_from_host_data_is_host_dirty():
    assert hb.Buffer((2,), "uint8").host_dirty()
    assert hb.Buffer.from_host(np.zeros(3)).host_dirty()
    assert hb.Buffer.from_host(b"abc").host_dirty()
    assert not hb.Buffer((2,)).device_dirty()


def test_copy_to_host_without_a_device_changes_nothing():
    b = hb.Buffer((2,), "float32")
    b.numpy(writable=True)[...] = [1, 2]
    b.copy_to_host()
    assert b.host_dirty() and not b.device_dirty() and not b.has_device_allocation()
    assert b.device is None
    np.testing.assert_array_equal(np.asarray(b), [1, 2])


def test_set_host_dirty_toggles_the_shared_flag():
    b = hb.Buffer((4,), "int16")
    view = b.cropped(0, 1, 2)
    b.set_host_dirty(False)
    assert not b.host_dirty() and not view.host_dirty()
    view.set_host_dirty()
    assert b.host_dirty()


@pytest.mark.parametrize("write", [
    lambda b: b.numpy(writable=True),
    lambda b: b.__dlpack__(max_version=(1, 0)),  # kept: a capsule dropped unconsumed withdraws its mark
])
def test_a_host_write_after_the_flag_was_cleared_marks_it_again(write):
    # A buffer nothing else has touched takes host writes without its lock (it has been host
    # dirty since it was made); once the flag is cleared, a writer must set it again.
    b = hb.Buffer((4,), "uint8")
    b.set_host_dirty(False)
    writer = write(b)
    assert b.host_dirty()
    del writer


def test_device_dirty_needs_a_device_allocation():
    b = hb.Buffer((4,), "int16")
    b.set_host_dirty(False)
    with pytest.raises(ValueError, match=r"set_device_dirty\(\): the buffer has no device allocation; "
                                         r"call copy_to_device\(\) or device_malloc\(\) first"):
        b.set_device_dirty(True)
    assert not b.device_dirty() and not b.host_dirty()
    b.set_device_dirty(False)  # clearing is always allowed


def test_writable_borrowed_memory_is_a_standing_lease():
    a = np.zeros(4, np.float32)
    b = hb.Buffer.from_host(a)
    assert b.external_writes
    b.set_host_dirty(False)
    assert b.host_dirty()  # its owner may have written it since
    assert raw_buffer(b).flags & HOST_DIRTY


def test_external_writes_false_is_the_promise_that_lifts_the_lease():
    b = hb.Buffer.from_host(np.zeros(4, np.float32), external_writes=False)
    assert not b.external_writes
    b.set_host_dirty(False)
    assert not b.host_dirty()
    b.numpy(writable=True)
    assert b.host_dirty()


def test_read_only_memory_is_no_lease():
    b = hb.Buffer.from_host(b"abcd")
    assert not b.external_writes
    b.set_host_dirty(False)
    assert not b.host_dirty()


def test_raw_buffer_publishes_the_shared_flags_and_takes_foreign_changes_back():
    b = hb.Buffer((2, 3), "uint8")
    view = b[1:, 1:]
    r = raw_buffer(view)
    assert r.flags == HOST_DIRTY
    b.set_host_dirty(False)
    assert raw_buffer(view).flags == 0  # re-published on every call
    r.flags = HOST_DIRTY  # as a pipeline writing this view on the host would
    assert view.host_dirty() and b.host_dirty()


def test_raw_buffer_matches_the_view():
    a = np.arange(24, dtype=np.uint16).reshape(4, 6)
    v = hb.Buffer.from_host(a).cropped(1, 2, 3)[::-1]
    addr = v._get_raw_halide_buffer_t()
    r = HalideBufferT.from_address(addr)
    assert r.host == np.asarray(v).ctypes.data
    assert r.dimensions == 2
    # Halide dim 0 is NumPy's last axis: (min, extent, stride in elements, flags).
    assert [(d.min, d.extent, d.stride, d.flags) for d in r.dim[:2]] == [(2, 3, 1, 0), (0, 4, -6, 0)]
    assert (r.type.code, r.type.bits, r.type.lanes) == hb.dtype("uint16").halide_type
    assert v._get_raw_halide_buffer_t() == addr  # one struct per view, stable


def test_raw_buffer_of_a_dtype_halide_cannot_describe_is_refused():
    with pytest.raises(BufferError, match=r"_get_raw_halide_buffer_t\(\): Halide has no type for complex128"):
        hb.Buffer((2,), "complex128")._get_raw_halide_buffer_t()


def test_zero_size_buffer_still_has_a_host_pointer():
    # host == NULL means "bounds query" to a Halide pipeline.
    assert raw_buffer(hb.Buffer((0, 3), "float32")).host


def test_flags_written_through_any_view_reach_every_view_even_after_it_dies():
    b = hb.Buffer((4, 4), "float32")
    b.set_host_dirty(False)
    crop = b.cropped(0, 1, 2)
    raw_buffer(crop).flags = HOST_DIRTY  # a pipeline wrote the crop on the host
    sibling = b.sliced(1, 0)
    assert sibling.host_dirty()
    b.set_host_dirty(False)
    other = b[2:]
    raw_buffer(other).flags = HOST_DIRTY
    del other
    assert b.host_dirty()
