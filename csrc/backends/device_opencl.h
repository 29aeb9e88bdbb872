// device_opencl.h: an OpenCL device: the context and queue its buffers' copies and kernels use.
#pragma once

#include <memory>
#include <string>

#include "abi/halide_abi.h"
#include "backends/opencl_api.h"
#include "device/device.h"

namespace hb {

/// What a handle is to its buffer.
enum class HandleKind : uint8_t {
    root,  ///< the allocation's owner: device_free / detach_native end the allocation
    crop,  ///< made by device_crop / device_slice: device_release_crop frees the handle
    view,  ///< a view's halide_buffer_t we published: its Buffer frees the handle
};

/// Our OpenCL halide_buffer_t::device. The first two fields are Halide's OpenCL runtime's own layout
/// ({uint64 offset, cl_mem}), so code that knows that layout reads ours correctly too.
struct DeviceHandle {
    uint64_t offset;               ///< bytes from the start of `native` to the element at buf->host
    void *native;                  ///< cl_mem
    DeviceAllocation *allocation;  ///< owned by the root handle
    HandleKind kind;
};
/// The handle of a buffer using one of our interfaces (no check: callers know).
inline DeviceHandle *handle_of(const halide_buffer_t *buf) {
    return reinterpret_cast<DeviceHandle *>(buf->device);
}


/// One OpenCL device with a context and an in-order command queue on it. Holds a reference on
/// both (clRetain*), so the objects outlive whoever created them (pyopencl, for one).
class OpenCLDevice final : public Device {
public:
    /// The first GPU of any platform, else the first device of the first platform with one.
    /// `zero_copy`: use host memory as device memory where the device shares the host's memory
    /// (CL_DEVICE_HOST_UNIFIED_MEMORY); ignored on a device that does not.
    static std::shared_ptr<OpenCLDevice> open_default(bool zero_copy = true);
    /// Adopts a context and/or queue created elsewhere (at least one of them non-null): a
    /// missing queue is created on the context's first device; a missing context is the
    /// queue's. Both given: the queue must belong to the context.
    static std::shared_ptr<OpenCLDevice> adopt(ocl::cl_context context, ocl::cl_command_queue queue,
                                               bool zero_copy = true);

    /// Whether new devices use zero-copy where they can: yes, unless the environment variable
    /// HALIDE_BUFFER_OPENCL_ZERO_COPY is 0, false, off or no.
    static bool zero_copy_wanted();

    ~OpenCLDevice() override;

    ocl::cl_context context() const { return context_; }
    ocl::cl_command_queue queue() const { return queue_; }
    ocl::cl_device_id id() const { return id_; }
    const std::string &name() const { return name_; }
    const std::string &platform() const { return platform_; }
    uint64_t max_allocation() const { return max_allocation_; }  ///< CL_DEVICE_MAX_MEM_ALLOC_SIZE
    uint64_t global_memory() const { return global_memory_; }    ///< CL_DEVICE_GLOBAL_MEM_SIZE
    uint64_t base_alignment() const { return base_alignment_; }  ///< CL_DEVICE_MEM_BASE_ADDR_ALIGN, in bytes
    bool is_gpu() const { return is_gpu_; }
    bool host_unified() const { return host_unified_; }  ///< CL_DEVICE_HOST_UNIFIED_MEMORY
    /// Blocks until every command queued so far has finished (clFinish).
    void synchronize() const override;

    // Device: memory handles are DeviceHandles ({offset, cl_mem, ...}).
    const char *kind() const override { return "opencl"; }
    std::string description() const override { return name_ + " (" + platform_ + ")"; }
    const halide_device_interface_t *interface() const override;
    DeviceAllocation *allocation(const halide_buffer_t &buf) const override;
    uint64_t view_field(const halide_buffer_t &root, int64_t offset, std::shared_ptr<void> &slot) const override;
    void finish_wrap(halide_buffer_t &root, uint64_t offset) const override;
    Handout hand_out(const halide_buffer_t &root, int64_t offset) const override;
    std::shared_ptr<void> retire_lent(halide_buffer_t &root) const override;
    bool shows_part(const halide_buffer_t *root, int64_t offset) const override;
    bool zero_copy() const override { return zero_copy_; }
    /// The widest OpenCL C vector of the elements (16 lanes) is read in place: host memory
    /// aligned to it, or to the device's base alignment if that is less, is used as it is.
    uint64_t mirror_alignment(int itemsize) const override;
    std::shared_ptr<void> host_block(uint64_t bytes, uint8_t **host) override;
    /// Zero-copy: memory over host memory in front of the pool (opencl_memory.cpp).
    DeviceAllocator &allocator() const override;
    // Data primitives (opencl_memory.cpp), on the queue, each waiting for it (clFinish).
    int fill(const DeviceRegion &region, const uint8_t *pattern) const override;
    int transfer(const DeviceRegion &region, const HostRegion &host, Direction direction) const override;
    int copy(const DeviceRegion &src, const DeviceRegion &dst) const override;
    /// The same context: buffers of one context copy into each other (clEnqueueCopyBuffer*).
    bool shares_memory_with(const Device &other) const override;

private:
    OpenCLDevice(ocl::cl_context context, ocl::cl_command_queue queue, ocl::cl_device_id id);
    void describe(bool zero_copy);  ///< reads name, platform and limits from the driver

    ocl::cl_context context_;
    ocl::cl_command_queue queue_;
    ocl::cl_device_id id_;
    std::string name_, platform_;
    uint64_t max_allocation_ = 0, global_memory_ = 0, base_alignment_ = 0;
    bool is_gpu_ = false, host_unified_ = false, zero_copy_ = false;
};

/// Our OpenCL allocator from the driver (clCreateBuffer, clReleaseMemObject; opencl_memory.cpp).
DeviceAllocator &opencl_driver();

/// Our OpenCL halide_device_interface_t (opencl_memory.cpp). Its halide_buffer_t::device is a
/// DeviceHandle whose first fields match Halide's OpenCL runtime's ({offset, cl_mem}).
const halide_device_interface_t *opencl_interface();

}  // namespace hb
