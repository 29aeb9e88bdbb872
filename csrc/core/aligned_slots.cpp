// aligned_slots.cpp: the free lists and chunks behind take_slot() (aligned_slots.h).
#include "core/aligned_slots.h"

#include <pthread.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <mutex>

#include "core/small_lock.h"

#if defined(__SANITIZE_ADDRESS__)
#define HB_SLOTS_OF_THEIR_OWN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HB_SLOTS_OF_THEIR_OWN 1
#endif
#endif

namespace hb {

#ifdef HB_SLOTS_OF_THEIR_OWN

void *take_slot(size_t bytes) { return std::aligned_alloc(kSlotAlignment, bytes); }
void give_slot(void *slot, size_t) { std::free(slot); }

#else

namespace {

constexpr size_t kSizes = kLargestSlot / kSlotAlignment;
constexpr size_t kChunk = size_t(64) << 10;

/// The slots of one size: a free list threaded through the slots given back, and the rest of
/// the chunk being cut.
struct SlotList {
    SmallLock lock;
    void *free = nullptr;
    uint8_t *next = nullptr;  ///< the chunk's next uncut slot
    uint8_t *end = nullptr;   ///< the chunk's end
};

std::array<SlotList, kSizes> &lists() {
    static std::array<SlotList, kSizes> all;  // constant-initialized: no guard on each take
    return all;
}

SlotList &list_of(size_t bytes) { return lists()[bytes / kSlotAlignment - 1]; }

/// A fork lets the child's one thread go on with every list's lock free: the parent takes them
/// all before it forks, and both sides let them go. Registered when the library loads, before
/// any lock can be taken.
void lock_all() {
    for (SlotList &list : lists()) list.lock.lock();
}
void unlock_all() {
    for (SlotList &list : lists()) list.lock.unlock();
}
const int fork_guard = pthread_atfork(lock_all, unlock_all, unlock_all);

}  // namespace

void *take_slot(size_t bytes) {
    SlotList &list = list_of(bytes);
    std::lock_guard<SmallLock> hold(list.lock);
    if (void *slot = list.free) {
        list.free = *static_cast<void **>(slot);
        return slot;
    }
    if (list.next == list.end) {
        // A chunk holds a whole number of slots: the last bytes of a 384-byte list's stay unused.
        auto *chunk = static_cast<uint8_t *>(std::aligned_alloc(kSlotAlignment, kChunk));
        if (!chunk) return nullptr;
        list.next = chunk;
        list.end = chunk + kChunk / bytes * bytes;
    }
    void *slot = list.next;
    list.next += bytes;
    return slot;
}

void give_slot(void *slot, size_t bytes) {
    SlotList &list = list_of(bytes);
    std::lock_guard<SmallLock> hold(list.lock);
    *static_cast<void **>(slot) = list.free;
    list.free = slot;
}

#endif

}  // namespace hb
