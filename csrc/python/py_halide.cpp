// py_halide.cpp: the bridge to the halide package: Buffer.from_halide(), Buffer.to_halide(), and
// opening the OpenCL loader where Halide's JIT runtime finds it.
//
// from_halide() binds the hl.Buffer's own halide_buffer_t to a storage over its host memory
// (halide_bridge.cpp), so both are one residency state. to_halide() gives that very hl.Buffer
// back for a view covering it; any other view is a host lease, as numpy(writable=True) is: an
// hl.Buffer made by Halide's buffer-protocol constructor over an ndarray of the same bytes, of
// an integer type that constructor reads (it reads no bfloat16 and no 'L' uint64), whose
// halide_buffer_t then gets the real element type: Halide::Buffer takes its type from there.
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "backends/opencl_api.h"
#include "core/errors.h"
#include "python/py_glue.h"

namespace hb {
namespace {

constexpr const char *kFromHalide = "Buffer.from_halide";
constexpr const char *kToHalide = "to_halide";

/// halide.Buffer, kept for the process once found (a hot path: no lookup per call). Without
/// `entry`: null while the halide package was never imported (nothing can be one of its
/// buffers then). With it: the package is imported, or ModuleNotFoundError names `entry`.
PyObject *halide_buffer_class(const char *entry) {
    static PyObject *type = nullptr;  // a strong reference, never released
    if (type) return type;
    py::object halide = py::reinterpret_steal<py::object>(PyImport_GetModule(py::str("halide").ptr()));
    if (!halide && PyErr_Occurred()) throw py::error_already_set();
    bool imported = halide && !halide.is_none();  // None in sys.modules: its import was blocked
    if (!imported && !entry) return nullptr;
    if (!imported) {
        try {
            halide = py::module_::import("halide");
        } catch (py::error_already_set &e) {
            if (!e.matches(PyExc_ModuleNotFoundError)) throw;
            std::string why = py::str(e.value()).cast<std::string>();
            PyErr_SetString(PyExc_ModuleNotFoundError,
                            (std::string(entry) + "(): the halide package is not installed (" + why +
                             "); pip install 'halide>=21,<22'").c_str());
            throw py::error_already_set();
        }
    }
    type = py::object(halide.attr("Buffer")).release().ptr();
    return type;
}

/// True for a halide.Buffer.
bool is_halide_buffer(py::handle obj) {
    PyObject *type = halide_buffer_class(nullptr);
    if (!type) return false;
    int is = PyObject_IsInstance(obj.ptr(), type);
    if (is < 0) throw py::error_already_set();
    return is == 1;
}

/// The address of a halide.Buffer's halide_buffer_t (Halide's _get_raw_halide_buffer_t()).
halide_buffer_t *raw_struct_of(py::handle h) {
    static PyObject *name = PyUnicode_InternFromString("_get_raw_halide_buffer_t");
    py::object address = py::reinterpret_steal<py::object>(PyObject_CallMethodNoArgs(h.ptr(), name));
    if (!address) throw py::error_already_set();
    return reinterpret_cast<halide_buffer_t *>(address.cast<uintptr_t>());
}

Buffer from_halide_object(py::handle obj) {
    if (!is_halide_buffer(obj))
        throw TypeError(std::string(kFromHalide) + "(): expected a halide.Buffer, not " + type_name(obj) +
                        "; for other memory use Buffer.from_host(obj)");
    halide_buffer_t *raw;
    try {
        raw = raw_struct_of(obj);
    } catch (py::error_already_set &) {
        // Halide refuses an undefined buffer (halide.Buffer()): said in our words.
        if (!obj.attr("defined")().cast<bool>())
            throw ValueError(std::string(kFromHalide) + "(): the halide.Buffer is undefined (halide.Buffer() "
                             "holds no memory); pass one with memory, e.g. halide.Buffer(halide.Float(32), "
                             "[640, 480])");
        throw;
    }
    return Buffer::from_halide(kFromHalide, raw, keep_object(obj));
}

/// The NumPy dtype Halide's buffer-protocol constructor reads for `itemsize` bytes: unsigned
/// integers, but int64 for 8 bytes (it reads 'l', not 'L').
const DType *carrier_of(int itemsize) {
    static const DType *const rows[] = {dtype_by_name("uint8"), dtype_by_name("uint16"), dtype_by_name("uint32"),
                                        dtype_by_name("int64")};
    return rows[itemsize == 1 ? 0 : itemsize == 2 ? 1 : itemsize == 4 ? 2 : 3];
}

/// TypeError for a dtype Halide has no type for, naming what to pass instead.
TypeError no_halide_type(const DType &t) {
    std::string what = std::string(kToHalide) + "(): Halide has no type for " + t.name + "; ";
    if (const DType *u = dtype_bits_of(t))
        return TypeError(what + "pass b.bits() for the same bytes as " + u->name);
    return TypeError(what + "pass a buffer of a dtype it has over the same bytes, e.g. "
                     "Buffer.from_host(b.numpy().view(numpy.float64))");
}

py::object to_halide_object(py::handle self) {
    Buffer &b = buffer_of(self.ptr());
    if (std::shared_ptr<void> owner = b.halide_owner()) return kept_in(owner)->object;  // one state already
    const DType &t = b.dtype();
    if (dtype_by_halide(t.halide) != &t) throw no_halide_type(t);
    for (int64_t m : b.mins()) {
        if (m < std::numeric_limits<int32_t>::min() || m > std::numeric_limits<int32_t>::max())
            throw ValueError(std::string(kToHalide) + "(): min " + std::to_string(m) + " is outside Halide's "
                             "int32 coordinates; pass a view whose mins lie within -2**31 .. 2**31 - 1");
    }
    py::handle halide_buffer = halide_buffer_class(kToHalide);
    // Every refusal came first: the lease is the first change.
    run_lease(b, [&] { b.begin_host_write(kToHalide); });
    py::object bytes = ndarray_view(self, b, true).attr("view")(numpy_dtype(*carrier_of(t.itemsize)));
    py::object h = halide_buffer(bytes);  // reverse_axes: NumPy's last axis is Halide's dimension 0
    raw_struct_of(h)->type = t.halide;
    bool moved = false;
    for (int64_t m : b.mins()) moved = moved || m != 0;
    if (moved) {
        py::list mins;
        for (size_t i = b.mins().size(); i-- > 0;) mins.append(b.mins()[i]);
        h.attr("set_min")(mins);
    }
    return h;
}

}  // namespace

void bind_halide(py::module_ &m) {
    auto cls = py::reinterpret_borrow<py::class_<Buffer>>(m.attr("Buffer"));
    cls.def_static("from_halide", &from_halide_object, py::arg("buffer"),
                   "A Buffer over a halide.Buffer's host memory, without a copy, sharing one residency "
                   "state with it: its device copy (made by Halide's JIT) and dirty flags are the buffer's. "
                   "The halide.Buffer is kept alive.")
        .def("to_halide", &to_halide_object,
             "A halide.Buffer over this buffer's memory, without a copy: the halide.Buffer it came from "
             "(Buffer.from_halide) when the view covers it; else a host lease, as numpy(writable=True) is "
             "(a newer device copy is downloaded; the buffer is marked host dirty).");
    m.def("_opencl_load_library", [] { return ocl::api("opencl.load_library").path; },
          "Opens the OpenCL loader (RTLD_GLOBAL) from the candidates given; returns its path.");
}

}  // namespace hb
