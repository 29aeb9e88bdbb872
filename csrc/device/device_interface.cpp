// device_interface.cpp: transfer counters, byte spans, the target device, Halide's buffer_copy
// for our backends, and the public half of our interface tables (Halide's flag rules in front of
// a backend's impl table).
#include "device/device_interface.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <utility>
#include <vector>

#include "core/constants.h"
#include "core/layout.h"
#include "core/strided.h"
#include "device/device.h"
#include "device/device_copy.h"

namespace hb {

Transfers &process_transfers() {
    static Transfers totals;
    return totals;
}

void record_transfer(Transfers *storage, Direction direction, int64_t bytes) {
    for (Transfers *t : {storage, &process_transfers()}) {
        if (!t) continue;
        if (direction == Direction::to_device) {
            t->to_device += 1;
            t->to_device_bytes += bytes;
        } else {
            t->to_host += 1;
            t->to_host_bytes += bytes;
        }
    }
}

ByteSpan byte_span(const halide_buffer_t *buf) {
    ByteSpan span;
    int64_t item = element_bytes(buf);
    Axes shape, strides;  // in bytes; the axis order does not matter here
    for (int i = 0; i < buf->dimensions; ++i) {
        const halide_dimension_t &d = buf->dim[i];
        if (d.extent <= 0) return span;  // no elements: an empty span
        shape.push_back(d.extent);
        strides.push_back(int64_t(d.stride) * item);
    }
    byte_reach(shape, strides, item, span.lo, span.hi);  // memory that exists: no overflow
    span.dense = is_dense(shape, strides, item);
    return span;
}

namespace {

void scatter(uint8_t *host, const uint8_t *staging, const halide_buffer_t *buf, int dim, int64_t item) {
    if (dim < 0) {
        std::memcpy(host, staging, size_t(item));
        return;
    }
    const halide_dimension_t &d = buf->dim[dim];
    int64_t step = int64_t(d.stride) * item;
    for (int32_t i = 0; i < d.extent; ++i) scatter(host + i * step, staging + i * step, buf, dim - 1, item);
}

}  // namespace

void scatter_elements(const halide_buffer_t *buf, const uint8_t *staging) {
    scatter(buf->host, staging, buf, buf->dimensions - 1, element_bytes(buf));
}

int64_t crop_offset(const halide_buffer_t *src, const halide_buffer_t *dst) {
    int64_t bytes = 0, item = element_bytes(src);
    for (int i = 0; i < src->dimensions && i < dst->dimensions; ++i)
        bytes += int64_t(dst->dim[i].min - src->dim[i].min) * src->dim[i].stride * item;
    return bytes;
}

int64_t slice_offset(const halide_buffer_t *src, int dim, int pos) {
    const halide_dimension_t &d = src->dim[dim];
    return int64_t(pos - d.min) * d.stride * element_bytes(src);
}

int host_and_device_malloc(void *uc, halide_buffer_t *buf, int (*device_malloc)(void *, halide_buffer_t *)) {
        ByteSpan span = byte_span(buf);
    void *host = std::malloc(size_t(span.size() > 0 ? span.size() : 1));
    if (!host) return halide_error::out_of_memory;
    buf->host = static_cast<uint8_t *>(host) - span.lo;
    if (int rc = device_malloc(uc, buf)) {
        std::free(host);
        buf->host = nullptr;
        return rc;
    }
    return 0;
}

int host_and_device_free(void *uc, halide_buffer_t *buf, int (*device_free)(void *, halide_buffer_t *)) {
    device_free(uc, buf);
    if (buf->host) std::free(buf->host + byte_span(buf).lo);
    buf->host = nullptr;
    return 0;
}

void no_module() {}
int no_device_release(void *) { return 0; }

std::string size_text(uint64_t bytes) {
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    int unit = 0;
    while (bytes >= 1024 * 16 && unit < 6) {
        bytes /= 1024;
        ++unit;
    }
    return std::to_string(bytes) + " " + units[unit];
}

int fail(int halide_code, int code, std::string name, std::string what) {
    DeviceFailure &f = last_failure();
    f.code = code;
    f.name = std::move(name);
    f.what = std::move(what);
    return halide_code;
}

DeviceFailure &last_failure() {
    thread_local DeviceFailure failure;
    return failure;
}

namespace {
thread_local Device *t_target = nullptr;
}  // namespace

TargetDevice::TargetDevice(Device *device) : previous_(t_target) { t_target = device; }
TargetDevice::~TargetDevice() { t_target = previous_; }
Device *TargetDevice::current() { return t_target; }

// ---------------------------------------------------------------------------------------------
// Halide's buffer_copy for our backends: the Device data primitives over the common box
// ---------------------------------------------------------------------------------------------

namespace {

/// The elements both buffers cover (the overlap of their domains, at the same coordinates), in
/// NumPy axis order, with where they start in each buffer (bytes from its element at host).
struct Box {
    std::vector<int64_t> shape, src_strides, dst_strides;
    int64_t src_offset = 0, dst_offset = 0, itemsize = 0;
};

Box common_box(const halide_buffer_t *src, const halide_buffer_t *dst) {
    Box box;
    box.itemsize = element_bytes(src);
    for (int i = src->dimensions - 1; i >= 0; --i) {
        const halide_dimension_t &s = src->dim[i], &d = dst->dim[i];
        int64_t lo = std::max(s.min, d.min);
        int64_t hi = std::min(int64_t(s.min) + s.extent, int64_t(d.min) + d.extent);
        box.shape.push_back(std::max<int64_t>(hi - lo, 0));
        box.src_strides.push_back(int64_t(s.stride) * box.itemsize);
        box.dst_strides.push_back(int64_t(d.stride) * box.itemsize);
        box.src_offset += (lo - s.min) * box.src_strides.back();
        box.dst_offset += (lo - d.min) * box.dst_strides.back();
    }
    return box;
}

/// Whether a buffer of ours has a current device copy: neither the buffer (a view whose flags
/// Halide may have changed since) nor its storage says the host copy is newer.
bool device_current(const halide_buffer_t *buf, const DevicePlace &place) {
    return !(buf->flags & kHostDirty) && !(place.root->flags & kHostDirty);
}

/// Whether a buffer has a current host copy (Halide's rule, and our storage's where it is ours).
bool host_current(const halide_buffer_t *buf, const DevicePlace &place) {
    if (!buf->host) return false;
    if (!buf->device_interface) return true;
    return !(buf->flags & kDeviceDirty) && !(place.root && (place.root->flags & kDeviceDirty));
}

/// One end of a copy: the box's elements in device memory (`device` set) or in host memory.
struct End {
    const Device *device = nullptr;
    DeviceRegion region{};
    HostRegion host{};
};

End on_device(const DevicePlace &place, const Box &box, int64_t offset, const std::vector<int64_t> &strides) {
    return End{place.device, DeviceRegion{place.root, place.offset + offset, box.shape, strides, box.itemsize}, {}};
}

End on_host(const halide_buffer_t *buf, int64_t offset, const std::vector<int64_t> &strides) {
    return End{nullptr, {}, HostRegion{buf->host + offset, strides}};
}

const std::vector<int64_t> &strides_of(const End &end) { return end.device ? end.region.strides : end.host.strides; }

/// Moves the box through a dense host staging copy: host to host (src and dst may overlap), and
/// between device memories that cannot copy into each other.
int bounce(const End &from, const End &to, const Box &box) {
    DenseLayout layout = dense_layout_like(box.shape, strides_of(to), box.itemsize);
    std::unique_ptr<uint8_t[]> staging(new (std::nothrow) uint8_t[size_t(layout.bytes)]);
    if (!staging) return halide_error::out_of_memory;
    HostRegion stage{staging.get() + layout.origin, layout.strides};
    if (from.device) {
        if (int rc = from.device->read(from.region, stage)) return rc;
    } else {
        copy_strided(stage.data, stage.strides, from.host.data, from.host.strides, box.shape, box.itemsize);
    }
    if (to.device) return to.device->write(stage, to.region);
    copy_strided(to.host.data, to.host.strides, stage.data, stage.strides, box.shape, box.itemsize);
    return 0;
}

/// Moves the box with the fewest copies: device to device in place where the memories are
/// shared, one read or write between host and device, else through the host.
int move(const End &from, const End &to, const Box &box) {
    if (from.device && to.device && to.device->shares_memory_with(*from.device)) {
        int rc = to.device->copy(from.region, to.region);
        if (rc != kNotOnDevice) return rc;
    } else if (from.device && !to.device) {
        return from.device->read(from.region, to.host);
    } else if (!from.device && to.device) {
        return to.device->write(from.host, to.region);
    }
    return bounce(from, to, box);
}

/// Where the box goes (false: dst has no memory for it). To the device: dst's device copy when
/// it is current; otherwise its host copy, which goes up whole afterwards (`upload`), since a
/// device write next to a stale rest, then called newer, would bring that rest home later.
bool target_end(const halide_buffer_t *dst, const DevicePlace &place, bool to_device, const Box &box, End &to,
                bool &upload) {
    upload = to_device && !device_current(dst, place);
    if (to_device && !upload) {
        to = on_device(place, box, box.dst_offset, box.dst_strides);
        return true;
    }
    to = on_host(dst, box.dst_offset, box.dst_strides);
    return dst->host != nullptr;
}

/// Where the box comes from (false: src's current copy is another runtime's device memory): its
/// device copy when current and beside a device target, else whichever copy is current, the
/// host's first.
bool source_end(const halide_buffer_t *src, const DevicePlace &place, const End &to, const Box &box, End &from) {
    bool on_device_current = place.root && device_current(src, place);
    bool beside = on_device_current && to.device && to.device->shares_memory_with(*place.device);
    if (beside || (on_device_current && !host_current(src, place))) {
        from = on_device(place, box, box.src_offset, box.src_strides);
        return true;
    }
    from = on_host(src, box.src_offset, box.src_strides);
    return host_current(src, place);
}

}  // namespace

int backend_buffer_copy(const halide_device_interface_t *ours, PlaceOf place_of, void *uc, halide_buffer_t *src,
                        const halide_device_interface_t *dst_interface, halide_buffer_t *dst) {
    if (!src || !dst) return halide_error::buffer_is_null;
    if (src->dimensions != dst->dimensions) return halide_error::bad_dimensions;
    if (element_bytes(src) != element_bytes(dst)) return halide_error::bad_type;
    Box box = common_box(src, dst);
    if (region_bytes(box.shape, box.itemsize) == 0) return 0;
    DevicePlace src_place = src->device && src->device_interface == ours ? place_of(src) : DevicePlace{};
    DevicePlace dst_place = dst->device && dst->device_interface == ours ? place_of(dst) : DevicePlace{};
    if (dst_interface && !dst_place.root) return halide_error::incompatible_device_interface;
    End from, to;
    bool upload = false;
    if (!target_end(dst, dst_place, dst_interface != nullptr, box, to, upload))
        return dst_interface ? halide_error::incompatible_device_interface : halide_error::host_is_null;
    if (!source_end(src, src_place, to, box, from)) return halide_error::incompatible_device_interface;
    // To the host of a buffer of ours whose device copy is the newer one: its storage comes home
    // first, as Halide will call the host copy the newer one.
    if (!dst_interface && dst_place.root && !host_current(dst, dst_place)) {
        if (int rc = dst->device_interface->impl->copy_to_host(uc, dst)) return rc;
    }
    int rc = move(from, to, box);
    if (rc == kNotOnDevice) return halide_error::incompatible_device_interface;
    if (rc == 0 && upload) rc = dst_interface->impl->copy_to_device(uc, dst);
    return rc;
}

// ---------------------------------------------------------------------------------------------
// The public half: Halide's rules, then the buffer's (or the given) impl table
// ---------------------------------------------------------------------------------------------

namespace {

/// What every entry checks first: a buffer whose device fields and flags are consistent.
int validate(const halide_buffer_t *buf) {
    if (!buf) return halide_error::buffer_is_null;
    if (buf->device && !buf->device_interface) return halide_error::no_device_interface;
    if (!buf->device && buf->device_interface) return halide_error::device_interface_no_device;
    if ((buf->flags & kHostDirty) && (buf->flags & kDeviceDirty)) return halide_error::host_and_device_dirty;
    return 0;
}

/// An interface may take a buffer that has no device allocation or already has one of its own.
bool compatible(const halide_buffer_t *buf, const halide_device_interface_t *interface) {
    return !buf->device_interface || buf->device_interface == interface;
}

int device_malloc(void *uc, halide_buffer_t *buf, const halide_device_interface_t *interface) {
    if (int rc = validate(buf)) return rc;
    if (!compatible(buf, interface)) return halide_error::incompatible_device_interface;
    if (buf->device) return 0;
    return interface->impl->device_malloc(uc, buf);
}

int device_free(void *uc, halide_buffer_t *buf) {
    if (int rc = validate(buf)) return rc;
    if (buf->device_interface) {
        if (int rc = buf->device_interface->impl->device_free(uc, buf)) return rc;
    }
    buf->flags &= ~kDeviceDirty;
    return 0;
}

int device_sync(void *uc, halide_buffer_t *buf) {
    if (int rc = validate(buf)) return rc;
    if (!buf->device_interface) return halide_error::no_device_interface;
    return buf->device_interface->impl->device_sync(uc, buf);
}

void device_release(void *uc, const halide_device_interface_t *interface) {
    interface->impl->device_release(uc);
}

int copy_to_host(void *uc, halide_buffer_t *buf) {
    if (int rc = validate(buf)) return rc;
    if (!(buf->flags & kDeviceDirty)) return 0;
    if (!buf->device_interface) return halide_error::no_device_interface;
    if (int rc = buf->device_interface->impl->copy_to_host(uc, buf)) return rc;
    buf->flags &= ~kDeviceDirty;
    return 0;
}

int copy_to_device(void *uc, halide_buffer_t *buf, const halide_device_interface_t *interface) {
    if (int rc = validate(buf)) return rc;
    if (!interface) interface = buf->device_interface;
    if (!interface) return halide_error::no_device_interface;
    if (!compatible(buf, interface)) return halide_error::incompatible_device_interface;
    if (!buf->device) {
        if (int rc = interface->impl->device_malloc(uc, buf)) return rc;
    }
    if (!(buf->flags & kHostDirty)) return 0;
    if (int rc = interface->impl->copy_to_device(uc, buf)) return rc;
    buf->flags &= ~kHostDirty;
    return 0;
}

int device_and_host_malloc(void *uc, halide_buffer_t *buf, const halide_device_interface_t *interface) {
    if (int rc = validate(buf)) return rc;
    if (!compatible(buf, interface)) return halide_error::incompatible_device_interface;
    return interface->impl->device_and_host_malloc(uc, buf);
}

int device_and_host_free(void *uc, halide_buffer_t *buf) {
    if (int rc = validate(buf)) return rc;
    if (buf->device_interface) {
        if (int rc = buf->device_interface->impl->device_and_host_free(uc, buf)) return rc;
    }
    buf->flags &= ~(kHostDirty | kDeviceDirty);
    return 0;
}

int buffer_copy(void *uc, halide_buffer_t *src, const halide_device_interface_t *dst_interface,
                halide_buffer_t *dst) {
    if (int rc = validate(src)) return rc;
    if (int rc = validate(dst)) return rc;
    const halide_device_interface_t *interface = dst_interface ? dst_interface : src->device_interface;
    if (!interface) return halide_error::no_device_interface;
    return interface->impl->buffer_copy(uc, src, dst_interface, dst);
}

int device_crop(void *uc, const halide_buffer_t *src, halide_buffer_t *dst) {
    if (int rc = validate(src)) return rc;
    if (!src->device) return 0;  // nothing on the device to crop
    if (dst->device) return halide_error::incompatible_device_interface;
    return src->device_interface->impl->device_crop(uc, src, dst);
}

int device_slice(void *uc, const halide_buffer_t *src, int dim, int pos, halide_buffer_t *dst) {
    if (int rc = validate(src)) return rc;
    if (!src->device) return 0;  // nothing on the device to slice
    if (dst->device) return halide_error::incompatible_device_interface;
    return src->device_interface->impl->device_slice(uc, src, dim, pos, dst);
}

int device_release_crop(void *uc, halide_buffer_t *buf) {
    if (!buf) return halide_error::buffer_is_null;
    if (!buf->device) return 0;
    if (!buf->device_interface) return halide_error::no_device_interface;
    return buf->device_interface->impl->device_release_crop(uc, buf);
}

int wrap_native(void *uc, halide_buffer_t *buf, uint64_t handle, const halide_device_interface_t *interface) {
    if (int rc = validate(buf)) return rc;
    if (!compatible(buf, interface) || buf->device) return halide_error::incompatible_device_interface;
    buf->device_interface = interface;
    if (int rc = interface->impl->wrap_native(uc, buf, handle)) {
        buf->device_interface = nullptr;
        return rc;
    }
    return 0;
}

int detach_native(void *uc, halide_buffer_t *buf) {
    if (int rc = validate(buf)) return rc;
    if (!buf->device_interface) return 0;
    return buf->device_interface->impl->detach_native(uc, buf);
}

int no_compute_capability(void *, int *major, int *minor) {
    // Meaningful for CUDA only; other devices report none.
    *major = *minor = 0;
    return 0;
}

}  // namespace

halide_device_interface_t make_public_interface(const halide_device_interface_impl_t *impl,
                                                ComputeCapability compute_capability) {
    if (!compute_capability) compute_capability = no_compute_capability;
    return halide_device_interface_t{
        device_malloc,       device_free,          device_sync,  device_release,
        copy_to_host,        copy_to_device,       device_and_host_malloc,
        device_and_host_free, buffer_copy,         device_crop,  device_slice,
        device_release_crop, wrap_native,          detach_native, compute_capability,
        impl,
    };
}

}  // namespace hb
