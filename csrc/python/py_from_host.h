// py_from_host.h: host memory exported by someone else, wrapped or copied (py_from_host.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "python/py_glue.h"
#include "storage/buffer.h"

namespace hb {

/// Buffer.from_host(): wrap (or copy) anything with the buffer protocol or an ndarray.
Buffer buffer_from_host(py::handle obj, bool copy, bool external_writes);
/// The bytes of a buffer-protocol object as one run (PyBUF_SIMPLE), writable when asked and the
/// exporter allows it, held until `owner` is released.
struct HeldBytes {
    uint8_t *data;
    size_t len;
    bool readonly;
    std::shared_ptr<void> owner;
};
HeldBytes hold_bytes(py::handle obj, bool writable);

}  // namespace hb
