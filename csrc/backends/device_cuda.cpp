// device_cuda.cpp: opening CUDA devices through their primary contexts, and ordering work
// between our stream and other people's.
#include "backends/device_cuda.h"

#include <mutex>

#include "core/errors.h"

namespace hb {
namespace {

using namespace cu;

constexpr const char *kEntry = "cuda.device";
constexpr const char *kFix = "check the NVIDIA driver (nvidia-smi)";

}  // namespace

CUstream stream_of_number(uintptr_t number) {
    if (number == 2) return per_thread_stream();
    if (number == 0 || number == 1) return legacy_stream();
    return reinterpret_cast<CUstream>(number);
}

CudaDevice::CudaDevice(int ordinal, CUdevice device, CUcontext context, CUstream stream)
    : Device(cuda_driver()), ordinal_(ordinal), device_(device), context_(context), stream_(stream) {}

CudaDevice::~CudaDevice() {
    if (available()) trim();  // the pool's memory, while the context lives
    if (const Api *cuda = available() ? &api() : nullptr) cuda->DevicePrimaryCtxRelease(device_);
}

std::shared_ptr<CudaDevice> CudaDevice::open(int ordinal, uintptr_t stream, std::shared_ptr<void> stream_owner) {
    const Api &cuda = api();  // throws "no CUDA driver found" without one
    int count = 0;
    check(cuda.DeviceGetCount(&count), kEntry, "cuDeviceGetCount", kFix);
    if (ordinal < 0 || ordinal >= count)
        throw ValueError(std::string(kEntry) + "(): there is no CUDA device " + std::to_string(ordinal) +
                         (count == 0 ? std::string("; the driver sees no device: check the GPU with nvidia-smi")
                                     : "; pass an ordinal from 0 to " + std::to_string(count - 1) + " (this machine has " +
                                           std::to_string(count) + ")"));
    CUdevice device = 0;
    check(cuda.DeviceGet(&device, ordinal), kEntry, "cuDeviceGet", kFix);
    CUcontext context = nullptr;
    check(cuda.DevicePrimaryCtxRetain(&context, device), kEntry, "cuDevicePrimaryCtxRetain", kFix);
    // From here the device holds the primary context and lets go of it however it ends.
    std::shared_ptr<CudaDevice> d(new CudaDevice(ordinal, device, context, stream_of_number(stream)));
    d->stream_owner_ = std::move(stream_owner);
    char name[256] = {};
    check(cuda.DeviceGetName(name, sizeof name - 1, device), kEntry, "cuDeviceGetName", kFix);
    d->name_ = name;
    size_t memory = 0;
    check(cuda.DeviceTotalMem(&memory, device), kEntry, "cuDeviceTotalMem", kFix);
    d->global_memory_ = memory;
    check(cuda.DeviceGetAttribute(&d->major_, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device), kEntry,
          "cuDeviceGetAttribute", kFix);
    check(cuda.DeviceGetAttribute(&d->minor_, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device), kEntry,
          "cuDeviceGetAttribute", kFix);
    return d;
}

std::string CudaDevice::description() const {
    std::string stream = stream_ == legacy_stream() ? "" : ", stream " + std::to_string(stream_number());
    return name_ + " (CUDA device " + std::to_string(ordinal_) + stream + ")";
}

void CudaDevice::synchronize() const {
    const Api &cuda = api();
    ContextScope scope(context_);
    check(scope.result, "device_sync", "cuCtxPushCurrent", "the context is lost; restart the process");
    check(cuda.StreamSynchronize(stream_), "device_sync", "cuStreamSynchronize",
          "a kernel on the stream failed; the context may be lost");
}

namespace {

/// Makes `waiter` wait for the work queued on `signaller` so far.
void order(CUcontext context, CUstream signaller, CUstream waiter) {
    if (signaller == waiter) return;  // one stream runs in order already
    constexpr const char *entry = "cuda stream handshake";
    constexpr const char *fix = "pass a live stream of this device";
    const Api &cuda = api();
    ContextScope scope(context);
    check(scope.result, entry, "cuCtxPushCurrent", fix);
    CUevent event = nullptr;
    check(cuda.EventCreate(&event, CU_EVENT_DISABLE_TIMING), entry, "cuEventCreate", fix);
    CUresult rc = cuda.EventRecord(event, signaller);
    if (rc == CUDA_SUCCESS) rc = cuda.StreamWaitEvent(waiter, event, 0);
    cuda.EventDestroy(event);  // released once the wait is done; the wait stays queued
    check(rc, entry, "cuStreamWaitEvent", fix);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Halide CUDA runtimes of pipelines
// ---------------------------------------------------------------------------------------------

namespace {

std::mutex &remembered_lock() {
    static std::mutex m;
    return m;
}
std::shared_ptr<CudaDevice> &remembered() {
    static auto *device = new std::shared_ptr<CudaDevice>();  // never destroyed: runtimes may call at exit
    return *device;
}

/// The device a pipeline runtime's request is for, or null.
std::shared_ptr<CudaDevice> pipeline_device() {
    if (auto *d = dynamic_cast<CudaDevice *>(TargetDevice::current()))
        return std::static_pointer_cast<CudaDevice>(d->shared_from_this());
    std::lock_guard<std::mutex> guard(remembered_lock());
    return remembered();
}


}  // namespace

void remember_pipeline_device(std::shared_ptr<CudaDevice> device) {
    std::lock_guard<std::mutex> guard(remembered_lock());
    remembered() = std::move(device);
}

int pipeline_acquire_context(void *, void **context, bool create) {
    std::shared_ptr<CudaDevice> d = pipeline_device();
    *context = d ? static_cast<void *>(d->context()) : nullptr;
    // Asked not to create one (Halide's device_release): none is an answer. Otherwise a call
    // outside any of ours before the first one: nothing to give.
    return d || !create ? 0 : halide_error::gpu_device_error;
}

int pipeline_release_context(void *) { return 0; }  // the primary context stays with its device

int pipeline_get_stream(void *, void *, void **stream) {
    std::shared_ptr<CudaDevice> d = pipeline_device();
    *stream = d ? static_cast<void *>(d->stream()) : nullptr;
    return 0;
}

void CudaDevice::order_before(CUstream consumer) const { order(context_, stream_, consumer); }
void CudaDevice::order_after(CUstream producer) const { order(context_, producer, stream_); }

}  // namespace hb
