// cuda_api.cpp: opening the CUDA driver library at run time, and CUDA's error names.
#include "backends/cuda_api.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>

#include "core/errors.h"

namespace hb::cu {
namespace {

constexpr const char *kNoDriverName = "CUDA_ERROR_NO_DRIVER";

std::mutex &lock() {
    static std::mutex m;
    return m;
}
/// Set once, after cuInit succeeded; read without the lock (check(), ContextScope).
std::atomic<const Api *> &loaded() {
    static std::atomic<const Api *> api{nullptr};  // never freed: the library stays loaded
    return api;
}
/// The first load's failure, rethrown by every later call instead of loading again.
struct Failure {
    bool failed = false;
    std::string message;
    CUresult code = CUDA_SUCCESS;
    std::string name;
};
Failure &failure() {
    static Failure f;
    return f;
}

/// The loaded API, or nullptr: never loads, never throws.
const Api *driver() { return loaded().load(std::memory_order_acquire); }

template <typename F>
bool resolve(void *library, const char *name, F &slot) {
    slot = reinterpret_cast<F>(dlsym(library, name));
    return slot != nullptr;
}

/// The driver's own short description of `code`, or "" when it has none.
std::string describe(const Api *api, CUresult code) {
    const char *text = nullptr;
    if (!api || api->GetErrorString(code, &text) != CUDA_SUCCESS || !text) return "";
    std::string s(text);
    // Keep the first sentence only: some descriptions run to a paragraph.
    size_t end = s.find(". ");
    if (end != std::string::npos) s.resize(end);
    if (!s.empty() && s.back() == '.') s.pop_back();
    if (s.size() > 120) s = s.substr(0, 117) + "...";
    return s;
}

[[noreturn]] void throw_driver_error(const Api *api, CUresult code, const char *entry, const char *call,
                                     const char *fix) {
    std::string text = describe(api, code);
    throw DeviceError(std::string(entry) + "(): " + call + " failed with " + error_name(code) +
                      " (" + std::to_string(code) + ")" + (text.empty() ? "" : " (" + text + ")") +
                      "; " + fix,
                      code, error_name(code));
}

/// Opens, resolves and initialises the driver; throws DeviceError when it cannot.
const Api *open() {
    const char *override_path = std::getenv("HALIDE_BUFFER_CUDA_LIBRARY");
    std::string path = override_path && *override_path ? override_path : "libcuda.so.1";
    // RTLD_GLOBAL: Halide's CUDA runtime inside an AOT pipeline looks the driver up by name
    // in the process, so the library we opened must be visible to it too.
    void *library = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!library) {
        const char *error = dlerror();
        std::string why = error ? error : "cannot be opened";
        if (why.rfind(path + ": ", 0) == 0) why.erase(0, path.size() + 2);  // dlerror repeats it
        throw DeviceError("cuda.device(): no CUDA driver found (" + path + ": " + why +
                          "); CUDA needs an NVIDIA GPU and its driver. Every CPU feature and "
                          "OpenCL keep working.",
                          kNoDriver, kNoDriverName);
    }
    auto api = std::make_unique<Api>();
    api->path = path;
    const char *missing = nullptr;
    auto need = [&](const char *name, auto &slot) {
        if (!missing && !resolve(library, name, slot)) missing = name;
    };
    need("cuInit", api->Init);
    need("cuDeviceGetCount", api->DeviceGetCount);
    need("cuDeviceGet", api->DeviceGet);
    need("cuDeviceGetName", api->DeviceGetName);
    need("cuDeviceTotalMem_v2", api->DeviceTotalMem);
    need("cuDeviceGetAttribute", api->DeviceGetAttribute);
    need("cuDevicePrimaryCtxRetain", api->DevicePrimaryCtxRetain);
    need("cuDevicePrimaryCtxRelease_v2", api->DevicePrimaryCtxRelease);
    need("cuCtxPushCurrent_v2", api->CtxPushCurrent);
    need("cuCtxPopCurrent_v2", api->CtxPopCurrent);
    need("cuMemAlloc_v2", api->MemAlloc);
    need("cuMemFree_v2", api->MemFree);
    need("cuMemGetAddressRange_v2", api->MemGetAddressRange);
    need("cuMemcpyHtoDAsync_v2", api->MemcpyHtoDAsync);
    need("cuMemcpyDtoHAsync_v2", api->MemcpyDtoHAsync);
    need("cuMemcpyDtoDAsync_v2", api->MemcpyDtoDAsync);
    need("cuMemcpy3DAsync_v2", api->Memcpy3DAsync);
    need("cuMemsetD8Async", api->MemsetD8Async);
    need("cuMemsetD16Async", api->MemsetD16Async);
    need("cuMemsetD32Async", api->MemsetD32Async);
    need("cuMemsetD2D8Async", api->MemsetD2D8Async);
    need("cuMemsetD2D16Async", api->MemsetD2D16Async);
    need("cuMemsetD2D32Async", api->MemsetD2D32Async);
    need("cuPointerGetAttribute", api->PointerGetAttribute);
    need("cuStreamSynchronize", api->StreamSynchronize);
    need("cuStreamWaitEvent", api->StreamWaitEvent);
    need("cuEventCreate", api->EventCreate);
    need("cuEventRecord", api->EventRecord);
    need("cuEventDestroy_v2", api->EventDestroy);
    need("cuGetErrorName", api->GetErrorName);
    need("cuGetErrorString", api->GetErrorString);
    if (missing) {
        dlclose(library);
        throw DeviceError("cuda.device(): the CUDA driver " + path + " lacks " + missing +
                          "; update the NVIDIA driver",
                          kNoDriver, kNoDriverName);
    }
    // On failure the library stays open: a driver that ran cuInit is not safely unloaded.
    CUresult code = api->Init(0);
    if (code != CUDA_SUCCESS) {
        throw_driver_error(api.get(), code, "cuda.device", "cuInit", "no usable NVIDIA GPU: check nvidia-smi");
    }
    return api.release();
}

}  // namespace

