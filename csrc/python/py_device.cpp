// py_device.cpp: the Device Python types and the OpenCL device entry points of _core.
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
        .def("__repr__", &device_repr);
    py::class_<OpenCLDevice, Device, std::shared_ptr<OpenCLDevice>>(
        m, "OpenCLDevice", "An OpenCL device with its context and in-order queue.")
        .def_property_readonly("name", &OpenCLDevice::name)
        .def_property_readonly("platform", &OpenCLDevice::platform)
        .def_property_readonly("is_gpu", &OpenCLDevice::is_gpu)
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
    m.def("_opencl_adopt", [](uintptr_t context, uintptr_t queue) {
        return OpenCLDevice::adopt(as_handle<ocl::cl_context>(context),
                                   as_handle<ocl::cl_command_queue>(queue));
    }, py::arg("context"), py::arg("queue"));
    m.def("_opencl_error_name", [](int code) { return ocl::error_name(code); });
}

}  // namespace hb
