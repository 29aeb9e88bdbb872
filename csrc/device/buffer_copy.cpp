// buffer_copy.cpp: Halide's impl-table buffer_copy for our backends (backend_buffer_copy()):
// the elements two buffers share, moved with the Device data primitives, device to device
// where the memories are shared, keeping each storage's one residency state true.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <new>
#include <vector>

#include "core/constants.h"
#include "core/strided.h"
#include "device/device.h"
#include "device/device_copy.h"
#include "device/device_interface.h"

namespace hb {
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

/// The flags saying which copy of a buffer is the newer: its storage's where the storage has a
/// dirty flag (the one state every view of it shares), else the buffer's own (a flag foreign code
/// set in it, not yet taken in). A struct kept across operations, as Halide keeps one for a crop,
/// holds the flags of when it was made: where they disagree with the storage's, the storage's
/// are the newer.
uint64_t newer_flags(const halide_buffer_t *buf, const DevicePlace &place) {
    uint64_t storage = place.root ? place.root->flags & (kHostDirty | kDeviceDirty) : 0;
    return storage ? storage : buf->flags;
}

/// Whether a buffer of ours has a current device copy: the newer flags do not say the host's.
bool current_on_device(const halide_buffer_t *buf, const DevicePlace &place) {
    return !(newer_flags(buf, place) & kHostDirty);
}

/// Whether a buffer has a current host copy (Halide's rule, by the newer flags where it is ours).
bool current_on_host(const halide_buffer_t *buf, const DevicePlace &place) {
    if (!buf->host) return false;
    if (!buf->device_interface) return true;
    return !(newer_flags(buf, place) & kDeviceDirty);
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
    upload = to_device && !current_on_device(dst, place);
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
    bool device_copy_current = place.root && current_on_device(src, place);
    bool beside = device_copy_current && to.device && to.device->shares_memory_with(*place.device);
    if (beside || (device_copy_current && !current_on_host(src, place))) {
        from = on_device(place, box, box.src_offset, box.src_strides);
        return true;
    }
    from = on_host(src, box.src_offset, box.src_strides);
    return current_on_host(src, place);
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
    if (!dst_interface && dst_place.root && !current_on_host(dst, dst_place)) {
        if (int rc = dst->device_interface->impl->copy_to_host(uc, dst)) return rc;
    }
    int rc = move(from, to, box);
    if (rc == kNotOnDevice) return halide_error::incompatible_device_interface;
    if (rc == 0 && upload) rc = dst_interface->impl->copy_to_device(uc, dst);
    return rc;
}

}  // namespace hb
