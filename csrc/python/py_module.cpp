// py_module.cpp: the private extension module halide_buffer._core.
#include "python/py_module.h"

#include <cstddef>
#include <cstring>

#include "core/errors.h"
#include "core/live_counts.h"
#include "python/py_aot.h"
#include "python/py_arguments.h"
#include "python/py_buffer.h"
#include "python/py_device.h"
#include "python/py_dtype.h"
#include "python/py_embedder.h"
#include "python/py_glue.h"
#include "python/py_halide.h"
#include "python/py_residency.h"

namespace hb {

namespace {
PyObject *device_error_type = nullptr;    // halide_buffer.DeviceError, created with the module
PyObject *pipeline_error_type = nullptr;  // halide_buffer.PipelineError
PyObject *read_only_error_type = nullptr; // halide_buffer.ReadOnlyError
}  // namespace

namespace {

/// An exception's message as Python text. A driver's, a library's or a pipeline's message may
/// carry any bytes: what is not UTF-8 shows as \xNN instead of failing the conversion.
py::object message_of(const std::exception &e) {
    const char *text = e.what();
    PyObject *message = PyUnicode_DecodeUTF8(text, Py_ssize_t(std::strlen(text)), "backslashreplace");
    if (!message) throw py::error_already_set();
    return py::reinterpret_steal<py::object>(message);
}

void set_error(PyObject *type, const std::exception &e) { PyErr_SetObject(type, message_of(e).ptr()); }

}  // namespace

bool set_python_error(std::exception_ptr error) {
    try {
        std::rethrow_exception(error);
    } catch (const DeviceError &e) {
        // The driver's code and name travel as attributes: exc.code, exc.name.
        py::object exc = py::reinterpret_borrow<py::object>(device_error_type)(message_of(e));
        exc.attr("code") = e.code;
        exc.attr("name") = e.name;
        PyErr_SetObject(device_error_type, exc.ptr());
    } catch (const PipelineError &e) {
        py::object exc = py::reinterpret_borrow<py::object>(pipeline_error_type)(message_of(e));
        exc.attr("code") = e.code;
        PyErr_SetObject(pipeline_error_type, exc.ptr());
    } catch (const ValueError &e) {
        set_error(PyExc_ValueError, e);
    } catch (const TypeError &e) {
        set_error(PyExc_TypeError, e);
    } catch (const IndexError &e) {
        set_error(PyExc_IndexError, e);
    } catch (const ReadOnlyError &e) {
        set_error(read_only_error_type, e);
    } catch (const BufferError &e) {
        set_error(PyExc_BufferError, e);
    } catch (const MemoryError &e) {
        set_error(PyExc_MemoryError, e);
    } catch (const std::bad_alloc &) {
        PyErr_SetString(PyExc_MemoryError, "halide_buffer: out of host memory; free memory and try again");
    } catch (...) {
        return false;
    }
    return true;
}

namespace {

/// An exception type halide_buffer.<name> (bases: RuntimeError, or the tuple given), added to
/// the module.
PyObject *add_error_type(py::module_ &m, const char *name, const char *doc, PyObject *bases = PyExc_RuntimeError) {
    std::string qualified = std::string("halide_buffer.") + name;
    PyObject *type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
    if (!type) throw py::error_already_set();
    m.add_object(name, py::handle(type));
    return type;
}

/// sizeof/offsetof of every field of halide_abi.h, for the layout test against Halide's header.
py::dict abi_layout() {
    py::dict d;
#define HB_SIZE(T) d["sizeof(" #T ")"] = sizeof(T)
#define HB_FIELD(T, f) d["offsetof(" #T ", " #f ")"] = offsetof(T, f)
    HB_SIZE(halide_type_t);
    HB_FIELD(halide_type_t, code);
    HB_FIELD(halide_type_t, bits);
    HB_FIELD(halide_type_t, lanes);
    HB_SIZE(halide_dimension_t);
    HB_FIELD(halide_dimension_t, min);
    HB_FIELD(halide_dimension_t, extent);
    HB_FIELD(halide_dimension_t, stride);
    HB_FIELD(halide_dimension_t, flags);
    HB_SIZE(halide_buffer_t);
    HB_FIELD(halide_buffer_t, device);
    HB_FIELD(halide_buffer_t, device_interface);
    HB_FIELD(halide_buffer_t, host);
    HB_FIELD(halide_buffer_t, flags);
    HB_FIELD(halide_buffer_t, type);
    HB_FIELD(halide_buffer_t, dimensions);
    HB_FIELD(halide_buffer_t, dim);
    HB_FIELD(halide_buffer_t, padding);
    HB_SIZE(halide_device_interface_t);
    HB_FIELD(halide_device_interface_t, device_malloc);
    HB_FIELD(halide_device_interface_t, device_free);
    HB_FIELD(halide_device_interface_t, device_sync);
    HB_FIELD(halide_device_interface_t, device_release);
    HB_FIELD(halide_device_interface_t, copy_to_host);
    HB_FIELD(halide_device_interface_t, copy_to_device);
    HB_FIELD(halide_device_interface_t, device_and_host_malloc);
    HB_FIELD(halide_device_interface_t, device_and_host_free);
    HB_FIELD(halide_device_interface_t, buffer_copy);
    HB_FIELD(halide_device_interface_t, device_crop);
    HB_FIELD(halide_device_interface_t, device_slice);
    HB_FIELD(halide_device_interface_t, device_release_crop);
    HB_FIELD(halide_device_interface_t, wrap_native);
    HB_FIELD(halide_device_interface_t, detach_native);
    HB_FIELD(halide_device_interface_t, compute_capability);
    HB_FIELD(halide_device_interface_t, impl);
#undef HB_SIZE
#undef HB_FIELD
    d["halide_type_int"] = int(halide_type_int);
    d["halide_type_uint"] = int(halide_type_uint);
    d["halide_type_float"] = int(halide_type_float);
    d["halide_type_handle"] = int(halide_type_handle);
    d["halide_type_bfloat"] = int(halide_type_bfloat);
    d["halide_buffer_flag_host_dirty"] = uint64_t(halide_buffer_flag_host_dirty);
    d["halide_buffer_flag_device_dirty"] = uint64_t(halide_buffer_flag_device_dirty);
    return d;
}

}  // namespace

}  // namespace hb

