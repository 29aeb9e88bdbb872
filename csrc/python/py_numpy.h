// py_numpy.h: NumPy views of a Buffer with the exact dtype (py_numpy.cpp).
#pragma once

#include "python/py_buffer.h"
#include "python/py_glue.h"

namespace hb {

/// An ndarray of the exact dtype over the buffer's host memory, kept alive by `self`.
py::array ndarray_view(py::handle self, Buffer &b, bool writable);
void bind_numpy(BufferClass &cls);

}  // namespace hb
