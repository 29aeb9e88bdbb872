// storage_op.h: how every residency operation runs (residency.cpp, buffer_data.cpp): under the
// storage's lock, taking in first what foreign code wrote into published views.
#pragma once

#include <mutex>

#include "buffer.h"
#include "errors.h"

namespace hb {

/// One residency operation on a storage: holds its lock (a contended one is waited for through
/// the lock waiter, so the bindings can let other Python threads run meanwhile), takes in first
/// what foreign code wrote into published views, and republishes every view from the shared
/// state on the way out, so no halide_buffer_t handed out shows a stale state. An operation on
/// two storages takes their locks in address order, so two of them never wait on each other.
class StorageOp {
public:
    explicit StorageOp(Storage &s, bool republish = true);
    ~StorageOp();
    StorageOp(const StorageOp &) = delete;
    StorageOp &operator=(const StorageOp &) = delete;

private:
    Storage &storage_;
    bool republish_;
    std::unique_lock<std::mutex> lock_;
};

/// Throws the DeviceError for a failed interface call or data primitive (`entry` is the
/// caller's entry point, `operation` what failed): the driver's code when our backend recorded
/// one, else Halide's code.
void check(int rc, const char *entry, const char *operation);

/// The BufferError for a write (naming `entry`) into a buffer over read-only memory.
BufferError read_only_memory(const char *entry);

}  // namespace hb
