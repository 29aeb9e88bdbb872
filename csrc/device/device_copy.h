// device_copy.h: copies over strided regions, planned as rectangular commands; the same for
// every backend.
//
// A region is a shape with byte strides of any sign. A copy between two regions of one shape
// (device and host memory, or two device regions) becomes as few rectangular commands as the
// two layouts allow (clEnqueue*BufferRect, cuMemcpy3D): rows of bytes contiguous on both sides,
// rows a pitch apart, slices of rows a pitch apart, one such command per combination of any
// further axes. Only the elements' bytes move: nothing between elements is read or written on
// either side (other views' data lives there).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/layout.h"
#include "device/device.h"
#include "device/device_interface.h"

namespace hb {

/// The commands copying the elements of one shape between side 0 (the one the order follows:
/// the device) and side 1 (the other).
struct CopyPlan {
    /// An axis repeated around the commands: its extent and byte stride on each side (an axis
    /// of core/layout.h's fold, which plans the commands).
    using Axis = FoldedAxis;
    int64_t row_bytes = 0;            ///< bytes of one row, contiguous on both sides (0: no elements)
    int64_t rows = 1, slices = 1;     ///< rows per slice, slices per command
    int64_t row_pitch[2] = {0, 0};    ///< bytes from a row to the next, each side (>= row_bytes)
    int64_t slice_pitch[2] = {0, 0};  ///< bytes from a slice to the next, each side (a multiple of
                                      ///< row_pitch, >= rows * row_pitch)
    int64_t start[2] = {0, 0};        ///< each side's first byte of the first command, from its
                                      ///< element at index 0
    std::vector<Axis> loop;           ///< one command per combination of these axes

    bool empty() const { return row_bytes == 0; }
    int64_t commands() const;
    int64_t command_bytes() const { return row_bytes * rows * slices; }
    /// Calls `command(offset0, offset1)` with each command's first byte on both sides (from the
    /// elements at index 0); stops at the first non-zero answer and returns it.
    int for_each(const std::function<int(int64_t, int64_t)> &command) const;
};

/// Plans a copy between the elements of `shape` at byte strides `strides0` (side 0) and
/// `strides1` (side 1), folded by fold_axes() (core/layout.h): negative strides of side 0 are
/// flipped (the start moves to the lowest element), extent-1 axes dropped, the axes ordered by
/// side 0's memory order (zero strides outermost) and merged where they are contiguous together
/// on both sides; the innermost contiguous run is the
/// row (one element when no axis is contiguous on both sides), two more axes the rows and
/// slices of a command (of those both sides' pitches allow, the pair covering the most
/// elements), and the other axes a loop.
CopyPlan plan_copy(const std::vector<int64_t> &shape, const std::vector<int64_t> &strides0,
                   const std::vector<int64_t> &strides1, int64_t itemsize);
/// The same copy with one row per command: the rows and slices join the loop (for a call that
/// cannot take these pitches).
CopyPlan row_by_row(const CopyPlan &plan);
/// One region alone (a fill): the plan of a copy to an identical layout.
CopyPlan plan_region(const std::vector<int64_t> &shape, const std::vector<int64_t> &strides, int64_t itemsize);

/// A dense layout of a shape with the axis order and signs of given strides: a staging copy
/// laid out like the device side, so that a copy to it plans the device side's commands only.
struct DenseLayout {
    std::vector<int64_t> strides;
    int64_t origin = 0;  ///< bytes from the lowest byte to the element at index 0
    int64_t bytes = 0;
};
DenseLayout dense_layout_like(const std::vector<int64_t> &shape, const std::vector<int64_t> &strides,
                              int64_t itemsize);


/// The elements' bytes of a region, and the bytes it reaches from its element at index 0.
int64_t region_bytes(const std::vector<int64_t> &shape, int64_t itemsize);
ByteSpan region_span(const std::vector<int64_t> &shape, const std::vector<int64_t> &strides, int64_t itemsize);

/// Issues the commands of a plan between a device region (side 0, from its element at index 0)
/// and host memory (side 1, from `host`), waits for them, and returns 0 or a Halide error code.
using RunPlan = std::function<int(const CopyPlan &plan, uint8_t *host)>;
/// A read (`to_host`) or write between `device` and `host`: directly when the host layout costs
/// no more commands than the device side alone, else through a dense staging copy in the
/// device's order (gathered before a write, scattered after a read).
int host_transfer(const DeviceRegion &device, const HostRegion &host, Direction direction, const RunPlan &run);

}  // namespace hb
