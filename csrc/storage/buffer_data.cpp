// buffer_data.cpp: the data operations of Halide's Runtime::Buffer (fill, copy_from), each done
// where the current data is. A write goes to the device when the destination's device copy is
// current (the host's is then stale: device dirty), else to the host (host dirty). A read comes
// from the device only when the source's device copy is newer, and then only the elements
// needed cross the bus. Device memory a pipeline's runtime allocated is reached through its
// interface only, which copies whole storages: such a copy comes home first.
#include <algorithm>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/constants.h"
#include "core/errors.h"
#include "core/strided.h"
#include "storage/buffer.h"
#include "storage/storage_op.h"

namespace hb {
namespace {

/// Our backend holds the storage's device copy (not a pipeline runtime's), so its data
/// primitives can reach parts of it.
bool ours(const Storage &s) {
    return s.root.device && s.device();  // a runtime's memory has no device of ours
}

/// The device copy is ours and current (the host's is not newer): a write goes there.
bool our_device_copy_current(const Storage &s) { return ours(s) && !(s.effective_flags() & kHostDirty); }

/// The device copy is newer than the host's: a read must come from there.
bool device_newer(const Storage &s) { return s.root.device && (s.effective_flags() & kDeviceDirty); }

/// A write on the device leaves the host copy stale.
void mark_device_written(Storage &s) {
    s.root.flags = kDeviceDirty;
    s.host_flag_cleared = true;
}

/// One side of a data operation: elements of a storage at `data`, with byte strides.
struct Side {
    Storage &storage;
    uint8_t *data;
    const Axes &strides;

