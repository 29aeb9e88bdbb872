// small_lock.cpp: where a SmallLock's waiters park (small_lock.h).
//
// A fixed table of slots, each a std::mutex and a condition variable; a lock's slot is chosen by
// its address, so locks share slots and a wake-up wakes every thread parked in the slot, each of
// which looks at its own lock again. The rule that loses no wake-up: a waiter marks its lock
// kParked and goes to sleep under its slot's mutex, only while the lock is still held; the holder
// letting go sees kParked after clearing the lock, and takes the same slot mutex before notifying,
// so it notifies either before the waiter looked (the waiter sees the lock free) or after it
// sleeps.
#include "core/small_lock.h"

#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <thread>

namespace hb {

namespace {

struct ParkingSlot {
    std::mutex mutex;
    std::condition_variable woken;
};

constexpr size_t kSlots = 64;  // a power of two
constexpr int kSpins = 64;     // tries before parking: a holder usually lets go within a few

ParkingSlot &slot_of(const void *lock) {
    static ParkingSlot slots[kSlots];
    auto address = reinterpret_cast<uintptr_t>(lock);
    return slots[(address >> 4 ^ address >> 10) % kSlots];  // a power of two: a mask
}

}  // namespace

void SmallLock::lock_slow() {
    for (int i = 0; i < kSpins; ++i) {
        if (state_.load(std::memory_order_relaxed) == 0 && try_lock()) return;
        std::this_thread::yield();
    }
    ParkingSlot &slot = slot_of(this);
    for (;;) {
        uint8_t seen = state_.load(std::memory_order_relaxed);
        if (!(seen & kLocked)) {
            // Free: take it, keeping kParked for the others still parked (their wake-up must come).
            if (state_.compare_exchange_weak(seen, uint8_t(seen | kLocked), std::memory_order_acquire,
                                             std::memory_order_relaxed))
                return;
            continue;
        }
        std::unique_lock<std::mutex> parked(slot.mutex);
        if (!(seen & kParked) && !state_.compare_exchange_strong(seen, uint8_t(seen | kParked), std::memory_order_relaxed))
            continue;  // it changed: look again
        // Sleeps only while it is still held and marked: unlock() clears both before it notifies.
        slot.woken.wait(parked, [&] { return state_.load(std::memory_order_relaxed) != (kLocked | kParked); });
    }
}

void SmallLock::unpark_all() {
    ParkingSlot &slot = slot_of(this);
    std::lock_guard<std::mutex> parked(slot.mutex);
    slot.woken.notify_all();
}

}  // namespace hb
