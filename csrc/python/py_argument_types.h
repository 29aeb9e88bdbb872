// py_argument_types.h: what a Python type's objects offer a pipeline call, read from the type
// once and kept: which of the argument kinds (py_arguments.cpp's order) the type has an
// attribute for, its DLPack C exchange API, and how to ask one of its tensors whether it requires
// grad or is a lazy view. A call then asks an object nothing its type does not offer, and asks a
// tensor's bits through the type's own C getter or method, with no attribute lookup.
//
// The answer is the type's, as the data model looks special methods up: an attribute its class
// (or a base) defines. An object whose class offers none of them but has a __dict__ may carry one
// of its own (an instance's __cuda_array_interface__, as some producers give it): such objects are
// asked one by one, every call. A class changed after its first sight (an attribute set or deleted
// on it or on a base) is read again: its version tag, which CPython changes then, is part of the
// key.
#pragma once

#include <cstdint>

#include "abi/dlpack_abi.h"
#include "python/py_glue.h"

namespace hb {

/// The kinds of argument a call tries, in its order (py_arguments.cpp's head), after a Buffer
/// and an exact ndarray, which need no table.
enum ArgumentKind : uint8_t {
    kTypedCapsule,   ///< _get_halide_buffer_t_capsule()
    kHalideBuffer,   ///< halide.Buffer
    kPyOpenCLArray,  ///< pyopencl.array.Array
    kDLPack,         ///< __dlpack__
    kCudaInterface,  ///< __cuda_array_interface__
    kHostMemory,     ///< the buffer protocol, or __array__
    kArgumentKinds,
};

/// What a type's objects offer.
struct ArgumentType {
    uint32_t version = 0;  ///< the type's version tag when read (0: never matches)
    uint8_t offered = 0;   ///< a bit (1 << ArgumentKind) per kind the type has an attribute for
    bool ask_each = false; ///< offers none, and each object has a __dict__ of its own to ask
    /// The type's DLPack exchange API (1.x, with managed_tensor_from_py_object_no_sync), or null.
    const DLPackExchangeAPI *exchange = nullptr;
    /// The type's own requires_grad, is_neg and is_conj (PyTorch's), as its MRO holds them; null
    /// where it has none.
    py::object requires_grad, is_neg, is_conj;

    bool offers(ArgumentKind k) const { return offered & (1u << k); }
};

/// The entry of `type`, read on its first sight and again after it changed.
const ArgumentType &argument_type(PyTypeObject *type);

/// Whether `obj`'s attribute `attr` (the type's, as argument_type() found it; `name` for the
/// general way) is true: a C getter or a C method taking no argument is called directly, anything
/// else through Python (a property, a method of a Python subclass); a method is called. False
/// where the type has none, or where asking it fails (nothing to check: a producer's own error
/// then comes from its own way).
bool type_attribute_true(py::handle obj, const py::object &attr, PyObject *name, bool method);

}  // namespace hb
