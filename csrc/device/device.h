// device.h: a device buffers can live on, as the residency rules see it. Each backend (OpenCL,
// CUDA) derives one class from Device; the rules in residency.cpp call only what is here.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "abi/halide_abi.h"
#include "device/device_interface.h"
#include "device/device_pool.h"

namespace hb {

/// Elements in a storage's device memory, as the data primitives below take them: the element
/// at index 0 of every axis lies `offset` bytes past the element at root->host (in the device
/// copy, which mirrors the host layout); NumPy axis order, byte strides of any sign.
struct DeviceRegion {
    const halide_buffer_t *root;  ///< the storage's root, holding the allocation (our interface)
    int64_t offset;
    std::vector<int64_t> shape, strides;
    int64_t itemsize;
};
/// The same elements in host memory: element at index 0 of every axis, byte strides; the
/// shape is the DeviceRegion's it is copied to or from.
struct HostRegion {
    uint8_t *data;
    std::vector<int64_t> strides;
};
/// A data primitive's answer when the device cannot express the request (e.g. a fill pattern
/// its memset has no width for): the caller does it on the host instead.
constexpr int kNotOnDevice = 1;

class Device : public std::enable_shared_from_this<Device> {
public:
    /// `driver`: the backend's allocator of device memory from its driver (one per backend, it
    /// keeps nothing), which the device's pool sits over.
    explicit Device(DeviceAllocator &driver) : driver_(driver), pool_(driver) {}
    Device(const Device &) = delete;
    Device &operator=(const Device &) = delete;
    virtual ~Device() = default;

    /// "opencl" or "cuda".
    virtual const char *kind() const = 0;
    /// How messages name it, e.g. "NVIDIA H200 (CUDA device 0)".
    virtual std::string description() const = 0;
    /// Our halide_device_interface_t for memory on this device.
    virtual const halide_device_interface_t *interface() const = 0;
    /// Blocks until every command queued on the device's queue or stream has finished.
    virtual void synchronize() const = 0;
    /// The allocation behind a buffer using this device's interface.
    virtual DeviceAllocation *allocation(const halide_buffer_t &buf) const = 0;
    /// What a view's halide_buffer_t::device shows, `offset` bytes past the root's element;
    /// `slot` keeps any handle object the backend needs for it alive (OpenCL's DeviceHandle), and
    /// is reused while it fits (0: none could be made).
    virtual uint64_t view_field(const halide_buffer_t &root, int64_t offset, std::shared_ptr<void> &slot) const = 0;
    /// Completes a device_wrap_native: the element at root.host is `offset` bytes into the
    /// native memory; takes whatever reference keeps it valid while the buffer uses it.
    virtual void finish_wrap(halide_buffer_t &root, uint64_t offset) const = 0;
    /// What a device consumer is handed of root's memory, `offset` bytes past the root's
    /// element: the native handle (with a reference of its own where the API counts them; else
    /// the allocation is lent, DeviceAllocation::lend()) and the byte offset into it.
    struct Handout {
        void *native;
        int64_t offset;
    };
    virtual Handout hand_out(const halide_buffer_t &root, int64_t offset) const = 0;
    /// Before root's allocation is freed: memory handed to consumers who hold no reference of
    /// their own (lent: CUDA pointers) is retired from root instead, and what frees it returned,
    /// for the storage to drop when it dies (its consumers keep it alive). Null: free it now.
    virtual std::shared_ptr<void> retire_lent(halide_buffer_t &root) const = 0;
    /// Zero-copy: this device's memory is the host's (an OpenCL device reporting host-unified
    /// memory, unless turned off). The device copy of a storage whose host memory is aligned as
    /// mirror_alignment() asks is then that host memory, and copies between them are maps.
    virtual bool zero_copy() const { return false; }
    /// The alignment host memory of elements of `itemsize` bytes needs to be used as device
    /// memory as it is (zero_copy()).
    virtual uint64_t mirror_alignment(int /*itemsize*/) const { return 0; }
    /// On a zero-copy device: host memory of at least `bytes` with device memory over it, from the
    /// pool (its start in `*host`; the returned owner gives it back to the pool when dropped).
    /// Null elsewhere, or when the driver has none: the caller allocates host memory itself.
    virtual std::shared_ptr<void> host_block(uint64_t /*bytes*/, uint8_t ** /*host*/) { return nullptr; }
    /// Work queued on a device that shares the host's memory (zero-copy) reads and writes that
    /// memory after the call that queued it returned: each such call takes a ticket, which the
    /// storages it used keep (Storage::queued_work), and a host access that conflicts with it
    /// waits for it (wait_for()). Tickets grow from 1; 0 is none.
    uint64_t ticket_queued_work() { return queued_.fetch_add(1, std::memory_order_acq_rel) + 1; }
    /// Blocks until the work of `ticket` has finished: one synchronize(), unless one since the
    /// ticket was taken already covered it (then nothing: no driver call).
    void wait_for(uint64_t ticket) const {
        if (ticket <= finished_.load(std::memory_order_acquire)) return;
        uint64_t covered = queued_.load(std::memory_order_acquire);  // queued before the wait begins
        synchronize();
        uint64_t done = finished_.load(std::memory_order_relaxed);
        while (done < covered && !finished_.compare_exchange_weak(done, covered, std::memory_order_acq_rel)) {
        }
    }
    /// Where the device's memory comes from (Engine::device_malloc asks it, nothing else): the pool
    /// over the driver's allocator, or the driver's itself while the pool's limit is 0
    /// (pool_limit = 0 swaps the pool out). A zero-copy device puts memory over host memory in front.
    virtual DeviceAllocator &allocator() const {
        return pool_.open() ? static_cast<DeviceAllocator &>(pool_) : driver_;
    }
    /// The backend's allocator from the driver: what releases our references to its memory.
    DeviceAllocator &driver() const { return driver_; }
    /// Freed device memory kept for reuse (device_pool.h).
    DevicePool &pool() const { return pool_; }
    /// Releases what the pool keeps; the bytes released.
    uint64_t trim() const { return pool_.trim(*this); }
    /// Whether this device can take over `other`'s allocation as it is (the same memory space,
    /// e.g. two streams of one CUDA device); if so, it does (work queued on `other` is ordered
    /// before its own).
    virtual bool take_over(halide_buffer_t &/*root*/, const Device &/*other*/) const { return false; }
    /// Whether a pipeline runtime computing in this device's memory can be shown a part of
    /// root's allocation (of this device) as it is, the part's element at index 0 `offset` bytes
    /// past root's element, its strides all positive; or, root null, a part `offset` bytes past
    /// the first byte of an allocation it would make now (the storage's lowest byte). OpenCL:
    /// the runtime makes a sub-buffer starting there, which must lie at a multiple of the
    /// device's CL_DEVICE_MEM_BASE_ADDR_ALIGN. No by default: a part is shown without device
    /// memory, and the runtime allocates memory of its own for it.
    virtual bool shows_part(const halide_buffer_t */*root*/, int64_t /*offset*/) const { return false; }

