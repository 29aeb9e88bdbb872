// py_aot.h: halide_buffer.aot's Pipeline type (py_aot.cpp).
#pragma once

#include "python/py_glue.h"

namespace hb {

void bind_aot(py::module_ &m);

}  // namespace hb
