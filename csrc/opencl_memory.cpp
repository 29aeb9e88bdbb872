// opencl_memory.cpp: the OpenCL backend's impl table: device memory, copies, crops, wrapping.
//
// Layout rule: a buffer's device memory mirrors its host memory byte for byte over the span of
// its elements, so one offset locates any view, and every copy is one OpenCL command over the
// span. Copies are blocking: when one returns, the bytes have arrived.
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "buffer.h"
#include "device_interface.h"
#include "device_opencl.h"

namespace hb {
namespace {

using namespace ocl;

/// Records the driver's code for the caller, returns Halide's.
int fail(int halide_code, cl_int code, std::string what) {
    return hb::fail(halide_code, code, error_name(code), std::move(what));
}

OpenCLDevice &device_of(const DeviceHandle *h) { return static_cast<OpenCLDevice &>(*h->allocation->device); }

/// A new root handle for `mem`, its lowest byte at `offset`; nullptr when out of memory.
DeviceHandle *new_root(std::shared_ptr<Device> device, cl_mem mem, uint64_t size, bool holds,
                       uint64_t offset) {
    auto *a = new (std::nothrow) DeviceAllocation{std::move(device), mem, size, holds, nullptr};
    if (!a) return nullptr;
    auto *h = new (std::nothrow) DeviceHandle{offset, mem, a, HandleKind::root};
    if (!h) delete a;
    return h;
}

/// Ends a root handle: our reference on the memory (if we hold one), the allocation, the handle.
void end_root(DeviceHandle *h) {
    DeviceAllocation *a = h->allocation;
    if (a->holds_reference) {
        api().ReleaseMemObject(static_cast<cl_mem>(a->native));
        --live_counts().device_allocations;
    }
    delete a;
    delete h;
}

void clear_device(halide_buffer_t *buf) {
    buf->device = 0;
    buf->device_interface = nullptr;
    buf->flags &= ~uint64_t(halide_buffer_flag_device_dirty);
}

/// What a copy through `buf` moves: the whole storage behind its allocation (whose one state
/// the flags of every view describe), else what `buf` describes.
halide_buffer_t *copy_target(halide_buffer_t *buf) {
    const halide_buffer_t *whole = handle_of(buf)->allocation->whole;
    return whole ? const_cast<halide_buffer_t *>(whole) : buf;
}

// ---------------------------------------------------------------------------------------------
// The impl table
// ---------------------------------------------------------------------------------------------

int device_malloc(void *, halide_buffer_t *buf) {
    if (buf->device) return 0;  // already allocated: nothing to do (Halide's impls agree)
    auto *device = dynamic_cast<OpenCLDevice *>(TargetDevice::current());
    if (!device)
        return fail(halide_error::device_malloc_failed, CL_INVALID_CONTEXT,
                    "device_malloc without a target device; allocate through halide_buffer");
    ByteSpan span = byte_span(buf);
    uint64_t bytes = span.size() > 0 ? uint64_t(span.size()) : 1;  // OpenCL refuses size 0
    if (bytes > device->max_allocation())
        return fail(halide_error::device_malloc_failed, CL_INVALID_BUFFER_SIZE,
                    "an allocation of " + size_text(bytes) + " exceeds the device's largest (" +
                        size_text(device->max_allocation()) + ", CL_DEVICE_MAX_MEM_ALLOC_SIZE); split the buffer");
    cl_int rc = CL_SUCCESS;
    cl_mem mem = api().CreateBuffer(device->context(), CL_MEM_READ_WRITE, bytes, nullptr, &rc);
    if (rc != CL_SUCCESS)
        return fail(halide_error::device_malloc_failed, rc, "clCreateBuffer of " + size_text(bytes) +
                                                 "; free device buffers (device_free()) or use a smaller one");
    ++live_counts().device_allocations;
    DeviceHandle *h = new_root(device->shared_from_this(), mem, bytes, true, uint64_t(-span.lo));
    if (!h) {
        api().ReleaseMemObject(mem);
        --live_counts().device_allocations;
        return halide_error::out_of_memory;
    }
    buf->device = reinterpret_cast<uint64_t>(h);
    buf->device_interface = opencl_interface();
    return 0;
}

int device_free(void *, halide_buffer_t *buf) {
    DeviceHandle *h = handle_of(buf);
    if (!h) return 0;
    if (h->kind == HandleKind::root) end_root(h);
    else if (h->kind == HandleKind::crop) delete h;
    // A view's handle belongs to its Buffer, which frees it; here it is only forgotten.
    clear_device(buf);
    return 0;
}

int device_sync(void *, halide_buffer_t *buf) {
    DeviceHandle *h = handle_of(buf);
    if (!h) return 0;
    cl_int rc = api().Finish(device_of(h).queue());
    return rc == CL_SUCCESS ? 0 : fail(halide_error::device_sync_failed, rc, "clFinish; the queue is lost, create a new device");
}

int copy_to_host(void *, halide_buffer_t *view) {
    halide_buffer_t *buf = copy_target(view);
    DeviceHandle *h = handle_of(buf);
    if (!buf->host) return halide_error::host_is_null;
    ByteSpan span = byte_span(buf);
    if (span.size() == 0) return 0;
    uint8_t *staging = span.dense ? buf->host + span.lo
                                  : static_cast<uint8_t *>(std::malloc(size_t(span.size())));
    if (!staging) return halide_error::out_of_memory;
    cl_int rc = api().EnqueueReadBuffer(device_of(h).queue(), static_cast<cl_mem>(h->native), CL_TRUE,
                                        size_t(int64_t(h->offset) + span.lo), size_t(span.size()),
                                        staging, 0, nullptr, nullptr);
    if (!span.dense) {
        if (rc == CL_SUCCESS)
            scatter_elements(buf, staging - span.lo);
        std::free(staging);
    }
    if (rc != CL_SUCCESS)
        return fail(halide_error::copy_to_host_failed, rc, "clEnqueueReadBuffer of " + size_text(uint64_t(span.size())) +
                                               "; the device copy is kept, retry or device_free()");
    record_transfer(h->allocation->transfers, Direction::to_host, span.size());
    return 0;
}

int copy_to_device(void *, halide_buffer_t *view) {
    halide_buffer_t *buf = copy_target(view);
    DeviceHandle *h = handle_of(buf);
    if (!buf->host) return halide_error::host_is_null;
    ByteSpan span = byte_span(buf);
    if (span.size() == 0) return 0;
    // The whole span goes up, gaps included: they are host bytes of the same storage (current,
    // as the host is: one state covers the storage) or bytes no element of ours reads.
    cl_int rc = api().EnqueueWriteBuffer(device_of(h).queue(), static_cast<cl_mem>(h->native), CL_TRUE,
                                         size_t(int64_t(h->offset) + span.lo), size_t(span.size()),
                                         buf->host + span.lo, 0, nullptr, nullptr);
    if (rc != CL_SUCCESS)
        return fail(halide_error::copy_to_device_failed, rc, "clEnqueueWriteBuffer of " + size_text(uint64_t(span.size())) +
                                                 "; the host copy is kept, free device memory and retry");
    record_transfer(h->allocation->transfers, Direction::to_device, span.size());
    return 0;
}

int device_and_host_malloc(void *uc, halide_buffer_t *buf) { return host_and_device_malloc(uc, buf, device_malloc); }
int device_and_host_free(void *uc, halide_buffer_t *buf) { return host_and_device_free(uc, buf, device_free); }

/// A crop handle into src's memory, `bytes` past src's first element.
int new_crop(const halide_buffer_t *src, int64_t bytes, halide_buffer_t *dst) {
    DeviceHandle *s = handle_of(src);
    auto *h = new (std::nothrow)
        DeviceHandle{uint64_t(int64_t(s->offset) + bytes), s->native, s->allocation, HandleKind::crop};
    if (!h) return halide_error::device_crop_failed;
    dst->device = reinterpret_cast<uint64_t>(h);
    dst->device_interface = src->device_interface;
    return 0;
}

int device_crop(void *, const halide_buffer_t *src, halide_buffer_t *dst) {
    return new_crop(src, crop_offset(src, dst), dst);
}

int device_slice(void *, const halide_buffer_t *src, int dim, int pos, halide_buffer_t *dst) {
    return new_crop(src, slice_offset(src, dim, pos), dst);
}

int device_release_crop(void *, halide_buffer_t *buf) {
    DeviceHandle *h = handle_of(buf);
    if (h->kind == HandleKind::crop) delete h;
    buf->device = 0;
    buf->device_interface = nullptr;
    return 0;
}

int wrap_native(void *, halide_buffer_t *buf, uint64_t native) {
    auto *device = dynamic_cast<OpenCLDevice *>(TargetDevice::current());
    if (!device)
        return fail(halide_error::device_wrap_native_failed, CL_INVALID_CONTEXT,
                    "wrap_native without a target device; wrap through halide_buffer");
    auto mem = reinterpret_cast<cl_mem>(native);
    uint64_t size = 0;
    cl_context context = nullptr;
    cl_int rc = api().GetMemObjectInfo(mem, CL_MEM_SIZE, sizeof size, &size, nullptr);
    if (rc == CL_SUCCESS) rc = api().GetMemObjectInfo(mem, CL_MEM_CONTEXT, sizeof context, &context, nullptr);
    if (rc != CL_SUCCESS)
        return fail(halide_error::device_wrap_native_failed, rc, "clGetMemObjectInfo; pass a live cl_mem");
    if (context != device->context())
        return fail(halide_error::device_wrap_native_failed, CL_INVALID_CONTEXT,
                    "the cl_mem belongs to another context; pass the device of its context");
    // Whether `size` is enough is the caller's business (Halide's rule); ours checks it.
    ByteSpan span = byte_span(buf);
    // Halide's rule: the caller keeps its reference; we take none.
    DeviceHandle *h = new_root(device->shared_from_this(), mem, size, false, uint64_t(-span.lo));
    if (!h) return halide_error::out_of_memory;
    buf->device = reinterpret_cast<uint64_t>(h);
    return 0;
}

int detach_native(void *, halide_buffer_t *buf) {
    DeviceHandle *h = handle_of(buf);
    if (!h) return 0;
    if (h->kind != HandleKind::root)
        return fail(halide_error::device_detach_native_failed, CL_INVALID_MEM_OBJECT,
                    "detach_native on a crop; detach the buffer that wrapped the memory");
    end_root(h);
    clear_device(buf);
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

const halide_device_interface_t *opencl_interface() {
    static const halide_device_interface_t table = make_public_interface(&kImpl);
    return &table;
}

// ---------------------------------------------------------------------------------------------
// OpenCLDevice: what the residency rules ask of the device
// ---------------------------------------------------------------------------------------------

const halide_device_interface_t *OpenCLDevice::interface() const { return opencl_interface(); }

DeviceAllocation *OpenCLDevice::allocation(const halide_buffer_t &buf) const {
    return handle_of(&buf)->allocation;
}

uint64_t OpenCLDevice::view_field(const halide_buffer_t &root, int64_t offset,
                                  std::unique_ptr<DeviceHandle> &slot) const {
    DeviceHandle *base = handle_of(&root);
    if (!slot || slot->allocation != base->allocation || slot->offset != uint64_t(int64_t(base->offset) + offset))
        slot.reset(new (std::nothrow) DeviceHandle{uint64_t(int64_t(base->offset) + offset), base->native,
                                                   base->allocation, HandleKind::view});
    return reinterpret_cast<uint64_t>(slot.get());
}

void OpenCLDevice::finish_wrap(halide_buffer_t &root, uint64_t offset) const {
    DeviceHandle *h = handle_of(&root);
    h->offset += offset;
    // Our own reference, on top of Halide's rule (the caller keeps its own): the memory stays
    // valid even if the owner is released by someone else.
    api().RetainMemObject(static_cast<cl_mem>(h->native));
    h->allocation->holds_reference = true;
    ++live_counts().device_allocations;
}

Device::Lease OpenCLDevice::lease(const halide_buffer_t &root, int64_t offset) const {
    DeviceHandle *h = handle_of(&root);
    // The consumer gets its own reference, taken under the storage's lock: a device_free()
    // racing with it cannot release the memory under the consumer's feet.
    api().RetainMemObject(static_cast<cl_mem>(h->native));
    return Lease{h->native, int64_t(h->offset) + offset};
}

}  // namespace hb
