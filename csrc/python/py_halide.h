// py_halide.h: the bridge to the halide package (py_halide.cpp).
#pragma once

#include "python/py_glue.h"
#include "storage/buffer.h"

namespace hb {

/// Buffer.from_halide(), Buffer.to_halide(), _opencl_load_library(): the bridge to the halide package.
void bind_halide(py::module_ &m);
/// True for a halide.Buffer (false, at no cost, while the halide package was never imported).
bool is_halide_buffer(py::handle obj);
/// True for halide.Buffer and its subclasses (false while the halide package was never imported:
/// none of its objects exists then).
bool is_halide_buffer_type(PyTypeObject *type);
/// Buffer.from_halide(): a Buffer sharing one residency state with the halide.Buffer `obj`.
Buffer buffer_from_halide(py::handle obj);

}  // namespace hb
