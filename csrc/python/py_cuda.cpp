// py_cuda.cpp: the CudaDevice Python type, the CUDA entry points of _core, and the CUDA array
// interface (v3) of Buffer.
#include "python/py_cuda.h"

#include <string>
#include <vector>

#include <pybind11/stl.h>

#include "core/errors.h"
#include "core/layout.h"
#include "interop/cuda_interop.h"
#include "python/py_buffer.h"
#include "python/py_dtype.h"
#include "python/py_glue.h"
#include "python/py_kept.h"

namespace hb {
namespace {

constexpr const char *kInterface = "__cuda_array_interface__";

/// The CUDA array interface of a buffer on a CUDA device: a device lease (the device copy made
/// current, and device dirty unless the memory is read-only, as the consumer may write).
py::dict cuda_array_interface(py::handle self) {
    Buffer &b = buffer_of(self.ptr());
    std::shared_ptr<CudaDevice> device = cuda_device_of(b);
    if (!device)
        throw py::attribute_error(std::string(kInterface) + ": the buffer is not on a CUDA device; call "
                                  "copy_to_device(halide_buffer.cuda.device()) first, or hand it over with "
                                  "__dlpack__ or numpy()");
    CudaLease lease = [&] {
        py::gil_scoped_release nogil;
        return lease_cuda(b, kInterface, device);
    }();
    uintptr_t data = b.size() ? reinterpret_cast<uintptr_t>(lease.first) : 0;
    py::dict d;
    d["shape"] = to_tuple(b.shape());
    d["typestr"] = b.dtype().typestr;
    d["data"] = py::make_tuple(data, b.readonly());
    d["strides"] = b.is_c_contiguous() ? py::object(py::none()) : py::object(to_tuple(b.strides()));
    d["version"] = 3;
    // Our copies are blocking, but kernels a pipeline queued on our stream may still run: the
    // consumer waits for our stream (never 0: the spec reserves it).
    d["stream"] = lease.device->stream_number();  // where the lease ended
    return d;
}

/// cuda.wrap's read-only rule (check_wrappable_cuda()), asked before the interface's other
/// fields are read, without a driver.
void check_wrappable(bool readonly) {
    check_wrappable_cuda("cuda.wrap", "the array", readonly, "wrap a writable array, or copy it");
}

Buffer wrap(uint64_t data, const std::vector<int64_t> &shape, const std::vector<int64_t> &strides,
            py::handle dtype, const std::shared_ptr<CudaDevice> &device, py::object owner, uintptr_t stream) {
    constexpr const char *entry = "cuda.wrap";
    const DType &t = to_dtype(dtype, entry);
    std::shared_ptr<void> keep = keep_object(owner);
    cu::CUstream producer = stream ? stream_of_number(stream) : nullptr;
    py::gil_scoped_release nogil;
    return wrap_cuda(entry, device, data, shape, strides, t, std::move(keep), producer);
}

/// What the garbage collector sees of a CudaDevice: the stream object it keeps, when this Python
/// object is the device's only holder (no buffer, allocation or pipeline uses it; see
/// py_kept.cpp).
int traverse_device(const std::shared_ptr<CudaDevice> &d, visitproc visit, void *arg) {
    if (d.use_count() != 1) return 0;
    return traverse_owner(d->stream_owner(), visit, arg);
}

}  // namespace

void bind_cuda(py::module_ &m, BufferClass &cls) {
    py::class_<CudaDevice, Device, std::shared_ptr<CudaDevice>>(
        m, "CudaDevice", "A CUDA device through its primary context, with the stream copies run on.",
        py::custom_type_setup([](PyHeapTypeObject *type) {
            take_part_in_gc(type, traverse_instance<std::shared_ptr<CudaDevice>, traverse_device>);
        }))
        .def_property_readonly("ordinal", &CudaDevice::ordinal)
        .def_property_readonly("name", &CudaDevice::name)
        .def_property_readonly("is_gpu", [](const CudaDevice &) { return true; })
        .def_property_readonly("global_memory_size", &CudaDevice::global_memory)
        .def_property_readonly("compute_capability", [](const CudaDevice &d) {
            return py::make_tuple(d.compute_major(), d.compute_minor());
        })
        .def_property_readonly("context", [](const CudaDevice &d) {
            return reinterpret_cast<uintptr_t>(d.context());
        }, "CUcontext address: the device's primary context")
        .def_property_readonly("stream", &CudaDevice::stream_number,
                               "the stream copies run on, numbered as the CUDA array interface does "
                               "(1: the legacy default stream)")
        .def("__repr__", [](const CudaDevice &d) {
            return "Device(cuda: " + d.name() + ", ordinal " + std::to_string(d.ordinal()) + ", stream " +
                   std::to_string(d.stream_number()) + ")";
        });

    m.def("_cuda_available", &cu::available);
    m.def("_cuda_loaded_library", &cu::loaded_library);
    m.def("_cuda_error_name", [](int code) { return cu::error_name(code); });
    m.def("_cuda_open", [](int ordinal, uintptr_t stream, py::object stream_owner) {
        return CudaDevice::open(ordinal, stream, keep_object(stream_owner));
    }, py::arg("ordinal"), py::arg("stream"), py::arg("stream_owner"));
    m.def("_cuda_pointer_ordinal", [](uint64_t data, const CudaDevice &any) {
        // Asked inside a context (the driver wants one current); with unified addressing any
        // device's answers for every device's pointers.
        cu::ContextScope scope(any.context());
        cu::check(scope.result, "cuda.wrap", "cuCtxPushCurrent", "the context is lost; restart the process");
        int ordinal = -1;
        cu::check(cu::api().PointerGetAttribute(&ordinal, cu::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, data),
                  "cuda.wrap", "cuPointerGetAttribute", "pass the memory of a live CUDA array");
        return ordinal;
    }, py::arg("data"), py::arg("any_device"), "The ordinal of the GPU holding a device pointer.");
    m.def("_c_strides", [](const std::vector<int64_t> &shape, int64_t itemsize) {
        return c_strides(shape, itemsize);
    }, py::arg("shape"), py::arg("itemsize"),
          "The byte strides of a C-contiguous layout of shape (what a CUDA array interface without "
          "strides means), by core/layout.h's rule.");
    m.def("_cuda_check_wrappable", &check_wrappable, py::arg("readonly"),
          "BufferError unless memory with this read-only flag may become a buffer's device copy "
          "(cuda.wrap's rule, interop/cuda_interop.h).");
    m.def("_cuda_wrap", &wrap, py::arg("data"), py::arg("shape"), py::arg("strides"), py::arg("dtype"),
          py::arg("device"), py::arg("owner"), py::arg("stream"));

    cls.def_property_readonly(kInterface, &cuda_array_interface,
                              "The CUDA array interface (v3) of a buffer on a CUDA device: a device "
                              "lease. AttributeError when the buffer is not on one.");
}

}  // namespace hb
