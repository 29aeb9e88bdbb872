// lease.h: what a consumer of a buffer's memory is handed: the access it asks for, and a host
// lease with the mark a writer left. A lease is always this: the residency made right for one
// consumer (Buffer::lease_host(), Buffer::lease_device(), current_host_copy()); nothing else is
// called one.
#pragma once

#include <cstdint>
#include <memory>

namespace hb {

class Buffer;
struct Storage;

/// The mark a writable host lease left (host_dirty set), for a lease nobody may take up: a
/// DLPack capsule no consumer took. withdraw() takes the mark back when nothing has happened
/// to the storage since; otherwise (or when the lease set nothing) it does nothing.
class HostWriteMark {
public:
    void withdraw();

private:
    friend class Buffer;
    std::shared_ptr<Storage> storage_;  ///< null: nothing to withdraw
    uint64_t generation_ = 0;           ///< the storage's generation right after the lease
};

/// What a consumer handed a buffer's memory does with it, which picks its lease
/// (Buffer::lease_host(), Buffer::lease_device()).
enum class Access : uint8_t {
    read,       ///< reads only: a read lease
    write,      ///< writes: a write lease; ReadOnlyError over read-only memory
    /// may write where the memory allows (DLPack, the CUDA array interface, an out-of-band
    /// pickle): a write lease, or a read lease over read-only memory
    may_write,
};

/// A host lease as handed out (Buffer::lease_host()).
struct HostLease {
    bool writable = false;  ///< a write lease: the consumer may write
    HostWriteMark mark;    ///< a write lease's mark, for a consumer that may never come
};

}  // namespace hb
