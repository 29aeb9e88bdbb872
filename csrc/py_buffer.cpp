// py_buffer.cpp: the Buffer Python type: construction, geometry, views, residency, raw access.
#include <string>
#include <vector>

#include "errors.h"
#include "py_glue.h"

namespace hb {

bool as_int64(py::handle n, int64_t &out) {
    py::object i = py::reinterpret_steal<py::object>(PyNumber_Index(n.ptr()));
    if (!i) throw py::error_already_set();
    int overflow = 0;
    out = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
    return !overflow;
}

bool as_uint64(py::handle n, uint64_t &out) {
    py::object i = py::reinterpret_steal<py::object>(PyNumber_Index(n.ptr()));
    if (!i) throw py::error_already_set();
    out = PyLong_AsUnsignedLongLong(i.ptr());
    if (!PyErr_Occurred()) return true;
    PyErr_Clear();  // negative, or more than 64 bits
    return false;
}

namespace {

/// as_int64(), or ValueError naming `what` and the fix.
int64_t to_int64(py::handle n, const char *entry, const char *what, const char *fix) {
    int64_t v;
    if (!as_int64(n, v))
        throw ValueError(std::string(entry) + "(): " + what + " " + py::str(n).cast<std::string>() +
                         " does not fit in 64 bits; " + fix);
    return v;
}

/// An int argument `name` of a method, or TypeError naming the entry and the argument; `fix`
/// says what to pass when the int does not fit in 64 bits.
int64_t int_arg(py::handle value, const char *entry, const char *name, const char *fix) {
    if (!is_integer(value))
        throw TypeError(std::string(entry) + "(): " + name + " must be an int, not " + type_name(value) +
                        "; pass an int, e.g. int(x)");
    return to_int64(value, entry, name, fix);
}

std::vector<int64_t> to_shape(py::handle shape, const char *entry) {
    constexpr const char *fix = "use a smaller shape";
    if (is_integer(shape)) return {to_int64(shape, entry, "extent", fix)};
    if (is_array(shape))
        throw TypeError(std::string(entry) + "(): shape must be an int or a sequence of ints, not " +
                        type_name(shape) + "; Buffer(shape, dtype) allocates a new buffer: use "
                        "Buffer.from_host(obj) for a buffer of an array's data (copy=True to copy "
                        "it), or pass tuple(obj) if it holds a shape");
    if (!py::isinstance<py::sequence>(shape) || py::isinstance<py::str>(shape))
        throw TypeError(std::string(entry) + "(): shape must be an int or a sequence of ints, not " +
                        type_name(shape) + "; pass e.g. (480, 640)");
    std::vector<int64_t> out;
    for (py::handle n : shape) {
        if (!is_integer(n))
            throw TypeError(std::string(entry) + "(): shape entries must be ints, not " + type_name(n) +
                            "; pass a shape such as (480, 640), or Buffer.from_host(values, "
                            "copy=True) for a buffer holding these values");
        out.push_back(to_int64(n, entry, "extent", fix));
    }
    return out;
}

template <typename T>
py::tuple to_tuple(const std::vector<T> &v) {
    py::tuple t(v.size());
    for (size_t i = 0; i < v.size(); ++i) t[i] = py::int_(v[i]);
    return t;
}

/// Where the current data lives, for repr: the reader's view of the residency flags.
std::string residency_of(Buffer &b) {
    if (!b.has_device_allocation()) return "host";
    if (b.device_dirty()) return "device (host copy stale)";
    if (b.host_dirty()) return "host (device copy stale)";
    return "host and device";
}

std::string repr_of(Buffer &b) {
    std::string shape = py::str(to_tuple(b.shape())).cast<std::string>();
    std::string out = "Buffer(shape=" + shape + ", dtype=" + b.dtype().name +
                      ", data=" + residency_of(b);
    if (b.readonly()) out += ", readonly";
    return out + ")";
}

/// IndexError for an index outside an axis, with the range that is inside.
IndexError index_out_of_range(const std::string &index, size_t axis, int64_t extent) {
    std::string where = "__getitem__(): index " + index + " is out of range for axis " + std::to_string(axis) +
                        " with extent " + std::to_string(extent);
    if (extent == 0) return IndexError(where + "; the axis is empty: only a slice such as 0:0 indexes it");
    return IndexError(where + "; use -" + std::to_string(extent) + " <= index < " + std::to_string(extent));
}

/// The items of an index a Buffer takes: ints, slices of ints, '...'. Anything else (None,
/// masks, integer arrays, floats) is NumPy's, refused naming where to find it.
void check_index_items(const py::tuple &items) {
    for (py::handle item : items) {
        if (item.ptr() == Py_Ellipsis || (is_integer(item) && !PyBool_Check(item.ptr()))) continue;
        if (!PySlice_Check(item.ptr()))
            throw TypeError("__getitem__(): only ints, slices and '...' index a Buffer, not " + type_name(item) +
                            "; for NumPy's other indexes (None, boolean masks, integer arrays) index the "
                            "ndarray b.numpy() instead");
        py::object start = item.attr("start"), stop = item.attr("stop"), step = item.attr("step");
        for (const py::object *part : {&start, &stop, &step}) {
            if (!part->is_none() && !is_integer(*part))
                throw TypeError("__getitem__(): slice bounds and steps must be ints or None, not " +
                                type_name(*part) + "; pass e.g. b[1:3] or b[::2]");
        }
        if (!step.is_none() && !py::bool_(step))
            throw ValueError("__getitem__(): slice step cannot be zero; use a nonzero step such as 1 or -1");
    }
}

/// Python index expression -> one AxisIndex per axis (positions, NumPy rules).
std::vector<AxisIndex> to_index(const Buffer &b, py::handle key) {
    py::tuple items = py::isinstance<py::tuple>(key) ? py::reinterpret_borrow<py::tuple>(key)
                                                     : py::make_tuple(key);
    check_index_items(items);
    size_t n_ellipsis = 0, n_axes = 0;
    for (py::handle item : items) {
        if (item.ptr() == Py_Ellipsis) ++n_ellipsis;
        else ++n_axes;
    }
    if (n_ellipsis > 1)
        throw IndexError("__getitem__(): an index can only have a single ellipsis ('...'); remove the others");
    if (n_axes > 0 && b.ndim() == 0)
        throw IndexError("__getitem__(): a 0-d buffer has no axes to index; b[()] is the buffer itself, "
                         "b.numpy()[()] its value");
    if (n_axes > size_t(b.ndim()))
        throw IndexError("__getitem__(): too many indices: " + std::to_string(n_axes) + " for " +
                         std::to_string(b.ndim()) + " axes; use at most one int or slice per axis");
    std::vector<AxisIndex> out;
    size_t axis = 0;
    auto full = [&](size_t a) { return AxisIndex{true, 0, 1, b.shape()[a]}; };
    for (py::handle item : items) {
        if (item.ptr() == Py_Ellipsis) {
            for (size_t k = 0; k < b.ndim() - n_axes; ++k, ++axis) out.push_back(full(axis));
        } else if (PySlice_Check(item.ptr())) {
            Py_ssize_t start, stop, step;
            if (PySlice_Unpack(item.ptr(), &start, &stop, &step) < 0) throw py::error_already_set();
            Py_ssize_t len = PySlice_AdjustIndices(Py_ssize_t(b.shape()[axis]), &start, &stop, step);
            out.push_back(AxisIndex{true, start, step, len});
            ++axis;
        } else {  // an int (check_index_items)
            int64_t i;
            bool fits = as_int64(item, i);
            int64_t extent = b.shape()[axis];
            if (!fits) throw index_out_of_range(py::str(item).cast<std::string>(), axis, extent);
            if (i < -extent || i >= extent) throw index_out_of_range(std::to_string(i), axis, extent);
            out.push_back(AxisIndex{false, i < 0 ? i + extent : i, 0, 0});
            ++axis;
        }
    }
    while (axis < size_t(b.ndim())) out.push_back(full(axis++));
    return out;
}

std::vector<int> to_axes(const Buffer &b, py::args args) {
    py::sequence given = args;
    if (args.size() == 0) {  // no axes: reverse them, like numpy.transpose
        std::vector<int> axes;
        for (int i = b.ndim(); i-- > 0;) axes.push_back(i);
        return axes;
    }
    if (args.size() == 1 && py::isinstance<py::sequence>(args[0]) && !py::isinstance<py::str>(args[0]))
        given = py::reinterpret_borrow<py::sequence>(args[0]);
    std::vector<int> axes;
    for (py::handle a : given) {
        if (!is_integer(a))
            throw TypeError("transposed(): axes must be ints, not " + type_name(a) +
                            "; pass e.g. b.transposed(1, 0)");
        int64_t axis = to_int64(a, "transposed", "axis", "pass each axis exactly once");
        // Out of int range is as wrong as any other non-axis: transposed() says which are valid.
        axes.push_back(axis < -b.ndim() - 1 || axis > b.ndim() ? b.ndim() : int(axis));
    }
    return axes;
}

/// Buffer methods reach the core object through buffer_of(), which checks the type of self and
/// that it was initialised (Buffer.__new__ alone leaves it empty).
template <typename R, typename... A>
auto method(R (Buffer::*f)(A...)) {
    return [f](py::handle self, A... a) -> R { return (buffer_of(self.ptr()).*f)(a...); };
}
template <typename R, typename... A>
auto method(R (Buffer::*f)(A...) const) {
    return [f](py::handle self, A... a) -> R { return (buffer_of(self.ptr()).*f)(a...); };
}
template <typename F>
auto method(F f) {
    return [f](py::handle self) { return f(buffer_of(self.ptr())); };
}

PyTypeObject *buffer_type = nullptr;

/// What the garbage collector sees of a buffer: the Python objects its storage keeps (the host
/// memory's owner, a wrapped device handle's owner), when the buffer is their only holder (see
/// py_kept.cpp).
int traverse_buffer(const std::unique_ptr<Buffer> &b, visitproc visit, void *arg) {
    return b->visit_sole_owners([&](const std::shared_ptr<void> &owner) { return traverse_owner(owner, visit, arg); });
}

}  // namespace

bool is_array(py::handle obj) {
    return !PyLong_Check(obj.ptr()) && (PyObject_CheckBuffer(obj.ptr()) || py::hasattr(obj, "__array__") ||
                                        py::hasattr(obj, "__dlpack__"));
}

bool is_integer(py::handle obj) {
    if (!PyIndex_Check(obj.ptr())) return false;
    if (!is_array(obj)) return true;
    PyObject *i = PyNumber_Index(obj.ptr());
    if (i) {
        Py_DECREF(i);
        return true;
    }
    if (!PyErr_ExceptionMatches(PyExc_TypeError)) throw py::error_already_set();
    PyErr_Clear();
    return false;
}

std::string type_name(py::handle obj) { return Py_TYPE(obj.ptr())->tp_name; }

Buffer &buffer_of(PyObject *self) {
    if (!PyObject_TypeCheck(self, buffer_type))
        throw TypeError(std::string("Buffer: expected a halide_buffer.Buffer, not ") +
                        Py_TYPE(self)->tp_name + "; call the method on a Buffer");
    auto *inst = reinterpret_cast<py::detail::instance *>(self);
    Buffer *b = inst->get_value_and_holder().value_ptr<Buffer>();
    if (!b) throw TypeError("Buffer: the object was never initialised; construct it with "
                            "halide_buffer.Buffer(shape, dtype)");
    return *b;
}

void bind_buffer(py::module_ &m) {
    py::class_<Buffer> cls(m, "Buffer", py::buffer_protocol(), py::custom_type_setup([](PyHeapTypeObject *type) {
        take_part_in_gc(type, traverse_instance<std::unique_ptr<Buffer>, traverse_buffer>);
    }), R"doc(
A Halide runtime buffer: host memory (owned or borrowed), a halide_buffer_t describing it in
Halide's terms, and the residency state of its data shared by every view.

Buffer(shape, dtype="float64") allocates owned, zero-filled, 128-byte aligned host memory.
)doc");
    buffer_type = reinterpret_cast<PyTypeObject *>(cls.ptr());
    install_buffer_protocol(cls);

    cls.def(py::init([](py::handle shape, py::handle dtype) {
                return Buffer::allocate("Buffer", to_shape(shape, "Buffer"), to_dtype(dtype, "Buffer"));
            }),
            py::arg("shape"), py::arg("dtype") = "float64")
        .def_static("from_host", &buffer_from_host, py::arg("obj"), py::arg("copy") = false,
                    py::kw_only(), py::arg("external_writes") = true,
                    "Wrap (copy=False) or copy anything with the buffer protocol or an ndarray of "
                    "any dtype, ml_dtypes included. copy=True also copies what numpy.asarray() reads "
                    "(lists, nested sequences, numbers), in the dtype NumPy picks. external_writes=False "
                    "promises that wrapped writable memory changes only through this buffer.")
        // --- geometry
        .def_property_readonly("shape", method([](Buffer &b) { return to_tuple(b.shape()); }))
        .def_property_readonly("strides", method([](Buffer &b) { return to_tuple(b.strides()); }))
        .def_property_readonly("mins", method([](Buffer &b) { return to_tuple(b.mins()); }),
                               "Halide coordinate of the first element of each axis")
        .def_property_readonly("ndim", method(&Buffer::ndim))
        .def_property_readonly("size", method(&Buffer::size))
        .def_property_readonly("nbytes", method(&Buffer::nbytes))
        .def_property_readonly("itemsize", method([](Buffer &b) { return b.dtype().itemsize; }))
        .def_property_readonly("dtype", method([](Buffer &b) { return &b.dtype(); }),
                               py::return_value_policy::reference)
        .def_property_readonly("readonly", method(&Buffer::readonly))
        .def_property_readonly("external_writes", method(&Buffer::external_writes),
                               "wrapped writable memory whose owner may write it at any time")
        .def_property_readonly("is_c_contiguous", method(&Buffer::is_c_contiguous))
        .def("__len__", method([](Buffer &b) {
            if (b.ndim() == 0) throw TypeError("len(): a 0-d buffer has no length; use b.size");
            return b.shape()[0];
        }))
        .def("shares_storage_with", [](py::handle self, py::handle other) {
            Buffer &b = buffer_of(self.ptr());
            if (!PyObject_TypeCheck(other.ptr(), buffer_type))
                throw TypeError("shares_storage_with(): other must be a halide_buffer.Buffer, not " + type_name(other) +
                                "; for an array use numpy.shares_memory(b.numpy(), other)");
            return b.shares_storage_with(buffer_of(other.ptr()));
        }, py::arg("other"))
        // --- views
        .def("cropped", [](py::handle self, py::handle axis, py::handle min, py::handle extent) {
            constexpr const char *fix = "crop within the mins and extents shown by b.mins and b.shape";
            Buffer &b = buffer_of(self.ptr());
            return b.cropped(int_arg(axis, "cropped", "axis", "pass an axis of b"), int_arg(min, "cropped", "min", fix),
                             int_arg(extent, "cropped", "extent", fix));
        }, py::arg("axis"), py::arg("min"), py::arg("extent"))
        .def("sliced", [](py::handle self, py::handle axis, py::handle pos) {
            Buffer &b = buffer_of(self.ptr());
            return b.sliced(int_arg(axis, "sliced", "axis", "pass an axis of b"),
                            int_arg(pos, "sliced", "pos", "slice at a coordinate shown by b.mins and b.shape"));
        }, py::arg("axis"), py::arg("pos"))
        .def("transposed", [](py::handle self, py::args axes) {
            Buffer &b = buffer_of(self.ptr());
            return b.transposed(to_axes(b, axes));
        })
        .def("__getitem__", [](py::handle self, py::handle key) {
            Buffer &b = buffer_of(self.ptr());
            return b.indexed(to_index(b, key));
        })
        .def("bits", method(&Buffer::bits))
        .def("copy", method([](Buffer &b) {
            run_lease(b, [&] { b.begin_host_read(); });  // the copy reads the host copy
            return b.copy("copy");
        }), "A C-contiguous host copy in a new storage (the device copy is downloaded first if newer).")
        // --- Halide
        .def("_get_raw_halide_buffer_t", method([](Buffer &b) {
            return reinterpret_cast<uintptr_t>(b.raw("_get_raw_halide_buffer_t"));
        }), "Address of the halide_buffer_t describing this view (Halide's extension protocol).")
        .def("__repr__", method(&repr_of));
    bind_numpy(cls);
    bind_buffer_data(cls);
    bind_residency(cls);
    bind_dlpack(cls, m);
    bind_dlpack_exchange(cls);
    bind_cuda(m, cls);
}

}  // namespace hb
