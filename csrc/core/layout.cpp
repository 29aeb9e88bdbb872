// layout.cpp: the rules of a strided layout that refuse with a message, or sort axes (the header
// holds the ones run per axis).
#include "core/layout.h"

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <string>

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

std::vector<int> memory_order(const Axes &strides) {
    std::vector<int> order(strides.size());
    std::iota(order.begin(), order.end(), 0);
    auto magnitude = [&](int axis) { return std::abs(strides[size_t(axis)]); };
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return magnitude(a) > magnitude(b); });
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

}  // namespace hb
