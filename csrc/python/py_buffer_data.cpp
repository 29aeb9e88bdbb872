// py_buffer_data.cpp: Buffer's data operations (fill, all_equal, copy_from, __setitem__). Values
// are converted to the buffer's dtype exactly as NumPy assigns them into an array of that dtype
// (ml_dtypes for bfloat16, float8 and the rest); the copies then run without the GIL.
#include "python/py_buffer_data.h"

#include <string>
#include <vector>

#include "core/errors.h"
#include "python/py_buffer.h"
#include "python/py_dtype.h"
#include "python/py_glue.h"
#include "python/py_kept.h"
#include "python/py_numpy.h"

namespace hb {
namespace {

/// `value` as NumPy assigns it into a new array of `t` and `shape` (broadcasting, casting and
/// refusing exactly as `array[...] = value` does); NumPy's exception gets the entry point.
py::array assigned(py::handle value, const DType &t, const std::vector<int64_t> &shape, const char *entry) {
    py::tuple extents(shape.size());
    for (size_t i = 0; i < shape.size(); ++i) extents[i] = py::int_(shape[i]);
    py::array out = py::module_::import("numpy").attr("empty")(extents, numpy_dtype(t));
    try {
        out[py::ellipsis()] = value;
    } catch (py::error_already_set &e) {
        std::string message = std::string(entry) + "(): " + py::str(e.value()).cast<std::string>() +
                              " (converting to " + t.name + " as NumPy assigns into an array of it)";
        py::raise_from(e, e.type().ptr(), message.c_str());
        throw py::error_already_set();
    }
    return out;
}

/// The element bytes of a scalar `value` in the buffer's dtype; TypeError for an array.
py::array scalar_of(py::handle value, const DType &t, const char *entry) {
    if (py::module_::import("numpy").attr("ndim")(value).cast<int>() != 0)
        throw TypeError(std::string(entry) + "(): the value must be a scalar, not " + type_name(value) +
                        "; assign arrays with b[...] = values");
    return assigned(value, t, {}, entry);
}

const uint8_t *bytes_of(const py::array &a) { return static_cast<const uint8_t *>(a.data()); }

void fill(py::handle self, py::handle value) {
    Buffer &b = buffer_of(self.ptr());
    py::array pattern = scalar_of(value, b.dtype(), "fill");
    py::gil_scoped_release nogil;
    b.fill("fill", bytes_of(pattern));
}

bool all_equal(py::handle self, py::handle value) {
    Buffer &b = buffer_of(self.ptr());
    py::array scalar = scalar_of(value, b.dtype(), "all_equal");
    unlocked_if_may_copy(b, [&] { return b.lease_host("all_equal", Access::read); });
    py::array view = ndarray_view(self, b, false);
    return py::module_::import("numpy").attr("all")(view.attr("__eq__")(scalar)).cast<bool>();
}

Buffer &buffer_arg(py::handle obj, const char *entry) {
    if (!is_buffer(obj))
        throw TypeError(std::string(entry) + "(): the source must be a halide_buffer.Buffer, not " + type_name(obj) +
                        "; wrap it with Buffer.from_host(obj), or assign values with b[...] = obj");
    return buffer_of(obj.ptr());
}

void copy_from(py::handle self, py::handle other) {
    Buffer &b = buffer_of(self.ptr());
    Buffer &src = buffer_arg(other, "copy_from");
    py::gil_scoped_release nogil;
    b.copy_from("copy_from", src);
}

/// b[key] = value: the view b[key] takes the value by position (NumPy's rule), wherever the
/// view's current data is: a scalar is a fill, a Buffer of the view's shape and dtype a copy
/// (device to device where both are there), anything else NumPy's assignment into a staging array.
void set_item(py::handle self, py::handle key, py::handle value) {
    constexpr const char *entry = "__setitem__";
    py::object view_obj = self.attr("__getitem__")(key);
    Buffer &view = buffer_of(view_obj.ptr());
    if (is_buffer(value)) {
        Buffer &src = buffer_of(value.ptr());
        if (src.shape() == view.shape() && &src.dtype() == &view.dtype()) {
            Buffer placed = src.with_mins(view.mins());  // positions, not coordinates
            py::gil_scoped_release nogil;
            view.copy_from(entry, placed);
            return;
        }
    }
    py::object values;  // an ndarray of the view's shape and dtype, once found or made
    if (py::isinstance<py::array>(value)) {
        auto given = py::reinterpret_borrow<py::array>(value);
        std::vector<int64_t> shape(given.shape(), given.shape() + given.ndim());
        if (shape == view.shape() && given.dtype().equal(numpy_dtype(view.dtype()))) values = given;
    }
    if (!values) {
        if (py::module_::import("numpy").attr("ndim")(value).cast<int>() == 0) {
            py::array pattern = assigned(value, view.dtype(), {}, entry);
            py::gil_scoped_release nogil;
            view.fill(entry, bytes_of(pattern));
            return;
        }
        values = assigned(value, view.dtype(), view.shape(), entry);
    }
    auto array = py::reinterpret_borrow<py::array>(values);
    std::vector<int64_t> strides(array.strides(), array.strides() + array.ndim());
    Buffer src = Buffer::wrap(entry, static_cast<uint8_t *>(array.mutable_data()), view.shape(), strides,
                              view.dtype(), keep_object(array), true, false)
                     .with_mins(view.mins());
    py::gil_scoped_release nogil;
    view.copy_from(entry, src);
}

}  // namespace

void bind_buffer_data(BufferClass &cls) {
    cls.def("fill", &fill, py::arg("value"),
            "Set every element to value (converted to the dtype as NumPy assigns it). On the device "
            "when the device copy is current (nothing moves; device dirty), else on the host (host dirty).")
        .def("all_equal", &all_equal, py::arg("value"),
             "Whether every element equals value (converted to the dtype; NumPy's ==, so NaN never "
             "equals). Reads the host copy (a newer device copy is downloaded first).")
        .def("copy_from", &copy_from, py::arg("other"),
             "Copy other's elements at the coordinates both buffers share (Halide's rule: mins "
             "matter; same dtype and number of axes). Device to device when both current copies are "
             "on one device; otherwise only those elements cross the bus.")
        .def("__setitem__", &set_item, py::arg("key"), py::arg("value"));
}

}  // namespace hb
