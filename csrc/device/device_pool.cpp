// device_pool.cpp: the size classes, and the pool's bookkeeping under its lock (a leaf lock:
// nothing else is taken while it is held).
#include "device/device_pool.h"

#include <cstdlib>

#include "device/device.h"
#include "device/device_interface.h"

namespace hb {

uint64_t DevicePool::size_class(uint64_t bytes) {
    constexpr uint64_t kSmallest = 256;
    if (bytes <= kSmallest) return kSmallest;
    int top = 63 - __builtin_clzll(bytes - 1);  // 2^top < bytes <= 2^(top + 1)
    uint64_t step = (uint64_t(1) << top) / 4;
    return (bytes + step - 1) / step * step;
}

int DevicePool::allocate(Device &device, const AllocationRequest &request, DeviceAllocation &a) {
    uint64_t size = size_class(request.bytes);
    if (!(a.native = take(size))) {
        AllocationRequest in_class{size, nullptr, request.itemsize};
        int rc = upstream_.allocate(device, in_class, a);
        // The driver refused: what the pool keeps goes back to it, and it is asked once more.
        if (rc != 0 && trim(device) > 0) rc = upstream_.allocate(device, in_class, a);
        if (rc != 0) return rc;
    }
    a.size = size;
    a.source = memory_source::Pooled{};
    return 0;
}

int DevicePool::release(const Device &device, void *native, uint64_t size) {
    return give(native, size) ? 0 : upstream_.release(device, native, size);
}

void *DevicePool::take(uint64_t size) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.find(size);
    if (it == free_.end() || it->second.empty()) {
        ++stats_.misses;
        return nullptr;
    }
    void *native = it->second.back();
    it->second.pop_back();
    ++stats_.hits;
    stats_.bytes_held -= size;
    --stats_.blocks_held;
    return native;
}

bool DevicePool::give(void *native, uint64_t size) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stats_.bytes_held + size > limit_.load(std::memory_order_relaxed)) return false;
    free_[size].push_back(native);
    stats_.bytes_held += size;
    ++stats_.blocks_held;
    return true;
}

bool DevicePool::take_block(uint64_t size, HostBlock &out) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(size);
    if (it == blocks_.end() || it->second.empty()) return false;  // the miss is counted by add_block()
    out = it->second.back();
    it->second.pop_back();
    blocks_in_use_[out.host] = out;
    ++stats_.hits;
    stats_.bytes_held -= size;
    --stats_.blocks_held;
    return true;
}

void DevicePool::add_block(const HostBlock &block) {
    std::lock_guard<std::mutex> lock(mutex_);
    blocks_in_use_[block.host] = block;
    ++stats_.misses;
}

void DevicePool::give_block(const Device &device, const HostBlock &block) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        blocks_in_use_.erase(block.host);
        if (stats_.bytes_held + block.size <= limit_.load(std::memory_order_relaxed)) {
            blocks_[block.size].push_back(block);
            stats_.bytes_held += block.size;
            ++stats_.blocks_held;
            return;
        }
    }
    finish_queued(device);
    release_block(device, block);
}

void *DevicePool::block_memory(const uint8_t *host, uint64_t bytes) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_in_use_.find(host);
    return it != blocks_in_use_.end() && bytes <= it->second.size ? it->second.native : nullptr;
}

void DevicePool::note_miss() {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.misses;
}

void DevicePool::finish_queued(const Device &device) {
    // Commands queued on a block's memory (a kernel writing an output dropped at once) must end
    // before its host memory is freed. A lost queue has nothing left to run.
    try {
        device.synchronize();
    } catch (const std::exception &) {
    }
}

void DevicePool::release_block(const Device &device, const HostBlock &block) {
    upstream_.release(device, block.native, block.size);
    std::free(block.host);
}

uint64_t DevicePool::trim(const Device &device) {
    std::map<uint64_t, std::vector<void *>> free;
    std::map<uint64_t, std::vector<HostBlock>> blocks;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        free.swap(free_);
        blocks.swap(blocks_);
        stats_.bytes_held = 0;
        stats_.blocks_held = 0;
    }
    uint64_t released = 0;
    if (!blocks.empty()) finish_queued(device);
    for (const auto &[size, natives] : free) {
        for (void *native : natives) {
            // A failure is ignored: the memory is the driver's again or lost with its context.
            upstream_.release(device, native, size);
            released += size;
        }
    }
    for (const auto &[size, kept] : blocks) {
        for (const HostBlock &block : kept) {
            release_block(device, block);
            released += size;
        }
    }
    return released;
}

PoolStats DevicePool::stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    PoolStats s = stats_;
    s.limit = limit_.load(std::memory_order_relaxed);
    return s;
}

void DevicePool::set_limit(uint64_t bytes) { limit_.store(bytes, std::memory_order_relaxed); }

}  // namespace hb
