// strided.cpp: element loops over strided host memory. Each loop first folds the axes into as
// few as possible (fold_axes(): extent-1 axes dropped, negative strides flipped, contiguous axes
// merged), so a dense array, whatever its axis order, is one memcpy or one run of its pattern.
#include "core/strided.h"

#include <algorithm>
#include <cstring>

#include "core/layout.h"

namespace hb {
namespace {

// The loops below run over a fold's axes, outermost first: stride[0] the destination's (the
// layout the fold is ordered by), stride[1] the source's.

void copy_axes(uint8_t *dst, const uint8_t *src, const Folded &f, size_t axis, int64_t item) {
    if (axis == f.axes.size()) {
        std::memcpy(dst, src, size_t(item));
        return;
    }
    int64_t n = f.axes[axis].extent, ds = f.axes[axis].stride[0], ss = f.axes[axis].stride[1];
    if (axis + 1 == f.axes.size() && ds == item && ss == item) {
        std::memcpy(dst, src, size_t(n * item));
        return;
    }
    for (int64_t i = 0; i < n; ++i) copy_axes(dst + i * ds, src + i * ss, f, axis + 1, item);
}

/// `count` copies of the pattern, one after another: memset for a byte, else doubling copies.
void fill_run(uint8_t *dst, int64_t count, const uint8_t *pattern, int64_t item) {
    if (item == 1) {
        std::memset(dst, pattern[0], size_t(count));
        return;
    }
    std::memcpy(dst, pattern, size_t(item));
    for (int64_t done = 1; done < count;) {
        int64_t n = std::min(done, count - done);
        std::memcpy(dst + done * item, dst, size_t(n * item));
        done += n;
    }
}

void fill_axes(uint8_t *dst, const Folded &f, size_t axis, const uint8_t *pattern, int64_t item) {
    if (axis == f.axes.size()) {
        std::memcpy(dst, pattern, size_t(item));
        return;
    }
    const FoldedAxis &a = f.axes[axis];
    if (axis + 1 == f.axes.size() && a.stride[0] == item) {
        fill_run(dst, a.extent, pattern, item);
        return;
    }
    for (int64_t i = 0; i < a.extent; ++i) fill_axes(dst + i * a.stride[0], f, axis + 1, pattern, item);
}

}  // namespace

void copy_strided(uint8_t *dst, const std::vector<int64_t> &dst_strides, const uint8_t *src,
                  const std::vector<int64_t> &src_strides, const std::vector<int64_t> &shape, int64_t itemsize) {
    Folded f = fold_axes(shape, dst_strides, src_strides, Repeats::innermost);
    if (!f.empty) copy_axes(dst + f.start[0], src + f.start[1], f, 0, itemsize);
}

void fill_strided(uint8_t *dst, const std::vector<int64_t> &strides, const std::vector<int64_t> &shape,
                  const uint8_t *pattern, int64_t itemsize) {
    Folded f = fold_axes(shape, strides, strides, Repeats::innermost);
    if (!f.empty) fill_axes(dst + f.start[0], f, 0, pattern, itemsize);
}

bool ranges_overlap(const uint8_t *a, const std::vector<int64_t> &a_strides, const uint8_t *b,
                    const std::vector<int64_t> &b_strides, const std::vector<int64_t> &shape, int64_t itemsize) {
    for (int64_t n : shape)
        if (n == 0) return false;
    int64_t alo, ahi, blo, bhi;  // arrays in memory: no overflow
    byte_reach(shape, a_strides, itemsize, alo, ahi);
    byte_reach(shape, b_strides, itemsize, blo, bhi);
    return a + alo < b + bhi && b + blo < a + ahi;
}

}  // namespace hb
