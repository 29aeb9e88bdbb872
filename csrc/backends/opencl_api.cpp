// opencl_api.cpp: opening the OpenCL ICD loader at run time, and OpenCL's error names.
#include "backends/opencl_api.h"

#include <dlfcn.h>

#include <memory>
#include <mutex>

#include "core/errors.h"

namespace hb::ocl {
namespace {

constexpr cl_int CL_PLATFORM_NOT_FOUND_KHR = -1001;

std::mutex &lock() {
    static std::mutex m;
    return m;
}
std::vector<std::string> &candidates() {
    static std::vector<std::string> paths{"libOpenCL.so.1"};
    return paths;
}
Api *&loaded() {
    static Api *api = nullptr;  // never freed: the library stays loaded for the process
    return api;
}

template <typename F>
bool resolve(void *library, const char *name, F &slot) {
    slot = reinterpret_cast<F>(dlsym(library, name));
    return slot != nullptr;
}

/// Opens one candidate; nullptr (and the reason in `why`) when it is no usable loader.
Api *open(const std::string &path, std::string &why) {
    // RTLD_GLOBAL: Halide's OpenCL runtime inside an AOT pipeline looks the API up by name in
    // the process, so the loader we found must be visible to it too.
    void *library = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!library) {
        const char *error = dlerror();
        why = error ? error : path + ": cannot be opened";
        return nullptr;
    }
    auto api = std::make_unique<Api>();
    api->path = path;
    bool ok = resolve(library, "clGetPlatformIDs", api->GetPlatformIDs) &&
              resolve(library, "clGetPlatformInfo", api->GetPlatformInfo) &&
              resolve(library, "clGetDeviceIDs", api->GetDeviceIDs) &&
              resolve(library, "clGetDeviceInfo", api->GetDeviceInfo) &&
              resolve(library, "clCreateContext", api->CreateContext) &&
              resolve(library, "clGetContextInfo", api->GetContextInfo) &&
              resolve(library, "clRetainContext", api->RetainContext) &&
              resolve(library, "clReleaseContext", api->ReleaseContext) &&
              resolve(library, "clCreateCommandQueue", api->CreateCommandQueue) &&
              resolve(library, "clGetCommandQueueInfo", api->GetCommandQueueInfo) &&
              resolve(library, "clRetainCommandQueue", api->RetainCommandQueue) &&
              resolve(library, "clReleaseCommandQueue", api->ReleaseCommandQueue) &&
              resolve(library, "clFinish", api->Finish) &&
              resolve(library, "clCreateBuffer", api->CreateBuffer) &&
              resolve(library, "clRetainMemObject", api->RetainMemObject) &&
              resolve(library, "clReleaseMemObject", api->ReleaseMemObject) &&
              resolve(library, "clGetMemObjectInfo", api->GetMemObjectInfo) &&
              resolve(library, "clEnqueueReadBuffer", api->EnqueueReadBuffer) &&
              resolve(library, "clEnqueueWriteBuffer", api->EnqueueWriteBuffer) &&
              resolve(library, "clEnqueueReadBufferRect", api->EnqueueReadBufferRect) &&
              resolve(library, "clEnqueueWriteBufferRect", api->EnqueueWriteBufferRect) &&
              resolve(library, "clEnqueueCopyBuffer", api->EnqueueCopyBuffer) &&
              resolve(library, "clEnqueueCopyBufferRect", api->EnqueueCopyBufferRect) &&
              resolve(library, "clEnqueueFillBuffer", api->EnqueueFillBuffer) &&
              resolve(library, "clEnqueueMapBuffer", api->EnqueueMapBuffer) &&
              resolve(library, "clEnqueueUnmapMemObject", api->EnqueueUnmapMemObject);
    if (!ok) {
        why = path + ": not an OpenCL loader (missing entry points)";
        dlclose(library);
        return nullptr;
    }
    return api.release();
}

}  // namespace

void set_library_candidates(std::vector<std::string> paths) {
    std::lock_guard<std::mutex> guard(lock());
    candidates() = std::move(paths);
}

const Api &api(const char *entry) {
    std::lock_guard<std::mutex> guard(lock());
    if (loaded()) return *loaded();
    std::string tried;
    for (const std::string &path : candidates()) {
        std::string why;
        if ((loaded() = open(path, why))) return *loaded();
        tried += "\n  " + why;
    }
    throw DeviceError(std::string(entry) + "(): no OpenCL loader found; pip install "
                      "'halide_buffer[opencl]' for pyopencl and PoCL, install a system OpenCL "
                      "ICD loader (libOpenCL.so.1), or set HALIDE_BUFFER_OPENCL_LIBRARY to a "
                      "libOpenCL. Tried:" + tried,
                      CL_PLATFORM_NOT_FOUND_KHR, "CL_PLATFORM_NOT_FOUND_KHR");
}

std::string loaded_library() {
    std::lock_guard<std::mutex> guard(lock());
    return loaded() ? loaded()->path : "";
}

