// cuda_interop.cpp: buffers over other people's CUDA memory, the CUDA device of a buffer and the
// lease of a consumer of it.
#include "interop/cuda_interop.h"

#include "core/errors.h"
#include "core/layout.h"
#include "device/embedder.h"

namespace hb {

std::shared_ptr<CudaDevice> cuda_device_of(Buffer &b) {
    if (!b.may_hold_device_copy()) return nullptr;  // never on a device: no lock needed
    std::shared_ptr<CudaDevice> device = std::dynamic_pointer_cast<CudaDevice>(b.device());
    if (device) embedder().after_device_lookup();
    return device;
}

std::shared_ptr<CudaDevice> embedder_cuda_device(int ordinal, const char *entry) {
    auto device = std::dynamic_pointer_cast<CudaDevice>(embedder().cuda_device(ordinal, entry));
    if (!device)
        throw BufferError(std::string(entry) + "(): the data is on CUDA device " + std::to_string(ordinal) +
                          ", and no CUDA device of that ordinal was found");
    return device;
}

CudaLease lease_cuda(Buffer &b, const char *entry, const std::shared_ptr<CudaDevice> &device) {
    Buffer::DeviceView v = b.lease_device(entry, DeviceChoice{device, false, true}, Access::may_write);
    auto on = std::dynamic_pointer_cast<CudaDevice>(v.device);  // where the lease ended
    if (!on)
        throw BufferError(std::string(entry) + "(): the buffer left its CUDA device meanwhile (another "
                          "thread moved it); export it again");
    return CudaLease{static_cast<uint8_t *>(v.native) + v.offset, std::move(on)};
}

void check_wrappable_cuda(const char *entry, const char *what, bool readonly, const char *fix) {
    if (readonly)
        throw BufferError(std::string(entry) + "(): " + what + " is read-only, and a buffer's device copy is "
                          "written by uploads; " + fix);
}

Buffer wrap_cuda(const char *entry, const std::shared_ptr<CudaDevice> &device, uint64_t data,
                 const std::vector<int64_t> &shape, const std::vector<int64_t> &strides, const DType &dtype,
                 std::shared_ptr<void> owner, cu::CUstream producer) {
    // The host copy mirrors the device memory's layout (one span, one copy each way): owned
    // bytes for the span, viewed with the producer's strides.
    int64_t lo, hi, count = 1;
    for (int64_t n : shape) count *= n;
    if (count == 0) return Buffer::allocate(entry, shape, dtype);  // no elements, no memory to share
    // Strides that overflow: Buffer::wrap() below refuses them (no span is needed for that).
    if (!byte_reach(shape, strides, dtype.itemsize, lo, hi)) lo = hi = 0;
    Buffer bytes = Buffer::allocate(entry, {hi - lo}, *dtype_by_name("uint8"));
    Buffer out = Buffer::wrap(entry, bytes.data() - lo, shape, strides, dtype,
                              std::const_pointer_cast<void>(bytes.keep_alive()), false, false);
    if (producer) device->order_after(producer);
    out.device_wrap_native(device, data + uint64_t(lo), 0, std::move(owner));
    return out;
}

}  // namespace hb
