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

}  // namespace hb
