// device_opencl.cpp: finding, adopting and describing OpenCL devices.
#include "backends/device_opencl.h"

#include <cctype>
#include <cstdlib>
#include <vector>

#include "core/errors.h"

namespace hb {
namespace {

using namespace ocl;

constexpr const char *kEntry = "opencl.device";
constexpr const char *kFix = "check the OpenCL installation (python -m halide_buffer lists devices)";

/// A string property through one of OpenCL's clGet*Info calls (size query, then the text).
template <typename Object, typename Info>
std::string info_string(cl_int (*get)(Object, Info, size_t, void *, size_t *), Object object,
                        Info what, const char *call) {
    size_t size = 0;
    check(get(object, what, 0, nullptr, &size), kEntry, call, kFix);
    std::string s(size, '\0');
    check(get(object, what, size, s.data(), nullptr), kEntry, call, kFix);
    while (!s.empty() && s.back() == '\0') s.pop_back();
    return s;
}

template <typename T>
T device_value(cl_device_id id, cl_device_info what) {
    T value{};
    check(api().GetDeviceInfo(id, what, sizeof(T), &value, nullptr), kEntry, "clGetDeviceInfo", kFix);
    return value;
}

std::vector<cl_platform_id> platforms() {
    const Api &cl = api();
    cl_uint n = 0;
    check(cl.GetPlatformIDs(0, nullptr, &n), kEntry, "clGetPlatformIDs",
          "install an OpenCL driver, or pip install 'halide_buffer[opencl]' for PoCL");
    std::vector<cl_platform_id> ids(n);
    if (n) check(cl.GetPlatformIDs(n, ids.data(), nullptr), kEntry, "clGetPlatformIDs", kFix);
    return ids;
}

/// The devices of one type on a platform; none is not an error.
std::vector<cl_device_id> devices(cl_platform_id platform, cl_device_type type) {
    const Api &cl = api();
    cl_uint n = 0;
    cl_int rc = cl.GetDeviceIDs(platform, type, 0, nullptr, &n);
    if (rc == CL_DEVICE_NOT_FOUND) return {};
    check(rc, kEntry, "clGetDeviceIDs", kFix);
    std::vector<cl_device_id> ids(n);
    if (n) check(cl.GetDeviceIDs(platform, type, n, ids.data(), nullptr), kEntry, "clGetDeviceIDs", kFix);
    return ids;
}

cl_device_id first_device() {
    std::vector<cl_platform_id> all = platforms();
    for (cl_device_type type : {CL_DEVICE_TYPE_GPU, CL_DEVICE_TYPE_ALL}) {
        for (cl_platform_id p : all) {
            std::vector<cl_device_id> ids = devices(p, type);
            if (!ids.empty()) return ids[0];
        }
    }
    throw DeviceError(std::string(kEntry) + "(): no OpenCL device on any platform; install a "
                      "driver, or pip install 'halide_buffer[opencl]' for PoCL on the CPU",
                      CL_DEVICE_NOT_FOUND, error_name(CL_DEVICE_NOT_FOUND));
}

}  // namespace

OpenCLDevice::OpenCLDevice(cl_context context, cl_command_queue queue, cl_device_id id)
    : Device(opencl_driver()), context_(context), queue_(queue), id_(id) {}

bool OpenCLDevice::zero_copy_wanted() {
    const char *value = std::getenv("HALIDE_BUFFER_OPENCL_ZERO_COPY");
    if (!value) return true;
    std::string v(value);
    for (char &c : v) c = char(std::tolower(static_cast<unsigned char>(c)));
    return !(v == "0" || v == "false" || v == "off" || v == "no");
}

OpenCLDevice::~OpenCLDevice() {
    trim();  // the pool's memory, while the context lives
    const Api &cl = api();
    cl.ReleaseCommandQueue(queue_);
    cl.ReleaseContext(context_);
}

void OpenCLDevice::describe(bool zero_copy) {
    const Api &cl = api();
    name_ = info_string(cl.GetDeviceInfo, id_, CL_DEVICE_NAME, "clGetDeviceInfo");
    auto platform = device_value<cl_platform_id>(id_, CL_DEVICE_PLATFORM);
    platform_ = info_string(cl.GetPlatformInfo, platform, CL_PLATFORM_NAME, "clGetPlatformInfo");
    max_allocation_ = device_value<cl_ulong>(id_, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
    global_memory_ = device_value<cl_ulong>(id_, CL_DEVICE_GLOBAL_MEM_SIZE);
    base_alignment_ = device_value<cl_uint>(id_, CL_DEVICE_MEM_BASE_ADDR_ALIGN) / 8;  // bits
    is_gpu_ = device_value<cl_device_type>(id_, CL_DEVICE_TYPE) & CL_DEVICE_TYPE_GPU;
    // Deprecated by OpenCL 2.0, still answered; a driver that does not know it answers no.
    cl_bool unified = CL_FALSE;
    host_unified_ = api().GetDeviceInfo(id_, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof unified, &unified, nullptr) ==
                        CL_SUCCESS && unified;
    zero_copy_ = zero_copy && host_unified_;
}

std::shared_ptr<OpenCLDevice> OpenCLDevice::open_default(bool zero_copy) {
    const Api &cl = api();
    cl_device_id id = first_device();
    cl_int rc = CL_SUCCESS;
    cl_context context = cl.CreateContext(nullptr, 1, &id, nullptr, nullptr, &rc);
    check(rc, kEntry, "clCreateContext", kFix);
    cl_command_queue queue = cl.CreateCommandQueue(context, id, 0, &rc);
    if (rc != CL_SUCCESS) cl.ReleaseContext(context);
    check(rc, kEntry, "clCreateCommandQueue", kFix);
    // From here the device owns one reference on each and releases them however it ends.
    std::shared_ptr<OpenCLDevice> device(new OpenCLDevice(context, queue, id));
    device->describe(zero_copy);
    return device;
}

std::shared_ptr<OpenCLDevice> OpenCLDevice::adopt(cl_context context, cl_command_queue queue, bool zero_copy) {
    const Api &cl = api();
    constexpr const char *fix = "pass a live pyopencl Context or CommandQueue";
    cl_device_id id = nullptr;
    if (queue) {
        cl_context owner = nullptr;
        check(cl.GetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof owner, &owner, nullptr), kEntry,
              "clGetCommandQueueInfo", fix);
        if (context && owner != context)
            throw ValueError(std::string(kEntry) + "(): the queue belongs to another context; pass "
                             "queue.context as the context, or no context");
        context = owner;
        check(cl.GetCommandQueueInfo(queue, CL_QUEUE_DEVICE, sizeof id, &id, nullptr), kEntry,
              "clGetCommandQueueInfo", fix);
        check(cl.RetainCommandQueue(queue), kEntry, "clRetainCommandQueue", fix);
        cl_int rc = cl.RetainContext(context);
        if (rc != CL_SUCCESS) cl.ReleaseCommandQueue(queue);
        check(rc, kEntry, "clRetainContext", fix);
    } else {
        size_t size = 0;
        check(cl.GetContextInfo(context, CL_CONTEXT_DEVICES, 0, nullptr, &size), kEntry,
              "clGetContextInfo", fix);
        std::vector<cl_device_id> ids(size / sizeof(cl_device_id));
        if (ids.empty())
            throw ValueError(std::string(kEntry) + "(): the context has no device; " + fix);
        check(cl.GetContextInfo(context, CL_CONTEXT_DEVICES, size, ids.data(), nullptr), kEntry,
              "clGetContextInfo", fix);
        id = ids[0];
        check(cl.RetainContext(context), kEntry, "clRetainContext", fix);
        cl_int rc = CL_SUCCESS;
        queue = cl.CreateCommandQueue(context, id, 0, &rc);
        if (rc != CL_SUCCESS) cl.ReleaseContext(context);
        check(rc, kEntry, "clCreateCommandQueue", fix);
    }
    std::shared_ptr<OpenCLDevice> device(new OpenCLDevice(context, queue, id));
    device->describe(zero_copy);
    return device;
}

void OpenCLDevice::synchronize() const {
    check(api().Finish(queue_), "device_sync", "clFinish", "the queue is lost; create a new device");
}

}  // namespace hb