const Api &api() {
    if (const Api *ready = driver()) return *ready;
    std::lock_guard<std::mutex> guard(lock());
    if (const Api *ready = driver()) return *ready;
    Failure &f = failure();
    if (!f.failed) {
        try {
            const Api *opened = open();
            loaded().store(opened, std::memory_order_release);
            return *opened;
        } catch (const DeviceError &e) {
            f.failed = true;
            f.message = e.what();
            f.code = e.code;
            f.name = e.name;
        }
    }
    throw DeviceError(f.message, f.code, f.name);
}

bool available() {
    try {
        api();
        return true;
    } catch (...) {
        return false;
    }
}

std::string loaded_library() {
    const Api *ready = driver();
    return ready ? ready->path : "";
}

const char *error_name(CUresult code) {
    // One row per CUresult of cuda.h (CUDA 13.0), and our own kNoDriver.
    static const struct { CUresult code; const char *name; } kNames[] = {
        {0, "CUDA_SUCCESS"},
        {1, "CUDA_ERROR_INVALID_VALUE"},
        {2, "CUDA_ERROR_OUT_OF_MEMORY"},
        {3, "CUDA_ERROR_NOT_INITIALIZED"},
        {4, "CUDA_ERROR_DEINITIALIZED"},
        {5, "CUDA_ERROR_PROFILER_DISABLED"},
        {6, "CUDA_ERROR_PROFILER_NOT_INITIALIZED"},
        {7, "CUDA_ERROR_PROFILER_ALREADY_STARTED"},
        {8, "CUDA_ERROR_PROFILER_ALREADY_STOPPED"},
        {34, "CUDA_ERROR_STUB_LIBRARY"},
        {36, "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER"},
        {46, "CUDA_ERROR_DEVICE_UNAVAILABLE"},
        {100, "CUDA_ERROR_NO_DEVICE"},
        {101, "CUDA_ERROR_INVALID_DEVICE"},
        {102, "CUDA_ERROR_DEVICE_NOT_LICENSED"},
        {200, "CUDA_ERROR_INVALID_IMAGE"},
        {201, "CUDA_ERROR_INVALID_CONTEXT"},
        {202, "CUDA_ERROR_CONTEXT_ALREADY_CURRENT"},
        {205, "CUDA_ERROR_MAP_FAILED"},
        {206, "CUDA_ERROR_UNMAP_FAILED"},
        {207, "CUDA_ERROR_ARRAY_IS_MAPPED"},
        {208, "CUDA_ERROR_ALREADY_MAPPED"},
        {209, "CUDA_ERROR_NO_BINARY_FOR_GPU"},
        {210, "CUDA_ERROR_ALREADY_ACQUIRED"},
        {211, "CUDA_ERROR_NOT_MAPPED"},
        {212, "CUDA_ERROR_NOT_MAPPED_AS_ARRAY"},
        {213, "CUDA_ERROR_NOT_MAPPED_AS_POINTER"},
        {214, "CUDA_ERROR_ECC_UNCORRECTABLE"},
        {215, "CUDA_ERROR_UNSUPPORTED_LIMIT"},
        {216, "CUDA_ERROR_CONTEXT_ALREADY_IN_USE"},
        {217, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED"},
        {218, "CUDA_ERROR_INVALID_PTX"},
        {219, "CUDA_ERROR_INVALID_GRAPHICS_CONTEXT"},
        {220, "CUDA_ERROR_NVLINK_UNCORRECTABLE"},
        {221, "CUDA_ERROR_JIT_COMPILER_NOT_FOUND"},
        {222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"},
        {223, "CUDA_ERROR_JIT_COMPILATION_DISABLED"},
        {224, "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY"},
        {225, "CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC"},
        {226, "CUDA_ERROR_CONTAINED"},
        {300, "CUDA_ERROR_INVALID_SOURCE"},
        {301, "CUDA_ERROR_FILE_NOT_FOUND"},
        {302, "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND"},
        {303, "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED"},
        {304, "CUDA_ERROR_OPERATING_SYSTEM"},
        {400, "CUDA_ERROR_INVALID_HANDLE"},
        {401, "CUDA_ERROR_ILLEGAL_STATE"},
        {402, "CUDA_ERROR_LOSSY_QUERY"},
        {500, "CUDA_ERROR_NOT_FOUND"},
        {600, "CUDA_ERROR_NOT_READY"},
        {700, "CUDA_ERROR_ILLEGAL_ADDRESS"},
        {701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"},
        {702, "CUDA_ERROR_LAUNCH_TIMEOUT"},
        {703, "CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING"},
        {704, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED"},
        {705, "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED"},
        {708, "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE"},
        {709, "CUDA_ERROR_CONTEXT_IS_DESTROYED"},
        {710, "CUDA_ERROR_ASSERT"},
        {711, "CUDA_ERROR_TOO_MANY_PEERS"},
        {712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED"},
        {713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED"},
        {714, "CUDA_ERROR_HARDWARE_STACK_ERROR"},
        {715, "CUDA_ERROR_ILLEGAL_INSTRUCTION"},
        {716, "CUDA_ERROR_MISALIGNED_ADDRESS"},
        {717, "CUDA_ERROR_INVALID_ADDRESS_SPACE"},
        {718, "CUDA_ERROR_INVALID_PC"},
        {719, "CUDA_ERROR_LAUNCH_FAILED"},
        {720, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE"},
        {721, "CUDA_ERROR_TENSOR_MEMORY_LEAK"},
        {800, "CUDA_ERROR_NOT_PERMITTED"},
        {801, "CUDA_ERROR_NOT_SUPPORTED"},
        {802, "CUDA_ERROR_SYSTEM_NOT_READY"},
        {803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"},
        {804, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE"},
        {805, "CUDA_ERROR_MPS_CONNECTION_FAILED"},
        {806, "CUDA_ERROR_MPS_RPC_FAILURE"},
        {807, "CUDA_ERROR_MPS_SERVER_NOT_READY"},
        {808, "CUDA_ERROR_MPS_MAX_CLIENTS_REACHED"},
        {809, "CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED"},
        {810, "CUDA_ERROR_MPS_CLIENT_TERMINATED"},
        {811, "CUDA_ERROR_CDP_NOT_SUPPORTED"},
        {812, "CUDA_ERROR_CDP_VERSION_MISMATCH"},
        {900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"},
        {901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"},
        {902, "CUDA_ERROR_STREAM_CAPTURE_MERGE"},
        {903, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED"},
        {904, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED"},
        {905, "CUDA_ERROR_STREAM_CAPTURE_ISOLATION"},
        {906, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT"},
        {907, "CUDA_ERROR_CAPTURED_EVENT"},
        {908, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD"},
        {909, "CUDA_ERROR_TIMEOUT"},
        {910, "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE"},
        {911, "CUDA_ERROR_EXTERNAL_DEVICE"},
        {912, "CUDA_ERROR_INVALID_CLUSTER_SIZE"},
        {913, "CUDA_ERROR_FUNCTION_NOT_LOADED"},
        {914, "CUDA_ERROR_INVALID_RESOURCE_TYPE"},
        {915, "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION"},
        {916, "CUDA_ERROR_KEY_ROTATION"},
        {999, "CUDA_ERROR_UNKNOWN"},
        {kNoDriver, kNoDriverName},
    };
    for (const auto &row : kNames) {
        if (row.code == code) return row.name;
    }
    return "unknown CUDA error";
}

void check(CUresult code, const char *entry, const char *call, const char *fix) {
    if (code == CUDA_SUCCESS) return;
    throw_driver_error(driver(), code, entry, call, fix);
}

ContextScope::ContextScope(CUcontext context) {
    // No load here: a context can only come from a driver that is already loaded.
    const Api *ready = driver();
    if (!ready) {
        result = kNoDriver;
        return;
    }
    result = ready->CtxPushCurrent(context);
    pushed_ = result == CUDA_SUCCESS;
}

ContextScope::~ContextScope() {
    if (!pushed_) return;
    CUcontext ignored = nullptr;
    driver()->CtxPopCurrent(&ignored);
}

}  // namespace hb::cu
