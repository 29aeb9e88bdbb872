// dtype.h: THE dtype table. Every fact about an element type lives in one row of it; every
// other file looks types up here instead of switching on them.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "abi/dlpack_abi.h"
#include "abi/halide_abi.h"

namespace hb {

/// Where the NumPy dtype of a row comes from.
enum class NumpySource : uint8_t {
    numpy,      ///< numpy.dtype(name)
    ml_dtypes,  ///< numpy.dtype(getattr(ml_dtypes, name)); never looked up by .char or .num
};

/// One element type and how every protocol spells it.
struct DType {
    const char *name;        ///< canonical name, equal to numpy.dtype(...).name
    int itemsize;            ///< bytes per element in memory
    halide_type_t halide;    ///< Halide type; bits == 0 when Halide has no type of this size
    DLDataType dlpack;       ///< DLPack type
    bool dlpack_padded;      ///< sub-byte type stored one per byte (DLPack's padded flag)
    const char *format;      ///< PEP 3118 format, or nullptr when the buffer protocol has none
    NumpySource source;      ///< where the NumPy dtype comes from
    const char *typestr;     ///< __cuda_array_interface__ typestr (the NumPy dtype's .str)

    bool has_halide_type() const { return halide.bits != 0; }
};

/// Every row, in a fixed order; index() of a row is its position here.
const DType *dtype_table();
size_t dtype_count();
inline size_t index_of(const DType &t) { return static_cast<size_t>(&t - dtype_table()); }

/// Lookups; each returns nullptr when no row matches.
const DType *dtype_by_name(std::string_view name);
const DType *dtype_by_format(const char *format, size_t itemsize);
/// The first row carrying a Halide type (uint8 before the float8 rows that borrow it), or nullptr.
const DType *dtype_by_halide(halide_type_t type);
/// The row of a DLPack element type (code and bits; lanes are the caller's business).
const DType *dtype_by_dlpack(uint8_t code, uint8_t bits);

/// The unsigned integer row of the same itemsize (raw bit access), or nullptr.
const DType *dtype_bits_of(const DType &t);

/// "bool, int8, ..." for error messages.
std::string dtype_names();

}  // namespace hb
