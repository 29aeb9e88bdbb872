// py_cuda.h: the CUDA side of the module (py_cuda.cpp).
#pragma once

#include "python/py_buffer.h"
#include "python/py_glue.h"

namespace hb {

/// halide_buffer.CudaDevice, the CUDA entry points, Buffer.__cuda_array_interface__.
void bind_cuda(py::module_ &m, BufferClass &cls);

}  // namespace hb
