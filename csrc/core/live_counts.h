// live_counts.h: counters of live objects, so tests can prove every one is released exactly once.
#pragma once

#include <atomic>
#include <cstdint>

namespace hb {

struct LiveCounts {
    std::atomic<int64_t> storages{0};
    /// Buffer-protocol exports not yet released: counted with the GIL held (see Buffer::note_host_export()).
    std::atomic<int64_t> exports{0};
    std::atomic<int64_t> device_allocations{0};  ///< device memory we hold a reference to
};
LiveCounts &live_counts();

}  // namespace hb
