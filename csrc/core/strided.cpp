// strided.cpp: element loops over strided host memory. Each loop first folds the axes into as
// few as possible (extent-1 axes dropped, negative strides flipped, contiguous axes merged), so a
// dense array, whatever its axis order, is one memcpy or one run of its pattern.
#include "core/strided.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include "core/layout.h"

namespace hb {
namespace {

/// Axes of one or two arrays sharing a shape, folded; outermost first.
struct Folded {
    std::vector<int64_t> shape, a, b;  ///< extents, strides of the first and second array
    bool empty = false;                 ///< some extent is 0: no element at all
};

/// Folds the axes, ordered by the first array's strides; `a0`/`b0` move to the element the
/// flipped axes start at. Axes merge only where both arrays are contiguous across them.
Folded fold(uint8_t *&a0, const std::vector<int64_t> &a, const uint8_t *&b0, const std::vector<int64_t> *b,
            const std::vector<int64_t> &shape) {
    Folded f;
    std::vector<size_t> axes;
    for (size_t i = 0; i < shape.size(); ++i) {
        if (shape[i] == 0) f.empty = true;
        if (shape[i] > 1) axes.push_back(i);
    }
    if (f.empty) return f;
    std::vector<int64_t> sa(a), sb(b ? *b : a);
    for (size_t i : axes) {
        if (sa[i] >= 0) continue;  // flip the first array's negative axes (the second follows)
        a0 += (shape[i] - 1) * sa[i];
        if (b) b0 += (shape[i] - 1) * sb[i];
        sa[i] = -sa[i];
        sb[i] = -sb[i];
    }
    std::stable_sort(axes.begin(), axes.end(), [&](size_t x, size_t y) { return sa[x] > sa[y]; });
    for (size_t i : axes) {
        if (!f.shape.empty() && sa[i] * shape[i] == f.a.back() && sb[i] * shape[i] == f.b.back()) {
            // Contiguous with the axis outside it on both sides: one axis.
            f.shape.back() *= shape[i];
            f.a.back() = sa[i];
            f.b.back() = sb[i];
            continue;
        }
        f.shape.push_back(shape[i]);
        f.a.push_back(sa[i]);
        f.b.push_back(sb[i]);
    }
    return f;
}

void copy_axes(uint8_t *dst, const uint8_t *src, const Folded &f, size_t axis, int64_t item) {
    if (axis == f.shape.size()) {
        std::memcpy(dst, src, size_t(item));
        return;
    }
    int64_t n = f.shape[axis], ds = f.a[axis], ss = f.b[axis];
    if (axis + 1 == f.shape.size() && ds == item && ss == item) {
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
    if (axis == f.shape.size()) {
        std::memcpy(dst, pattern, size_t(item));
        return;
    }
    if (axis + 1 == f.shape.size() && f.a[axis] == item) {
        fill_run(dst, f.shape[axis], pattern, item);
        return;
    }
    for (int64_t i = 0; i < f.shape[axis]; ++i) fill_axes(dst + i * f.a[axis], f, axis + 1, pattern, item);
}

}  // namespace

void copy_strided(uint8_t *dst, const std::vector<int64_t> &dst_strides, const uint8_t *src,
                  const std::vector<int64_t> &src_strides, const std::vector<int64_t> &shape, int64_t itemsize) {
    Folded f = fold(dst, dst_strides, src, &src_strides, shape);
    if (!f.empty) copy_axes(dst, src, f, 0, itemsize);
}

void fill_strided(uint8_t *dst, const std::vector<int64_t> &strides, const std::vector<int64_t> &shape,
                  const uint8_t *pattern, int64_t itemsize) {
    const uint8_t *unused = nullptr;
    Folded f = fold(dst, strides, unused, nullptr, shape);
    if (!f.empty) fill_axes(dst, f, 0, pattern, itemsize);
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
