// py_embedder.h: the binding as the core's embedder (py_embedder.cpp).
#pragma once

#include "python/py_glue.h"

namespace hb {

/// Installs the binding as the core's embedder (device/embedder.h), and its tests' hook.
void bind_embedder(py::module_ &m);

}  // namespace hb
