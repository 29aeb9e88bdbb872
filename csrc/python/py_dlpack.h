// py_dlpack.h: the DLPack protocol in Python (py_dlpack.cpp): its entry points, copy= as they
// take it, what keeps an imported tensor alive, and a Buffer over any producer's tensor.
#pragma once

#include <memory>

#include "abi/dlpack_abi.h"
#include "python/py_buffer.h"
#include "python/py_glue.h"

namespace hb {

void bind_dlpack(BufferClass &cls, py::module_ &m);
/// copy= of the DLPack entry points: -1 (None), 0 (False) or 1 (True); TypeError otherwise.
int tri_state(py::handle value, const char *entry);
/// What keeps an imported tensor alive (exactly one of `versioned`, `legacy`): runs its deleter
/// once, with the GIL, when the last buffer over it dies.
std::shared_ptr<void> import_owner(DLManagedTensorVersioned *versioned, DLManagedTensor *legacy,
                                   py::object producer);
/// A Buffer over a DLPack producer's tensor (not a Buffer, not a raw capsule): its C exchange
/// API where its type has one, else __dlpack__; `copy` as tri_state() gives it. `for_writing`:
/// memory a pipeline will write, refused when the producer cannot say it is writable (a legacy
/// capsule carries no read-only flag) or when it does not hold the tensor's values (a lazy view,
/// see exchange_import()).
Buffer buffer_from_dlpack(py::handle obj, int copy, bool for_writing);

}  // namespace hb
