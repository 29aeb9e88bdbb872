// cuda_memory.cpp: the CUDA backend's impl table: device memory, copies, crops, wrapping.
//
// halide_buffer_t::device is the CUdeviceptr of the element at buf->host, exactly as Halide's
// CUDA runtime stores it, so a pipeline's kernels and any framework read our pointers as they
// are. The allocation behind a pointer (its device, size, owner and counters) is reached
// through the buffer's `padding` field, which Halide reserves and never reads; crops carry it.
// Layout rule as for OpenCL: device memory mirrors host memory byte for byte over the span of
// the elements. Copies run on the device's stream and are blocking: when one returns, the
// bytes have arrived.
#include <cstdlib>
#include <new>
#include <string>

#include "buffer.h"
#include "device_cuda.h"

namespace hb {
namespace {

using namespace cu;

/// Records the driver's code for the caller, returns Halide's.
int fail(int halide_code, CUresult code, std::string what) {
    return hb::fail(halide_code, code, error_name(code), std::move(what));
}

DeviceAllocation *allocation_of(const halide_buffer_t *buf) {
    return static_cast<DeviceAllocation *>(buf->padding);
}
const CudaDevice &device_of(const DeviceAllocation *a) { return static_cast<const CudaDevice &>(*a->device); }

/// Whether `buf` is the buffer that owns its allocation (the storage's root once adopted;
/// before that, the one buffer there is), not a crop or a published view.
bool owns_allocation(const halide_buffer_t *buf) {
    const DeviceAllocation *a = allocation_of(buf);
    return !a->retired && (!a->whole || a->whole == buf);
}

void clear_device(halide_buffer_t *buf) {
    buf->device = 0;
    buf->device_interface = nullptr;
    buf->padding = nullptr;
    buf->flags &= ~uint64_t(halide_buffer_flag_device_dirty);
}

/// Ends an allocation: the memory (when ours to free) and the record.
void end_allocation(DeviceAllocation *a) {
    if (a->holds_reference) {
        ContextScope scope(device_of(a).context());
        api().MemFree(reinterpret_cast<CUdeviceptr>(a->native));
        --live_counts().device_allocations;
    }
    delete a;
}

/// What a copy through `buf` moves: the whole storage behind its allocation.
halide_buffer_t *copy_target(halide_buffer_t *buf) {
    const halide_buffer_t *whole = allocation_of(buf)->whole;
    return whole ? const_cast<halide_buffer_t *>(whole) : buf;
}

CudaDevice *target_device() { return dynamic_cast<CudaDevice *>(TargetDevice::current()); }

// ---------------------------------------------------------------------------------------------
// The impl table
// ---------------------------------------------------------------------------------------------

int device_malloc(void *, halide_buffer_t *buf) {
    if (buf->device) return 0;  // already allocated: nothing to do (Halide's impls agree)
    CudaDevice *device = target_device();
    if (!device)
        return fail(halide_error::device_malloc_failed, CUDA_ERROR_INVALID_CONTEXT,
                    "device_malloc without a target device; allocate through halide_buffer");
    ByteSpan span = byte_span(buf);
    uint64_t bytes = span.size() > 0 ? uint64_t(span.size()) : 1;
    ContextScope scope(device->context());
    if (scope.result != CUDA_SUCCESS) return fail(halide_error::device_malloc_failed, scope.result, "cuCtxPushCurrent");
    CUdeviceptr base = 0;
    CUresult rc = api().MemAlloc(&base, bytes);
    if (rc != CUDA_SUCCESS)
        return fail(halide_error::device_malloc_failed, rc, "cuMemAlloc of " + size_text(bytes) +
                                                 "; free device buffers (device_free()) or use a smaller one");
    auto *a = new (std::nothrow) DeviceAllocation{device->shared_from_this(), reinterpret_cast<void *>(base),
                                                  bytes, true, nullptr, nullptr};
    if (!a) {
        api().MemFree(base);
        return halide_error::out_of_memory;
    }
    ++live_counts().device_allocations;
    buf->device = base - uint64_t(span.lo);
    buf->device_interface = cuda_interface();
    buf->padding = a;
    return 0;
}

int device_free(void *, halide_buffer_t *buf) {
    if (!buf->device) return 0;
    if (owns_allocation(buf)) end_allocation(allocation_of(buf));
    // A crop's or a view's pointer is only forgotten: the allocation belongs to its root.
    clear_device(buf);
    return 0;
}

int device_sync(void *, halide_buffer_t *buf) {
    if (!buf->device) return 0;
    const CudaDevice &d = device_of(allocation_of(buf));
    ContextScope scope(d.context());
    CUresult rc = scope.result != CUDA_SUCCESS ? scope.result : api().StreamSynchronize(d.stream());
    return rc == CUDA_SUCCESS ? 0 : fail(halide_error::device_sync_failed, rc, "cuStreamSynchronize; a kernel on the stream failed");
}

/// One blocking copy of `span` on the device's stream; `to_host` gives the direction.
CUresult copy_span(const CudaDevice &d, uint8_t *host, CUdeviceptr device, size_t bytes, bool to_host) {
    ContextScope scope(d.context());
    if (scope.result != CUDA_SUCCESS) return scope.result;
    const Api &cuda = api();
    CUresult rc = to_host ? cuda.MemcpyDtoHAsync(host, device, bytes, d.stream())
                          : cuda.MemcpyHtoDAsync(device, host, bytes, d.stream());
    return rc == CUDA_SUCCESS ? cuda.StreamSynchronize(d.stream()) : rc;
}

int copy_to_host(void *, halide_buffer_t *view) {
    halide_buffer_t *buf = copy_target(view);
    DeviceAllocation *a = allocation_of(buf);
    if (!buf->host) return halide_error::host_is_null;
    ByteSpan span = byte_span(buf);
    if (span.size() == 0) return 0;
    uint8_t *staging = span.dense ? buf->host + span.lo
                                  : static_cast<uint8_t *>(std::malloc(size_t(span.size())));
    if (!staging) return halide_error::out_of_memory;
    CUresult rc = copy_span(device_of(a), staging, buf->device + uint64_t(span.lo), size_t(span.size()), true);
    if (!span.dense) {
        if (rc == CUDA_SUCCESS) scatter_elements(buf, staging - span.lo);
        std::free(staging);
    }
    if (rc != CUDA_SUCCESS)
        return fail(halide_error::copy_to_host_failed, rc, "cuMemcpyDtoH of " + size_text(uint64_t(span.size())) +
                                               "; the device copy is kept, retry or device_free()");
    record_transfer(a->transfers, Direction::to_host, span.size());
    return 0;
}

int copy_to_device(void *, halide_buffer_t *view) {
    halide_buffer_t *buf = copy_target(view);
    DeviceAllocation *a = allocation_of(buf);
    if (!buf->host) return halide_error::host_is_null;
    ByteSpan span = byte_span(buf);
    if (span.size() == 0) return 0;
    // The whole span goes up, gaps included (see opencl_memory.cpp: the same rule).
    CUresult rc = copy_span(device_of(a), buf->host + span.lo, buf->device + uint64_t(span.lo),
                            size_t(span.size()), false);
    if (rc != CUDA_SUCCESS)
        return fail(halide_error::copy_to_device_failed, rc, "cuMemcpyHtoD of " + size_text(uint64_t(span.size())) +
                                                 "; the host copy is kept, free device memory and retry");
    record_transfer(a->transfers, Direction::to_device, span.size());
    return 0;
}

int device_and_host_malloc(void *uc, halide_buffer_t *buf) { return host_and_device_malloc(uc, buf, device_malloc); }
int device_and_host_free(void *uc, halide_buffer_t *buf) { return host_and_device_free(uc, buf, device_free); }

int new_crop(const halide_buffer_t *src, int64_t bytes, halide_buffer_t *dst) {
    dst->device = src->device + uint64_t(bytes);
    dst->device_interface = src->device_interface;
    dst->padding = src->padding;
    return 0;
}

int device_crop(void *, const halide_buffer_t *src, halide_buffer_t *dst) {
    return new_crop(src, crop_offset(src, dst), dst);
}

int device_slice(void *, const halide_buffer_t *src, int dim, int pos, halide_buffer_t *dst) {
    return new_crop(src, slice_offset(src, dim, pos), dst);
}

int device_release_crop(void *, halide_buffer_t *buf) {
    buf->device = 0;
    buf->device_interface = nullptr;
    buf->padding = nullptr;
    return 0;
}

int wrap_native(void *, halide_buffer_t *buf, uint64_t native) {
    CudaDevice *device = target_device();
    if (!device)
        return fail(halide_error::device_wrap_native_failed, CUDA_ERROR_INVALID_CONTEXT,
                    "wrap_native without a target device; wrap through halide_buffer");
    const Api &cuda = api();
    ContextScope scope(device->context());
    if (scope.result != CUDA_SUCCESS) return fail(halide_error::device_wrap_native_failed, scope.result, "cuCtxPushCurrent");
    int ordinal = -1;
    CUresult rc = cuda.PointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, native);
    if (rc != CUDA_SUCCESS)
        return fail(halide_error::device_wrap_native_failed, rc, "cuPointerGetAttribute; pass a live CUDA device pointer");
    if (ordinal != device->ordinal())
        return fail(halide_error::device_wrap_native_failed, CUDA_ERROR_INVALID_DEVICE,
                    "the memory is on CUDA device " + std::to_string(ordinal) + "; pass halide_buffer.cuda.device(" +
                        std::to_string(ordinal) + ")");
    // The bytes from `native` to the end of its allocation. Memory the driver cannot bound
    // (some pool allocators map it themselves) is taken at the producer's word.
    CUdeviceptr base = 0;
    size_t size = 0;
    uint64_t available = UINT64_MAX;
    if (cuda.MemGetAddressRange(&base, &size, native) == CUDA_SUCCESS) available = base + size - native;
    // Halide's rule: the caller keeps the memory alive; we free nothing.
    auto *a = new (std::nothrow) DeviceAllocation{device->shared_from_this(), reinterpret_cast<void *>(native),
                                                  available, false, nullptr, nullptr};
    if (!a) return halide_error::out_of_memory;
    buf->device = native - uint64_t(byte_span(buf).lo);
    buf->padding = a;
    return 0;
}

int detach_native(void *, halide_buffer_t *buf) {
    if (!buf->device) return 0;
    if (!owns_allocation(buf))
        return fail(halide_error::device_detach_native_failed, CUDA_ERROR_INVALID_VALUE,
                    "detach_native on a crop; detach the buffer that wrapped the memory");
    end_allocation(allocation_of(buf));
    clear_device(buf);
    return 0;
}

int compute_capability(void *, int *major, int *minor) {
    const CudaDevice *d = target_device();
    *major = d ? d->compute_major() : 0;
    *minor = d ? d->compute_minor() : 0;
    return 0;
}

const halide_device_interface_impl_t kImpl = {
    no_module,     no_module,      device_malloc,          device_free,
    device_sync,   no_device_release, copy_to_host,        copy_to_device,
    device_and_host_malloc,        device_and_host_free,   copy_through_host,
    device_crop,   device_slice,   device_release_crop,    wrap_native,
    detach_native,
};

}  // namespace

