// storage_op.h: how every residency operation runs (residency.cpp, raw_views.cpp, buffer_data.cpp):
// under the storage's lock, taking in first what foreign code wrote into published views
// (storage_op.cpp).
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "core/errors.h"
#include "storage/buffer.h"

namespace hb {

/// Throws the DeviceError for a failed interface call or data primitive (`entry` is the
/// caller's entry point, `operation` what failed): the driver's code when our backend recorded
/// one, else Halide's code.
void check(int rc, const char *entry, const char *operation);

/// Waits for a storage's lock someone else holds, through the embedder (device/embedder.h).
void wait_for_lock(std::unique_lock<SmallLock> &lock);

/// One residency operation on a storage: holds its lock (a contended one is waited for through
/// the lock waiter, so the bindings can let other Python threads run meanwhile), takes in first
/// what foreign code wrote into published views, and republishes every view from the shared
/// state on the way out, so no halide_buffer_t handed out shows a stale state. An operation on
/// two storages takes their locks in address order, so two of them never wait on each other.
class StorageOp {
public:
    /// `take_in` false: no view is taken in on entry (the caller takes in the one it needs).
    /// Inline: every residency operation, the small calls' included, runs one.
    explicit StorageOp(Storage &s, bool republish = true, bool take_in = true)
        : storage_(s), republish_(republish), lock_(s.mutex, std::try_to_lock) {
        if (!lock_.owns_lock()) wait_for_lock(lock_);
        ++storage_.generation;
        if (take_in && !storage_.raw_views.empty()) storage_.absorb_raw_views();
    }
    ~StorageOp() {
        if (republish_ && !storage_.raw_views.empty()) storage_.publish_all();
    }
    StorageOp(const StorageOp &) = delete;
    StorageOp &operator=(const StorageOp &) = delete;

    /// Keeps `object` until the lock is let go: what the operation drops that Python may own
    /// (a released device owner, memory consumers were lent) dies after it (the rule at
    /// Storage::mutex).
    void defer(std::shared_ptr<void> object) {
        if (object) deferred_.push_back(std::move(object));
    }

private:
    Storage &storage_;
    bool republish_;
    std::vector<std::shared_ptr<void>> deferred_;  // before lock_: destroyed after the unlock
    std::unique_lock<SmallLock> lock_;
};

/// One call into a device, as every residency operation makes it: with `device` the target
/// (TargetDevice: where device_malloc allocates, whose context a pipeline runtime's hooks get)
/// and this thread's failure record cleared before each call, so a failure reports that call's
/// driver error, never an older one.
class DeviceCall {
public:
    DeviceCall(const char *entry, Device *device) : entry_(entry), target_(device) {}
    DeviceCall(const DeviceCall &) = delete;
    DeviceCall &operator=(const DeviceCall &) = delete;

    /// Runs `call` (an interface entry or a data primitive: 0, a Halide error code, or
    /// kNotOnDevice) and throws the DeviceError naming `operation` for a failure; returns 0 or
    /// kNotOnDevice.
    template <class Call>
    int operator()(const char *operation, Call &&call) const {
        int rc = attempt(call);
        if (rc != kNotOnDevice) check(rc, entry_, operation);
        return rc;
    }
    /// Runs `call` and returns its code unchecked, for a caller that tries again later.
    template <class Call>
    int attempt(Call &&call) const {
        last_failure() = DeviceFailure{};
        return call();
    }

private:
    const char *entry_;
    TargetDevice target_;
};

/// The ReadOnlyError for a write (naming `entry`) into a buffer over read-only memory.
ReadOnlyError read_only_memory(const char *entry);

}  // namespace hb