    DeviceRegion region(const Axes &shape, int64_t itemsize) const {
        return DeviceRegion{&storage.root, data - storage.root.host, shape, strides, itemsize};
    }
    HostRegion host() const { return HostRegion{data, strides}; }
};

/// The elements the two sides share, copied on the host (through a staging copy when their
/// bytes overlap: two views of the same memory).
void copy_on_host(const Side &dst, const Side &src, const Axes &shape, int64_t item) {
    if (!ranges_overlap(dst.data, dst.strides, src.data, src.strides, shape, item)) {
        copy_strided(dst.data, dst.strides, src.data, src.strides, shape, item);
        return;
    }
    Axes dense = c_strides(shape, int(item));
    std::vector<uint8_t> staging(size_t(std::max<int64_t>(item, dense.empty() ? item : dense[0] * shape[0])));
    copy_strided(staging.data(), dense, src.data, src.strides, shape, item);
    copy_strided(dst.data, dst.strides, staging.data(), dense, shape, item);
}

/// The copy into a destination whose host copy takes the write: the source's newer device
/// copy read straight into it (ours), or brought home first (a pipeline runtime's).
void copy_to_host_side(const char *entry, const Side &dst, const Side &src, const Axes &shape,
                       int64_t item) {
    dst.storage.prepare_host_write(entry);
    bool done = false;
    if (&src.storage != &dst.storage && device_newer(src.storage) && ours(src.storage)) {
        DeviceCall call(entry, src.storage.device().get());
        done = call("reading the source's device copy",
                    [&] { return src.storage.device()->read(src.region(shape, item), dst.host()); }) == 0;
    }
    if (!done) {
        src.storage.download(entry);
        copy_on_host(dst, src, shape, item);
    }
    dst.storage.root.flags |= kHostDirty;
}

/// The copy into a destination whose device copy is current: device to device when the source's
/// device copy is current too and the devices reach each other's memory, else the source's
/// current elements written up (read from its own device first when that is newer). False when
/// the device could not do it: the host takes the write then.
bool copy_to_device_side(const char *entry, const Side &dst, const Side &src, const Axes &shape,
                         int64_t item) {
    Storage &d = dst.storage, &s = src.storage;
    const Device &device = *d.device();
    DeviceRegion to = dst.region(shape, item);
    DeviceCall call(entry, d.device().get());
    auto write = [&](const HostRegion &from) {
        return call("writing the device copy", [&] { return device.write(from, to); }) == 0;
    };
    if (our_device_copy_current(s) && device.shares_memory_with(*s.device()))
        return call("copying on the device", [&] { return device.copy(src.region(shape, item), to); }) == 0;
    if (!device_newer(s)) return write(src.host());
    if (!ours(s)) {
        s.download(entry);  // a pipeline runtime's device copy comes home whole
        return write(src.host());
    }
    // The source's newer copy is on another device: through a staging copy of just these elements.
    Axes dense = c_strides(shape, int(item));
    std::vector<uint8_t> staging(size_t(dense.empty() ? item : dense[0] * shape[0]));
    HostRegion middle{staging.data(), dense};
    if (call("reading the source's device copy",
             [&] { return s.device()->read(src.region(shape, item), middle); }) != 0)
        return false;
    return write(middle);
}

/// Takes the locks of one or two storages, in address order.
struct Locked {
    std::optional<StorageOp> first, second;
    Locked(Storage &a, Storage &b) {
        if (&a == &b) {
            first.emplace(a);
            return;
        }
        bool a_first = std::less<Storage *>()(&a, &b);
        first.emplace(a_first ? a : b);
        second.emplace(a_first ? b : a);
    }
};

}  // namespace

void Buffer::fill(const char *entry, const uint8_t *pattern) {
    if (readonly())
        throw read_only_memory(entry);
    if (size() == 0) return;  // no element: nothing written, no flag changed
    StorageOp op(*storage_);
    Storage &s = *storage_;
    if (our_device_copy_current(s)) {
        DeviceRegion region{&s.root, data_ - s.root.host, shape_, strides_, dtype_->itemsize};
        if (DeviceCall(entry, s.device().get())("filling on the device",
                                                 [&] { return s.device()->fill(region, pattern); }) == 0) {
            mark_device_written(s);
            return;
        }
    }
    s.prepare_host_write(entry);
    fill_strided(data_, strides_, shape_, pattern, dtype_->itemsize);
    s.root.flags |= kHostDirty;
}

void Buffer::copy_from(const char *entry, const Buffer &src) {
    if (src.dtype_ != dtype_)
        throw TypeError(std::string(entry) + "(): the source is " + src.dtype_->name + ", the buffer " +
                        dtype_->name + "; convert it first (e.g. Buffer.from_host(src.numpy().astype(...), "
                        "copy=True)) or copy the bits of same-sized types with b.bits().copy_from(src.bits())");
    if (src.ndim() != ndim())
        throw ValueError(std::string(entry) + "(): the source has " + std::to_string(src.ndim()) +
                         " axes, the buffer " + std::to_string(ndim()) +
                         "; give both the same axes (sliced(), embedded() or add_dimension())");
    if (readonly())
        throw read_only_memory(entry);
    // The coordinates both domains share, and where that box starts in each.
    Axes shape(shape_.size());
    uint8_t *to = data_, *from = src.data_;
    for (size_t i = 0; i < shape.size(); ++i) {
        int64_t lo = std::max(mins_[i], src.mins_[i]);
        int64_t hi = std::min(mins_[i] + shape_[i], src.mins_[i] + src.shape_[i]);
        if (hi <= lo) return;  // no coordinate in common: nothing to copy
        shape[i] = hi - lo;
        to += (lo - mins_[i]) * strides_[i];
        from += (lo - src.mins_[i]) * src.strides_[i];
    }
    Locked locks(*storage_, *src.storage_);
    Side dst{*storage_, to, strides_}, source{*src.storage_, from, src.strides_};
    int64_t item = dtype_->itemsize;
    // Views of one storage share one state: copied on a current host copy.
    if (storage_ != src.storage_ && our_device_copy_current(*storage_) &&
        copy_to_device_side(entry, dst, source, shape, item)) {
        mark_device_written(*storage_);
        return;
    }
    copy_to_host_side(entry, dst, source, shape, item);
}

}  // namespace hb
