// errors.h: the exception kinds of the C++ core. The bindings map each to the Python
// exception of the same name; messages read "<entry point>(): <what is wrong>; <what to do>".
#pragma once

#include <stdexcept>
#include <string>

namespace hb {

struct ValueError : std::runtime_error { using std::runtime_error::runtime_error; };
struct TypeError : std::runtime_error { using std::runtime_error::runtime_error; };
struct IndexError : std::runtime_error { using std::runtime_error::runtime_error; };
/// A protocol cannot be satisfied (Python's BufferError).
struct BufferError : std::runtime_error { using std::runtime_error::runtime_error; };
/// A write refused because the memory is read-only (Python's halide_buffer.ReadOnlyError: a
/// BufferError, and a ValueError as NumPy raises for a write into a read-only array).
struct ReadOnlyError : BufferError { using BufferError::BufferError; };
/// The system refused host memory (Python's MemoryError): the message says how much, for what.
struct MemoryError : std::runtime_error { using std::runtime_error::runtime_error; };

/// A device driver refused (Python's halide_buffer.DeviceError): carries the driver's code
/// and its name, e.g. -4 and "CL_MEM_OBJECT_ALLOCATION_FAILURE".
struct DeviceError : std::runtime_error {
    DeviceError(const std::string &message, int code, std::string name)
        : std::runtime_error(message), code(code), name(std::move(name)) {}
    int code;
    std::string name;
};

/// A Halide pipeline's runtime failed (Python's halide_buffer.PipelineError): Halide's error
/// code (halide_error_code_t, e.g. -3 for a bad type) and its message.
struct PipelineError : std::runtime_error {
    PipelineError(const std::string &message, int code) : std::runtime_error(message), code(code) {}
    int code;
};

}  // namespace hb
