// py_from_host.cpp: Buffer.from_host(): wrap or copy host memory exported by someone else.
//
// Order of attempts: our own Buffer (a view of it), an ndarray (any dtype, ml_dtypes included:
// NumPy cannot export those through the buffer protocol), the buffer protocol, __array__; for a
// copy, last, whatever numpy.asarray() reads (lists, nested sequences, numbers).
#include "python/py_from_host.h"

#include <string>
#include <vector>

#include "core/errors.h"
#include "python/py_buffer.h"
#include "python/py_dtype.h"
#include "python/py_glue.h"
#include "python/py_kept.h"

namespace hb {
namespace {

constexpr const char *kEntry = "Buffer.from_host";

/// A buffer-protocol export we hold: released once, when the last storage over it dies. The
/// reference it holds is the view's `obj`.
struct HeldExport final : Kept {
    HeldExport() : Kept(py::object()) {}
    ~HeldExport() override { PyBuffer_Release(&view); }  // nothing when the export failed (obj NULL)
    int traverse(visitproc visit, void *arg) const override {
        Py_VISIT(view.obj);
        return 0;
    }
    py::handle origin() const override { return view.obj; }
    Py_buffer view{};
};

/// Someone else's host memory as its exporter describes it (byte strides, any values).
struct Exported {
    uint8_t *data;
    Axes shape, strides;
    const DType *dtype;
    std::shared_ptr<void> owner;  ///< releases the export
    bool readonly;
};

/// A view of the exported memory, or (copy=True) an owned copy: the copy accepts any strides,
/// so it is also the fix for strides a view cannot describe.
Buffer adopt(Exported e, bool copy, bool external_writes) {
    if (copy) return Buffer::copy_of(kEntry, e.data, e.shape, e.strides, *e.dtype);
    return Buffer::wrap(kEntry, e.data, std::move(e.shape), std::move(e.strides), *e.dtype, std::move(e.owner), e.readonly,
                        external_writes);
}

Exported from_ndarray(py::array a) {
    py::dtype descr = a.dtype();  // read from the array object, as the shape and strides are
    if (big_endian(descr.ptr()))
        throw ValueError(std::string(kEntry) + "(): the array is big-endian; convert it with "
                         "a.astype(a.dtype.newbyteorder('='))");
    return Exported{static_cast<uint8_t *>(const_cast<void *>(a.data())),
                    Axes(a.shape(), a.shape() + a.ndim()),
                    Axes(a.strides(), a.strides() + a.ndim()),
                    &to_dtype(descr, kEntry), keep_object(a), !a.writeable()};
}

Exported from_buffer_protocol(py::handle obj) {
    auto held = std::make_unique<HeldExport>();
    Py_buffer *view = &held->view;
    if (PyObject_GetBuffer(obj.ptr(), view, PyBUF_RECORDS_RO) != 0) {
        view->obj = nullptr;  // nothing to release
        throw py::error_already_set();
    }
    // From here the view is released exactly once: by the storage, or right here on failure.
    std::shared_ptr<void> owner = keep(std::move(held));
    if (view->suboffsets)
        throw BufferError(std::string(kEntry) + "(): indirect (PIL-style) buffers are not "
                          "supported; convert with numpy.array(obj) first");
    const DType *dtype = dtype_by_format(view->format, size_t(view->itemsize));
    if (!dtype)
        throw TypeError(std::string(kEntry) + "(): buffer format '" +
                        (view->format ? view->format : "B") + "' with itemsize " +
                        std::to_string(view->itemsize) + " is not supported; supported dtypes: " +
                        dtype_names());
    // The exporter's own description, checked before it is read: at most kMaxDims axes, and a
    // shape for more than one (a 1-d buffer may leave it to len).
    if (view->ndim < 0 || view->ndim > kMaxDims || (view->ndim > 1 && !view->shape))
        throw BufferError(std::string(kEntry) + "(): " + Py_TYPE(obj.ptr())->tp_name + "'s buffer has ndim " +
                          std::to_string(view->ndim) + (view->ndim > 1 ? " and no shape" : "") +
                          "; the exporter is broken (0 to " + std::to_string(kMaxDims) +
                          " axes, each with an extent)");
    Axes shape, strides;
    if (view->ndim == 1 && !view->shape) {
        shape = {int64_t(view->len / view->itemsize)};
    } else {
        shape = Axes(view->shape, view->shape + view->ndim);
    }
    if (view->strides) strides = Axes(view->strides, view->strides + view->ndim);
    else strides = c_strides(shape, int(view->itemsize));  // no strides: C-contiguous
    return Exported{static_cast<uint8_t *>(view->buf), std::move(shape), std::move(strides), dtype,
                    std::move(owner), view->readonly != 0};
}

}  // namespace

HeldBytes hold_bytes(py::handle obj, bool writable) {
    auto held = std::make_unique<HeldExport>();
    Py_buffer *view = &held->view;
    bool got = false;
    if (writable) {
        got = PyObject_GetBuffer(obj.ptr(), view, PyBUF_SIMPLE | PyBUF_WRITABLE) == 0;
        if (!got) {
            PyErr_Clear();  // read-only memory: the caller copies
            view->obj = nullptr;
        }
    }
    if (!got && PyObject_GetBuffer(obj.ptr(), view, PyBUF_SIMPLE) != 0) {
        view->obj = nullptr;  // nothing to release
        throw py::error_already_set();
    }
    auto *data = static_cast<uint8_t *>(view->buf);
    size_t len = size_t(view->len);
    bool readonly = view->readonly != 0;
    return HeldBytes{data, len, readonly, keep(std::move(held))};
}

namespace {

/// obj.__array__() under NumPy 2's rules: with copy=False the producer must share its memory
/// or refuse. Producers that predate the copy keyword (PyTorch's, for one) are asked without
/// it, and what they return is wrapped as it is.
py::array array_of(py::handle obj, bool copy) {
    py::object method = obj.attr("__array__");
    py::object a;
    if (copy) {
        a = method();
    } else {
        try {
            a = method(py::arg("copy") = false);
        } catch (py::error_already_set &e) {
            if (!e.matches(PyExc_TypeError)) throw;
            a = method();
        }
    }
    if (!py::isinstance<py::array>(a))
        throw TypeError(std::string(kEntry) + "(): " + Py_TYPE(obj.ptr())->tp_name +
                        ".__array__() returned " + Py_TYPE(a.ptr())->tp_name +
                        ", not an ndarray; pass numpy.asarray(obj) instead");
    return py::reinterpret_borrow<py::array>(a);
}

/// Values with no memory of their own (a list, nested sequences, a Python number), as NumPy
/// reads them: numpy.asarray(obj) decides the dtype (int64 for ints, float64 for floats).
py::array values_of(py::handle obj) {
    py::object a;
    try {
        a = py::module_::import("numpy").attr("asarray")(obj);
    } catch (py::error_already_set &e) {
        if (!e.matches(PyExc_ValueError) && !e.matches(PyExc_OverflowError)) throw;
        std::string why = py::str(e.value()).cast<std::string>();
        if (!why.empty() && why.back() == '.') why.pop_back();
        throw ValueError(std::string(kEntry) + "(): numpy.asarray() cannot read the " + Py_TYPE(obj.ptr())->tp_name +
                         " (" + why + "); pass numbers in nested sequences of equal lengths");
    }
    char kind = a.attr("dtype").attr("kind").cast<std::string>()[0];
    if (kind == 'O' || kind == 'U' || kind == 'S' || kind == 'V')
        throw TypeError(std::string(kEntry) + "(): numpy.asarray() reads " + Py_TYPE(obj.ptr())->tp_name +
                        " as dtype " + py::str(a.attr("dtype")).cast<std::string>() +
                        ", which no buffer holds; pass numbers (nested sequences of equal lengths), "
                        "or numpy.asarray(obj, dtype=...) for a dtype of the table");
    return py::reinterpret_borrow<py::array>(a);
}

}  // namespace

Buffer buffer_from_host(py::handle obj, bool copy, bool external_writes) {
    if (is_buffer(obj)) {
        Buffer &src = buffer_of(obj.ptr());
        if (!copy) return src.view();
        return unlocked_if_may_copy(src, [&] { return src.current_host_copy(kEntry); });
    }
    if (py::isinstance<py::array>(obj))
        return adopt(from_ndarray(py::reinterpret_borrow<py::array>(obj)), copy, external_writes);
    if (PyObject_CheckBuffer(obj.ptr())) {
        // Like NumPy: an exporter that cannot describe its dtype (JAX's bfloat16) may still
        // offer __array__.
        try {
            return adopt(from_buffer_protocol(obj), copy, external_writes);
        } catch (py::error_already_set &e) {
            if (!e.matches(PyExc_BufferError) || !py::hasattr(obj, "__array__")) throw;
        }
    }
    if (py::hasattr(obj, "__array__"))
        return adopt(from_ndarray(array_of(obj, copy)), copy, external_writes);
    if (copy) return adopt(from_ndarray(values_of(obj)), true, external_writes);
    throw TypeError(std::string(kEntry) + "(): " + Py_TYPE(obj.ptr())->tp_name +
                    " holds no memory to wrap (it exports neither the buffer protocol nor "
                    "__array__); pass copy=True to copy its values into a new buffer");
}

}  // namespace hb
