// py_processes.h: buffers across process boundaries: pickling, copies, shared memory
// (py_processes.cpp).
#pragma once

#include "python/py_buffer.h"
#include "python/py_glue.h"

namespace hb {

void bind_processes(BufferClass &cls, py::module_ &m);

}  // namespace hb
