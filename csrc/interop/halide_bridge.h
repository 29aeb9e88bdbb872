// halide_bridge.h: buffers and Halide's own buffers (an hl.Buffer's halide_buffer_t), sharing one
// residency state both ways (halide_bridge.cpp). The storage keeps the rules of a struct someone
// else owns (Buffer::bind_struct(), publish_struct(), raw_views.cpp); the bridge knows the
// struct's owner: Halide's element types, its geometry, the storage each struct is bound to.
#pragma once

#include <memory>

#include "abi/halide_abi.h"
#include "storage/buffer.h"

namespace hb {

/// A buffer over the host memory `external` describes (an hl.Buffer's halide_buffer_t), kept
/// alive by `owner`, sharing one residency state with it: `external` becomes the storage's bound
/// struct. A struct bound to a live storage already gives a view of that one. TypeError naming
/// `entry` for an element type no dtype holds; ValueError for a struct with no shape or no memory.
Buffer buffer_from_halide_struct(const char *entry, halide_buffer_t *external, std::shared_ptr<void> owner);

/// The owner whose halide_buffer_t describes exactly this view (buffer_from_halide_struct()'s, the
/// view covering its storage); null otherwise.
std::shared_ptr<void> halide_owner_of(Buffer &view);

/// Binds `external` (a halide_buffer_t someone else made over exactly this view's memory and keeps
/// alive: the hl.Buffer of to_halide()) to the view's storage as a published view, shown the
/// shared state right away (Buffer::publish_struct()). Valid until unbind_halide_struct().
std::unique_ptr<RawView> bind_halide_struct(Buffer &view, halide_buffer_t *external);

/// Whether `binding` (bind_halide_struct()'s) still describes its memory: its owner changed
/// nothing in place.
bool halide_struct_bound(Buffer &view, RawView &binding);

/// Ends bind_halide_struct() before the struct's owner lets go of it (Buffer::withdraw_struct()):
/// a device copy of Halide's JIT it shows is freed, its data coming home first; else a newer
/// device copy comes home. The struct is left host only, host dirty, showing no device memory.
void unbind_halide_struct(Buffer &view, const char *entry, std::unique_ptr<RawView> binding);

}  // namespace hb