    // --- data primitives: each returns 0, a Halide error code (the driver's failure left in
    // last_failure()), or kNotOnDevice. Element by element over the region's shape, touching
    // no byte between elements on either side (device_copy.h plans them). Reads and writes are
    // counted in the counters of the allocation they read or write (read: to_host, write:
    // to_device; one per call, the elements' bytes); copy and fill count nothing (nothing
    // crosses). They complete before returning.
    /// Sets every element of `region` to `pattern` (region.itemsize bytes). kNotOnDevice for a
    /// pattern the device's fill cannot take (OpenCL: sizes other than 1, 2, 4, ..., 128 bytes;
    /// CUDA: a pattern that is no repeated 1-, 2- or 4-byte word the region is aligned to).
    virtual int fill(const DeviceRegion &/*region*/, const uint8_t */*pattern*/) const { return kNotOnDevice; }
    /// Device elements to host elements (host strides of any sign).
    int read(const DeviceRegion &src, const HostRegion &dst) const { return transfer(src, dst, Direction::to_host); }
    /// Host elements to device elements.
    int write(const HostRegion &src, const DeviceRegion &dst) const { return transfer(dst, src, Direction::to_device); }
    /// What read() and write() are: elements between `region` and `host`, either way.
    virtual int transfer(const DeviceRegion &/*region*/, const HostRegion &/*host*/, Direction /*direction*/) const {
        return kNotOnDevice;
    }
    /// Device elements to device elements on this device's queue or stream (call it on dst's
    /// device; src's own queue or stream is waited for). kNotOnDevice when src's memory is not
    /// shared with this device (shares_memory_with) or src and dst share a byte (rectangle
    /// copies cannot overlap).
    virtual int copy(const DeviceRegion &/*src*/, const DeviceRegion &/*dst*/) const { return kNotOnDevice; }
    /// Whether copy() can move data between this device's memory and `other`'s directly (the
    /// same OpenCL context, the same CUDA device).
    virtual bool shares_memory_with(const Device &other) const { return &other == this; }

protected:
    DeviceAllocator &driver_;
    mutable DevicePool pool_;  ///< released by each backend's destructor (trim()), while it can

private:
    std::atomic<uint64_t> queued_{0};            ///< the last ticket taken (ticket_queued_work())
    mutable std::atomic<uint64_t> finished_{0};  ///< every ticket up to this one has finished
};

}  // namespace hb
