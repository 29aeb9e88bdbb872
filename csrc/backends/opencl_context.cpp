// opencl_context.cpp: the context and queue Halide's OpenCL runtimes are given (see
// opencl_context.h). Halide's rule for these hooks: acquire stores a valid context and queue
// (or returns an error), every acquire is followed by one release, and an acquire waits while
// another thread holds the context (its own default holds a lock from acquire to release).
#include "backends/opencl_context.h"

#include <dlfcn.h>

#include <mutex>

#include "core/errors.h"
#include "device/device_interface.h"

namespace hb {
namespace {

/// Held from a runtime's acquire to its release, as Halide's own default does: one runtime
/// operation at a time, whichever library or thread (recursive: a thread may nest them).
std::recursive_mutex &runtime_lock() {
    static auto *m = new std::recursive_mutex;  // never destroyed: runtimes release at exit too
    return *m;
}
/// Acquires this thread holds (releases without one are ignored), and all it ever made.
thread_local int t_held = 0;
thread_local long t_acquires = 0;
bool g_shared = false;

/// The device whose context a runtime gets: the call's, else the default one (a library called
/// without hb.aot); null (with `create` false: none yet) when there is none.
std::shared_ptr<OpenCLDevice> context_device(bool create) {
    if (auto *d = dynamic_cast<OpenCLDevice *>(TargetDevice::current()))
        return std::static_pointer_cast<OpenCLDevice>(d->shared_from_this());
    if (!create) return nullptr;
    return default_opencl_device();
}

extern "C" int acquire_cl_context(void *, void **context, void **queue, bool create) {
    std::shared_ptr<OpenCLDevice> device;
    try {
        device = context_device(create);
    } catch (const std::exception &) {
        return halide_error::gpu_device_error;  // no OpenCL device: the runtime reports the failed call
    }
    runtime_lock().lock();
    ++t_held;
    ++t_acquires;
    *context = device ? device->context() : nullptr;
    *queue = device ? device->queue() : nullptr;
    return 0;
}

extern "C" int release_cl_context(void *) {
    if (t_held == 0) return 0;
    --t_held;
    runtime_lock().unlock();
    return 0;
}

}  // namespace

std::shared_ptr<OpenCLDevice> default_opencl_device() {
    static std::mutex m;
    static auto *device = new std::shared_ptr<OpenCLDevice>;  // never released: runtimes hold its objects
    std::lock_guard<std::mutex> guard(m);
    if (!*device) *device = OpenCLDevice::open_default(OpenCLDevice::zero_copy_wanted());
    return *device;
}

void share_opencl_context(const std::string &path) {
    using Set = void (*)(int (*)(void *, void **, void **, bool), int (*)(void *));
    void *library = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    const char *why = library ? nullptr : dlerror();
    auto set = library ? reinterpret_cast<Set>(dlsym(library, "halide_buffer_set_cl_context_hooks")) : nullptr;
    if (!set)
        throw ValueError("halide_buffer: cannot load its OpenCL context hooks (" + path + "): " +
                         (why ? why : "no halide_buffer_set_cl_context_hooks") + "; reinstall halide_buffer");
    set(acquire_cl_context, release_cl_context);
    g_shared = true;
}

bool opencl_context_shared() { return g_shared; }

bool runtime_uses_our_context(const halide_device_interface_t *interface, OpenCLDevice &device) {
    if (!g_shared || !interface) return false;
    halide_buffer_t probe{};
    probe.device_interface = interface;
    TargetDevice target(&device);
    long before = t_acquires;
    // The runtime's own device_sync (the public one refuses a buffer without device memory
    // before reaching it): a runtime with hooks of its own makes (and keeps) its context here.
    interface->impl->device_sync(nullptr, &probe);
    return t_acquires != before;
}

}  // namespace hb
