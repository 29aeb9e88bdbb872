// py_residency.h: the residency methods of Buffer, the device argument of the entry points, and
// the process-wide transfer counts (py_residency.cpp).
#pragma once

#include "python/py_buffer.h"
#include "python/py_glue.h"
#include "storage/storage.h"

namespace hb {

void bind_residency(BufferClass &cls);
/// The device a call names: a Device (required), or None: where the buffer is, else the default.
DeviceChoice device_arg(py::handle device, const char *entry);
/// halide_buffer.transfers(): the process-wide counts.
void bind_transfer_totals(py::module_ &m);

}  // namespace hb
