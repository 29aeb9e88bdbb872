// cuda_memory.cpp: the CUDA backend: how CUDA memory is named and moved (the engine in
// device_engine.h makes the impl table of it), and CudaDevice's Device methods, its data
// primitives over strided regions included (rectangle commands planned by device_copy.h).
// Everything runs on the device's stream and is blocking: when a call returns, the bytes have
// arrived.
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <string>

#include "backends/device_cuda.h"
#include "core/errors.h"
#include "device/device_copy.h"
#include "device/device_engine.h"

namespace hb {
namespace {

using namespace cu;

/// Records the driver's code for the caller, returns Halide's.
int record_failure(int halide_code, CUresult code, std::string what) {
    return hb::record_failure(halide_code, code, error_name(code), std::move(what));
}

DeviceAllocation *allocation_of(const halide_buffer_t *buf) {
    return static_cast<DeviceAllocation *>(buf->padding);
}

CudaDevice *target_device() { return dynamic_cast<CudaDevice *>(TargetDevice::current()); }

/// One blocking copy of `bytes` on the device's stream; `to_host` gives the direction.
CUresult copy_span(const CudaDevice &d, uint8_t *host, CUdeviceptr device, size_t bytes, bool to_host) {
    ContextScope scope(d.context());
    if (scope.result != CUDA_SUCCESS) return scope.result;
    const Api &cuda = api();
    CUresult rc = to_host ? cuda.MemcpyDtoHAsync(host, device, bytes, d.stream())
                          : cuda.MemcpyHtoDAsync(device, host, bytes, d.stream());
    return rc == CUDA_SUCCESS ? cuda.StreamSynchronize(d.stream()) : rc;
}

int compute_capability(void *, int *major, int *minor) {
    const CudaDevice *d = target_device();
    *major = d ? d->compute_major() : 0;
    *minor = d ? d->compute_minor() : 0;
    return 0;
}

/// How CUDA memory is named and moved, for the engine (device_engine.h). A buffer's
/// halide_buffer_t::device is the CUdeviceptr of the element at buf->host, exactly as Halide's
/// CUDA runtime stores it, so a pipeline's kernels and any framework read our pointers as they
/// are; the allocation behind it is reached through the buffer's `padding` field, which Halide
/// reserves and never reads, and crops carry it.
struct CudaMemory {
    using Device = CudaDevice;
    static const halide_device_interface_t *interface() { return cuda_interface(); }
    static constexpr ComputeCapability compute_capability = hb::compute_capability;
    static constexpr const char *kRead = "cuMemcpyDtoH", *kWrite = "cuMemcpyHtoD", *kFree = "cuMemFree",
                                *kMap = "";
    static constexpr bool kZeroCopy = false;  // device memory of its own: every transfer copies
    static constexpr int kNoTarget = CUDA_ERROR_INVALID_CONTEXT, kNotRoot = CUDA_ERROR_INVALID_VALUE;

    static DeviceAllocation *allocation_of(const halide_buffer_t *buf) { return hb::allocation_of(buf); }
    static int64_t offset_of(const halide_buffer_t *buf) {
        return int64_t(buf->device - reinterpret_cast<CUdeviceptr>(allocation_of(buf)->native));
    }
    static bool attach(halide_buffer_t *buf, DeviceAllocation *a, int64_t offset) {
        buf->device = reinterpret_cast<CUdeviceptr>(a->native) + uint64_t(offset);
        buf->padding = a;
        return true;
    }
    static bool attach_crop(const halide_buffer_t *src, int64_t bytes, halide_buffer_t *dst) {
        dst->device = src->device + uint64_t(bytes);
        dst->padding = src->padding;
        return true;
    }
    /// The storage's root once adopted; before that, the one buffer there is (not a crop or a
    /// published view, which share the record).
    static bool is_root(const halide_buffer_t *buf) {
        const DeviceAllocation *a = allocation_of(buf);
        return !a->retired() && (!a->whole || a->whole == buf);
    }
    static void detach(halide_buffer_t *buf) {
        buf->device = 0;
        buf->padding = nullptr;
    }

