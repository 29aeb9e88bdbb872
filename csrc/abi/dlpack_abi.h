// dlpack_abi.h: our declarations of the DLPack 1.x C ABI (dlpack.h, up to v1.3).
//
// Values and layouts are DLPack's, so tensors described with them are understood by every
// producer and consumer (their sizes checked by the static_asserts below and by a ctypes
// mirror in the tests).
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

/// The DLPack version a versioned tensor follows: consumers refuse a major they do not know;
/// minors add features compatibly (1.1: float8/6/4 codes and the padded flag; 1.2: strides
/// never NULL; 1.3: the C exchange API).
struct DLPackVersion {
    uint32_t major;
    uint32_t minor;
};
constexpr uint32_t kDLPackMajor = 1;
constexpr uint32_t kDLPackMinor = 3;  ///< the newest minor we implement

/// Where a tensor's data lives (DLDeviceType values; DLPack's enum is 32 bits wide).
enum DLDeviceType : int32_t {
    kDLCPU = 1,
    kDLCUDA = 2,
    kDLCUDAHost = 3,  ///< pinned host memory: readable from the host
    kDLOpenCL = 4,
    kDLVulkan = 7,
    kDLMetal = 8,
    kDLVPI = 9,
    kDLROCM = 10,
    kDLROCMHost = 11,  ///< pinned host memory: readable from the host
    kDLExtDev = 12,
    kDLCUDAManaged = 13,
    kDLOneAPI = 14,
    kDLWebGPU = 15,
    kDLHexagon = 16,
    kDLMAIA = 17,
    kDLTrn = 18,
};

struct DLDevice {
    DLDeviceType device_type;
    int32_t device_id;  ///< 0 on the CPU
};

/// A tensor's description, owning nothing.
struct DLTensor {
    void *data;            ///< start of the allocation (device pointer or cl_mem off the CPU)
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;        ///< ndim extents; may be NULL when ndim == 0
    int64_t *strides;      ///< ndim strides in elements; NULL meant C-contiguous before v1.2
    uint64_t byte_offset;  ///< from data to the first element
};

/// The unversioned (legacy) managed tensor, in capsules named "dltensor".
struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(DLManagedTensor *self);  ///< may be NULL: nothing to release
};

/// The versioned managed tensor, in capsules named "dltensor_versioned".
struct DLManagedTensorVersioned {
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(DLManagedTensorVersioned *self);  ///< may be NULL: nothing to release
    uint64_t flags;                                   ///< DLPACK_FLAG_BITMASK_*
    DLTensor dl_tensor;
};

// Capsule names: a consumer renames a capsule it took to the "used_" name, so the capsule's
// destructor calls the deleter only for a tensor nobody took.
constexpr const char *kDLTensorCapsule = "dltensor";
constexpr const char *kUsedDLTensorCapsule = "used_dltensor";
constexpr const char *kDLTensorVersionedCapsule = "dltensor_versioned";
constexpr const char *kUsedDLTensorVersionedCapsule = "used_dltensor_versioned";

// ---------------------------------------------------------------------------------------------
// The C exchange API (v1.3): a table of C functions on the type, as a capsule named
// "dlpack_exchange_api" in the type attribute __dlpack_c_exchange_api__. Every function returns
// 0, or -1 with a Python exception set; none throws.
// ---------------------------------------------------------------------------------------------

constexpr const char *kExchangeAPICapsule = "dlpack_exchange_api";

struct DLPackExchangeAPIHeader {
    DLPackVersion version;
    DLPackExchangeAPIHeader *prev_api;  ///< an older table, or NULL
};

struct DLPackExchangeAPI {
    DLPackExchangeAPIHeader header;
    /// A new managed tensor shaped like `prototype` (allocated by the producer).
    int (*managed_tensor_allocator)(DLTensor *prototype, DLManagedTensorVersioned **out, void *error_ctx,
                                    void (*set_error)(void *error_ctx, const char *kind, const char *message));
    /// An owning managed tensor of a Python object of the producer's type (no stream sync).
    int (*managed_tensor_from_py_object_no_sync)(void *py_object, DLManagedTensorVersioned **out);
    /// A Python object of the producer's type taking ownership of `tensor`.
    int (*managed_tensor_to_py_object_no_sync)(DLManagedTensorVersioned *tensor, void **out_py_object);
    /// A borrowed description of a Python object, valid until control returns (may be NULL).
    int (*dltensor_from_py_object_no_sync)(void *py_object, DLTensor *out);
    /// The producer's current stream for a device (NULL on the CPU).
    int (*current_work_stream)(DLDeviceType device_type, int32_t device_id, void **out_current_stream);
};

}  // extern "C"

static_assert(sizeof(DLTensor) == 48, "DLTensor is 48 bytes on 64-bit targets");
static_assert(sizeof(DLManagedTensor) == 64, "DLTensor, manager_ctx, deleter");
static_assert(sizeof(DLManagedTensorVersioned) == 80, "version, manager_ctx, deleter, flags, DLTensor");
