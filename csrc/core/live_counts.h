// live_counts.h: counters of live objects, so tests can prove every one is released exactly once.
#pragma once

#include <atomic>
#include <cstdint>

namespace hb {

struct LiveCounts {
    std::atomic<int64_t> storages{0};
    std::atomic<int64_t> exports{0};             ///< buffer-protocol exports not yet released
    std::atomic<int64_t> device_allocations{0};  ///< device memory we hold a reference to
};
LiveCounts &live_counts();

}  // namespace hb
