// py_buffer_data.h: Buffer's data operations (py_buffer_data.cpp).
#pragma once

#include "python/py_buffer.h"
#include "python/py_glue.h"

namespace hb {

void bind_buffer_data(BufferClass &cls);

}  // namespace hb