    static std::string error_name(int code) { return cu::error_name(CUresult(code)); }
    static int release(const Device &d, void *native) {
        ContextScope scope(static_cast<const CudaDevice &>(d).context());
        return scope.result != CUDA_SUCCESS ? scope.result : api().MemFree(reinterpret_cast<CUdeviceptr>(native));
    }
    static int read(const Device &d, void *native, int64_t at, uint8_t *host, uint64_t bytes) {
        return copy_span(d, host, reinterpret_cast<CUdeviceptr>(native) + uint64_t(at), size_t(bytes), true);
    }
    static int write(const Device &d, void *native, int64_t at, const uint8_t *host, uint64_t bytes) {
        return copy_span(d, const_cast<uint8_t *>(host), reinterpret_cast<CUdeviceptr>(native) + uint64_t(at),
                         size_t(bytes), false);
    }
    static int allocate(Device &d, uint64_t bytes, void **native) {
        ContextScope scope(d.context());
        if (scope.result != CUDA_SUCCESS) return record_failure(halide_error::device_malloc_failed, scope.result,
                                                                "cuCtxPushCurrent");
        CUdeviceptr base = 0;
        CUresult rc = api().MemAlloc(&base, bytes);
        if (rc != CUDA_SUCCESS)
            return record_failure(halide_error::device_malloc_failed, rc, "cuMemAlloc of " + size_text(bytes) +
                                                               "; free device buffers (device_free()) or use a smaller one");
        *native = reinterpret_cast<void *>(base);
        return 0;
    }
    static int sync(const Device &d) {
        ContextScope scope(d.context());
        CUresult rc = scope.result != CUDA_SUCCESS ? scope.result : api().StreamSynchronize(d.stream());
        return rc == CUDA_SUCCESS ? 0 : record_failure(halide_error::device_sync_failed, rc,
                                                       "cuStreamSynchronize; a kernel on the stream failed");
    }
    static std::string transfer_call(const CopyPlan &plan, Direction direction);
    static int inspect(Device &d, uint64_t native, uint64_t *available) {
        const Api &cuda = api();
        ContextScope scope(d.context());
        if (scope.result != CUDA_SUCCESS) return record_failure(halide_error::device_wrap_native_failed, scope.result,
                                                                "cuCtxPushCurrent");
        int ordinal = -1;
        CUresult rc = cuda.PointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, native);
        if (rc != CUDA_SUCCESS)
            return record_failure(halide_error::device_wrap_native_failed, rc,
                                  "cuPointerGetAttribute; pass a live CUDA device pointer");
        if (ordinal != d.ordinal())
            return record_failure(halide_error::device_wrap_native_failed, CUDA_ERROR_INVALID_DEVICE,
                                      "the memory is on CUDA device " + std::to_string(ordinal) + "; pass halide_buffer.cuda.device(" +
                                      std::to_string(ordinal) + ")");
        // Memory the driver cannot bound (some pool allocators map it themselves) is taken at the
        // producer's word.
        CUdeviceptr base = 0;
        size_t size = 0;
        *available = UINT64_MAX;
        if (cuda.MemGetAddressRange(&base, &size, native) == CUDA_SUCCESS) *available = base + size - native;
        return 0;
    }
};

using CudaEngine = Engine<CudaMemory>;

}  // namespace

const halide_device_interface_t *cuda_interface() { return CudaEngine::table(); }

DeviceAllocator &cuda_driver() { return CudaEngine::driver(); }

// ---------------------------------------------------------------------------------------------
// CudaDevice: what the residency rules ask of the device
// ---------------------------------------------------------------------------------------------

const halide_device_interface_t *CudaDevice::interface() const { return cuda_interface(); }

