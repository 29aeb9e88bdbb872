// device_interface.cpp: transfer counters, byte spans, the target device, and the public half of
// our interface tables (Halide's flag rules in front of a backend's impl table). Halide's
// buffer_copy for our backends is buffer_copy.cpp's.
#include "device/device_interface.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "core/constants.h"
#include "core/layout.h"

namespace hb {

Transfers &process_transfers() {
    static Transfers totals;
    return totals;
}

void record_map(Transfers *storage, Direction direction) {
    for (Transfers *t : {storage, &process_transfers()}) {
        if (t) (direction == Direction::to_device ? t->maps_to_device : t->maps_to_host) += 1;
    }
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

int record_failure(int halide_code, int code, std::string name, std::string what) {
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
