// layout.cpp: the rules of a strided layout that refuse with a message, sort or fold axes (the
// header holds the ones run per axis).
#include "core/layout.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <string>
#include <utility>

#include "core/errors.h"
#include "core/text.h"

namespace hb {

void refuse_count(const char *entry, CountFault fault, const Axes &shape, size_t axis) {
    switch (fault) {
        case CountFault::too_many_axes:
            throw ValueError(std::string(entry) + "(): " + str(int64_t(shape.size())) +
                             " axes is more than the " + str(kMaxDims) + " supported; reshape the data");
        case CountFault::negative_extent:
            throw ValueError(std::string(entry) + "(): negative extent " + str(shape[axis]) +
                             "; every extent must be >= 0");
        case CountFault::extent_over_int32:
            throw ValueError(std::string(entry) + "(): extent " + str(shape[axis]) +
                             " exceeds Halide's int32 limit (2**31 - 1); split the axis");
        case CountFault::elements:
            throw ValueError(std::string(entry) + "(): the shape has more than 2**63 elements; "
                             "use a smaller shape");
        case CountFault::bytes:
        case CountFault::none:  // not a fault: never passed
            break;
    }
    throw ValueError(std::string(entry) + "(): the shape needs more than 2**63 bytes; "
                     "use a smaller shape");
}

void check_mins(const char *entry, const Axes &shape, const Axes &mins) {
    for (size_t i = 0; i < mins.size(); ++i)
        if (!coordinates_fit(mins[i], shape[i]))
            throw ValueError(std::string(entry) + "(): min " + str(mins[i]) + " of axis " + str(int64_t(i)) +
                             " (extent " + str(shape[i]) + ") leaves " + kInt32Coordinates +
                             "; pass mins with min + extent - 1 inside them");
}

std::vector<int> permutation(const char *entry, const char *what, const std::vector<int> &axes, int n,
                             const char *fix) {
    std::vector<int> out;
    std::vector<bool> seen(size_t(n), false);
    bool ok = axes.size() == size_t(n);
    for (size_t i = 0; ok && i < axes.size(); ++i) {
        int64_t a = axes[i] < 0 ? int64_t(axes[i]) + n : axes[i];
        ok = a >= 0 && a < n && !seen[size_t(a)];
        if (ok) {
            seen[size_t(a)] = true;
            out.push_back(int(a));
        }
    }
    if (!ok)
        throw ValueError(std::string(entry) + "(): " + what + " must be a permutation of " +
                         (n ? "0.." + str(n - 1) : std::string("no axes, ()")) + "; " + fix);
    return out;
}

Axes byte_strides(const Axes &element_strides, int64_t itemsize) {
    Axes bytes(element_strides.size());
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = element_strides[i] * itemsize;
    return bytes;
}

Layout dense_layout(const char *entry, Axes shape_arg, int64_t itemsize, const std::vector<int> *order) {
    // The shape moves into the value first and the rules read it there: it moves once.
    size_t n = shape_arg.size();
    Layout layout{std::move(shape_arg), Axes(n), 0, 0};
    const Axes &shape = layout.shape;
    if (order) {
        std::vector<int> axes = permutation(entry, "order", *order, int(n),
                                            "pass 'C', 'F' or each axis once, outermost in memory first");
        dense_strides_into(layout.strides.data(), shape.data(), n, itemsize, [&](size_t k) { return axes[k]; });
    } else {
        dense_strides_into(layout.strides.data(), shape.data(), n, itemsize, [](size_t k) { return k; });
    }
    layout.count = checked_count(entry, shape, itemsize);
    layout.bytes = layout.count * itemsize;
    normalize_strides(entry, shape, layout.strides, int(itemsize), "use a smaller shape");
    return layout;
}

std::vector<int> memory_order(const int64_t *strides, size_t n, Repeats repeats) {
    std::vector<int> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
        return outer_in_memory(strides[size_t(a)], strides[size_t(b)], repeats);
    });
    return order;
}

bool is_dense(const Axes &shape, const Axes &strides, int64_t itemsize) {
    if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return true;
    Axes magnitudes(strides.size());
    for (size_t i = 0; i < strides.size(); ++i) magnitudes[i] = strides[i] < 0 ? -strides[i] : strides[i];
    std::vector<int> order = memory_order(strides);
    return dense_in_order(shape.data(), magnitudes.data(), shape.size(), itemsize,
                          [&](size_t k) { return order[k]; });
}

Folded fold_axes(const int64_t *shape, size_t n, const int64_t *strides0, const int64_t *strides1,
                 Repeats repeats) {
    Folded f;
    std::vector<FoldedAxis> axes;
    for (size_t i = 0; i < n; ++i) {
        if (shape[i] <= 0) {
            f.empty = true;
            return f;
        }
        if (shape[i] == 1) continue;
        FoldedAxis a{shape[i], {strides0[i], strides1[i]}};
        if (a.stride[0] < 0) {  // flip the first layout's backward axes (the second follows)
            for (int side = 0; side < 2; ++side) {
                f.start[side] += (a.extent - 1) * a.stride[side];
                a.stride[side] = -a.stride[side];
            }
        }
        axes.push_back(a);
    }
    std::stable_sort(axes.begin(), axes.end(), [&](const FoldedAxis &a, const FoldedAxis &b) {
        return outer_in_memory(a.stride[0], b.stride[0], repeats);
    });
    for (const FoldedAxis &a : axes) {
        if (!f.axes.empty()) {
            FoldedAxis &outer = f.axes.back();
            if (outer.stride[0] == a.stride[0] * a.extent && outer.stride[1] == a.stride[1] * a.extent) {
                // Contiguous with the axis outside it in both layouts: one axis, with its stride.
                outer.extent *= a.extent;
                outer.stride[0] = a.stride[0];
                outer.stride[1] = a.stride[1];
                continue;
            }
        }
        f.axes.push_back(a);
    }
    return f;
}

// --- memory someone else describes --------------------------------------------------------------

void check_memory(const char *entry, const uint8_t *data, const Axes &shape, const Axes &strides, int64_t count,
                  int itemsize) {
    if (count == 0) return;
    auto refuse = [&](const std::string &what) {
        return BufferError(std::string(entry) + "(): " + what + "; the memory's description is broken "
                           "(its exporter or producer is at fault)");
    };
    if (!data) throw refuse("NULL data for " + str(count) + " elements");
    int64_t lo, hi;  // bytes from data: [lo, hi)
    if (!byte_reach(shape, strides, itemsize, lo, hi)) throw refuse("the strides reach beyond the address space");
    if (!within_address_space(data, lo, hi)) throw refuse("data and strides reach beyond the address space");
}

void normalize_strides(const char *entry, const Axes &shape, Axes &strides, int itemsize, const char *fix) {
    bool empty = std::find(shape.begin(), shape.end(), 0) != shape.end();
    if (empty) strides = c_strides(shape, itemsize);
    for (size_t i = 0; i < strides.size(); ++i) {
        int64_t s = strides[i], elements;
        if (element_stride(empty ? 1 : shape[i], s, itemsize, elements)) {
            strides[i] = elements * itemsize;
            continue;
        }
        if (s % itemsize != 0)
            throw ValueError(std::string(entry) + "(): stride " + str(s) +
                             " bytes is not a multiple of the itemsize " + str(itemsize) + "; " + fix);
        throw ValueError(std::string(entry) + "(): stride " + str(s) + " bytes exceeds Halide's int32 element strides; " +
                         fix);
    }
}

}  // namespace hb