DeviceAllocation *CudaDevice::allocation(const halide_buffer_t &buf) const { return allocation_of(&buf); }

uint64_t CudaDevice::view_field(const halide_buffer_t &root, int64_t offset, std::shared_ptr<void> &slot) const {
    slot.reset();  // a plain pointer needs no handle object
    return root.device + uint64_t(offset);
}

void CudaDevice::finish_wrap(halide_buffer_t &root, uint64_t offset) const {
    // Nothing to retain: CUDA memory has no reference count; the storage keeps its owner alive.
    root.device += offset;
}

Device::Handout CudaDevice::hand_out(const halide_buffer_t &root, int64_t offset) const {
    allocation_of(&root)->lend();  // freed no earlier than the storage from now on, never pooled
    return Handout{reinterpret_cast<void *>(root.device), offset};
}

std::shared_ptr<void> CudaDevice::retire_lent(halide_buffer_t &root) const { return CudaEngine::retire_lent(root); }

bool CudaDevice::take_over(halide_buffer_t &root, const Device &other) const {
    const auto *from = dynamic_cast<const CudaDevice *>(&other);
    if (!from || from->ordinal() != ordinal_) return false;
    from->order_before(stream_);  // the other stream's work on this memory comes first
    allocation_of(&root)->device = std::const_pointer_cast<Device>(shared_from_this());
    return true;
}

// ---------------------------------------------------------------------------------------------
// CudaDevice: the data primitives over strided regions
// ---------------------------------------------------------------------------------------------

namespace {

using Enqueue = std::function<CUresult(int64_t, int64_t)>;

/// The device address of a region's element at index 0.
CUdeviceptr base_of(const DeviceRegion &r) { return r.root->device + uint64_t(r.offset); }

/// Whether each command of a plan is one row: a plain call, not a 3-D copy or a 2-D memset.
bool single_rows(const CopyPlan &plan) { return plan.rows == 1 && plan.slices == 1; }

/// Queues each command of `plan` (`enqueue(offset0, offset1)`) on the device's stream with its
/// context current, then waits for the stream, after a failure too (host memory the commands
/// use must outlive them). The first failure wins.
CUresult run_commands(const CudaDevice &d, const CopyPlan &plan, const Enqueue &enqueue) {
    ContextScope scope(d.context());
    if (scope.result != CUDA_SUCCESS) return scope.result;
    CUresult rc = plan.for_each(enqueue);
    CUresult finished = api().StreamSynchronize(d.stream());
    return rc != CUDA_SUCCESS ? rc : finished;
}

/// One end of a copy command: device or host memory at the command's first byte, with the
/// pitches of its side of the plan.
struct End {
    CUmemorytype type;
    CUdeviceptr device;
    uint8_t *host;
    size_t pitch, height;  ///< bytes per row, rows per slice
};

End device_end(const CopyPlan &plan, int side, CUdeviceptr at) {
    return End{CU_MEMORYTYPE_DEVICE, at, nullptr, size_t(plan.row_pitch[side]),
               size_t(plan.slice_pitch[side] / plan.row_pitch[side])};
}

End host_end(const CopyPlan &plan, int side, uint8_t *at) {
    return End{CU_MEMORYTYPE_HOST, 0, at, size_t(plan.row_pitch[side]),
               size_t(plan.slice_pitch[side] / plan.row_pitch[side])};
}

/// Queues one command of `plan` from `src` to `dst`: a plain copy for a single row, else a 3-D
/// copy between pitched memories.
CUresult enqueue_copy(const CopyPlan &plan, const End &src, const End &dst, CUstream stream) {
    const Api &cuda = api();
    size_t bytes = size_t(plan.row_bytes);
    if (single_rows(plan)) {
        if (src.type == CU_MEMORYTYPE_HOST) return cuda.MemcpyHtoDAsync(dst.device, src.host, bytes, stream);
        if (dst.type == CU_MEMORYTYPE_HOST) return cuda.MemcpyDtoHAsync(dst.host, src.device, bytes, stream);
        return cuda.MemcpyDtoDAsync(dst.device, src.device, bytes, stream);
    }
    CUDA_MEMCPY3D c{};
    c.srcMemoryType = src.type;
    c.srcHost = src.host;
    c.srcDevice = src.device;
    c.srcPitch = src.pitch;
    c.srcHeight = src.height;
    c.dstMemoryType = dst.type;
    c.dstHost = dst.host;
    c.dstDevice = dst.device;
    c.dstPitch = dst.pitch;
    c.dstHeight = dst.height;
    c.WidthInBytes = bytes;
    c.Height = size_t(plan.rows);
    c.Depth = size_t(plan.slices);
    return cuda.Memcpy3DAsync(&c, stream);
}

/// The call a plan's commands use, for messages.
const char *copy_call(const CopyPlan &plan, const char *plain) { return single_rows(plan) ? plain : "cuMemcpy3DAsync"; }

}  // namespace

