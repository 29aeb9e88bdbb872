// live_counts.h: counters of live objects, so tests can prove every one is released exactly once,
// of the calls that took the direct path, and of bounds queries.
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
    /// Bounds queries run (interop/aot_call.h's required_regions(), which aot_sizes.h sizes
    /// outputs with), so tests can tell an answer kept from one asked again.
    std::atomic<int64_t> bounds_queries{0};
};
LiveCounts &live_counts();

}  // namespace hb
