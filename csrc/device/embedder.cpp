// embedder.cpp: the embedder's answers, and the defaults a core without one uses.
#include "device/embedder.h"

#include <string>

#include "core/errors.h"

namespace hb {
namespace {

void plain_wait(std::unique_lock<SmallLock> &lock) { lock.lock(); }
void run_here(Step step) { step(); }
std::shared_ptr<Device> no_cuda_device(int ordinal, const char *entry) {
    throw BufferError(std::string(entry) + "(): the data is on CUDA device " + std::to_string(ordinal) +
                      ", and this program has no CUDA devices to offer");
}
void nothing() {}

Embedder &installed() {
    static Embedder e{plain_wait, run_here, no_cuda_device, nothing};
    return e;
}

}  // namespace

void install_embedder(const Embedder &given) {
    Embedder &e = installed();
    e.wait_for_lock = given.wait_for_lock ? given.wait_for_lock : plain_wait;
    e.run_unlocked = given.run_unlocked ? given.run_unlocked : run_here;
    e.cuda_device = given.cuda_device ? given.cuda_device : no_cuda_device;
    e.after_device_lookup = given.after_device_lookup ? given.after_device_lookup : nothing;
}

const Embedder &embedder() { return installed(); }

}  // namespace hb
