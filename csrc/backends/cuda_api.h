// cuda_api.h: the part of the CUDA driver API we call, declared here and loaded at run time.
//
// Nothing CUDA is needed to build or import the package: libcuda.so.1 (the driver's own
// library, installed with the NVIDIA driver) is opened on first use. Entry points are resolved
// by their ABI names (cuMemAlloc_v2, ...), as cuda.h's macros map them. Values are cuda.h's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace hb::cu {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = uint64_t;
using CUcontext = struct CUctx_st *;
using CUstream = struct CUstream_st *;
using CUevent = struct CUevent_st *;
using CUdevice_attribute = int;
using CUpointer_attribute = int;
using CUarray = struct CUarray_st *;
using CUmemorytype = int;

constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_INVALID_VALUE = 1;
constexpr CUresult CUDA_ERROR_INVALID_DEVICE = 101;
constexpr CUresult CUDA_ERROR_INVALID_CONTEXT = 201;
/// Ours, not cuda.h's: no driver library could be loaded (cuda.h has no code for that).
constexpr CUresult kNoDriver = -1;

constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
constexpr CUpointer_attribute CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9;
constexpr unsigned CU_EVENT_DISABLE_TIMING = 2;
constexpr CUmemorytype CU_MEMORYTYPE_HOST = 1;
constexpr CUmemorytype CU_MEMORYTYPE_DEVICE = 2;

/// cuda.h's CUDA_MEMCPY3D (_v2): a box of WidthInBytes x Height x Depth between two pitched
/// memories (pitch: bytes per row; height: rows per slice).
struct CUDA_MEMCPY3D {
    size_t srcXInBytes, srcY, srcZ, srcLOD;
    CUmemorytype srcMemoryType;
    const void *srcHost;
    CUdeviceptr srcDevice;
    CUarray srcArray;
    void *reserved0;
    size_t srcPitch, srcHeight;
    size_t dstXInBytes, dstY, dstZ, dstLOD;
    CUmemorytype dstMemoryType;
    void *dstHost;
    CUdeviceptr dstDevice;
    CUarray dstArray;
    void *reserved1;
    size_t dstPitch, dstHeight;
    size_t WidthInBytes, Height, Depth;
};
static_assert(sizeof(CUDA_MEMCPY3D) == 200 || sizeof(void *) != 8, "CUDA_MEMCPY3D must match cuda.h's layout");
/// CUstream values with a meaning of their own (cuda.h's CU_STREAM_LEGACY / _PER_THREAD).
inline CUstream legacy_stream() { return reinterpret_cast<CUstream>(uintptr_t(1)); }
inline CUstream per_thread_stream() { return reinterpret_cast<CUstream>(uintptr_t(2)); }

/// Entry points, resolved by ABI name from the loaded library.
struct Api {
    std::string path;  ///< the library that was loaded
    CUresult (*Init)(unsigned);
    CUresult (*DeviceGetCount)(int *);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DeviceGetName)(char *, int, CUdevice);
    CUresult (*DeviceTotalMem)(size_t *, CUdevice);                    // cuDeviceTotalMem_v2
    CUresult (*DeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*DevicePrimaryCtxRelease)(CUdevice);                     // cuDevicePrimaryCtxRelease_v2
    CUresult (*CtxPushCurrent)(CUcontext);                             // cuCtxPushCurrent_v2
    CUresult (*CtxPopCurrent)(CUcontext *);                            // cuCtxPopCurrent_v2
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);                       // cuMemAlloc_v2
    CUresult (*MemFree)(CUdeviceptr);                                  // cuMemFree_v2
    CUresult (*MemGetAddressRange)(CUdeviceptr *, size_t *, CUdeviceptr);  // cuMemGetAddressRange_v2
    CUresult (*MemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);  // cuMemcpyHtoDAsync_v2
    CUresult (*MemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);        // cuMemcpyDtoHAsync_v2
    CUresult (*MemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);   // cuMemcpyDtoDAsync_v2
    CUresult (*Memcpy3DAsync)(const CUDA_MEMCPY3D *, CUstream);               // cuMemcpy3DAsync_v2
    CUresult (*MemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
    CUresult (*MemsetD16Async)(CUdeviceptr, unsigned short, size_t, CUstream);
    CUresult (*MemsetD32Async)(CUdeviceptr, unsigned int, size_t, CUstream);
    // (memory, pitch, value, values per row, rows, stream)
    CUresult (*MemsetD2D8Async)(CUdeviceptr, size_t, unsigned char, size_t, size_t, CUstream);
    CUresult (*MemsetD2D16Async)(CUdeviceptr, size_t, unsigned short, size_t, size_t, CUstream);
    CUresult (*MemsetD2D32Async)(CUdeviceptr, size_t, unsigned int, size_t, size_t, CUstream);
    CUresult (*PointerGetAttribute)(void *, CUpointer_attribute, CUdeviceptr);
    CUresult (*StreamSynchronize)(CUstream);
    CUresult (*StreamWaitEvent)(CUstream, CUevent, unsigned);
    CUresult (*EventCreate)(CUevent *, unsigned);
    CUresult (*EventRecord)(CUevent, CUstream);
    CUresult (*EventDestroy)(CUevent);                                 // cuEventDestroy_v2
    CUresult (*GetErrorName)(CUresult, const char **);
    CUresult (*GetErrorString)(CUresult, const char **);
};

/// The loaded and initialised API (cuInit(0) done); opens libcuda.so.1 on first call. Throws
/// DeviceError "cuda.device(): no CUDA driver found ..." (code kNoDriver) when it cannot be
/// loaded, or the cuInit failure (e.g. CUDA_ERROR_NO_DEVICE) when the driver has no device.
const Api &api();
/// True when api() would succeed (never throws).
bool available();
/// The driver library in use, or "" before the first successful load.
std::string loaded_library();

/// The name of a CUresult ("CUDA_ERROR_OUT_OF_MEMORY"), or "unknown CUDA error".
const char *error_name(CUresult code);
/// Throws DeviceError "<entry>(): <call> failed with <name> (<code>); <fix>" unless CUDA_SUCCESS.
void check(CUresult code, const char *entry, const char *call, const char *fix);

/// Makes `context` current on this thread while it lives (push/pop), as every driver call on
/// memory needs. The constructor's failure is kept in `result` (no throw: impl tables use it).
class ContextScope {
public:
    explicit ContextScope(CUcontext context);
    ~ContextScope();
    ContextScope(const ContextScope &) = delete;
    ContextScope &operator=(const ContextScope &) = delete;
    CUresult result = CUDA_SUCCESS;

private:
    bool pushed_ = false;
};

}  // namespace hb::cu
