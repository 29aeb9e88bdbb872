// layout.h: the rules of a strided layout, each in one place: what a shape may be, the bytes a
// layout reaches, the strides of a dense layout in any axis order, contiguity, Halide's
// coordinate limits, memory order, and the fold of axes under every strided loop and copy plan. Shapes in NumPy axis order (axis 0 outermost), strides in bytes (any sign)
// unless said otherwise. The rules the small-object path (Buffer(), b[1:3], from_host) runs per
// axis are inline.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/axes.h"
#include "core/constants.h"

namespace hb {

// --- what a geometry may be -------------------------------------------------------------------

/// Halide holds an axis's min and max (min + extent - 1) in int32s: does [min, min + extent) fit?
inline bool coordinates_fit(int64_t min, int64_t extent) {
    return min >= kInt32Min && min <= kInt32Max && (extent == 0 || min <= kInt32Max - (extent - 1));
}
/// Those coordinates, for messages.
constexpr const char *kInt32Coordinates = "Halide's int32 coordinates [-2**31, 2**31 - 1]";

/// What a shape has that Halide or a 64-bit address cannot describe (count_of()).
enum class CountFault : uint8_t { none, too_many_axes, negative_extent, extent_over_int32, elements, bytes };

/// The rule of checked_count(): the element count of a shape (in `count`), or the first fault
/// found, with the axis it was found at (`axis`).
inline CountFault count_of(const Axes &shape, int64_t itemsize, int64_t &count, size_t &axis) {
    count = 1;
    if (shape.size() > size_t(kMaxDims)) return CountFault::too_many_axes;
    for (axis = 0; axis < shape.size(); ++axis) {
        int64_t n = shape[axis];
        if (n < 0) return CountFault::negative_extent;
        if (n > kInt32Max) return CountFault::extent_over_int32;
        if (__builtin_mul_overflow(count, n, &count)) return CountFault::elements;
    }
    int64_t bytes;
    return __builtin_mul_overflow(count, itemsize, &bytes) ? CountFault::bytes : CountFault::none;
}

/// The ValueError naming `entry` for a fault count_of() found.
[[noreturn]] void refuse_count(const char *entry, CountFault fault, const Axes &shape, size_t axis);

/// Element count of a shape, refusing (ValueError naming `entry`) anything Halide or a 64-bit
/// address cannot describe: more than kMaxDims axes, negative or int32-overflowing extents,
/// 2**63 bytes. Inline: every new buffer and view checks its shape.
inline int64_t checked_count(const char *entry, const Axes &shape, int64_t itemsize) {
    int64_t count;
    size_t axis = 0;
    CountFault fault = count_of(shape, itemsize, count, axis);
    if (fault != CountFault::none) refuse_count(entry, fault, shape, axis);
    return count;
}
/// ValueError naming `entry` unless every axis's [min, min + extent) fits Halide's int32
/// coordinates (one min per axis).
void check_mins(const char *entry, const Axes &shape, const Axes &mins);
/// `axes` as a permutation of 0..n-1 (negative axes count from the end), or ValueError
/// "<entry>(): <what> must be a permutation of ...; <fix>".
std::vector<int> permutation(const char *entry, const char *what, const std::vector<int> &axes, int n,
                             const char *fix);

// --- reach ------------------------------------------------------------------------------------

/// The bytes the elements of a non-empty layout of `n` axes reach, relative to its element at
/// index 0: [lo, hi). False when that overflows int64 (lo and hi are then meaningless). The
/// caller rules out empty layouts: an axis of extent 0 or 1 never steps.
inline bool byte_reach(const int64_t *shape, const int64_t *strides, size_t n, int64_t itemsize,
                       int64_t &lo, int64_t &hi) {
    lo = 0;
    hi = itemsize;
    for (size_t i = 0; i < n; ++i) {
        int64_t reach;
        if (shape[i] > 1 && (__builtin_mul_overflow(shape[i] - 1, strides[i], &reach) ||
                             __builtin_add_overflow(reach < 0 ? lo : hi, reach, reach < 0 ? &lo : &hi)))
            return false;
    }
    return true;
}
inline bool byte_reach(const Axes &shape, const Axes &strides, int64_t itemsize, int64_t &lo, int64_t &hi) {
    return byte_reach(shape.data(), strides.data(), shape.size(), itemsize, lo, hi);
}
inline bool byte_reach(const std::vector<int64_t> &shape, const std::vector<int64_t> &strides, int64_t itemsize,
                       int64_t &lo, int64_t &hi) {
    return byte_reach(shape.data(), strides.data(), shape.size(), itemsize, lo, hi);
}

// --- dense layouts ----------------------------------------------------------------------------
// One convention for an axis order: axis_at(k) is the k-th axis from the outermost in memory
// (C order: k itself; F order: n - 1 - k), and the rules walk it from the innermost out.

/// Writes to `out` the strides of a dense layout of `shape` (`n` axes) in the order `axis_at`
/// gives: each axis's stride is the itemsize times the extents of the axes inside it. A shape
/// too large for int64 strides is refused by whoever checks its count (an empty one has no
/// element to step to): past the overflow, strides are 0, never undefined.
template <typename AxisAt>
inline void dense_strides_into(int64_t *out, const int64_t *shape, size_t n, int64_t itemsize, AxisAt axis_at) {
    int64_t s = itemsize;
    for (size_t k = n; k-- > 0;) {
        size_t i = size_t(axis_at(k));
        out[i] = s;
        if (__builtin_mul_overflow(s, shape[i] > 0 ? shape[i] : 1, &s)) s = 0;
    }
}
/// Strides of a C-contiguous layout of this shape (in elements for an itemsize of 1).
inline Axes c_strides(const Axes &shape, int64_t itemsize) {
    Axes strides(shape.size());
    dense_strides_into(strides.data(), shape.data(), shape.size(), itemsize, [](size_t k) { return k; });
    return strides;
}
inline std::vector<int64_t> c_strides(const std::vector<int64_t> &shape, int64_t itemsize) {
    std::vector<int64_t> strides(shape.size());
    dense_strides_into(strides.data(), shape.data(), shape.size(), itemsize, [](size_t k) { return k; });
    return strides;
}
/// Strides in elements as byte strides (each times `itemsize`).
Axes byte_strides(const Axes &element_strides, int64_t itemsize);

// --- a new buffer's layout --------------------------------------------------------------------

/// The layout of a new dense buffer, made once by dense_layout() and handed whole to storage,
/// which makes its memory and its first view from it and asks nothing more of these rules.
struct Layout {
    Axes shape;     ///< NumPy axis order
    Axes strides;   ///< bytes: dense in the order asked, made what a view keeps (normalize_strides())
    int64_t count;  ///< elements (checked_count())
    int64_t bytes;  ///< count times the itemsize: the host memory it needs
};
/// The layout of a new dense buffer of `shape` whose axes lie in memory in `order`, outermost
/// first (a permutation, negative axes counting from the end; null: C order). Refuses, with
/// ValueErrors naming `entry`: an order that is no permutation of the axes, a shape
/// checked_count() refuses, and strides beyond Halide's int32 element strides. No memory moves.
Layout dense_layout(const char *entry, Axes shape, int64_t itemsize, const std::vector<int> *order = nullptr);

/// The one rule of contiguity, in any order: walking the axes from the innermost out (axis_at as
/// above), each axis that steps (extent > 1) has the stride of a dense layout, the itemsize times
/// the extents inside it; reaching an axis of extent 0 ends the walk (no element is addressed).
template <typename AxisAt>
inline bool dense_in_order(const int64_t *shape, const int64_t *strides, size_t n, int64_t itemsize,
                           AxisAt axis_at) {
    int64_t expected = itemsize;
    for (size_t k = n; k-- > 0;) {
        size_t i = size_t(axis_at(k));
        if (shape[i] == 0) return true;
        if (shape[i] != 1 && strides[i] != expected) return false;
        expected *= shape[i];
    }
    return true;
}

/// NumPy's two named orders of a dense layout.
enum class Order : uint8_t {
    C,  ///< the last axis innermost
    F,  ///< the first axis innermost (Fortran's)
};
/// Whether a layout is contiguous in `order`, as NumPy's flags say it (axes of extent 1 may
/// have any stride).
inline bool is_contiguous(const Axes &shape, const Axes &strides, int64_t itemsize, Order order) {
    size_t n = shape.size();
    if (order == Order::C) return dense_in_order(shape.data(), strides.data(), n, itemsize, [](size_t k) { return k; });
    return dense_in_order(shape.data(), strides.data(), n, itemsize, [n](size_t k) { return n - 1 - k; });
}

// --- memory order -----------------------------------------------------------------------------

/// Where the axes of stride 0 (an element repeated, as in a broadcast view) go in memory order.
enum class Repeats : uint8_t {
    innermost,  ///< by their |stride|, 0: inside every axis that steps (the host loops)
    outermost,  ///< outside every axis that steps: a device copy's rows and pitches cannot repeat
};
/// The one memory-order comparator: whether an axis of byte stride `a` lies outside one of byte
/// stride `b` (larger |stride| outside; stride 0 as `repeats` says). Every ordering of axes by
/// their strides in csrc/ sorts with it, stably, so that ties stay in axis order.
inline bool outer_in_memory(int64_t a, int64_t b, Repeats repeats = Repeats::innermost) {
    if (repeats == Repeats::outermost && (a == 0) != (b == 0)) return a == 0;
    return (a < 0 ? -a : a) > (b < 0 ? -b : b);
}
/// The axes from outermost to innermost in memory (outer_in_memory()), ties in axis order.
std::vector<int> memory_order(const int64_t *strides, size_t n, Repeats repeats = Repeats::innermost);
inline std::vector<int> memory_order(const Axes &strides, Repeats repeats = Repeats::innermost) {
    return memory_order(strides.data(), strides.size(), repeats);
}
inline std::vector<int> memory_order(const std::vector<int64_t> &strides, Repeats repeats = Repeats::innermost) {
    return memory_order(strides.data(), strides.size(), repeats);
}

/// Whether an axis runs backwards in memory: it steps (extent > 1) with a negative stride. An
/// axis of extent 0 or 1 never steps, whatever its stride.
inline bool runs_backwards(int64_t extent, int64_t stride) { return extent > 1 && stride < 0; }
/// Whether the element at index 0 is the layout's lowest byte: no axis runs backwards.
inline bool is_forward(const Axes &shape, const Axes &strides) {
    for (size_t i = 0; i < shape.size(); ++i)
        if (runs_backwards(shape[i], strides[i])) return false;
    return true;
}
/// The same rule for a halide_buffer_t (Halide's order of axes: the rule does not care).
inline bool is_forward(const halide_buffer_t &buf) {
    for (int i = 0; i < buf.dimensions; ++i)
        if (runs_backwards(buf.dim[i].extent, buf.dim[i].stride)) return false;
    return true;
}

/// Whether the elements fill one run of bytes exactly, in some axis order (memory_order()) and
/// whatever the signs of the strides: contiguous in that order, by |stride|. True when empty.
bool is_dense(const Axes &shape, const Axes &strides, int64_t itemsize);

// --- folding ----------------------------------------------------------------------------------
// A loop over the elements of one shape in one or two layouts (a copy's destination and source,
// a device and a host side, or one layout alone) runs over as few axes as the layouts allow, as
// Halide's make_buffer_copy plans both its host and its device copies.

/// An axis of a fold: its extent, and its byte stride in each layout.
struct FoldedAxis {
    int64_t extent;
    int64_t stride[2];
};
/// The axes of a fold, outermost first, and where each layout's loop starts.
struct Folded {
    std::vector<FoldedAxis> axes;  ///< outermost first; none for one element
    int64_t start[2] = {0, 0};     ///< bytes from each layout's element at index 0 to the first one the
                                   ///< loop reaches (the flips below move it)
    bool empty = false;            ///< some extent is 0: no element at all (then no axes)
};
/// Folds a shape (`n` axes) laid out at byte strides `strides0` and `strides1` (the same pointer
/// for one layout alone): axes of extent 1 dropped; each axis the first layout runs backwards
/// flipped in both (each layout's start moves to the axis's last element, so the first layout's
/// strides are all >= 0); the axes ordered by the first layout's memory order (outer_in_memory(),
/// stride 0 where `repeats` says, ties in axis order); and each axis merged into the one inside
/// it where both layouts continue contiguously across them (its stride is the inner one's times
/// the inner extent, in both). The second layout's strides keep their signs.
Folded fold_axes(const int64_t *shape, size_t n, const int64_t *strides0, const int64_t *strides1, Repeats repeats);
inline Folded fold_axes(const std::vector<int64_t> &shape, const std::vector<int64_t> &strides0,
                        const std::vector<int64_t> &strides1, Repeats repeats) {
    return fold_axes(shape.data(), shape.size(), strides0.data(), strides1.data(), repeats);
}

// --- what a pipeline takes as it is -------------------------------------------------------------

/// Halide's default constraint on a pipeline's buffers: dimension 0 (NumPy's last axis) steps
/// one element. A layout of `n` axes (strides in elements) is taken as it is when it has no
/// axes, no elements (normalize_strides() gives it C-contiguous strides), or a last axis that
/// steps one element or never steps (extent 0 or 1). A caller whose layout fails it passes a
/// dense copy, as torch ops compute on strided inputs (hb.torch).
inline bool innermost_steps_one(const int64_t *shape, const int64_t *strides, size_t n) {
    if (n == 0 || shape[n - 1] <= 1 || strides[n - 1] == 1) return true;
    for (size_t i = 0; i < n; ++i)
        if (shape[i] == 0) return true;
    return false;
}

// --- memory someone else describes --------------------------------------------------------------

/// Memory someone else describes (data, byte strides) must exist and stay inside the address
/// space: no NULL data for elements, and the lowest and highest byte any index reaches computed
/// without overflow (BufferError naming `entry` otherwise). What lies there is the describer's
/// word: it cannot be checked. `count` is the shape's element count (checked_count()).
void check_memory(const char *entry, const uint8_t *data, const Axes &shape, const Axes &strides, int64_t count,
                  int itemsize);
/// Byte strides made what a view keeps: whole elements that Halide's int32 element strides can
/// hold (ValueError naming `entry`, ending with `fix`, otherwise). The stride of an axis with at
/// most one element never addresses memory: whatever it is, it becomes the itemsize (NumPy calls
/// such arrays contiguous too). An empty layout addresses none at all: it gets C-contiguous
/// strides, whatever it came with (NumPy 2 gives empty arrays zero strides, which a pipeline's
/// default constraint, innermost stride 1, refuses), so a pipeline over an empty buffer is the
/// no-op it is for one made empty.
void normalize_strides(const char *entry, const Axes &shape, Axes &strides, int itemsize, const char *fix);
/// The element stride Halide takes (int32) for an axis of a non-empty layout, from its byte
/// stride: an axis of at most one element, which never steps, takes one element where its own
/// stride is none Halide can take. False where a stepping axis' stride is not a whole number of
/// elements, or beyond int32 (normalize_strides() says which, and how to fix it).
inline bool element_stride(int64_t extent, int64_t byte_stride, int64_t itemsize, int64_t &out) {
    bool whole = byte_stride % itemsize == 0;
    bool fits = byte_stride / itemsize <= kInt32Max && byte_stride / itemsize >= kInt32Min;
    out = whole && fits ? byte_stride / itemsize : 1;
    return (whole && fits) || extent <= 1;
}
/// Whether data and the bytes a non-empty layout reaches from it lie in the address space
/// (check_memory()'s test, for a caller that takes another way instead of raising).
inline bool within_address_space(const uint8_t *data, int64_t lo, int64_t hi) {
    uintptr_t base = reinterpret_cast<uintptr_t>(data);
    return base >= uintptr_t(0) - uintptr_t(lo) && uintptr_t(hi) <= std::numeric_limits<uintptr_t>::max() - base;
}

}  // namespace hb
