// aligned_slots.h: 128-byte aligned blocks of a few small sizes, without malloc's header or slack.
//
// A small buffer's storage and data are one block (storage/buffer.cpp): the data must start on
// 128 bytes, which malloc (16-byte aligned, a header of its own before each block) costs up to
// 120 bytes of slack and 8 of header for. Slots are cut from 64 KiB chunks that start on 128
// bytes, one free list per size, so every slot starts on 128 bytes and costs its size alone. A
// freed slot goes back to its list for the next block of its size; chunks stay with the process
// (as the blocks of malloc's small bins mostly do). Under AddressSanitizer every slot is a block
// of its own (aligned_alloc), so a read past a slot or after its release is still reported.
#pragma once

#include <cstddef>

#include "core/constants.h"

namespace hb {

constexpr size_t kSlotAlignment = kHostAlignment;  ///< every slot starts on the host alignment
constexpr size_t kLargestSlot = 4 * kSlotAlignment;  ///< the sizes served: 128, 256, 384, 512

/// A slot of `bytes` (a multiple of kSlotAlignment, at most kLargestSlot), contents undefined;
/// null when memory runs out.
void *take_slot(size_t bytes);
/// Gives back a slot take_slot(bytes) returned.
void give_slot(void *slot, size_t bytes);

}  // namespace hb