std::string CudaMemory::transfer_call(const CopyPlan &plan, Direction direction) {
    return copy_call(plan, direction == Direction::to_host ? "cuMemcpyDtoHAsync" : "cuMemcpyHtoDAsync");
}

namespace {

/// Whether two regions share a byte of device memory (copies between them must not overlap).
bool overlapping(const DeviceRegion &a, const DeviceRegion &b) {
    ByteSpan sa = region_span(a.shape, a.strides, a.itemsize), sb = region_span(b.shape, b.strides, b.itemsize);
    auto lo = [](const DeviceRegion &r, const ByteSpan &s) { return int64_t(base_of(r)) + s.lo; };
    auto hi = [](const DeviceRegion &r, const ByteSpan &s) { return int64_t(base_of(r)) + s.hi; };
    return lo(a, sa) < hi(b, sb) && lo(b, sb) < hi(a, sa);
}

/// Whether every command of `plan` at `base` starts, and every pitch and step is, a multiple of w.
bool aligned(const CopyPlan &plan, CUdeviceptr base, int64_t w) {
    if ((int64_t(base) + plan.start[0]) % w || plan.row_bytes % w || plan.row_pitch[0] % w || plan.slice_pitch[0] % w)
        return false;
    for (const CopyPlan::Axis &a : plan.loop) {
        if (a.stride[0] % w) return false;
    }
    return true;
}

/// The widest memset word (4, 2 or 1 bytes) that repeats to the pattern and fits the plan's
/// alignment; 0 when there is none (an 8- or 16-byte pattern of unequal words, say).
int64_t memset_width(const uint8_t *pattern, int64_t size, const CopyPlan &plan, CUdeviceptr base) {
    for (int64_t w : {4, 2, 1}) {
        if (size % w || !aligned(plan, base, w)) continue;
        bool repeats = true;
        for (int64_t i = w; i < size && repeats; ++i) repeats = pattern[i] == pattern[i % w];
        if (repeats) return w;
    }
    return 0;
}

/// Queues one memset of `height` rows of `count` words of `w` bytes, `pitch` apart.
CUresult enqueue_memset(CUdeviceptr at, size_t pitch, const uint8_t *word, int64_t w, size_t count, size_t height,
                        CUstream stream) {
    const Api &cuda = api();
    uint8_t v8 = word[0];
    uint16_t v16 = 0;
    uint32_t v32 = 0;
    std::memcpy(&v16, word, w >= 2 ? 2 : 0);
    std::memcpy(&v32, word, w >= 4 ? 4 : 0);
    if (height == 1) {
        if (w == 4) return cuda.MemsetD32Async(at, v32, count, stream);
        if (w == 2) return cuda.MemsetD16Async(at, v16, count, stream);
        return cuda.MemsetD8Async(at, v8, count, stream);
    }
    if (w == 4) return cuda.MemsetD2D32Async(at, pitch, v32, count, height, stream);
    if (w == 2) return cuda.MemsetD2D16Async(at, pitch, v16, count, height, stream);
    return cuda.MemsetD2D8Async(at, pitch, v8, count, height, stream);
}

}  // namespace

