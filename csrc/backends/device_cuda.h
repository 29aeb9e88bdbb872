// device_cuda.h: a CUDA device: its primary context and the stream its buffers' copies use.
#pragma once

#include <memory>
#include <string>

#include "abi/halide_abi.h"
#include "backends/cuda_api.h"
#include "device/device.h"

namespace hb {

/// One CUDA device through its primary context (the one CuPy, PyTorch and JAX use, so device
/// pointers pass between them and us as they are), with the stream our copies run on.
class CudaDevice final : public Device {
public:
    /// Device `ordinal`; `stream` is a CUstream handle, or 0 for the legacy default stream, kept
    /// valid by `stream_owner` (a framework's stream object), which the device holds as long
    /// as it lives. The stream must belong to the device. Throws DeviceError without a driver.
    static std::shared_ptr<CudaDevice> open(int ordinal, uintptr_t stream, std::shared_ptr<void> stream_owner);
    ~CudaDevice() override;  ///< lets go of the primary context

    int ordinal() const { return ordinal_; }
    cu::CUcontext context() const { return context_; }
    /// The stream copies run on, as the driver takes it (legacy default: CU_STREAM_LEGACY).
    cu::CUstream stream() const { return stream_; }
    /// The stream as the CUDA array interface and DLPack number it: 1 for the legacy default.
    uintptr_t stream_number() const { return reinterpret_cast<uintptr_t>(stream_); }
    /// What keeps the stream valid (null for the default stream); set once, at open().
    const std::shared_ptr<void> &stream_owner() const { return stream_owner_; }
    const std::string &name() const { return name_; }
    uint64_t global_memory() const { return global_memory_; }
    int compute_major() const { return major_; }
    int compute_minor() const { return minor_; }

    /// Makes `consumer` wait for everything queued on our stream so far (an event recorded on
    /// ours, waited for on theirs). The same stream, or none to wait for, costs nothing.
    void order_before(cu::CUstream consumer) const;
    /// Makes our stream wait for everything queued on `producer` so far.
    void order_after(cu::CUstream producer) const;

    void synchronize() const override;
    const char *kind() const override { return "cuda"; }
    std::string description() const override;
    const halide_device_interface_t *interface() const override;
    DeviceAllocation *allocation(const halide_buffer_t &buf) const override;
    uint64_t view_field(const halide_buffer_t &root, int64_t offset, std::shared_ptr<void> &slot) const override;
    void finish_wrap(halide_buffer_t &root, uint64_t offset) const override;
    Handout hand_out(const halide_buffer_t &root, int64_t offset) const override;
    std::shared_ptr<void> retire_lent(halide_buffer_t &root) const override;
    bool take_over(halide_buffer_t &root, const Device &other) const override;
    // Data primitives (cuda_memory.cpp), on the stream, each waiting for it.
    int fill(const DeviceRegion &region, const uint8_t *pattern) const override;
    int transfer(const DeviceRegion &region, const HostRegion &host, Direction direction) const override;
    int copy(const DeviceRegion &src, const DeviceRegion &dst) const override;
    /// The same GPU (any stream of it): one memory space, copied within by cuMemcpy*.
    bool shares_memory_with(const Device &other) const override;

private:
    CudaDevice(int ordinal, cu::CUdevice device, cu::CUcontext context, cu::CUstream stream);

    int ordinal_;
    cu::CUdevice device_;
    cu::CUcontext context_;
    cu::CUstream stream_;
    std::shared_ptr<void> stream_owner_;
    std::string name_;
    uint64_t global_memory_ = 0;
    int major_ = 0, minor_ = 0;
};

/// Our CUDA allocator from the driver (cuMemAlloc, cuMemFree; cuda_memory.cpp).
DeviceAllocator &cuda_driver();

/// Our CUDA halide_device_interface_t (cuda_memory.cpp). Its halide_buffer_t::device is the
/// CUdeviceptr of the element at buf->host, as Halide's CUDA runtime stores it; the allocation
/// behind it is reached through the buffer's `padding` field.
const halide_device_interface_t *cuda_interface();

/// Handlers for a Halide CUDA pipeline's runtime (halide_set_cuda_acquire_context & co.):
/// the primary context and stream of the device an operation names (TargetDevice): the call's,
/// and, when memory a runtime allocated is copied home or freed later, the device of the call
/// that allocated it (recorded with the allocation, raw_views.cpp). Without one (a runtime
/// acting on a halide_buffer_t handed out otherwise), the device of the last call. Halide pushes
/// and pops the context itself.
int pipeline_acquire_context(void *user_context, void **context, bool create);
int pipeline_release_context(void *user_context);
int pipeline_get_stream(void *user_context, void *context, void **stream);
/// The device pipelines use outside a call from now on (kept alive until replaced).
void remember_pipeline_device(std::shared_ptr<CudaDevice> device);

/// The device a stream number of the CUDA array interface or DLPack stands for: 1 (and None,
/// passed as 1) the legacy default stream, 2 the per-thread default stream, else a CUstream.
cu::CUstream stream_of_number(uintptr_t number);

}  // namespace hb
