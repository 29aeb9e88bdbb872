// py_buffer.h: the Buffer Python type as the other binding files use it (py_buffer.cpp): how an
// object holds its Buffer, the Buffer of an object, a new object for a Buffer (and the caster
// that makes every returned Buffer one), and the checks of Python values its entry points share.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "python/py_glue.h"
#include "storage/buffer.h"

namespace hb {

/// How a Python Buffer object holds its Buffer: inside the object itself, after pybind11's
/// instance (the type's basic size makes room for it), so a buffer or view is one Python object
/// and no heap block of its own. The holder only ends the Buffer's life (its destructor, in
/// place): the memory is the object's, freed with it.
struct DestroyInPlace {
    void operator()(Buffer *b) const { b->~Buffer(); }
};
using BufferHolder = std::unique_ptr<Buffer, DestroyInPlace>;
using BufferClass = py::class_<Buffer, BufferHolder>;
void bind_buffer(py::module_ &m);
/// An array of values (an ndarray, a tensor, anything exporting memory), as opposed to a plain
/// integer or sequence: what a newcomer passes where a shape, an index or a handle goes.
bool is_array(py::handle obj);
/// True when `obj` is an integer: it has __index__ and, for an array, __index__ takes it (NumPy
/// and PyTorch give their arrays __index__, which refuses all but a single integer). Another
/// object's __index__ is its own: what it raises is passed on where it is called.
bool is_integer(py::handle obj);
/// A Python integer (anything with __index__) as int64_t / uint64_t; false when it does not
/// fit (for uint64_t: also when negative). What __index__ raises is passed on.
bool as_int64(py::handle n, int64_t &out);
bool as_uint64(py::handle n, uint64_t &out);
/// The name of obj's type, for messages ("numpy.ndarray").
std::string type_name(py::handle obj);
/// Whether `obj` is a halide_buffer.Buffer (or a subclass), without pybind11's type lookup.
bool is_buffer(py::handle obj);
/// The core Buffer inside a Python Buffer object (no type check: callers know the type).
Buffer &buffer_of(PyObject *self);
/// The Buffer of a Buffer slot's or method's own `self`, whose type CPython checked already (a
/// slot of the type, a method descriptor): read without a second check; buffer_of() for a
/// Buffer never initialised, which raises its error.
inline Buffer &own_buffer(PyObject *self) {
    Buffer *b = instance_parts(self).value_ptr<Buffer>();
    return b ? *b : buffer_of(self);
}
/// The Buffer whose _get_halide_buffer_t_capsule() made `capsule` (one of that name), or null
/// for a capsule someone else made.
Buffer *buffer_in_typed_capsule(PyObject *capsule);
/// A new Python Buffer object holding `b`: what every Buffer a binding returns becomes (see the
/// type_caster below).
PyObject *new_buffer_object(Buffer &&b);

}  // namespace hb

namespace pybind11::detail {
/// A Buffer returned by a binding (every view, from_host(), from_halide(), ...) is a new object
/// by construction: it goes straight into a new instance (hb::new_buffer_object()), where
/// pybind11's generic cast would first search its registry for a live instance at the
/// temporary's address and then move it through a type-erased constructor. Declared in
/// py_glue.h, so that no binding file casts a Buffer without this definition.
template <>
class type_caster<hb::Buffer> : public type_caster_base<hb::Buffer> {
public:
    using type_caster_base<hb::Buffer>::cast;
    static handle cast(hb::Buffer &&src, return_value_policy, handle) {
        return hb::new_buffer_object(std::move(src));
    }
};
}  // namespace pybind11::detail
