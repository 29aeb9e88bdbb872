// test_small_lock.cpp: the storage's one-byte lock (core/small_lock.h) and the 128-byte aligned
// slots small buffers live in (core/aligned_slots.h), under contention from several threads.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "core/aligned_slots.h"
#include "core/small_lock.h"
#include "harness.h"

namespace {

constexpr int kThreads = 4;

/// Runs `body(thread)` on kThreads threads at once.
template <typename F>
void on_threads(F &&body) {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) threads.emplace_back([&, t] { body(t); });
    for (std::thread &thread : threads) thread.join();
}

}  // namespace

TEST_CASE(small_lock_is_one_byte_and_lockable) {
    static_assert(sizeof(hb::SmallLock) == 1, "a storage's lock is one byte");
    hb::SmallLock lock;
    CHECK(lock.try_lock());
    CHECK(!lock.try_lock());
    lock.unlock();
    std::unique_lock<hb::SmallLock> held(lock, std::try_to_lock);
    CHECK(held.owns_lock());
    CHECK(!lock.try_lock());
}

TEST_CASE(small_lock_excludes_under_contention) {
    // Counters updated without atomics: a lost update shows two holders at once. Long critical
    // sections (a yield inside) make the waiters park, not only spin.
    hb::SmallLock lock;
    int64_t counter = 0, inside = 0, most_inside = 0;
    constexpr int kRounds = 20000;
    on_threads([&](int) {
        for (int i = 0; i < kRounds; ++i) {
            std::lock_guard<hb::SmallLock> hold(lock);
            most_inside = std::max(most_inside, ++inside);
            ++counter;
            if (i % 64 == 0) std::this_thread::yield();
            --inside;
        }
    });
    CHECK_EQ(counter, int64_t(kThreads) * kRounds);
    CHECK_EQ(most_inside, int64_t(1));
}

TEST_CASE(small_locks_sharing_a_parking_slot_each_wake_their_waiters) {
    // Many locks, more than the parking table's slots, each held in turn by all threads: a waiter
    // woken for another lock of its slot looks again, and no wake-up is lost (a lost one hangs).
    std::vector<hb::SmallLock> locks(512);
    std::vector<int64_t> counts(locks.size());
    on_threads([&](int t) {
        for (int round = 0; round < 200; ++round)
            for (size_t i = size_t(t); i < locks.size(); i += 7) {
                std::lock_guard<hb::SmallLock> hold(locks[i]);
                ++counts[i];
            }
    });
    int64_t total = 0;
    for (int64_t c : counts) total += c;
    int64_t expected = 0;
    for (int t = 0; t < kThreads; ++t)
        for (size_t i = size_t(t); i < locks.size(); i += 7) expected += 200;
    CHECK_EQ(total, expected);
}

TEST_CASE(slots_are_aligned_distinct_and_reused) {
    for (size_t bytes = hb::kSlotAlignment; bytes <= hb::kLargestSlot; bytes += hb::kSlotAlignment) {
        std::vector<uint8_t *> taken;
        std::set<uint8_t *> seen;
        for (int i = 0; i < 600; ++i) {  // more than one 64 KiB chunk of the smaller sizes
            auto *slot = static_cast<uint8_t *>(hb::take_slot(bytes));
            CHECK(slot != nullptr);
            CHECK_EQ(reinterpret_cast<uintptr_t>(slot) % hb::kSlotAlignment, uintptr_t(0));
            std::memset(slot, 0xab, bytes);  // all of it is ours (ASan checks it in its builds)
            for (uint8_t *other : taken)
                CHECK(slot + bytes <= other || other + bytes <= slot);  // no two overlap
            taken.push_back(slot);
            seen.insert(slot);
        }
        for (uint8_t *slot : taken) hb::give_slot(slot, bytes);
        // Given back, they serve the next blocks of their size (under ASan every slot is new).
#if !defined(__SANITIZE_ADDRESS__)
        auto *again = static_cast<uint8_t *>(hb::take_slot(bytes));
        CHECK(seen.count(again) == 1);
        hb::give_slot(again, bytes);
#endif
    }
}

TEST_CASE(slots_taken_and_given_on_threads_never_serve_two_holders) {
    // Each thread writes its mark over its slots and checks it is still there before giving them
    // back: a slot handed to two threads at once shows the other's mark.
    std::atomic<int> wrong{0};
    on_threads([&](int t) {
        std::vector<std::pair<uint8_t *, size_t>> held;
        auto give_all = [&] {
            for (auto [slot, bytes] : held) {
                for (size_t b = 0; b < bytes; ++b)
                    if (slot[b] != uint8_t(t + 1)) ++wrong;
                hb::give_slot(slot, bytes);
            }
            held.clear();
        };
        for (int round = 0; round < 2000; ++round) {
            size_t bytes = hb::kSlotAlignment * size_t(1 + (round + t) % 4);
            auto *slot = static_cast<uint8_t *>(hb::take_slot(bytes));
            std::memset(slot, t + 1, bytes);
            held.emplace_back(slot, bytes);
            if (held.size() == 8) give_all();
        }
        give_all();
    });
    CHECK_EQ(wrong.load(), 0);
}
