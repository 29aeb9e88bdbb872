// py_arguments.h: every object a user brings to a pipeline as a buffer argument, and where its
// memory is (py_arguments.cpp).
#pragma once

#include <cstdint>
#include <string>

#include "python/py_glue.h"
#include "storage/buffer.h"

namespace hb {

struct BorrowedArgument;  // interop/aot_borrow.h

/// A pipeline's name and an argument's, for messages ("<pipeline>(): argument '<name>'"),
/// built into text only when a message needs it.
struct ArgumentName {
    const char *pipeline;
    const char *argument;
    std::string text() const;
};
/// Where the memory of the object an argument came from is, which is where a call leaves an
/// output it wrote (bring_home()).
enum class Home : uint8_t {
    own_rule,  ///< a Buffer, an hl.Buffer, a typed capsule: their own residency state says
    host,      ///< host memory (an ndarray, a CPU tensor, the buffer protocol)
    device,    ///< device memory (a CUDA tensor, __cuda_array_interface__, a pyopencl array)
};
/// A Buffer over an object that is not a Buffer, and its home.
struct Argument {
    Buffer buffer;
    Home home;
};
/// Any object a user brings as a buffer argument (not a Buffer: the caller takes those as they
/// are), wrapped without a copy (but a PyTorch tensor whose memory does not hold its values, a
/// lazy negation or conjugate: an input is read through one copy of its values, an output is
/// refused); TypeError naming the argument for an object no attempt takes.
/// `input`: the pipeline reads it (else writes it: read-only memory is refused). `borrow`: the
/// Buffer lives no longer than the caller holds `obj` (a call's argument): a CPU tensor is then
/// described by its producer's exchange API without a managed tensor (exchange_borrow()).
Argument adopt_argument(py::handle obj, const ArgumentName &name, bool input, bool borrow);
/// `obj` described into `out` for one call of a host pipeline, with no Buffer (aot_borrow.h): an
/// ndarray, or a CPU tensor of a producer whose exchange API describes it (PyTorch); false, with
/// nothing described, for anything else and wherever a description would not do (a byte order,
/// a dtype or a layout it cannot say, a read-only output, a tensor that requires grad or is a
/// lazy view): adopt_argument() then takes it, and refuses what it must, with its messages (a
/// malformed producer's description is refused here, as there, naming the pipeline).
bool borrow_argument(py::handle obj, const ArgumentName &name, bool input, BorrowedArgument &out);
/// ReadOnlyError naming the output when `b`'s memory is read-only: refused before anything of
/// the call moves.
void refuse_read_only_output(const Buffer &b, const ArgumentName &name);
/// The data of `b`, written by a pipeline, made current in its home: one counted copy when it is
/// elsewhere, nothing for Home::own_rule.
void bring_home(Buffer &b, Home home);
/// _argument(), for the package's Python callers (hb.dask).
void bind_arguments(py::module_ &m);

}  // namespace hb
