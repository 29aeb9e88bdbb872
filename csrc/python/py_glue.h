// py_glue.h: what every binding file shares and no one binding file defines: pybind11 and its
// namespace alias, Buffer's own caster declared (py_buffer.h defines it), residency operations
// run without the GIL where they may copy, tuples of ints, optional attributes, the parts of a
// pybind11 instance. What a py_X.cpp defines for the others, its py_X.h declares.
#pragma once

#include <utility>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "storage/buffer.h"

namespace hb {
namespace py = pybind11;

/// A tuple of Python ints: a shape, strides, mins (an Axes or a std::vector).
template <typename Values>
py::tuple to_tuple(const Values &v) {
    py::tuple t(v.size());
    for (size_t i = 0; i < v.size(); ++i) t[i] = py::int_(v[i]);
    return t;
}

/// obj.<name>, or a null object when it has none (no AttributeError made: a miss costs a lookup
/// alone); any other exception the lookup raises is passed on.
inline py::object optional_attr(py::handle obj, PyObject *name) {
    PyObject *value = nullptr;
#if PY_VERSION_HEX >= 0x030D0000
    int found = PyObject_GetOptionalAttr(obj.ptr(), name, &value);
#else
    int found = _PyObject_LookupAttr(obj.ptr(), name, &value);
#endif
    if (found < 0) throw py::error_already_set();
    return py::reinterpret_steal<py::object>(value);
}

/// The C++ object and holder inside `self`, an instance of a py::class_ type with one C++ type
/// (pybind11's value_and_holder: value_ptr<T>(), holder_constructed(), holder<H>()).
///
/// The one place that names pybind11's private py::detail::instance. It is needed where a raw
/// PyObject * whose type is already known reaches our own code: the slots we install
/// (Pipeline's vectorcall, tp_traverse, the buffer protocol), own_buffer() and buffer_of(). pybind11's public way, py::cast, would
/// look the type up and check it again on every call, and a tp_traverse only reads pointers.
/// It assumes the instance layout and get_value_and_holder() of pybind11 2.12 (pyproject's
/// lower bound) through 3.1 (what it is built and tested with).
inline py::detail::value_and_holder instance_parts(PyObject *self) {
    return reinterpret_cast<py::detail::instance *>(self)->get_value_and_holder();
}

}  // namespace hb

namespace pybind11::detail {
/// Buffer's own caster (py_buffer.h defines it), declared in every binding file: one that casts a
/// Buffer without including py_buffer.h fails to compile ("incomplete type") instead of quietly
/// using pybind11's generic caster, which would give one program two casters for one type.
template <>
class type_caster<hb::Buffer>;
}  // namespace pybind11::detail
