// py_dlpack_exchange.h: DLPack 1.3's C exchange API, both sides (py_dlpack_exchange.cpp): our
// table on the Buffer type, and a producer's, for its imports, borrows and descriptions.
#pragma once

#include <optional>

#include "python/py_buffer.h"
#include "python/py_glue.h"

namespace hb {

struct ArgumentType;      // py_argument_types.h
struct BorrowedArgument;  // interop/aot_borrow.h

/// DLPack 1.3's C exchange API: our table on the Buffer type.
void bind_dlpack_exchange(BufferClass &cls);
/// A producer's exchange API, when its type has one: the fast import; nothing when it has none
/// or when the producer's __dlpack__ must answer (a tensor that requires grad). A PyTorch tensor
/// whose memory does not hold its values (a lazy negation or conjugate) is imported as a tensor of
/// its values, one copy; with copy=False, or `for_writing`, it raises BufferError instead.
std::optional<Buffer> exchange_import(py::handle obj, int copy, bool for_writing);
/// A CPU tensor of a producer whose exchange API describes its objects without handing over
/// ownership (dltensor_from_py_object_no_sync), wrapped while `obj` is held: a pipeline call's
/// argument, for that call alone. Nothing when the API or the tensor cannot.
std::optional<Buffer> exchange_borrow(py::handle obj, const char *entry);
/// The same tensor described into `out` for one call of a host pipeline (no Buffer: see
/// aot_borrow.h); false, with nothing described, where it cannot be (exchange_borrow()'s cases,
/// packed values, a dtype or layout a description cannot say): the general way takes it. A
/// malformed description is refused as check_import() refuses it, naming `entry`.
bool exchange_describe(py::handle obj, const ArgumentType &type, const char *entry, BorrowedArgument &out);

}  // namespace hb
