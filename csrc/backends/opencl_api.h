// opencl_api.h: the part of the OpenCL C API we call, declared here and loaded at run time.
//
// Nothing OpenCL is needed to build or import the package: the ICD loader is opened on first
// use from a list of candidates the Python layer supplies (an explicit path from the
// environment, the loader pyopencl ships, the system's). Values are the Khronos headers'.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hb::ocl {

using cl_int = int32_t;
using cl_uint = uint32_t;
using cl_ulong = uint64_t;
using cl_bitfield = cl_ulong;
using cl_device_type = cl_bitfield;
using cl_mem_flags = cl_bitfield;
using cl_command_queue_properties = cl_bitfield;
using cl_platform_info = cl_uint;
using cl_device_info = cl_uint;
using cl_context_info = cl_uint;
using cl_command_queue_info = cl_uint;
using cl_context_properties = intptr_t;
using cl_platform_id = struct _cl_platform_id *;
using cl_device_id = struct _cl_device_id *;
using cl_context = struct _cl_context *;
using cl_command_queue = struct _cl_command_queue *;
using cl_mem = struct _cl_mem *;
using cl_event = struct _cl_event *;
using cl_mem_info = cl_uint;
using cl_bool = cl_uint;
using cl_map_flags = cl_bitfield;

constexpr cl_int CL_SUCCESS = 0;
constexpr cl_int CL_DEVICE_NOT_FOUND = -1;
constexpr cl_int CL_INVALID_CONTEXT = -34;
constexpr cl_int CL_INVALID_MEM_OBJECT = -38;
constexpr cl_int CL_INVALID_BUFFER_SIZE = -61;
constexpr cl_device_type CL_DEVICE_TYPE_GPU = 1 << 2;
constexpr cl_device_type CL_DEVICE_TYPE_ALL = 0xFFFFFFFF;
constexpr cl_platform_info CL_PLATFORM_NAME = 0x0902;
constexpr cl_device_info CL_DEVICE_TYPE = 0x1000;
constexpr cl_device_info CL_DEVICE_MAX_MEM_ALLOC_SIZE = 0x1010;
constexpr cl_device_info CL_DEVICE_MEM_BASE_ADDR_ALIGN = 0x1019;
constexpr cl_device_info CL_DEVICE_GLOBAL_MEM_SIZE = 0x101F;
constexpr cl_device_info CL_DEVICE_NAME = 0x102B;
constexpr cl_device_info CL_DEVICE_PLATFORM = 0x1031;
constexpr cl_context_info CL_CONTEXT_DEVICES = 0x1081;
constexpr cl_command_queue_info CL_QUEUE_CONTEXT = 0x1090;
constexpr cl_command_queue_info CL_QUEUE_DEVICE = 0x1091;
constexpr cl_device_info CL_DEVICE_HOST_UNIFIED_MEMORY = 0x1035;
constexpr cl_mem_flags CL_MEM_READ_WRITE = 1 << 0;
constexpr cl_mem_flags CL_MEM_USE_HOST_PTR = 1 << 3;
constexpr cl_map_flags CL_MAP_READ = 1 << 0;
constexpr cl_map_flags CL_MAP_WRITE_INVALIDATE_REGION = 1 << 2;
constexpr cl_mem_info CL_MEM_SIZE = 0x1102;
constexpr cl_mem_info CL_MEM_CONTEXT = 0x1106;
constexpr cl_bool CL_FALSE = 0;
constexpr cl_bool CL_TRUE = 1;

