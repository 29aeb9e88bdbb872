// opencl_memory.cpp: the OpenCL backend: how OpenCL memory is named and moved (the engine in
// device_engine.h makes the impl table of it), and OpenCLDevice's Device methods, its data
// primitives over strided regions included (rectangle commands planned by device_copy.h).
// Everything is blocking: when a call returns, the bytes have arrived.
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <string>

#include "backends/device_opencl.h"
#include "core/live_counts.h"
#include "device/device_copy.h"
#include "device/device_engine.h"
#include "device/device_interface.h"

namespace hb {
namespace {

using namespace ocl;

/// Records the driver's code for the caller, returns Halide's.
int record_failure(int halide_code, cl_int code, std::string what) {
    return hb::record_failure(halide_code, code, error_name(code), std::move(what));
}

/// How OpenCL memory is named and moved, for the engine (device_engine.h). A buffer's
/// halide_buffer_t::device is a DeviceHandle: {offset of the element at host, cl_mem, ...}.
struct OpenCLMemory {
    using Device = OpenCLDevice;
    static const halide_device_interface_t *interface() { return opencl_interface(); }
    static constexpr ComputeCapability compute_capability = nullptr;
    static constexpr const char *kRead = "clEnqueueReadBuffer", *kWrite = "clEnqueueWriteBuffer",
                                *kFree = "clReleaseMemObject", *kMap = "clEnqueueMapBuffer";
    static constexpr bool kZeroCopy = true;
    static constexpr int kNoTarget = CL_INVALID_CONTEXT, kNotRoot = CL_INVALID_MEM_OBJECT;

    static DeviceAllocation *allocation_of(const halide_buffer_t *buf) { return handle_of(buf)->allocation; }
    static int64_t offset_of(const halide_buffer_t *buf) { return int64_t(handle_of(buf)->offset); }
    static bool attach(halide_buffer_t *buf, DeviceAllocation *a, int64_t offset) {
        auto *h = new (std::nothrow) DeviceHandle{uint64_t(offset), a->native, a, HandleKind::root};
        buf->device = reinterpret_cast<uint64_t>(h);
        return h != nullptr;
    }
    static bool attach_crop(const halide_buffer_t *src, int64_t bytes, halide_buffer_t *dst) {
        const DeviceHandle *s = handle_of(src);
        auto *h = new (std::nothrow)
            DeviceHandle{uint64_t(int64_t(s->offset) + bytes), s->native, s->allocation, HandleKind::crop};
        dst->device = reinterpret_cast<uint64_t>(h);
        return h != nullptr;
    }
    static bool is_root(const halide_buffer_t *buf) { return handle_of(buf)->kind == HandleKind::root; }
    static void detach(halide_buffer_t *buf) {
        DeviceHandle *h = handle_of(buf);
        // A view's handle belongs to its Buffer, which frees it; here it is only forgotten.
        if (h && h->kind != HandleKind::view) delete h;
        buf->device = 0;
    }

