// py_module.h: what py_module.cpp (the module halide_buffer._core) gives the other binding files:
// C++ exceptions of the core turned into Python ones, for the C callers of our code.
#pragma once

#include <exception>

#include "python/py_glue.h"

namespace hb {

/// Sets the Python exception for a C++ exception of the core; false if it is not one of ours.
bool set_python_error(std::exception_ptr error);

/// Runs `f` (returning 0 or -1) for a C caller (a type slot, a DLPack table): a C++ exception
/// becomes the Python exception it maps to, and -1.
template <typename F>
int c_call(F &&f) noexcept {
    try {
        return f();
    } catch (py::error_already_set &e) {
        e.restore();
    } catch (const py::builtin_exception &e) {
        e.set_error();  // pybind11's own (a failed cast): the Python exception it stands for
    } catch (...) {
        if (!set_python_error(std::current_exception()))
            PyErr_SetString(PyExc_RuntimeError, "halide_buffer: unexpected internal error");
    }
    return -1;
}

}  // namespace hb
