// py_device.cpp: the Device Python types and the OpenCL device entry points of _core.
#include "python/py_device.h"

#include <string>
#include <vector>

#include <pybind11/stl.h>

#include "backends/device_opencl.h"
#include "backends/opencl_context.h"
#include "core/errors.h"
#include "python/py_glue.h"

namespace hb {
namespace {

std::string device_repr(const Device &d) { return "Device(" + std::string(d.kind()) + ": " + d.description() + ")"; }

template <typename T>
T as_handle(uintptr_t address) {
    return reinterpret_cast<T>(address);
}

}  // namespace

void bind_device(py::module_ &m) {
    py::class_<Device, std::shared_ptr<Device>>(
        m, "Device", "A device buffers can live on: halide_buffer.opencl.device() or halide_buffer.cuda.device().")
        .def_property_readonly("kind", &Device::kind, "'opencl' or 'cuda'")
        .def("synchronize", &Device::synchronize, py::call_guard<py::gil_scoped_release>(),
             "Blocks until every command queued on the device's queue or stream has finished.")
        .def_property_readonly("pool", [](const Device &d) {
            PoolStats s = d.pool().stats();
            py::dict out;
            out["bytes_held"] = s.bytes_held;
            out["blocks_held"] = s.blocks_held;
            out["hits"] = s.hits;
            out["misses"] = s.misses;
            out["limit"] = s.limit;
            return out;
        }, "The pool of freed device memory: bytes_held and blocks_held (kept for reuse, still the "
           "driver's), hits (allocations it served), misses (allocations it passed on to the driver), limit")
        .def_property("pool_limit", [](const Device &d) { return d.pool().stats().limit; },
                      [](const Device &d, uint64_t bytes) { d.pool().set_limit(bytes); },
                      "Bytes the pool keeps at most (default 1 GiB); 0 takes the pool out: allocations go "
                      "straight to the driver")
        .def("trim", &Device::trim, py::call_guard<py::gil_scoped_release>(),
             "Releases the device memory the pool keeps; returns the bytes released.")
        .def("__repr__", &device_repr);
    py::class_<OpenCLDevice, Device, std::shared_ptr<OpenCLDevice>>(
        m, "OpenCLDevice", "An OpenCL device with its context and in-order queue.")
        .def_property_readonly("name", &OpenCLDevice::name)
        .def_property_readonly("platform", &OpenCLDevice::platform)
        .def_property_readonly("is_gpu", &OpenCLDevice::is_gpu)
        .def_property_readonly("host_unified_memory", &OpenCLDevice::host_unified,
                               "the device reports CL_DEVICE_HOST_UNIFIED_MEMORY: its memory is the host's")
        .def_property_readonly("zero_copy", &OpenCLDevice::zero_copy,
                               "host memory is used as device memory as it is, copies are maps")
        .def_property_readonly("max_allocation_size", &OpenCLDevice::max_allocation,
                               "largest single allocation the driver allows, in bytes")
        .def_property_readonly("global_memory_size", &OpenCLDevice::global_memory)
        .def_property_readonly("base_alignment", &OpenCLDevice::base_alignment,
                               "CL_DEVICE_MEM_BASE_ADDR_ALIGN in bytes: a part of a buffer starting at a "
                               "multiple of it is computed in place by a pipeline")
        .def_property_readonly("context", [](const OpenCLDevice &d) {
            return reinterpret_cast<uintptr_t>(d.context());
        }, "cl_context address (pyopencl: Context.from_int_ptr)")
        .def_property_readonly("queue", [](const OpenCLDevice &d) {
            return reinterpret_cast<uintptr_t>(d.queue());
        }, "cl_command_queue address (pyopencl: CommandQueue.from_int_ptr)")
        .def("__repr__", [](const OpenCLDevice &d) {
            return "Device(opencl: " + d.name() + " on " + d.platform() + ")";
        });

    m.def("_opencl_set_library_candidates", &ocl::set_library_candidates, py::arg("paths"));
    m.def("_opencl_loaded_library", &ocl::loaded_library);
    m.def("_opencl_default_device", &default_opencl_device, py::call_guard<py::gil_scoped_release>());
    m.def("_opencl_share_context", &share_opencl_context, py::arg("hooks_library"));
    m.def("_opencl_context_shared", &opencl_context_shared);
    m.def("_opencl_adopt", [](uintptr_t context, uintptr_t queue, bool zero_copy) {
        return OpenCLDevice::adopt(as_handle<ocl::cl_context>(context),
                                   as_handle<ocl::cl_command_queue>(queue), zero_copy);
    }, py::arg("context"), py::arg("queue"), py::arg("zero_copy"));
    m.def("_opencl_zero_copy_wanted", &OpenCLDevice::zero_copy_wanted);
    m.def("_opencl_error_name", [](int code) { return ocl::error_name(code); });
}

}  // namespace hb