    static std::string error_name(int code) { return ocl::error_name(code); }
    static int release(const Device &, void *native) {
        // A failure is ignored: a reference count offers no retry.
        api().ReleaseMemObject(static_cast<cl_mem>(native));
        return CL_SUCCESS;
    }
    static int read(const Device &d, void *native, int64_t at, uint8_t *host, uint64_t bytes) {
        return api().EnqueueReadBuffer(d.queue(), static_cast<cl_mem>(native), CL_TRUE, size_t(at), size_t(bytes), host,
                                       0, nullptr, nullptr);
    }
    static int write(const Device &d, void *native, int64_t at, const uint8_t *host, uint64_t bytes) {
        return api().EnqueueWriteBuffer(d.queue(), static_cast<cl_mem>(native), CL_TRUE, size_t(at), size_t(bytes),
                                        host, 0, nullptr, nullptr);
    }
    static int allocate(Device &d, uint64_t bytes, void **native) {
        if (bytes > d.max_allocation())
            return record_failure(halide_error::device_malloc_failed, CL_INVALID_BUFFER_SIZE,
                                  "an allocation of " + size_text(bytes) + " exceeds the device's largest (" +
                                      size_text(d.max_allocation()) + ", CL_DEVICE_MAX_MEM_ALLOC_SIZE); split the buffer");
        cl_int rc = CL_SUCCESS;
        *native = api().CreateBuffer(d.context(), CL_MEM_READ_WRITE, bytes, nullptr, &rc);
        if (rc == CL_SUCCESS) return 0;
        return record_failure(halide_error::device_malloc_failed, rc, "clCreateBuffer of " + size_text(bytes) +
                                                           "; free device buffers (device_free()) or use a smaller one");
    }
    static int create_over(const Device &d, uint8_t *host, uint64_t bytes, void **native) {
        cl_int rc = CL_SUCCESS;
        *native = api().CreateBuffer(d.context(), CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, bytes, host, &rc);
        if (rc == CL_SUCCESS) return 0;
        return record_failure(halide_error::device_malloc_failed, rc, "clCreateBuffer of " + size_text(bytes) +
                                  " over host memory (zero-copy); free device buffers (device_free()), or turn "
                                  "zero-copy off (halide_buffer.opencl.device(zero_copy=False))");
    }
    /// A blocking map of the bytes for the side that reads next, and its unmap: the driver makes
    /// the memory current for that side (nothing moves where the device's memory is the host's).
    static int map(const Device &d, void *native, int64_t at, uint64_t bytes, Direction direction) {
        auto mem = static_cast<cl_mem>(native);
        cl_map_flags flags = direction == Direction::to_host ? CL_MAP_READ : CL_MAP_WRITE_INVALIDATE_REGION;
        cl_int rc = CL_SUCCESS;
        void *mapped = api().EnqueueMapBuffer(d.queue(), mem, CL_TRUE, flags, size_t(at), size_t(bytes), 0, nullptr,
                                              nullptr, &rc);
        if (rc != CL_SUCCESS) return rc;
        rc = api().EnqueueUnmapMemObject(d.queue(), mem, mapped, 0, nullptr, nullptr);
        cl_int finished = api().Finish(d.queue());
        return rc != CL_SUCCESS ? rc : finished;
    }
    static int sync(const Device &d) {
        cl_int rc = api().Finish(d.queue());
        return rc == CL_SUCCESS ? 0 : record_failure(halide_error::device_sync_failed, rc,
                                                     "clFinish; the queue is lost, create a new device");
    }
    static std::string transfer_call(const CopyPlan &plan, Direction direction);
    static int inspect(Device &d, uint64_t native, uint64_t *available) {
        auto mem = reinterpret_cast<cl_mem>(native);
        cl_context context = nullptr;
        cl_int rc = api().GetMemObjectInfo(mem, CL_MEM_SIZE, sizeof *available, available, nullptr);
        if (rc == CL_SUCCESS) rc = api().GetMemObjectInfo(mem, CL_MEM_CONTEXT, sizeof context, &context, nullptr);
        if (rc != CL_SUCCESS)
            return record_failure(halide_error::device_wrap_native_failed, rc, "clGetMemObjectInfo; pass a live cl_mem");
        if (context != d.context())
            return record_failure(halide_error::device_wrap_native_failed, CL_INVALID_CONTEXT,
                                  "the cl_mem belongs to another context; pass the device of its context");
        return 0;
    }
};

using OpenCLEngine = Engine<OpenCLMemory>;

/// A zero-copy device's allocator: device memory that is the request's host memory itself, where
/// it is aligned as the device asks (mirror_alignment()), so a map stands for each copy: a host
/// block's memory (the pool's, another reference), else a new cl_mem using the host memory
/// (CL_MEM_USE_HOST_PTR). Other requests go to the device's own allocator (the pool or the driver).
struct OverHostAllocator final : DeviceAllocator {
    int allocate(Device &device, const AllocationRequest &request, DeviceAllocation &a) override {
        auto &d = static_cast<OpenCLDevice &>(device);
        if (!request.host || reinterpret_cast<uintptr_t>(request.host) % d.mirror_alignment(request.itemsize) != 0)
            return d.Device::allocator().allocate(device, request, a);
        a.size = request.bytes;
        if ((a.native = d.pool().block_memory(request.host, request.bytes))) {
            api().RetainMemObject(static_cast<cl_mem>(a.native));
            a.source = memory_source::OverPoolBlock{request.host};
        } else {
            d.pool().note_miss();
            if (int rc = OpenCLMemory::create_over(d, const_cast<uint8_t *>(request.host), request.bytes, &a.native))
                return rc;
            a.source = memory_source::OverHost{request.host};
        }
        ++live_counts().device_allocations;
        return 0;
    }
    /// What it made ends as its source says (Engine::end()), through the driver's.
    int release(const Device &device, void *native, uint64_t size) override {
        return device.driver().release(device, native, size);
    }
};

}  // namespace

const halide_device_interface_t *opencl_interface() { return OpenCLEngine::table(); }

DeviceAllocator &opencl_driver() { return OpenCLEngine::driver(); }

// ---------------------------------------------------------------------------------------------
// OpenCLDevice: what the residency rules ask of the device
// ---------------------------------------------------------------------------------------------

const halide_device_interface_t *OpenCLDevice::interface() const { return opencl_interface(); }

DeviceAllocation *OpenCLDevice::allocation(const halide_buffer_t &buf) const {
    return handle_of(&buf)->allocation;
}

uint64_t OpenCLDevice::view_field(const halide_buffer_t &root, int64_t offset, std::shared_ptr<void> &slot) const {
    const DeviceHandle *base = handle_of(&root);
    uint64_t at = uint64_t(int64_t(base->offset) + offset);
    const auto *h = static_cast<const DeviceHandle *>(slot.get());
    if (!h || h->allocation != base->allocation || h->offset != at) {
        auto *fresh = new (std::nothrow) DeviceHandle{at, base->native, base->allocation, HandleKind::view};
        slot = fresh ? std::shared_ptr<void>(fresh, [](void *p) { delete static_cast<DeviceHandle *>(p); }) : nullptr;
    }
    return reinterpret_cast<uint64_t>(slot.get());
}

void OpenCLDevice::finish_wrap(halide_buffer_t &root, uint64_t offset) const {
    DeviceHandle *h = handle_of(&root);
    h->offset += offset;
    // Our own reference, on top of Halide's rule (the caller keeps its own): the memory stays
    // valid even if the owner is released by someone else.
    api().RetainMemObject(static_cast<cl_mem>(h->native));
    h->allocation->retain();
    ++live_counts().device_allocations;
}

std::shared_ptr<void> OpenCLDevice::retire_lent(halide_buffer_t &root) const {
    return OpenCLEngine::retire_lent(root);
}

DeviceAllocator &OpenCLDevice::allocator() const {
    static auto *over_host = new OverHostAllocator;  // never destroyed, as the driver's
    return zero_copy_ ? *over_host : Device::allocator();
}

bool OpenCLDevice::shows_part(const halide_buffer_t *root, int64_t offset) const {
    uint64_t at = (root ? handle_of(root)->offset : 0) + uint64_t(offset);
    return base_alignment_ > 0 && at % base_alignment_ == 0;
}

uint64_t OpenCLDevice::mirror_alignment(int itemsize) const {
    uint64_t widest = 16 * uint64_t(itemsize > 0 ? itemsize : 1);
    return base_alignment_ > 0 && base_alignment_ < widest ? base_alignment_ : widest;
}

std::shared_ptr<void> OpenCLDevice::host_block(uint64_t bytes, uint8_t **host) {
    if (!zero_copy_) return nullptr;
    DevicePool::HostBlock block;
    if (!pool_.take_block(DevicePool::size_class(bytes), block)) {
        block.size = DevicePool::size_class(bytes);
        void *memory = nullptr;
        constexpr size_t kPage = 4096;  // pages of its own for bulk copies, as a storage's large blocks
        if (posix_memalign(&memory, kPage, size_t(block.size)) != 0) return nullptr;
        block.host = static_cast<uint8_t *>(memory);
        std::memset(memory, 0, size_t(block.size));  // as a storage's own memory starts
        if (OpenCLMemory::create_over(*this, block.host, block.size, &block.native) != 0) {
            std::free(memory);
            return nullptr;
        }
        ++live_counts().device_allocations;
        pool_.add_block(block);
    }
    *host = block.host;
    auto self = std::static_pointer_cast<OpenCLDevice>(shared_from_this());
    return std::shared_ptr<void>(block.host, [self, block](void *) { self->pool_.give_block(*self, block); });
}

Device::Handout OpenCLDevice::hand_out(const halide_buffer_t &root, int64_t offset) const {
    DeviceHandle *h = handle_of(&root);
    // The consumer gets its own reference, taken under the storage's lock: a device_free()
    // racing with it cannot release the memory under the consumer's feet, nor the pool hand it on.
    api().RetainMemObject(static_cast<cl_mem>(h->native));
    h->allocation->share_out();
    return Handout{h->native, int64_t(h->offset) + offset};
}


// ---------------------------------------------------------------------------------------------
// OpenCLDevice: the data primitives over strided regions
// ---------------------------------------------------------------------------------------------

namespace {

using Enqueue = std::function<cl_int(int64_t, int64_t)>;

cl_mem memory_of(const DeviceRegion &r) { return static_cast<cl_mem>(handle_of(r.root)->native); }
/// Bytes from the start of the cl_mem to the region's element at index 0.
int64_t base_of(const DeviceRegion &r) { return int64_t(handle_of(r.root)->offset) + r.offset; }

/// Whether each command of a plan is one row: a plain call, not a rectangle.
bool single_rows(const CopyPlan &plan) { return plan.rows == 1 && plan.slices == 1; }

/// Enqueues each command of `plan` (`enqueue(offset0, offset1)`), then waits for the queue,
/// after a failure too (host memory the commands use must outlive them). The first failure wins.
cl_int run_commands(cl_command_queue queue, const CopyPlan &plan, const Enqueue &enqueue) {
    cl_int rc = plan.for_each(enqueue);
    cl_int finished = api().Finish(queue);
    return rc != CL_SUCCESS ? rc : finished;
}

/// Enqueues a copy of one command between two cl_mems at byte offsets `from` and `to`; side 0
/// of the plan is the source.
cl_int enqueue_copy(cl_command_queue queue, const CopyPlan &plan, cl_mem src, int64_t from, cl_mem dst, int64_t to) {
    if (single_rows(plan))
        return api().EnqueueCopyBuffer(queue, src, dst, size_t(from), size_t(to), size_t(plan.row_bytes), 0, nullptr,
                                       nullptr);
    size_t src_origin[3] = {size_t(from), 0, 0}, dst_origin[3] = {size_t(to), 0, 0};
    size_t region[3] = {size_t(plan.row_bytes), size_t(plan.rows), size_t(plan.slices)};
    return api().EnqueueCopyBufferRect(queue, src, dst, src_origin, dst_origin, region, size_t(plan.row_pitch[0]),
                                       size_t(plan.slice_pitch[0]), size_t(plan.row_pitch[1]),
                                       size_t(plan.slice_pitch[1]), 0, nullptr, nullptr);
}

/// A read (device to `host`) or write of one command, the device at byte offset `at`.
cl_int enqueue_transfer(cl_command_queue queue, const CopyPlan &plan, cl_mem mem, int64_t at, uint8_t *host,
                        Direction direction) {
    const Api &cl = api();
    bool read = direction == Direction::to_host;
    if (single_rows(plan))
        return read ? cl.EnqueueReadBuffer(queue, mem, CL_FALSE, size_t(at), size_t(plan.row_bytes), host, 0, nullptr, nullptr)
                    : cl.EnqueueWriteBuffer(queue, mem, CL_FALSE, size_t(at), size_t(plan.row_bytes), host, 0, nullptr,
                                            nullptr);
    size_t device_origin[3] = {size_t(at), 0, 0}, host_origin[3] = {0, 0, 0};
    size_t region[3] = {size_t(plan.row_bytes), size_t(plan.rows), size_t(plan.slices)};
    auto pitches = [&](int side) { return std::make_pair(size_t(plan.row_pitch[side]), size_t(plan.slice_pitch[side])); };
    auto [device_row, device_slice] = pitches(0);
    auto [host_row, host_slice] = pitches(1);
    return read ? cl.EnqueueReadBufferRect(queue, mem, CL_FALSE, device_origin, host_origin, region, device_row,
                                           device_slice, host_row, host_slice, host, 0, nullptr, nullptr)
                : cl.EnqueueWriteBufferRect(queue, mem, CL_FALSE, device_origin, host_origin, region, device_row,
                                            device_slice, host_row, host_slice, host, 0, nullptr, nullptr);
}

/// The call a plan's commands use, for messages.
std::string call_name(const CopyPlan &plan, const char *plain) {
    return std::string(plain) + (single_rows(plan) ? "" : "Rect");
}

}  // namespace

std::string OpenCLMemory::transfer_call(const CopyPlan &plan, Direction direction) {
    return call_name(plan, direction == Direction::to_host ? kRead : kWrite);
}

namespace {

/// Whether two regions of the same cl_mem share a byte (rectangle copies must not overlap).
bool overlapping(const DeviceRegion &a, const DeviceRegion &b) {
    if (memory_of(a) != memory_of(b)) return false;
    ByteSpan sa = region_span(a.shape, a.strides, a.itemsize), sb = region_span(b.shape, b.strides, b.itemsize);
    return base_of(a) + sa.lo < base_of(b) + sb.hi && base_of(b) + sb.lo < base_of(a) + sa.hi;
}

/// Whether clEnqueueFillBuffer takes a pattern of `size` bytes: 1, 2, 4, ..., 128.
bool fillable(int64_t size) { return size >= 1 && size <= 128 && (size & (size - 1)) == 0; }

constexpr const char *kFillFix = "; the elements may be partly filled, retry or fill on the host";

/// A fill of one range at an offset the pattern divides: one clEnqueueFillBuffer in place.
int fill_range(const OpenCLDevice &device, const DeviceRegion &region, const uint8_t *pattern, int64_t at,
               int64_t bytes) {
    cl_int rc = api().EnqueueFillBuffer(device.queue(), memory_of(region), pattern, size_t(region.itemsize),
                                        size_t(at), size_t(bytes), 0, nullptr, nullptr);
    if (rc == CL_SUCCESS) rc = api().Finish(device.queue());
    return rc == CL_SUCCESS ? 0 : record_failure(halide_error::gpu_device_error, rc,
                                                 "clEnqueueFillBuffer of " + size_text(uint64_t(bytes)) + kFillFix);
}

/// A fill with gaps between elements, or at an offset the pattern does not divide: one
/// command's worth of elements is filled in a temporary buffer, then copied into place command
/// by command (the host sees none of it).
int fill_from_temporary(const OpenCLDevice &device, const DeviceRegion &region, const uint8_t *pattern,
                        const CopyPlan &plan) {
    const Api &cl = api();
    size_t bytes = size_t(plan.command_bytes());
    cl_int rc = CL_SUCCESS;
    cl_mem temp = cl.CreateBuffer(device.context(), CL_MEM_READ_WRITE, bytes, nullptr, &rc);
    if (rc != CL_SUCCESS)
        return record_failure(halide_error::gpu_device_error, rc, "clCreateBuffer of " + size_text(bytes) +
                                  " to fill from; free device memory (device_free()) or fill on the host");
    CopyPlan from_temp = plan;  // side 0: the temporary buffer, dense; side 1: the region
    from_temp.row_pitch[0] = plan.row_bytes;
    from_temp.slice_pitch[0] = plan.row_bytes * plan.rows;
    from_temp.row_pitch[1] = plan.row_pitch[0];
    from_temp.slice_pitch[1] = plan.slice_pitch[0];
    std::string what = "clEnqueueFillBuffer of " + size_text(bytes) + " (a temporary buffer)";
    rc = cl.EnqueueFillBuffer(device.queue(), temp, pattern, size_t(region.itemsize), 0, bytes, 0, nullptr, nullptr);
    if (rc == CL_SUCCESS) {
        what = call_name(plan, "clEnqueueCopyBuffer") + " of " +
               size_text(uint64_t(region_bytes(region.shape, region.itemsize))) + " from a filled temporary buffer";
        cl_mem mem = memory_of(region);
        int64_t base = base_of(region);
        rc = run_commands(device.queue(), plan, [&](int64_t at, int64_t) {
            return enqueue_copy(device.queue(), from_temp, temp, 0, mem, base + at);
        });
    }
    cl.ReleaseMemObject(temp);
    return rc == CL_SUCCESS ? 0 : record_failure(halide_error::gpu_device_error, rc, what + kFillFix);
}

}  // namespace

int OpenCLDevice::transfer(const DeviceRegion &region, const HostRegion &host, Direction direction) const {
    cl_mem mem = memory_of(region);
    int64_t base = base_of(region);
    return OpenCLEngine::transfer(region, host, direction, [&](const CopyPlan &plan, uint8_t *at) {
        return run_commands(queue_, plan, [&](int64_t on_device, int64_t on_host) {
            return enqueue_transfer(queue_, plan, mem, base + on_device, at + on_host, direction);
        });
    });
}

int OpenCLDevice::copy(const DeviceRegion &src, const DeviceRegion &dst) const {
    const auto *owner = dynamic_cast<const OpenCLDevice *>(allocation(*src.root)->device.get());
    if (!owner || !shares_memory_with(*owner) || overlapping(src, dst)) return kNotOnDevice;
    // Work queued on the source's own queue (another queue of the context) comes first.
    if (owner != this) {
        cl_int rc = api().Finish(owner->queue());
        if (rc != CL_SUCCESS)
            return record_failure(halide_error::device_buffer_copy_failed, rc,
                                  "clFinish on the source's queue; the queue is lost, create a new device");
    }
    CopyPlan plan = plan_copy(src.shape, src.strides, dst.strides, src.itemsize);
    cl_mem from = memory_of(src), to = memory_of(dst);
    // Within one cl_mem, clEnqueueCopyBufferRect needs the same pitches on both sides.
    if (from == to && (plan.row_pitch[0] != plan.row_pitch[1] || plan.slice_pitch[0] != plan.slice_pitch[1]))
        plan = row_by_row(plan);
    int64_t from_base = base_of(src), to_base = base_of(dst);
    cl_int rc = run_commands(queue_, plan, [&](int64_t at_src, int64_t at_dst) {
        return enqueue_copy(queue_, plan, from, from_base + at_src, to, to_base + at_dst);
    });
    if (rc == CL_SUCCESS) return 0;
    return record_failure(halide_error::device_buffer_copy_failed, rc,
                          call_name(plan, "clEnqueueCopyBuffer") + " of " + size_text(uint64_t(region_bytes(src.shape, src.itemsize))) +
                              "; the destination may be partly written, retry or copy through the host");
}

int OpenCLDevice::fill(const DeviceRegion &region, const uint8_t *pattern) const {
    // OpenCL fills with patterns of 1, 2, 4, ..., 128 bytes only; other element sizes are
    // filled on the host.
    if (!fillable(region.itemsize)) return kNotOnDevice;
    CopyPlan plan = plan_region(region.shape, region.strides, region.itemsize);
    if (plan.empty()) return 0;
    int64_t first = base_of(region) + plan.start[0];
    bool one_range = plan.commands() == 1 && single_rows(plan) && first % region.itemsize == 0;
    return one_range ? fill_range(*this, region, pattern, first, plan.row_bytes)
                     : fill_from_temporary(*this, region, pattern, plan);
}

bool OpenCLDevice::shares_memory_with(const Device &other) const {
    const auto *o = dynamic_cast<const OpenCLDevice *>(&other);
    return o && o->context() == context_;
}

}  // namespace hb
