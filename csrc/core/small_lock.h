// small_lock.h: a mutual-exclusion lock of one byte, for the lock every storage carries.
//
// std::mutex is 40 bytes on glibc, the largest field of a small buffer's storage. A SmallLock is
// one atomic byte: taken and let go with one atomic instruction when nobody waits (the common
// case: one thread per storage), and a thread that must wait parks on one of a fixed table of
// condition variables chosen by the lock's address (small_lock.cpp), as WebKit's WTF::Lock and
// folly's MicroLock do. It meets Lockable (lock, try_lock, unlock), so std::unique_lock and
// std::lock_guard take it as they take a std::mutex. Not recursive, not fair.
#pragma once

#include <atomic>
#include <cstdint>

namespace hb {

class SmallLock {
public:
    SmallLock() = default;
    SmallLock(const SmallLock &) = delete;
    SmallLock &operator=(const SmallLock &) = delete;

    bool try_lock() {
        uint8_t expected = 0;
        return state_.compare_exchange_strong(expected, kLocked, std::memory_order_acquire, std::memory_order_relaxed);
    }
    void lock() {
        if (!try_lock()) lock_slow();
    }
    void unlock() {
        if (state_.exchange(0, std::memory_order_release) & kParked) unpark_all();
    }

private:
    static constexpr uint8_t kLocked = 1;
    static constexpr uint8_t kParked = 2;  ///< a thread may be parked waiting for it

    /// Spins a little, then parks until the lock is let go, as often as needed.
    void lock_slow();
    /// Wakes the threads parked on this lock's slot of the table (unlock() saw kParked).
    void unpark_all();

    std::atomic<uint8_t> state_{0};
};

}  // namespace hb