const char *error_name(cl_int code) {
    // One row per code of the Khronos headers (cl.h, cl_ext.h's KHR ICD extension).
    static const struct { cl_int code; const char *name; } kNames[] = {
        {0, "CL_SUCCESS"},
        {-1, "CL_DEVICE_NOT_FOUND"},
        {-2, "CL_DEVICE_NOT_AVAILABLE"},
        {-3, "CL_COMPILER_NOT_AVAILABLE"},
        {-4, "CL_MEM_OBJECT_ALLOCATION_FAILURE"},
        {-5, "CL_OUT_OF_RESOURCES"},
        {-6, "CL_OUT_OF_HOST_MEMORY"},
        {-7, "CL_PROFILING_INFO_NOT_AVAILABLE"},
        {-8, "CL_MEM_COPY_OVERLAP"},
        {-9, "CL_IMAGE_FORMAT_MISMATCH"},
        {-10, "CL_IMAGE_FORMAT_NOT_SUPPORTED"},
        {-11, "CL_BUILD_PROGRAM_FAILURE"},
        {-12, "CL_MAP_FAILURE"},
        {-13, "CL_MISALIGNED_SUB_BUFFER_OFFSET"},
        {-14, "CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST"},
        {-15, "CL_COMPILE_PROGRAM_FAILURE"},
        {-16, "CL_LINKER_NOT_AVAILABLE"},
        {-17, "CL_LINK_PROGRAM_FAILURE"},
        {-18, "CL_DEVICE_PARTITION_FAILED"},
        {-19, "CL_KERNEL_ARG_INFO_NOT_AVAILABLE"},
        {-30, "CL_INVALID_VALUE"},
        {-31, "CL_INVALID_DEVICE_TYPE"},
        {-32, "CL_INVALID_PLATFORM"},
        {-33, "CL_INVALID_DEVICE"},
        {-34, "CL_INVALID_CONTEXT"},
        {-35, "CL_INVALID_QUEUE_PROPERTIES"},
        {-36, "CL_INVALID_COMMAND_QUEUE"},
        {-37, "CL_INVALID_HOST_PTR"},
        {-38, "CL_INVALID_MEM_OBJECT"},
        {-39, "CL_INVALID_IMAGE_FORMAT_DESCRIPTOR"},
        {-40, "CL_INVALID_IMAGE_SIZE"},
        {-41, "CL_INVALID_SAMPLER"},
        {-42, "CL_INVALID_BINARY"},
        {-43, "CL_INVALID_BUILD_OPTIONS"},
        {-44, "CL_INVALID_PROGRAM"},
        {-45, "CL_INVALID_PROGRAM_EXECUTABLE"},
        {-46, "CL_INVALID_KERNEL_NAME"},
        {-47, "CL_INVALID_KERNEL_DEFINITION"},
        {-48, "CL_INVALID_KERNEL"},
        {-49, "CL_INVALID_ARG_INDEX"},
        {-50, "CL_INVALID_ARG_VALUE"},
        {-51, "CL_INVALID_ARG_SIZE"},
        {-52, "CL_INVALID_KERNEL_ARGS"},
        {-53, "CL_INVALID_WORK_DIMENSION"},
        {-54, "CL_INVALID_WORK_GROUP_SIZE"},
        {-55, "CL_INVALID_WORK_ITEM_SIZE"},
        {-56, "CL_INVALID_GLOBAL_OFFSET"},
        {-57, "CL_INVALID_EVENT_WAIT_LIST"},
        {-58, "CL_INVALID_EVENT"},
        {-59, "CL_INVALID_OPERATION"},
        {-60, "CL_INVALID_GL_OBJECT"},
        {-61, "CL_INVALID_BUFFER_SIZE"},
        {-62, "CL_INVALID_MIP_LEVEL"},
        {-63, "CL_INVALID_GLOBAL_WORK_SIZE"},
        {-64, "CL_INVALID_PROPERTY"},
        {-65, "CL_INVALID_IMAGE_DESCRIPTOR"},
        {-66, "CL_INVALID_COMPILER_OPTIONS"},
        {-67, "CL_INVALID_LINKER_OPTIONS"},
        {-68, "CL_INVALID_DEVICE_PARTITION_COUNT"},
        {-69, "CL_INVALID_PIPE_SIZE"},
        {-70, "CL_INVALID_DEVICE_QUEUE"},
        {-71, "CL_INVALID_SPEC_ID"},
        {-72, "CL_MAX_SIZE_RESTRICTION_EXCEEDED"},
        {CL_PLATFORM_NOT_FOUND_KHR, "CL_PLATFORM_NOT_FOUND_KHR"},
    };
    for (const auto &row : kNames) {
        if (row.code == code) return row.name;
    }
    return "unknown OpenCL error";
}

void check(cl_int code, const char *entry, const char *call, const char *fix) {
    if (code == CL_SUCCESS) return;
    throw DeviceError(std::string(entry) + "(): " + call + " failed with " + error_name(code) +
                      " (" + std::to_string(code) + "); " + fix,
                      code, error_name(code));
}

}  // namespace hb::ocl