int CudaDevice::transfer(const DeviceRegion &region, const HostRegion &host, Direction direction) const {
    bool read = direction == Direction::to_host;
    CUdeviceptr base = base_of(region);
    return CudaEngine::transfer(region, host, direction, [&](const CopyPlan &plan, uint8_t *at) {
        return run_commands(*this, plan, [&](int64_t on_device, int64_t on_host) {
            End dev = device_end(plan, 0, base + uint64_t(on_device)), mem = host_end(plan, 1, at + on_host);
            return read ? enqueue_copy(plan, dev, mem, stream_) : enqueue_copy(plan, mem, dev, stream_);
        });
    });
}

int CudaDevice::copy(const DeviceRegion &src, const DeviceRegion &dst) const {
    const auto *owner = dynamic_cast<const CudaDevice *>(allocation(*src.root)->device.get());
    if (!owner || !shares_memory_with(*owner) || overlapping(src, dst)) return kNotOnDevice;
    try {
        owner->order_before(stream_);  // work queued on the source's stream comes first
    } catch (const DeviceError &e) {
        return hb::record_failure(halide_error::device_buffer_copy_failed, e.code, e.name, e.what());
    }
    CopyPlan plan = plan_copy(src.shape, src.strides, dst.strides, src.itemsize);
    CUdeviceptr from = base_of(src), to = base_of(dst);
    CUresult rc = run_commands(*this, plan, [&](int64_t at_src, int64_t at_dst) {
        return enqueue_copy(plan, device_end(plan, 0, from + uint64_t(at_src)), device_end(plan, 1, to + uint64_t(at_dst)),
                            stream_);
    });
    if (rc == CUDA_SUCCESS) return 0;
    return record_failure(halide_error::device_buffer_copy_failed, rc,
                          std::string(copy_call(plan, "cuMemcpyDtoDAsync")) + " of " +
                              size_text(uint64_t(region_bytes(src.shape, src.itemsize))) +
                              "; the destination may be partly written, retry or copy through the host");
}

int CudaDevice::fill(const DeviceRegion &region, const uint8_t *pattern) const {
    CopyPlan plan = plan_region(region.shape, region.strides, region.itemsize);
    if (plan.empty()) return 0;
    CUdeviceptr base = base_of(region);
    // cuMemsetD8/D16/D32 repeat a word of 1, 2 or 4 bytes: a pattern that is no such word
    // repeated (a float64 other than 0.0, say) is filled on the host.
    int64_t w = memset_width(pattern, region.itemsize, plan, base);
    if (!w) return kNotOnDevice;
    CUresult rc = run_commands(*this, plan, [&](int64_t at, int64_t) {
        for (int64_t z = 0; z < plan.slices; ++z) {
            CUresult r = enqueue_memset(base + uint64_t(at + z * plan.slice_pitch[0]), size_t(plan.row_pitch[0]), pattern,
                                        w, size_t(plan.row_bytes / w), size_t(plan.rows), stream_);
            if (r != CUDA_SUCCESS) return r;
        }
        return CUDA_SUCCESS;
    });
    if (rc == CUDA_SUCCESS) return 0;
    return record_failure(halide_error::gpu_device_error, rc,
                          std::string(plan.rows == 1 ? "cuMemsetD" : "cuMemsetD2D") + std::to_string(w * 8) + "Async of " +
                              size_text(uint64_t(region_bytes(region.shape, region.itemsize))) +
                              "; the elements may be partly filled, retry or fill on the host");
}

bool CudaDevice::shares_memory_with(const Device &other) const {
    const auto *o = dynamic_cast<const CudaDevice *>(&other);
    return o && o->ordinal() == ordinal_;
}

}  // namespace hb
