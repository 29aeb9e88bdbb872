// live_counts.h: counters of live objects, so tests can prove every one is released exactly once,
// and of the calls that took the direct path.
#pragma once

#include <atomic>
#include <cstdint>

namespace hb {

struct LiveCounts {
    std::atomic<int64_t> storages{0};
    /// Buffer-protocol exports not yet released: counted with the GIL held (see Buffer::note_host_export()).
    std::atomic<int64_t> exports{0};
    std::atomic<int64_t> device_allocations{0};  ///< device memory we hold a reference to
    /// Pipeline calls made directly (interop/aot_call.h, kDirectCallBytes), so tests can tell
    /// which way a call went: a plain read and write, not a locked add, on the call's hot path
    /// (a count two threads race on may lose one; the tests count on one thread).
    std::atomic<int64_t> direct_calls{0};
};
LiveCounts &live_counts();

}  // namespace hb
