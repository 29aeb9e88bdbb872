// dlpack_abi.h: our declarations of the DLPack 1.x C ABI (the parts the dtype table needs).
//
// Values are DLPack's, so tensors described with them are understood by every producer and
// consumer. The exchange structs (DLTensor, DLManagedTensorVersioned) join this file with the
// DLPack protocol implementation.
#pragma once

#include <cstdint>

extern "C" {

/// Element kinds. Codes 7-17 arrived in DLPack 1.1; a tensor that uses them is labelled 1.1.
enum DLDataTypeCode : uint8_t {
    kDLInt = 0,                 ///< signed integer; int4 is {0, 4, 1}
    kDLUInt = 1,                ///< unsigned integer
    kDLFloat = 2,               ///< IEEE float
    kDLOpaqueHandle = 3,        ///< pointer
    kDLBfloat = 4,              ///< bfloat16 is {4, 16, 1}
    kDLComplex = 5,             ///< complex64 is {5, 64, 1}: bits count both parts
    kDLBool = 6,                ///< bool is {6, 8, 1}: one byte per element
    kDLFloat8_e3m4 = 7,
    kDLFloat8_e4m3 = 8,
    kDLFloat8_e4m3b11fnuz = 9,
    kDLFloat8_e4m3fn = 10,
    kDLFloat8_e4m3fnuz = 11,
    kDLFloat8_e5m2 = 12,
    kDLFloat8_e5m2fnuz = 13,
    kDLFloat8_e8m0fnu = 14,
    kDLFloat6_e2m3fn = 15,      ///< {15, 6, 1}; stored one per byte with the padded flag
    kDLFloat6_e3m2fn = 16,
    kDLFloat4_e2m1fn = 17,      ///< {17, 4, 1}; PyTorch packs two per byte as {17, 4, 2}
};

/// One element's type, as DLPack describes it.
struct DLDataType {
    uint8_t code;    ///< a DLDataTypeCode
    uint8_t bits;    ///< bits per lane
    uint16_t lanes;  ///< 1 for scalars
};

/// DLManagedTensorVersioned::flags bits.
constexpr uint64_t DLPACK_FLAG_BITMASK_READ_ONLY = 1ull << 0;
constexpr uint64_t DLPACK_FLAG_BITMASK_IS_COPIED = 1ull << 1;
/// Sub-byte elements (bits < 8) each occupy one whole byte.
constexpr uint64_t DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED = 1ull << 2;

}  // extern "C"