/// Entry points, resolved by name from the loaded library.
struct Api {
    std::string path;  ///< the library that was loaded
    cl_int (*GetPlatformIDs)(cl_uint, cl_platform_id *, cl_uint *);
    cl_int (*GetPlatformInfo)(cl_platform_id, cl_platform_info, size_t, void *, size_t *);
    cl_int (*GetDeviceIDs)(cl_platform_id, cl_device_type, cl_uint, cl_device_id *, cl_uint *);
    cl_int (*GetDeviceInfo)(cl_device_id, cl_device_info, size_t, void *, size_t *);
    cl_context (*CreateContext)(const cl_context_properties *, cl_uint, const cl_device_id *,
                                void (*)(const char *, const void *, size_t, void *), void *,
                                cl_int *);
    cl_int (*GetContextInfo)(cl_context, cl_context_info, size_t, void *, size_t *);
    cl_int (*RetainContext)(cl_context);
    cl_int (*ReleaseContext)(cl_context);
    cl_command_queue (*CreateCommandQueue)(cl_context, cl_device_id, cl_command_queue_properties,
                                           cl_int *);
    cl_int (*GetCommandQueueInfo)(cl_command_queue, cl_command_queue_info, size_t, void *, size_t *);
    cl_int (*RetainCommandQueue)(cl_command_queue);
    cl_int (*ReleaseCommandQueue)(cl_command_queue);
    cl_int (*Finish)(cl_command_queue);
    cl_mem (*CreateBuffer)(cl_context, cl_mem_flags, size_t, void *, cl_int *);
    cl_int (*RetainMemObject)(cl_mem);
    cl_int (*ReleaseMemObject)(cl_mem);
    cl_int (*GetMemObjectInfo)(cl_mem, cl_mem_info, size_t, void *, size_t *);
    cl_int (*EnqueueReadBuffer)(cl_command_queue, cl_mem, cl_bool, size_t, size_t, void *, cl_uint,
                                const cl_event *, cl_event *);
    cl_int (*EnqueueWriteBuffer)(cl_command_queue, cl_mem, cl_bool, size_t, size_t, const void *,
                                 cl_uint, const cl_event *, cl_event *);
    // Rectangles: origins and region are {bytes, rows, slices}; then the pitches of each side.
    cl_int (*EnqueueReadBufferRect)(cl_command_queue, cl_mem, cl_bool, const size_t *, const size_t *,
                                    const size_t *, size_t, size_t, size_t, size_t, void *, cl_uint,
                                    const cl_event *, cl_event *);
    cl_int (*EnqueueWriteBufferRect)(cl_command_queue, cl_mem, cl_bool, const size_t *, const size_t *,
                                     const size_t *, size_t, size_t, size_t, size_t, const void *, cl_uint,
                                     const cl_event *, cl_event *);
    cl_int (*EnqueueCopyBuffer)(cl_command_queue, cl_mem, cl_mem, size_t, size_t, size_t, cl_uint,
                                const cl_event *, cl_event *);
    cl_int (*EnqueueCopyBufferRect)(cl_command_queue, cl_mem, cl_mem, const size_t *, const size_t *,
                                    const size_t *, size_t, size_t, size_t, size_t, cl_uint,
                                    const cl_event *, cl_event *);
    /// (queue, memory, pattern, pattern bytes, offset, bytes, ...): OpenCL 1.2.
    cl_int (*EnqueueFillBuffer)(cl_command_queue, cl_mem, const void *, size_t, size_t, size_t, cl_uint,
                                const cl_event *, cl_event *);
    /// (queue, memory, blocking, flags, offset, bytes, ..., errcode): the host address of the bytes.
    void *(*EnqueueMapBuffer)(cl_command_queue, cl_mem, cl_bool, cl_map_flags, size_t, size_t, cl_uint,
                              const cl_event *, cl_event *, cl_int *);
    cl_int (*EnqueueUnmapMemObject)(cl_command_queue, cl_mem, void *, cl_uint, const cl_event *, cl_event *);
};

/// Libraries to try, in order, before the first use (set by halide_buffer.opencl).
void set_library_candidates(std::vector<std::string> paths);
/// The loaded API; opens the first candidate that loads on first call. Throws DeviceError
/// "<entry>(): no OpenCL loader found; ..." (code CL_PLATFORM_NOT_FOUND_KHR) naming the fix
/// when none does.
const Api &api(const char *entry = "opencl.device");
/// The loader in use, or "" before the first successful load.
std::string loaded_library();

/// The name of an OpenCL error code ("CL_INVALID_VALUE"), or "unknown OpenCL error".
const char *error_name(cl_int code);
/// Throws DeviceError "<entry>(): <call> failed with <name> (<code>); <fix>" unless CL_SUCCESS.
void check(cl_int code, const char *entry, const char *call, const char *fix);

}  // namespace hb::ocl
