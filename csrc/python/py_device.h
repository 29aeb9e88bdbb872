// py_device.h: the Device Python types and the OpenCL entry points (py_device.cpp).
#pragma once

#include "python/py_glue.h"

namespace hb {

void bind_device(py::module_ &m);

}  // namespace hb