const halide_device_interface_t *cuda_interface() {
    static const halide_device_interface_t table = make_public_interface(&kImpl, compute_capability);
    return &table;
}

// ---------------------------------------------------------------------------------------------
// CudaDevice: what the residency rules ask of the device
// ---------------------------------------------------------------------------------------------

const halide_device_interface_t *CudaDevice::interface() const { return cuda_interface(); }

DeviceAllocation *CudaDevice::allocation(const halide_buffer_t &buf) const { return allocation_of(&buf); }

uint64_t CudaDevice::view_field(const halide_buffer_t &root, int64_t offset, std::unique_ptr<DeviceHandle> &slot) const {
    slot.reset();  // a plain pointer needs no handle object
    return root.device + uint64_t(offset);
}

void CudaDevice::finish_wrap(halide_buffer_t &root, uint64_t offset) const {
    // Nothing to retain: CUDA memory has no reference count; the storage keeps its owner alive.
    root.device += offset;
}

Device::Lease CudaDevice::lease(const halide_buffer_t &root, int64_t offset) const {
    allocation_of(&root)->lent = true;  // freed no earlier than the storage from now on
    return Lease{reinterpret_cast<void *>(root.device), offset};
}

std::shared_ptr<void> CudaDevice::retire_lent(halide_buffer_t &root) const {
    DeviceAllocation *a = allocation_of(&root);
    if (!a->lent) return nullptr;
    clear_device(&root);
    a->whole = nullptr;  // no buffer shows it any more: nothing to copy through it
    a->retired = true;
    return std::shared_ptr<void>(a, [](void *p) { end_allocation(static_cast<DeviceAllocation *>(p)); });
}

bool CudaDevice::take_over(halide_buffer_t &root, const Device &other) const {
    const auto *from = dynamic_cast<const CudaDevice *>(&other);
    if (!from || from->ordinal() != ordinal_) return false;
    from->order_before(stream_);  // the other stream's work on this memory comes first
    allocation_of(&root)->device = std::const_pointer_cast<Device>(shared_from_this());
    return true;
}

}  // namespace hb
