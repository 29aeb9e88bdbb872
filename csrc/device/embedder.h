// embedder.h: the one way up from the core to whoever embeds it: the Python binding, or the
// C++ tests. The core asks its embedder four things and nothing else: to wait for a storage's
// lock someone else holds, to run a long step so other threads go on meanwhile, for the CUDA
// device of an ordinal, and (tests only) to run a hook after an export looked a device up. The
// embedder installs its answers once, before it makes a buffer; until then the core's defaults
// serve (plain waits, steps run as they are, no CUDA device).
#pragma once

#include <memory>
#include <mutex>
#include <type_traits>

#include "core/small_lock.h"
#include "device/device.h"

namespace hb {

/// A step lent to run_unlocked() for the length of that call: neither copied nor allocated
/// (the callable stays the caller's).
class Step {
public:
    template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, Step>>>
    Step(F &&f)  // NOLINT: made implicitly from a lambda
        : f_(const_cast<void *>(static_cast<const void *>(&f))),
          run_([](void *f) { (*static_cast<std::remove_reference_t<F> *>(f))(); }) {}
    void operator()() const { run_(f_); }

private:
    void *f_;
    void (*run_)(void *);
};

/// What the core asks of its embedder. Every entry is set (install_embedder() fills the ones
/// left null with the defaults).
struct Embedder {
    /// Takes `lock`, a storage's lock another thread holds (the binding lets other Python
    /// threads run while it waits: the holder may need the GIL).
    void (*wait_for_lock)(std::unique_lock<SmallLock> &lock) = nullptr;
    /// Runs `step`, which may copy, wait on a device or run a pipeline, so that other threads go
    /// on meanwhile (the binding: without the GIL, when the calling thread holds it).
    void (*run_unlocked)(Step step) = nullptr;
    /// The embedder's CUDA device of `ordinal` (the package's default device of it): a
    /// CudaDevice; BufferError naming `entry` where the machine has no such device. Asked on the
    /// caller's own thread, never from a step run_unlocked() runs (the binding would have to take
    /// the GIL back there): a pipeline call asks before its step.
    std::shared_ptr<Device> (*cuda_device)(int ordinal, const char *entry) = nullptr;
    /// Tests only: runs right after an export found a buffer's CUDA device, to force an
    /// interleaving of threads there.
    void (*after_device_lookup)() = nullptr;
};

/// Installs the embedder's answers (once, at start-up; later calls replace them).
void install_embedder(const Embedder &embedder);
/// The answers installed (the defaults before install_embedder()).
const Embedder &embedder();

}  // namespace hb
