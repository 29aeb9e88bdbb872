// py_numpy.cpp: NumPy views of a Buffer with the exact dtype: __array__ and numpy().
//
// These are the only exports that can carry every dtype to NumPy (the buffer protocol has no
// format for bfloat16 or float8), so they build the ndarray directly over our host memory.
#include "python/py_numpy.h"

#include <string>
#include <vector>

#include "core/errors.h"
#include "python/py_buffer.h"
#include "python/py_dtype.h"
#include "python/py_glue.h"

namespace hb {

py::array ndarray_view(py::handle self, Buffer &b, bool writable) {
    std::vector<py::ssize_t> shape(b.shape().begin(), b.shape().end());
    std::vector<py::ssize_t> strides(b.strides().begin(), b.strides().end());
    py::array a(numpy_dtype(b.dtype()), std::move(shape), std::move(strides), b.data(), self);
    if (!writable)
        py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
    return a;
}

namespace {

/// NumPy 2's __array__(dtype=None, copy=None): copy=None copies only to convert, copy=True
/// always returns a new array, copy=False never copies (ValueError when it would have to).
py::object array_protocol(py::handle self, py::object dtype, py::object copy) {
    Buffer &b = buffer_of(self.ptr());
    // Every refusal comes before the lease: a refused call moves no data.
    py::object wanted;
    bool convert = false;
    if (!dtype.is_none()) {
        wanted = py::module_::import("numpy").attr("dtype")(dtype);
        convert = !wanted.equal(numpy_dtype(b.dtype()));
    }
    // NumPy passes True, False or None; anything else counts by its truth value.
    bool always = !copy.is_none() && PyObject_IsTrue(copy.ptr()) == 1;
    bool never = !copy.is_none() && !always;
    if (never && convert)
        throw ValueError(std::string("__array__(): converting ") + b.dtype().name + " to " +
                         py::str(wanted).cast<std::string>() + " needs a copy; call with copy=None or copy=True");
    unlocked_if_may_copy(b, [&] { return b.lease_host("__array__", Access::read); });
    py::array view = ndarray_view(self, b, false);
    if (convert) return view.attr("astype")(wanted);
    if (always) return view.attr("copy")();
    b.note_ndarray_handed_out();
    return std::move(view);
}

py::object numpy_view(py::handle self, bool writable) {
    Buffer &b = buffer_of(self.ptr());
    unlocked_if_may_copy(b, [&] { return b.lease_host("numpy", writable ? Access::write : Access::read); });
    b.note_ndarray_handed_out();
    return ndarray_view(self, b, writable);
}

}  // namespace

void bind_numpy(BufferClass &cls) {
    cls.def("__array__", &array_protocol, py::arg("dtype") = py::none(), py::arg("copy") = py::none(),
            "A read-only ndarray of the exact dtype over the host data (NumPy 2 semantics).")
        .def("numpy", &numpy_view, py::arg("writable") = false,
             "An ndarray of the exact dtype over the host data; writable=True marks the host "
             "copy dirty (the caller may write).");
}

}  // namespace hb
