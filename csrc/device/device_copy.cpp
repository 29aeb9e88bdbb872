// device_copy.cpp: planning copies over strided regions as rectangular commands (see the header).
#include "device/device_copy.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>

#include "core/layout.h"
#include "core/strided.h"

namespace hb {
namespace {

using Axis = CopyPlan::Axis;

/// The axes of extent > 1, innermost first, with side 0's strides made positive (each flip
/// moves both sides' starts to the axis's last element), ordered by side 0's memory order with
/// zero strides (repeats) outermost, as they can never be part of a row or a pitch, and merged
/// where both sides continue contiguously: fold_axes(), the host loops' fold.
std::vector<Axis> folded_axes(const std::vector<int64_t> &shape, const std::vector<int64_t> &strides0,
                              const std::vector<int64_t> &strides1, int64_t start[2]) {
    Folded f = fold_axes(shape, strides0, strides1, Repeats::outermost);
    start[0] = f.start[0];
    start[1] = f.start[1];
    return std::vector<Axis>(f.axes.rbegin(), f.axes.rend());
}

/// Whether an axis can be the rows of a command: each side's pitch reaches past a row.
bool fits_as_rows(const Axis &a, int64_t row_bytes) {
    return a.stride[0] >= row_bytes && a.stride[1] >= row_bytes;
}

/// Whether an axis can be the slices of a command: each side's pitch is a whole number of row
/// pitches past the slice (what both OpenCL's and CUDA's rectangles can describe).
bool fits_as_slices(const Axis &a, int64_t rows, const int64_t row_pitch[2]) {
    for (int side = 0; side < 2; ++side) {
        if (a.stride[side] < rows * row_pitch[side] || a.stride[side] % row_pitch[side] != 0) return false;
    }
    return true;
}

/// The axes that become a command's rows and slices (indices into the axes left after the
/// row; -1: none): the pair the pitches allow that covers the most elements, so that the loop
/// around the commands is shortest.
struct RectAxes {
    int rows = -1, slices = -1;
};
RectAxes choose_rect_axes(const std::vector<Axis> &axes, int64_t row_bytes) {
    RectAxes best;
    int64_t most = 1;
    for (int r = 0; r < int(axes.size()); ++r) {
        if (!fits_as_rows(axes[r], row_bytes)) continue;
        if (axes[r].extent > most) {
            best = {r, -1};
            most = axes[r].extent;
        }
        const int64_t pitch[2] = {axes[r].stride[0], axes[r].stride[1]};
        for (int z = 0; z < int(axes.size()); ++z) {
            if (z == r || !fits_as_slices(axes[z], axes[r].extent, pitch)) continue;
            if (axes[r].extent * axes[z].extent > most) {
                best = {r, z};
                most = axes[r].extent * axes[z].extent;
            }
        }
    }
    return best;
}

}  // namespace

int64_t CopyPlan::commands() const {
    if (empty()) return 0;
    int64_t n = 1;
    for (const Axis &a : loop) n *= a.extent;
    return n;
}

int CopyPlan::for_each(const std::function<int(int64_t, int64_t)> &command) const {
    if (empty()) return 0;
    std::vector<int64_t> index(loop.size(), 0);
    int64_t offset[2] = {start[0], start[1]};
    while (true) {
        if (int rc = command(offset[0], offset[1])) return rc;
        // Next combination of the loop axes, innermost first (an odometer).
        size_t k = 0;
        for (; k < loop.size(); ++k) {
            for (int side = 0; side < 2; ++side) offset[side] += loop[k].stride[side];
            if (++index[k] < loop[k].extent) break;
            for (int side = 0; side < 2; ++side) offset[side] -= loop[k].extent * loop[k].stride[side];
            index[k] = 0;
        }
        if (k == loop.size()) return 0;
    }
}

CopyPlan plan_copy(const std::vector<int64_t> &shape, const std::vector<int64_t> &strides0,
                   const std::vector<int64_t> &strides1, int64_t itemsize) {
    CopyPlan plan;
    for (int64_t extent : shape) {
        if (extent <= 0) return plan;  // no elements: nothing to do
    }
    std::vector<Axis> axes = folded_axes(shape, strides0, strides1, plan.start);
    auto next = axes.begin();
    // The row: the innermost run contiguous on both sides, else one element.
    plan.row_bytes = itemsize;
    if (next != axes.end() && next->stride[0] == itemsize && next->stride[1] == itemsize) {
        plan.row_bytes = next->extent * itemsize;
        ++next;
    }
    // The rows and slices of a command, and a loop over the other axes.
    std::vector<Axis> rest(next, axes.end());
    RectAxes chosen = choose_rect_axes(rest, plan.row_bytes);
    if (chosen.rows >= 0) plan.rows = rest[chosen.rows].extent;
    if (chosen.slices >= 0) plan.slices = rest[chosen.slices].extent;
    for (int side = 0; side < 2; ++side) {
        plan.row_pitch[side] = chosen.rows >= 0 ? rest[chosen.rows].stride[side] : plan.row_bytes;
        plan.slice_pitch[side] = chosen.slices >= 0 ? rest[chosen.slices].stride[side] : plan.rows * plan.row_pitch[side];
    }
    for (int i = 0; i < int(rest.size()); ++i) {
        if (i != chosen.rows && i != chosen.slices) plan.loop.push_back(rest[i]);
    }
    return plan;
}

CopyPlan row_by_row(const CopyPlan &plan) {
    CopyPlan rows = plan;
    rows.rows = rows.slices = 1;
    for (int side = 0; side < 2; ++side) rows.row_pitch[side] = rows.slice_pitch[side] = plan.row_bytes;
    std::vector<Axis> outer;
    if (plan.rows > 1) outer.push_back(Axis{plan.rows, {plan.row_pitch[0], plan.row_pitch[1]}});
    if (plan.slices > 1) outer.push_back(Axis{plan.slices, {plan.slice_pitch[0], plan.slice_pitch[1]}});
    rows.loop.insert(rows.loop.begin(), outer.begin(), outer.end());
    return rows;
}

CopyPlan plan_region(const std::vector<int64_t> &shape, const std::vector<int64_t> &strides, int64_t itemsize) {
    return plan_copy(shape, strides, strides, itemsize);
}

DenseLayout dense_layout_like(const std::vector<int64_t> &shape, const std::vector<int64_t> &strides,
                              int64_t itemsize) {
    size_t n = shape.size();
    std::vector<int> order = memory_order(strides, Repeats::outermost);  // as plan_copy() orders side 0
    DenseLayout layout;
    layout.strides.assign(n, 0);
    dense_strides_into(layout.strides.data(), shape.data(), n, itemsize, [&](size_t k) { return order[k]; });
    for (size_t i = 0; i < n; ++i) {
        if (strides[i] >= 0) continue;
        if (shape[i] > 0) layout.origin += (shape[i] - 1) * layout.strides[i];
        layout.strides[i] = -layout.strides[i];  // the axis runs backwards, as in `strides`
    }
    layout.bytes = region_bytes(shape, itemsize);
    return layout;
}

int64_t region_bytes(const std::vector<int64_t> &shape, int64_t itemsize) {
    int64_t bytes = itemsize;
    for (int64_t extent : shape) bytes *= std::max<int64_t>(extent, 0);
    return bytes;
}

ByteSpan region_span(const std::vector<int64_t> &shape, const std::vector<int64_t> &strides, int64_t itemsize) {
    ByteSpan span;
    if (region_bytes(shape, itemsize) == 0) return span;
    byte_reach(shape, strides, itemsize, span.lo, span.hi);  // a region of memory that exists: no overflow
    return span;
}

int host_transfer(const DeviceRegion &device, const HostRegion &host, Direction direction, const RunPlan &run) {
    CopyPlan direct = plan_copy(device.shape, device.strides, host.strides, device.itemsize);
    if (direct.empty()) return 0;
    if (direct.commands() <= plan_region(device.shape, device.strides, device.itemsize).commands())
        return run(direct, host.data);
    DenseLayout layout = dense_layout_like(device.shape, device.strides, device.itemsize);
    std::unique_ptr<uint8_t[]> staging(new (std::nothrow) uint8_t[size_t(layout.bytes)]);
    if (!staging) return halide_error::out_of_memory;
    uint8_t *origin = staging.get() + layout.origin;
    if (direction == Direction::to_device)
        copy_strided(origin, layout.strides, host.data, host.strides, device.shape, device.itemsize);
    int rc = run(plan_copy(device.shape, device.strides, layout.strides, device.itemsize), origin);
    if (rc == 0 && direction == Direction::to_host)
        copy_strided(host.data, host.strides, origin, layout.strides, device.shape, device.itemsize);
    return rc;
}

}  // namespace hb
