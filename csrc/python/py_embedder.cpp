// py_embedder.cpp: the binding as the core's embedder (device/embedder.h), the one way up from
// the core to Python: waits for a storage's lock and long steps let the other Python threads
// run, CUDA devices are the package's (halide_buffer.cuda), and the tests' hook after a device
// lookup is a Python callable; a count of lookups that took the GIL back, for tests.
#include "python/py_embedder.h"

#include <atomic>
#include <memory>
#include <string>

#include "backends/device_cuda.h"
#include "core/errors.h"
#include "device/embedder.h"
#include "python/py_glue.h"

namespace hb {
namespace {

/// Lookups of the package's CUDA devices that took the GIL back on a thread that had let it go
/// (from inside a step): none is asked for there (embedder.h), and tests check it
/// (_core._gil_taken_back()).
std::atomic<int64_t> g_gil_taken_back{0};

/// A thread waiting for a storage's lock lets the others run: the holder may need the GIL (a
/// pipeline's error handler written in Python, an owner released in a callback).
void wait_letting_others_run(std::unique_lock<SmallLock> &lock) {
    if (!PyGILState_Check()) return lock.lock();
    PyThreadState *state = PyEval_SaveThread();
    lock.lock();
    PyEval_RestoreThread(state);
}

/// A long step runs without the GIL; a step asked for by a thread without it (inside another
/// step) just runs.
void run_without_gil(Step step) {
    if (!PyGILState_Check()) return step();
    PyThreadState *state = PyEval_SaveThread();
    try {
        step();
    } catch (...) {
        PyEval_RestoreThread(state);
        throw;
    }
    PyEval_RestoreThread(state);
}

/// halide_buffer.cuda.device(ordinal): the package's default device of that ordinal
/// (DeviceError without CUDA). An ordinal this machine does not have is a BufferError naming
/// `entry`, whose data (a tensor, a stream) named it. The binding's own callers ask through the
/// embedder too (embedder_cuda_device()): this is the one lookup.
std::shared_ptr<Device> package_cuda_device(int ordinal, const char *entry) {
    if (!PyGILState_Check()) g_gil_taken_back.fetch_add(1, std::memory_order_relaxed);
    py::gil_scoped_acquire gil;  // asked from a thread that let it go: counted above
    try {
        return py::module_::import("halide_buffer.cuda").attr("device")(ordinal).cast<std::shared_ptr<CudaDevice>>();
    } catch (py::error_already_set &e) {
        if (!e.matches(PyExc_ValueError)) throw;
        throw BufferError(std::string(entry) + "(): the data is on CUDA device " + std::to_string(ordinal) +
                          ", which this machine does not have (" + py::str(e.value()).cast<std::string>() + ")");
    }
}

/// The tests' hook (halide_buffer._core._set_after_device_lookup()); never destroyed: it may
/// hold a Python object at exit.
py::object &lookup_hook() {
    static auto *hook = new py::object();
    return *hook;
}
std::atomic<bool> g_lookup_hook_set{false};

void run_lookup_hook() {
    if (!g_lookup_hook_set.load(std::memory_order_relaxed)) return;
    py::gil_scoped_acquire gil;
    if (lookup_hook()) lookup_hook()();
}

}  // namespace

void bind_embedder(py::module_ &m) {
    install_embedder(Embedder{wait_letting_others_run, run_without_gil, package_cuda_device, run_lookup_hook});
    m.def("_set_after_device_lookup", [](py::object hook) {
        g_lookup_hook_set = false;
        lookup_hook() = hook.is_none() ? py::object() : std::move(hook);
        g_lookup_hook_set = bool(lookup_hook());
    }, py::arg("hook"), "Tests only: calls hook() right after an export found the buffer's CUDA device.");
    m.def("_gil_taken_back", [] { return g_gil_taken_back.load(std::memory_order_relaxed); },
          "Tests only: how many lookups of the package's CUDA devices took the GIL back on a thread that "
          "had let it go.");
}

}  // namespace hb
