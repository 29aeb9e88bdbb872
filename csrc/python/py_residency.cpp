// py_residency.cpp: the residency methods of Buffer, transfer counts, and the device views the
// pyopencl interop (halide_buffer.opencl) builds on. The explicit copies (copy_to_host,
// copy_to_device, device_sync, ...) run without the GIL; queries, set_*_dirty and raw() keep it
// (their step under the storage's lock may still bring a pipeline's allocation home). The
// storage's own lock keeps it consistent (docs/architecture.md, locks and the GIL).
#include "python/py_residency.h"

#include <string>

#include "core/errors.h"
#include "device/device.h"
#include "python/py_buffer.h"
#include "python/py_glue.h"
#include "python/py_kept.h"

namespace hb {
namespace {

/// A snapshot of Transfers, as Python sees it.
struct TransferCounts {
    int64_t to_device = 0, to_device_bytes = 0, to_host = 0, to_host_bytes = 0, maps_to_device = 0, maps_to_host = 0;

    auto fields() const {
        return std::make_tuple(to_device, to_device_bytes, to_host, to_host_bytes, maps_to_device, maps_to_host);
    }
};

TransferCounts snapshot(const Transfers &t) {
    return TransferCounts{t.to_device.load(), t.to_device_bytes.load(), t.to_host.load(),
                          t.to_host_bytes.load(), t.maps_to_device.load(), t.maps_to_host.load()};
}

std::string transfers_repr(const TransferCounts &t) {
    std::string out = "Transfers(to_device=" + std::to_string(t.to_device) + ", to_device_bytes=" +
                      std::to_string(t.to_device_bytes) + ", to_host=" + std::to_string(t.to_host) +
                      ", to_host_bytes=" + std::to_string(t.to_host_bytes);
    // Maps only where there were any: most storages never meet a zero-copy device.
    if (t.maps_to_device || t.maps_to_host)
        out += ", maps_to_device=" + std::to_string(t.maps_to_device) + ", maps_to_host=" + std::to_string(t.maps_to_host);
    return out + ")";
}

std::shared_ptr<Device> default_device() {
    return py::module_::import("halide_buffer.opencl").attr("device")().cast<std::shared_ptr<Device>>();
}

}  // namespace

DeviceChoice device_arg(py::handle device, const char *entry) {
    if (device.is_none()) return DeviceChoice{default_device(), false};
    if (!py::isinstance<Device>(device))
        throw TypeError(std::string(entry) + "(): device must be a halide_buffer.Device or None, not " +
                        Py_TYPE(device.ptr())->tp_name + "; get one with halide_buffer.opencl.device() "
                        "or halide_buffer.cuda.device()");
    return DeviceChoice{device.cast<std::shared_ptr<Device>>(), true};
}

namespace {

/// The object a detach hands back (None when nothing was wrapped).
py::object owner_object(const std::shared_ptr<void> &owner) {
    Kept *kept = kept_in(owner);
    if (!kept || !kept->object) return py::none();
    return kept->object;
}

/// A pyopencl memory object or pool block (its cl_mem is live while the object is).
bool is_pyopencl_memory(py::handle obj) {
    py::object module = py::module_::import("sys").attr("modules").attr("get")("pyopencl");
    return !module.is_none() && py::isinstance(obj, module.attr("MemoryObjectHolder"));
}

/// A device address given as an int, or ValueError for an int no address can be.
uint64_t device_address(py::handle n, const char *entry) {
    uint64_t address;
    if (!as_uint64(n, address))
        throw ValueError(std::string(entry) + "(): handle " + py::str(n).cast<std::string>() +
                         " is no device address (0 to 2**64 - 1); pass the device memory itself");
    return address;
}

void wrap_native(py::handle self, py::handle handle, py::handle device, uint64_t offset, bool trust_handle) {
    constexpr const char *entry = "device_wrap_native";
    Buffer &b = buffer_of(self.ptr());
    std::shared_ptr<Device> on = device_arg(device, entry).device;
    uint64_t native;
    if (is_pyopencl_memory(handle)) {
        native = handle.attr("int_ptr").cast<uint64_t>();
    } else if (is_integer(handle) && !PyBool_Check(handle.ptr())) {
        native = device_address(handle, entry);
        // A CUDA pointer is checked by the driver without being dereferenced; a cl_mem cannot be:
        // OpenCL reads through it, so a wrong int would crash the process.
        if (native && std::string(on->kind()) == "opencl" && !trust_handle)
            throw TypeError(std::string(entry) + "(): an int would reach the OpenCL driver as a cl_mem "
                            "address, which nothing can check; pass the pyopencl.Buffer, or "
                            "trust_handle=True if the int is a live cl_mem of the device's context");
    } else {
        throw TypeError(std::string(entry) + "(): handle must be a pyopencl.Buffer, or the address "
                        "(int) of CUDA device memory, not " + type_name(handle) +
                        "; pass the device memory itself (for an array of a framework, use "
                        "halide_buffer.opencl.wrap() or halide_buffer.cuda.wrap())");
    }
    if (!native) throw ValueError(std::string(entry) + "(): the handle is NULL; pass live device memory");
    // A pool's buffer goes back to the pool when its Python object dies, cl_mem reference or
    // not: the Python object is what must stay alive.
    std::shared_ptr<void> owner = keep_object(handle);
    py::gil_scoped_release nogil;
    b.device_wrap_native(on, native, offset, std::move(owner));
}

}  // namespace

void bind_residency(BufferClass &cls) {
    auto nogil = [](void (Buffer::*f)()) {
        return [f](py::handle self) {
            Buffer &b = buffer_of(self.ptr());
            py::gil_scoped_release release;
            (b.*f)();
        };
    };
    auto with_device = [](void (Buffer::*f)(const DeviceChoice &), const char *entry) {
        return [f, entry](py::handle self, py::handle device) {
            Buffer &b = buffer_of(self.ptr());
            DeviceChoice on = device_arg(device, entry);
            py::gil_scoped_release release;
            (b.*f)(on);
        };
    };
    auto flag = [](bool (Buffer::*f)()) {
        return [f](py::handle self) { return (buffer_of(self.ptr()).*f)(); };
    };
    auto set_flag = [](void (Buffer::*f)(bool)) {
        return [f](py::handle self, bool value) { (buffer_of(self.ptr()).*f)(value); };
    };

    cls.def("host_dirty", flag(&Buffer::host_dirty), "True when the host copy is newer than the device's.")
        .def("device_dirty", flag(&Buffer::device_dirty), "True when the device copy is newer than the host's.")
        .def("set_host_dirty", set_flag(&Buffer::set_host_dirty), py::arg("value") = true)
        .def("set_device_dirty", set_flag(&Buffer::set_device_dirty), py::arg("value") = true)
        .def("has_device_allocation", flag(&Buffer::has_device_allocation))
        .def_property_readonly("device", [](py::handle self) -> py::object {
            std::shared_ptr<Device> d = buffer_of(self.ptr()).device();
            return d ? py::cast(d) : py::none();
        }, "The Device holding the device copy, or None.")
        .def("copy_to_host", nogil(&Buffer::copy_to_host),
             "Downloads the device copy if it is newer; otherwise does nothing.")
        .def("copy_to_device", with_device(&Buffer::copy_to_device, "copy_to_device"),
             py::arg("device") = py::none(),
             "Allocates on the device if needed (default: halide_buffer.opencl.device()), then "
             "uploads if the host copy is newer.")
        .def("device_malloc", with_device(&Buffer::device_malloc, "device_malloc"),
             py::arg("device") = py::none(), "Allocates device memory without copying.")
        .def("device_free", nogil(&Buffer::device_free),
             "Releases the device memory; a newer device copy is downloaded first.")
        .def("device_sync", nogil(&Buffer::device_sync),
             "Waits for every command queued on the buffer's device.")
        .def("device_wrap_native", &wrap_native, py::arg("handle"), py::arg("device") = py::none(),
             py::arg("offset") = 0, py::kw_only(), py::arg("trust_handle") = false,
             "Uses existing device memory (a pyopencl.Buffer; a CUdeviceptr int on a CUDA device, "
             "which the driver checks), kept alive, as the device copy, which becomes the current "
             "one. A cl_mem given as an int cannot be checked: it needs trust_handle=True, the "
             "caller's word that it is live memory of the device's context.")
        .def("device_detach_native", [](py::handle self) {
            Buffer &b = buffer_of(self.ptr());
            std::shared_ptr<void> owner;
            {
                py::gil_scoped_release release;
                owner = b.device_detach_native();
            }
            return owner_object(owner);
        }, "Lets go of wrapped device memory (downloading first if it is newer) and returns its owner.")
        .def_property_readonly("transfers", [](py::handle self) {
            return snapshot(buffer_of(self.ptr()).transfers());
        }, "Copies between host and device of this buffer's storage so far.")
        .def("_device_view", [](py::handle self, py::handle device, bool writable, const std::string &entry) {
            Buffer &b = buffer_of(self.ptr());
            DeviceChoice on = device_arg(device, entry.c_str());
            Buffer::DeviceView v;
            {
                py::gil_scoped_release release;
                v = b.lease_device(entry.c_str(), on, writable ? Access::write : Access::read);
            }
            return py::make_tuple(reinterpret_cast<uintptr_t>(v.native), v.offset, v.device);
        }, py::arg("device"), py::arg("writable"), py::arg("entry"),
           "Device lease: (cl_mem address holding a new reference for the caller, or CUdeviceptr; "
           "byte offset of the first element; Device).");
}

void bind_transfer_totals(py::module_ &m) {
    py::class_<TransferCounts>(m, "Transfers",
                               "Copies (count and bytes) in each direction, counted where they happen, and maps: "
                               "hand-overs of zero-copy memory, which move no byte.")
        .def_readonly("to_device", &TransferCounts::to_device)
        .def_readonly("to_device_bytes", &TransferCounts::to_device_bytes)
        .def_readonly("to_host", &TransferCounts::to_host)
        .def_readonly("to_host_bytes", &TransferCounts::to_host_bytes)
        .def_readonly("maps_to_device", &TransferCounts::maps_to_device,
                      "hand-overs of zero-copy memory to the device: no bytes moved")
        .def_readonly("maps_to_host", &TransferCounts::maps_to_host)
        .def("__eq__", [](const TransferCounts &a, const TransferCounts &b) {
            return a.fields() == b.fields();
        }, py::is_operator())
        .def("__hash__", [](const TransferCounts &t) {
            return py::hash(py::cast(t.fields()));
        })
        .def("__sub__", [](const TransferCounts &a, const TransferCounts &b) {
            return TransferCounts{a.to_device - b.to_device, a.to_device_bytes - b.to_device_bytes,
                                  a.to_host - b.to_host, a.to_host_bytes - b.to_host_bytes,
                                  a.maps_to_device - b.maps_to_device, a.maps_to_host - b.maps_to_host};
        }, py::is_operator())
        .def("__repr__", &transfers_repr);

    m.def("transfers", [] { return snapshot(process_transfers()); },
          "Every host<->device copy of the process so far.");
}

}  // namespace hb
