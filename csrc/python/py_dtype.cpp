// py_dtype.cpp: the DType Python type and the conversion of every dtype spelling to a row.
#include "python/py_dtype.h"

#include <string>
#include <unordered_map>
#include <vector>

#include "core/errors.h"
#include "python/py_glue.h"

namespace hb {
namespace {

py::object halide_tuple(const DType &t) {
    if (!t.has_halide_type()) return py::none();
    return py::make_tuple(t.halide.code, t.halide.bits, t.halide.lanes);
}

/// The canonical name of whatever the user passed other than one of our names (to_dtype() reads
/// those), or "" when it is no dtype at all.
std::string name_of(py::handle obj, const char *entry) {
    if (obj.is_none()) return "";  // numpy.dtype(None) would say float64
    // torch.dtype prints as "torch.bfloat16"; its names match ours where the type exists.
    py::handle type = reinterpret_cast<PyObject *>(Py_TYPE(obj.ptr()));
    if (py::str(type.attr("__module__")).cast<std::string>() == "torch") {
        std::string s = py::str(obj).cast<std::string>();
        return s.rfind("torch.", 0) == 0 ? s.substr(6) : s;
    }
    // NumPy dtypes and scalar types, ml_dtypes types, jax's types and NumPy spellings ("f4").
    py::object np_dtype;
    try {
        np_dtype = py::module_::import("numpy").attr("dtype")(obj);
    } catch (py::error_already_set &) {
        return "";
    }
    if (!np_dtype.attr("isnative").cast<bool>())
        throw ValueError(std::string(entry) + "(): " + py::str(np_dtype).cast<std::string>() +
                         " is big-endian; convert the data to native byte order first");
    return np_dtype.attr("name").cast<std::string>();
}

TypeError unknown_dtype(py::handle obj, const char *entry) {
    return TypeError(std::string(entry) + "(): unknown dtype " + py::repr(obj).cast<std::string>() +
                     "; use one of: " + dtype_names());
}

}  // namespace

const DType &to_dtype(py::handle obj, const char *entry) {
    // The name last resolved, kept alive so that its address names it: a literal such as
    // "float32" in a loop is the same str object every time. Read and written with the GIL.
    static PyObject *last_name = nullptr;
    static const DType *last_dtype = nullptr;
    if (obj.ptr() == last_name) return *last_dtype;
    if (PyUnicode_Check(obj.ptr())) {  // the usual spelling, a canonical name: no string made
        Py_ssize_t length;
        const char *s = PyUnicode_AsUTF8AndSize(obj.ptr(), &length);
        if (!s) {  // not UTF-8 (a lone surrogate): no dtype's name, ours or NumPy's
            PyErr_Clear();
            throw unknown_dtype(obj, entry);
        }
        if (const DType *t = dtype_by_name(std::string_view(s, size_t(length)))) {
            Py_XSETREF(last_name, py::reinterpret_borrow<py::object>(obj).release().ptr());
            last_dtype = t;
            return *t;
        }
    }
    // numpy.dtype objects (every ndarray has one) resolve once: the cache keeps each alive, so
    // its address names it for good. There are only as many as the dtypes a process uses.
    static std::unordered_map<PyObject *, const DType *> resolved;
    bool is_numpy_dtype = py::isinstance<py::dtype>(obj);
    if (is_numpy_dtype) {
        auto found = resolved.find(obj.ptr());
        if (found != resolved.end()) return *found->second;
    }
    if (py::isinstance<DType>(obj)) return obj.cast<const DType &>();
    std::string name = name_of(obj, entry);
    if (const DType *t = dtype_by_name(name)) {
        if (is_numpy_dtype) resolved.emplace(py::reinterpret_borrow<py::object>(obj).release().ptr(), t);
        return *t;
    }
    throw unknown_dtype(obj, entry);
}

py::dtype numpy_dtype(const DType &t) {
    // Created on first use and kept for the life of the process (never destroyed at exit,
    // when the interpreter may already be gone).
    static std::vector<PyObject *> cache(dtype_count(), nullptr);
    PyObject *&slot = cache[index_of(t)];
    if (!slot) {
        py::object spec = py::str(t.name);
        if (t.source == NumpySource::ml_dtypes)
            spec = py::module_::import("ml_dtypes").attr(t.name);
        slot = py::module_::import("numpy").attr("dtype")(spec).release().ptr();
    }
    return py::reinterpret_borrow<py::dtype>(slot);
}

void bind_dtype(py::module_ &m) {
    py::class_<DType>(m, "DType", "One row of the dtype table: an element type and how every "
                                  "protocol spells it. Get one with halide_buffer.dtype(x).")
        .def_property_readonly("name", [](const DType &t) { return t.name; })
        .def_property_readonly("itemsize", [](const DType &t) { return t.itemsize; })
        .def_property_readonly("halide_type", &halide_tuple,
                               "(code, bits, lanes) of halide_type_t, or None")
        .def_property_readonly("dlpack_type", [](const DType &t) {
            return py::make_tuple(t.dlpack.code, t.dlpack.bits, t.dlpack.lanes);
        }, "(code, bits, lanes) of DLDataType")
        .def_property_readonly("dlpack_padded", [](const DType &t) { return t.dlpack_padded; },
                               "sub-byte type stored one element per byte")
        .def_property_readonly("format", [](const DType &t) -> py::object {
            return t.format ? py::object(py::str(t.format)) : py::object(py::none());
        }, "PEP 3118 format, or None when the buffer protocol cannot carry the dtype")
        .def_property_readonly("typestr", [](const DType &t) { return t.typestr; },
                               "The typestr of ``__cuda_array_interface__``")
        .def_property_readonly("numpy", [](const DType &t) { return numpy_dtype(t); },
                               "the exact NumPy dtype (ml_dtypes for exotic types)")
        .def("__eq__", [](const DType &t, py::handle other) {
            try {
                return &to_dtype(other, "DType.__eq__") == &t;
            } catch (const std::exception &) {
                return false;
            }
        })
        .def("__hash__", [](const DType &t) { return py::hash(py::str(t.name)); })
        .def("__str__", [](const DType &t) { return t.name; })
        .def("__repr__", [](const DType &t) { return std::string("dtype('") + t.name + "')"; });

    m.def("dtype", [](py::handle obj) { return &to_dtype(obj, "dtype"); }, py::arg("obj"),
          py::return_value_policy::reference,
          "The dtype row for a name, NumPy/ml_dtypes dtype, or torch/jax dtype.");
    m.def("dtypes", [] {
        py::list rows;
        for (size_t i = 0; i < dtype_count(); ++i)
            rows.append(py::cast(&dtype_table()[i], py::return_value_policy::reference));
        return rows;
    }, "Every row of the dtype table, in table order.");
}

}  // namespace hb