PYBIND11_MODULE(_core, m) {
    namespace py = pybind11;
    m.doc() = "C++ core of halide_buffer (private: import halide_buffer instead).";
    py::register_exception_translator([](std::exception_ptr p) {
        if (p && !hb::set_python_error(p)) std::rethrow_exception(p);
    });
    hb::device_error_type = hb::add_error_type(
        m, "DeviceError",
        "A device driver refused an operation. .code is the driver's error code, .name its name "
        "(e.g. 'CL_MEM_OBJECT_ALLOCATION_FAILURE').");
    hb::pipeline_error_type = hb::add_error_type(
        m, "PipelineError",
        "A Halide pipeline's runtime reported an error. .code is Halide's error code "
        "(halide_error_code_t); the message is Halide's.");
    py::tuple read_only_bases = py::make_tuple(py::handle(PyExc_BufferError), py::handle(PyExc_ValueError));
    hb::read_only_error_type = hb::add_error_type(
        m, "ReadOnlyError",
        "A write refused because the buffer wraps read-only memory: a BufferError, and a ValueError "
        "as NumPy raises for a write into a read-only array.",
        read_only_bases.ptr());
    hb::bind_embedder(m);  // first: the core asks it from the first buffer on
    hb::bind_dtype(m);
    hb::bind_device(m);
    hb::bind_transfer_totals(m);
    hb::bind_buffer(m);
    hb::bind_halide(m);
    hb::bind_aot(m);
    hb::bind_arguments(m);
    m.def("_abi_layout", &hb::abi_layout);
    m.def("_live_counts", [] {
        py::dict d;
        d["storages"] = hb::live_counts().storages.load();
        d["exports"] = hb::live_counts().exports.load();
        d["device_allocations"] = hb::live_counts().device_allocations.load();
        d["direct_calls"] = hb::live_counts().direct_calls.load();
        return d;
    }, "Live storages, unreleased buffer-protocol exports and device allocations (for leak tests), and "
       "the pipeline calls made directly so far.");
    m.def("_bounds_queries", [] { return hb::live_counts().bounds_queries.load(); },
          "The bounds queries pipelines ran so far (sizing outputs, required_regions()).");
}
