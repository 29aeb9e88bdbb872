// storage_op.cpp: how every residency operation runs: the storage's lock (a contended one
// waited for through the embedder), and the DeviceError of a failed device call.
#include "storage/storage_op.h"

#include <string>
#include <utility>

#include "device/embedder.h"

namespace hb {

void check(int rc, const char *entry, const char *operation) {
    if (rc == 0) return;
    DeviceFailure &f = last_failure();
    if (f.code != 0) {
        DeviceFailure failure = std::exchange(f, DeviceFailure{});
        throw DeviceError(std::string(entry) + "(): " + operation + " failed with " + failure.name +
                              " (" + std::to_string(failure.code) + "): " + failure.what,
                          failure.code, failure.name);
    }
    throw DeviceError(std::string(entry) + "(): " + operation + " failed with Halide error " +
                          std::to_string(rc) + "; the buffer and its current data are unchanged",
                      rc, "halide_error_code " + std::to_string(rc));
}

void wait_for_lock(std::unique_lock<SmallLock> &lock) { embedder().wait_for_lock(lock); }

}  // namespace hb
