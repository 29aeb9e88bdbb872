// overlap.h: whether strided views share memory: the elements of one view among themselves (a
// broadcast or as_strided view, whose writes land on one another), and two views (an output and
// an input of one call). Byte strides of any sign, NumPy's axis order (the tests do not care).
//
// Both tests take the cheap answer where the geometry gives it (an empty view, byte spans apart,
// axes that nest by |stride|: contiguous, transposed, cropped, stepped and reversed views) and
// otherwise decide exactly, with a bounded integer search (overlap.cpp), which answers `maybe`
// past its work limit: whoever must be safe treats that as overlapping.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hb {

/// A strided view of memory as the overlap tests read it.
struct ByteView {
    const uint8_t *data;     ///< the element at index 0 of every axis
    const int64_t *shape;    ///< `ndim` extents
    const int64_t *strides;  ///< `ndim` byte strides, any sign
    size_t ndim;
    int64_t itemsize;  ///< bytes of one element (> 0)
};

/// What an overlap test found.
enum class Overlap : uint8_t {
    none,   ///< no byte in common (an empty view has none)
    same,   ///< two views of the very same elements: one first element, itemsize, shape and strides
            ///< (those of axes of extent 1 aside): a call computing in place
    some,   ///< some byte in common, proven
    maybe,  ///< undecided within the work limit: treat it as `some`
};

/// The bytes a view's elements occupy, from the lowest address to one past the highest; lo == hi
/// for a view of no element.
struct AddressSpan {
    uintptr_t lo = 0, hi = 0;
};
/// The span of a view, and whether its axes nest in C order (`nested`): walking them from the
/// last (innermost) out, each axis that steps has a |stride| past all the axes inside it reach,
/// so its elements are distinct (contiguous, cropped, stepped and reversed views are). One pass,
/// inline: a pipeline call asks it of every buffer. The view lies in the address space (its
/// reach computed without overflow: check_memory()), as every Buffer's does.
inline AddressSpan address_span(const ByteView &v, bool &nested) {
    uintptr_t lo = reinterpret_cast<uintptr_t>(v.data), hi = lo + uintptr_t(v.itemsize);
    nested = true;
    for (size_t i = v.ndim; i-- > 0;) {
        int64_t n = v.shape[i], s = v.strides[i];
        if (n == 0) return AddressSpan{};
        if (n > 1 && uintptr_t(s < 0 ? -s : s) < hi - lo) nested = false;
        if (s < 0) lo += uintptr_t((n - 1) * s);
        else hi += uintptr_t((n - 1) * s);
    }
    return AddressSpan{lo, hi};
}
/// Whether two views share no byte by their spans alone: one is empty, or they lie apart.
inline bool spans_apart(const AddressSpan &a, const AddressSpan &b) {
    return a.lo == a.hi || b.lo == b.hi || a.hi <= b.lo || b.hi <= a.lo;
}

/// Nodes the exact search may visit per test before it answers `maybe`: a few milliseconds at
/// most, for geometry no ordinary view has.
constexpr int64_t kOverlapWork = 100000;

/// Whether two distinct elements of one view share a byte: `none`, `some` (an axis of stride 0
/// and extent > 1 always does), or `maybe` past `work` nodes. Never `same`.
Overlap internal_overlap(const ByteView &v, int64_t work = kOverlapWork);

/// Whether an element of `a` and one of `b` share a byte: `none`, `same` (the very same view),
/// `some`, or `maybe` past `work` nodes.
Overlap views_overlap(const ByteView &a, const ByteView &b, int64_t work = kOverlapWork);

}  // namespace hb
