// dtype.cpp: the rows of the dtype table and the lookups over them.
#include "core/dtype.h"

#include <cstring>
#include <unordered_map>

namespace hb {
namespace {

constexpr halide_type_t H(halide_type_code_t code, int bits) {
    return {static_cast<uint8_t>(code), static_cast<uint8_t>(bits), 1};
}
constexpr halide_type_t NO_HALIDE{0, 0, 0};
constexpr DLDataType D(DLDataTypeCode code, int bits) {
    return {static_cast<uint8_t>(code), static_cast<uint8_t>(bits), 1};
}
constexpr NumpySource NP = NumpySource::numpy;
constexpr NumpySource ML = NumpySource::ml_dtypes;
// NumPy's own int64/uint64 arrays export the format of C's `long` where it is 64 bits wide
// (LP64): 'q'/'Q' (long long) would make NumPy choose numpy.longlong/ulonglong, a dtype equal
// to int64/uint64 but of another type, which torch.from_numpy and others refuse.
constexpr const char *I64 = sizeof(long) == 8 ? "l" : "q";
constexpr const char *U64 = sizeof(long) == 8 ? "L" : "Q";
constexpr halide_type_code_t I = halide_type_int, U = halide_type_uint, F = halide_type_float,
                             BF = halide_type_bfloat;

// Halide has no float8/6/4, no 4/2-bit storage and no complex: those rows carry the unsigned
// integer of the same width, so bit-level pipelines still accept them. complex128 has none.
// ml_dtypes stores int4/int2 in the low bits of a byte without sign extension, so they too
// carry uint8 rather than int8.
constexpr DType kTable[] = {
    // name                 size  Halide       DLPack                         pad    PEP3118 src  typestr
    {"bool",                   1, H(U, 1),     D(kDLBool, 8),                 false, "?",  NP, "|b1"},
    {"int8",                   1, H(I, 8),     D(kDLInt, 8),                  false, "b",  NP, "|i1"},
    {"int16",                  2, H(I, 16),    D(kDLInt, 16),                 false, "h",  NP, "<i2"},
    {"int32",                  4, H(I, 32),    D(kDLInt, 32),                 false, "i",  NP, "<i4"},
    {"int64",                  8, H(I, 64),    D(kDLInt, 64),                 false, I64,  NP, "<i8"},
    {"uint8",                  1, H(U, 8),     D(kDLUInt, 8),                 false, "B",  NP, "|u1"},
    {"uint16",                 2, H(U, 16),    D(kDLUInt, 16),                false, "H",  NP, "<u2"},
    {"uint32",                 4, H(U, 32),    D(kDLUInt, 32),                false, "I",  NP, "<u4"},
    {"uint64",                 8, H(U, 64),    D(kDLUInt, 64),                false, U64,  NP, "<u8"},
    {"float16",                2, H(F, 16),    D(kDLFloat, 16),               false, "e",  NP, "<f2"},
    {"float32",                4, H(F, 32),    D(kDLFloat, 32),               false, "f",  NP, "<f4"},
    {"float64",                8, H(F, 64),    D(kDLFloat, 64),               false, "d",  NP, "<f8"},
    {"complex64",              8, H(U, 64),    D(kDLComplex, 64),             false, "Zf", NP, "<c8"},
    {"complex128",            16, NO_HALIDE,   D(kDLComplex, 128),            false, "Zd", NP, "<c16"},
    {"bfloat16",               2, H(BF, 16),   D(kDLBfloat, 16),              false, nullptr, ML, "<V2"},
    {"float8_e3m4",            1, H(U, 8),     D(kDLFloat8_e3m4, 8),          false, nullptr, ML, "<V1"},
    {"float8_e4m3",            1, H(U, 8),     D(kDLFloat8_e4m3, 8),          false, nullptr, ML, "<V1"},
    {"float8_e4m3b11fnuz",     1, H(U, 8),     D(kDLFloat8_e4m3b11fnuz, 8),   false, nullptr, ML, "<V1"},
    {"float8_e4m3fn",          1, H(U, 8),     D(kDLFloat8_e4m3fn, 8),        false, nullptr, ML, "<V1"},
    {"float8_e4m3fnuz",        1, H(U, 8),     D(kDLFloat8_e4m3fnuz, 8),      false, nullptr, ML, "<V1"},
    {"float8_e5m2",            1, H(U, 8),     D(kDLFloat8_e5m2, 8),          false, nullptr, ML, "<f1"},
    {"float8_e5m2fnuz",        1, H(U, 8),     D(kDLFloat8_e5m2fnuz, 8),      false, nullptr, ML, "<V1"},
    {"float8_e8m0fnu",         1, H(U, 8),     D(kDLFloat8_e8m0fnu, 8),       false, nullptr, ML, "<V1"},
    {"float6_e2m3fn",          1, H(U, 8),     D(kDLFloat6_e2m3fn, 6),        true,  nullptr, ML, "<V1"},
    {"float6_e3m2fn",          1, H(U, 8),     D(kDLFloat6_e3m2fn, 6),        true,  nullptr, ML, "<V1"},
    {"float4_e2m1fn",          1, H(U, 8),     D(kDLFloat4_e2m1fn, 4),        true,  nullptr, ML, "<V1"},
    {"int4",                   1, H(U, 8),     D(kDLInt, 4),                  true,  nullptr, ML, "<V1"},
    {"uint4",                  1, H(U, 8),     D(kDLUInt, 4),                 true,  nullptr, ML, "<V1"},
    {"int2",                   1, H(U, 8),     D(kDLInt, 2),                  true,  nullptr, ML, "<V1"},
    {"uint2",                  1, H(U, 8),     D(kDLUInt, 2),                 true,  nullptr, ML, "<V1"},
};
constexpr size_t kCount = sizeof(kTable) / sizeof(kTable[0]);

}  // namespace

const DType *dtype_table() { return kTable; }
size_t dtype_count() { return kCount; }

const DType *dtype_by_name(std::string_view name) {
    // Hashed: a name is looked up on every Buffer(shape, "float32"). Built on first use, never
    // destroyed (it may be used while the process exits).
    static const auto *by_name = [] {
        auto *m = new std::unordered_map<std::string_view, const DType *>();
        for (const DType &t : kTable) m->emplace(t.name, &t);
        return m;
    }();
    auto found = by_name->find(name);
    return found == by_name->end() ? nullptr : found->second;
}

const DType *dtype_by_halide(halide_type_t type) {
    for (const DType &t : kTable) {  // table order: the plain integer before what borrows its type
        if (t.has_halide_type() && t.halide.code == type.code && t.halide.bits == type.bits &&
            t.halide.lanes == type.lanes)
            return &t;
    }
    return nullptr;
}

const DType *dtype_by_dlpack(uint8_t code, uint8_t bits) {
    for (const DType &t : kTable) {
        if (t.dlpack.code == code && t.dlpack.bits == bits) return &t;
    }
    return nullptr;
}

const DType *dtype_by_format(const char *format, size_t itemsize) {
    if (format == nullptr) return itemsize == 1 ? dtype_by_name("uint8") : nullptr;  // PEP 3118: no format means bytes
    // Byte order: native ('@'), standard ('='), little-endian ('<'); this library is
    // little-endian only, so big-endian data needs a conversion the caller must ask for.
    if (*format == '@' || *format == '=' || *format == '<') ++format;
    for (const DType &t : kTable) {
        if (t.format && std::strcmp(format, t.format) == 0 && size_t(t.itemsize) == itemsize)
            return &t;
    }
    // Aliases that name an integer by C type ('l', 'L', 'n', ...): the itemsize picks the row.
    if (format[0] != '\0' && format[1] == '\0') {
        uint8_t code;
        if (std::strchr("bhilqn", format[0])) code = kDLInt;
        else if (std::strchr("BHILQNc", format[0])) code = kDLUInt;
        else return nullptr;
        for (const DType &t : kTable) {
            if (t.format && t.dlpack.code == code && size_t(t.itemsize) == itemsize) return &t;
        }
    }
    return nullptr;
}

const DType *dtype_bits_of(const DType &t) {
    for (const DType &u : kTable) {
        if (u.dlpack.code == kDLUInt && !u.dlpack_padded && u.itemsize == t.itemsize) return &u;
    }
    return nullptr;
}

std::string dtype_names() {
    std::string out;
    for (const DType &t : kTable) {
        if (!out.empty()) out += ", ";
        out += t.name;
    }
    return out;
}

}  // namespace hb
