// py_buffer_protocol.h: the buffer protocol (PEP 3118) export of a Buffer (py_buffer_protocol.cpp).
#pragma once

#include "python/py_glue.h"

namespace hb {

/// Replaces pybind11's buffer slots of `type` with ours.
void install_buffer_protocol(py::handle type);

}  // namespace hb
