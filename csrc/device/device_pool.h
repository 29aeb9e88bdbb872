// device_pool.h: a device's pool of freed device memory, kept by size class and handed to the
// next allocation of that class, so a loop that allocates the same sizes over and over (the
// outputs of a pipeline called in a loop, a Dask task per chunk) asks the driver once. On a
// zero-copy device it also keeps host blocks: host memory with the device memory over it,
// reused together. Everything is released by trim(), when an allocation fails (before the
// retry), and when the device ends.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace hb {

class Device;

/// What a pool holds and has done (device.pool).
struct PoolStats {
    uint64_t bytes_held = 0;   ///< bytes of free allocations kept for reuse (held from the driver)
    uint64_t blocks_held = 0;  ///< how many
    uint64_t hits = 0;         ///< allocations served from the pool
    uint64_t misses = 0;       ///< allocations the driver made
    uint64_t limit = 0;        ///< bytes it keeps at most; a freed allocation beyond it is released
};

class DevicePool {
public:
    /// Frees one allocation at the driver: 0, or the driver's code.
    using Release = int (*)(const Device &device, void *native);
    /// Host memory with the device memory over it (zero-copy), kept and reused together.
    struct HostBlock {
        uint8_t *host = nullptr;
        void *native = nullptr;
        uint64_t size = 0;
    };
    static constexpr uint64_t kDefaultLimit = uint64_t(1) << 30;

    /// The size `bytes` is allocated as: at least 256 bytes, then four classes per power of two
    /// (at most a quarter more than asked for).
    static uint64_t size_class(uint64_t bytes);

    /// A kept allocation of `size` (a size_class()), counted as a hit; null when there is none.
    void *take(uint64_t size);
    /// Keeps a freed allocation of `size` for reuse; false when that would pass the limit (the
    /// caller releases it then).
    bool give(void *native, uint64_t size, Release release);
    /// A kept host block of `size`, counted as a hit and remembered as in use; false if none.
    bool take_block(uint64_t size, HostBlock &out);
    /// A block the driver just made (counted as a miss), in use from now on.
    void add_block(const HostBlock &block, Release release);
    /// A block back from its user: kept, or released beyond the limit.
    void give_block(const Device &device, const HostBlock &block);
    /// The device memory of the block in use whose host memory is `host`, or null.
    void *block_memory(const uint8_t *host, uint64_t bytes) const;
    /// An allocation the driver made outside the pool's classes (counted as a miss).
    void note_miss();

    /// Releases everything kept; the bytes released.
    uint64_t trim(const Device &device);
    PoolStats stats() const;
    void set_limit(uint64_t bytes);

private:
    /// Waits for the device's queued commands (before host memory under them is freed).
    static void finish_queued(const Device &device);
    /// Releases a block's device memory with `release` (the backend's, read under the lock by
    /// the caller) and frees its host memory (after finish_queued()).
    static void release_block(Release release, const Device &device, const HostBlock &block);

    mutable std::mutex mutex_;
    std::map<uint64_t, std::vector<void *>> free_;       ///< by size class
    std::map<uint64_t, std::vector<HostBlock>> blocks_;  ///< kept host blocks, by size class
    std::unordered_map<const uint8_t *, HostBlock> blocks_in_use_;
    Release release_ = nullptr;  ///< the backend's, set by the first give
    PoolStats stats_{0, 0, 0, 0, kDefaultLimit};
};

}  // namespace hb
