// device_pool.h: where a device's memory comes from. A DeviceAllocator hands out memory; the
// driver's allocator (one per backend, device_engine.h) asks the driver, and the pool is an
// allocator over it: freed device memory kept by size class and handed to the next allocation
// of that class, so a loop that allocates the same sizes over and over (the outputs of a
// pipeline called in a loop, a Dask task per chunk) asks the driver once. On a zero-copy device
// the pool also keeps host blocks: host memory with the device memory over it, reused together.
// Everything is released by trim(), when an allocation fails (before the retry), and when the
// device ends.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace hb {

class Device;
struct AllocationRequest;
struct DeviceAllocation;

/// Hands out device memory: Engine::device_malloc asks the device's (Device::allocator()) and
/// nothing else. An allocator in front of another (the pool over the driver's) asks it for what
/// it cannot serve itself; each allocation's source (MemorySource) says which one it goes back to.
class DeviceAllocator {
public:
    virtual ~DeviceAllocator() = default;
    /// Memory on `device` for `request`: sets a.native, a.size (at least request.bytes) and
    /// a.source; a reference the driver newly made is counted live (LiveCounts). 0, or a
    /// Halide error code with the driver's failure recorded (record_failure()).
    virtual int allocate(Device &device, const AllocationRequest &request, DeviceAllocation &a) = 0;
    /// Takes back memory it handed out (`size` bytes, as allocate() set them): 0, or the
    /// driver's code, the memory kept (and still counted live) then.
    virtual int release(const Device &device, void *native, uint64_t size) = 0;
};

/// What a pool holds and has done (device.pool).
struct PoolStats {
    uint64_t bytes_held = 0;   ///< bytes of free allocations kept for reuse (held from the driver)
    uint64_t blocks_held = 0;  ///< how many
    uint64_t hits = 0;         ///< allocations served from the pool
    uint64_t misses = 0;       ///< allocations it passed on to the driver
    uint64_t limit = 0;        ///< bytes it keeps at most; a freed allocation beyond it is released
};

/// The pool: an allocator over `upstream` (the driver's), which makes and releases what it keeps.
/// With a limit of 0 it is out of the way (Device::allocator() is then the driver's).
class DevicePool final : public DeviceAllocator {
public:
    explicit DevicePool(DeviceAllocator &upstream) : upstream_(upstream) {}
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

    /// A kept allocation of the request's size class (a hit), else the upstream's, in that class
    /// (a miss), retried once after trim() when it refuses; either way Pooled: it comes back here.
    int allocate(Device &device, const AllocationRequest &request, DeviceAllocation &a) override;
    /// Keeps a freed allocation for reuse, or releases it upstream when that would pass the limit.
    int release(const Device &device, void *native, uint64_t size) override;
    /// A kept host block of `size`, counted as a hit and remembered as in use; false if none.
    bool take_block(uint64_t size, HostBlock &out);
    /// A block the driver just made (counted as a miss), in use from now on.
    void add_block(const HostBlock &block);
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
    /// Whether it keeps anything: a limit of 0 takes it out of the way of allocations.
    bool open() const { return limit_.load(std::memory_order_relaxed) > 0; }

private:
    /// A kept allocation of `size` (a size_class()), counted as a hit; null when there is none.
    void *take(uint64_t size);
    /// Keeps a freed allocation of `size` for reuse; false when that would pass the limit.
    bool give(void *native, uint64_t size);
    /// Waits for the device's queued commands (before host memory under them is freed).
    static void finish_queued(const Device &device);
    /// Releases a block's device memory upstream and frees its host memory (after finish_queued()).
    void release_block(const Device &device, const HostBlock &block);

    mutable std::mutex mutex_;
    std::map<uint64_t, std::vector<void *>> free_;       ///< by size class
    std::map<uint64_t, std::vector<HostBlock>> blocks_;  ///< kept host blocks, by size class
    std::unordered_map<const uint8_t *, HostBlock> blocks_in_use_;
    /// Makes and releases what the pool keeps; set once, so read without the lock.
    DeviceAllocator &upstream_;
    PoolStats stats_{0, 0, 0, 0, 0};  ///< all but the limit, which is limit_
    std::atomic<uint64_t> limit_{kDefaultLimit};  ///< read by every allocation (open()): no lock
};

}  // namespace hb
