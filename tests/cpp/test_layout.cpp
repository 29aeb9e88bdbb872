// test_layout.cpp: a new buffer's layout (core/layout.h: the Layout value dense_layout() makes
// once), and the buffers storage makes from it (storage/buffer.h: allocate() in C order and in
// any order, allocate_interleaved(), allocate_like(), allocate_on(), allocate_shared(), copy_of()):
// the strides, count and bytes of the value, the messages of what it refuses, and each allocation
// laid out as the value says.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/errors.h"
#include "core/layout.h"
#include "harness.h"
#include "storage/buffer.h"

namespace {

using hb::Axes;
using hb::Buffer;

const hb::DType &f32() { return *hb::dtype_by_name("float32"); }
const hb::DType &u8() { return *hb::dtype_by_name("uint8"); }

/// The checks every new buffer passes: its geometry as `shape`, `strides` and `mins` (0 unless
/// given) say, its data 128-byte aligned, and its storage's root halide_buffer_t (what storage
/// makes from the layout) the same axes reversed, strides in elements, over the same data.
void check_new(const Buffer &b, const Axes &shape, const Axes &strides, const Axes &mins = {}) {
    Axes expected_mins = mins.empty() ? Axes(shape.size(), 0) : mins;
    CHECK_EQ(b.shape(), shape);
    CHECK_EQ(b.strides(), strides);
    CHECK_EQ(b.mins(), expected_mins);
    CHECK_EQ(reinterpret_cast<uintptr_t>(b.data()) % 128, uintptr_t(0));
    auto storage = std::static_pointer_cast<const hb::Storage>(b.keep_alive());
    const halide_buffer_t &root = storage->root;
    CHECK_EQ(root.host, b.data());
    CHECK_EQ(root.dimensions, int(shape.size()));
    for (size_t i = 0; i < shape.size(); ++i) {
        const halide_dimension_t &d = root.dim[shape.size() - 1 - i];
        CHECK_EQ(int64_t(d.extent), shape[i]);
        CHECK_EQ(int64_t(d.stride), strides[i] / b.dtype().itemsize);
        CHECK_EQ(int64_t(d.min), expected_mins[i]);
    }
}

// ---------------------------------------------------------------------------------------------
// The layout value
// ---------------------------------------------------------------------------------------------

TEST_CASE(dense_layout_in_c_order) {
    hb::Layout l = hb::dense_layout("test", {2, 3, 4}, 4);
    CHECK_EQ(l.shape, Axes({2, 3, 4}));
    CHECK_EQ(l.strides, Axes({48, 16, 4}));
    CHECK_EQ(l.count, int64_t(24));
    CHECK_EQ(l.bytes, int64_t(96));
    hb::Layout scalar = hb::dense_layout("test", {}, 8);
    CHECK_EQ(scalar.strides, Axes());
    CHECK_EQ(scalar.count, int64_t(1));
    CHECK_EQ(scalar.bytes, int64_t(8));
}

TEST_CASE(dense_layout_in_an_order) {
    // Outermost first: axis 2, then 0, then 1 innermost; negative axes count from the end.
    std::vector<int> order = {2, 0, 1}, from_the_end = {-1, 0, -2}, fortran = {2, 1, 0};
    CHECK_EQ(hb::dense_layout("test", {2, 3, 4}, 4, &order).strides, Axes({12, 4, 24}));
    CHECK_EQ(hb::dense_layout("test", {2, 3, 4}, 4, &from_the_end).strides, Axes({12, 4, 24}));
    CHECK_EQ(hb::dense_layout("test", {2, 3, 4}, 2, &fortran).strides, Axes({2, 4, 12}));
    CHECK_EQ(hb::dense_layout("test", {2, 3, 4}, 2, &fortran).bytes, int64_t(48));
}

TEST_CASE(dense_layout_normalizes_its_strides) {
    // An empty layout addresses nothing: C-contiguous strides, whatever the order.
    std::vector<int> fortran = {1, 0};
    hb::Layout empty = hb::dense_layout("test", {0, 3}, 4, &fortran);
    CHECK_EQ(empty.strides, Axes({12, 4}));
    CHECK_EQ(empty.count, int64_t(0));
    CHECK_EQ(empty.bytes, int64_t(0));
    // An axis of one element never steps: a stride beyond int32 elements becomes one element.
    hb::Layout wide = hb::dense_layout("test", {1, int64_t(1) << 30, 4}, 1);
    CHECK_EQ(wide.strides, Axes({1, 4, 1}));
    CHECK_EQ(wide.count, int64_t(1) << 32);
}

TEST_CASE(dense_layout_refuses_with_the_entry_s_name) {
    std::vector<int> repeated = {0, 0};
    CHECK_THROWS(hb::ValueError, hb::dense_layout("Buffer", {2, 3}, 4, &repeated),
                 "Buffer(): order must be a permutation of 0..1; pass 'C', 'F' or each axis once, outermost in "
                 "memory first");
    // The order is checked before the shape, as Buffer(shape, order=) always did.
    CHECK_THROWS(hb::ValueError, hb::dense_layout("Buffer", {2, -3}, 4, &repeated), "order must be a permutation");
    CHECK_THROWS(hb::ValueError, hb::dense_layout("Buffer", {2, -3}, 4), "Buffer(): negative extent -3");
    CHECK_THROWS(hb::ValueError, hb::dense_layout("Buffer", Axes(65, 1), 4),
                 "Buffer(): 65 axes is more than the 64 supported; reshape the data");
    CHECK_THROWS(hb::ValueError, hb::dense_layout("Buffer", {int64_t(1) << 31}, 4),
                 "Buffer(): extent 2147483648 exceeds Halide's int32 limit (2**31 - 1); split the axis");
    CHECK_THROWS(hb::ValueError, hb::dense_layout("Buffer", {1 << 30, 1 << 30, 1 << 30}, 4),
                 "Buffer(): the shape has more than 2**63 elements; use a smaller shape");
    CHECK_THROWS(hb::ValueError, hb::dense_layout("Buffer", {1 << 30, 1 << 30, 4}, 4),
                 "Buffer(): the shape needs more than 2**63 bytes; use a smaller shape");
    // A stepping axis whose dense stride Halide's int32 element strides cannot hold.
    CHECK_THROWS(hb::ValueError, hb::dense_layout("Buffer", {3, int64_t(1) << 30, 4}, 1),
                 "Buffer(): stride 4294967296 bytes exceeds Halide's int32 element strides; use a smaller shape");
}

// ---------------------------------------------------------------------------------------------
// Allocations, from the storage's side
// ---------------------------------------------------------------------------------------------

TEST_CASE(allocate_lays_out_c_order) {
    Buffer b = Buffer::allocate("test", {4, 4}, f32());
    check_new(b, {4, 4}, {16, 4});
    CHECK_EQ(b.size(), int64_t(16));
    for (int64_t i = 0; i < b.nbytes(); ++i) CHECK_EQ(b.data()[i], uint8_t(0));  // zero-filled
}

TEST_CASE(allocate_lays_out_an_order) {
    // Axis 2 outermost in memory, then 0, then 1 innermost.
    check_new(Buffer::allocate("test", {2, 3, 4}, f32(), {2, 0, 1}), {2, 3, 4}, {12, 4, 24});
    check_new(Buffer::allocate("test", {2, 3, 4}, f32(), {-1, 0, -2}), {2, 3, 4}, {12, 4, 24});
}

TEST_CASE(allocate_interleaved_puts_the_channels_innermost) {
    check_new(Buffer::allocate_interleaved("test", {3, 4, 5}, f32()), {3, 4, 5}, {4, 60, 12});
    CHECK_THROWS(hb::ValueError, Buffer::allocate_interleaved("make_interleaved", {}, f32()),
                 "make_interleaved(): a 0-d shape has no channel axis");
}

TEST_CASE(allocate_like_keeps_the_memory_order_and_mins) {
    Buffer other = Buffer::allocate("test", {2, 3}, u8(), {1, 0}).with_mins({5, -7});
    check_new(Buffer::allocate_like("test", other, f32()), {2, 3}, {4, 8}, {5, -7});
}

TEST_CASE(allocate_on_no_device_allocates) {
    check_new(Buffer::allocate_on("test", nullptr, {3, 5}, f32()), {3, 5}, {20, 4});
}

TEST_CASE(allocate_shared_lays_out_an_order) {
    Buffer b = Buffer::allocate_shared("test", {2, 3}, f32(), {1, 0});
    check_new(b, {2, 3}, {4, 8});
    CHECK(b.is_shared());
}

TEST_CASE(copy_of_stores_c_order) {
    // A transposed 3x2 source: element (i, j) at i * 1 + j * 3 bytes.
    const uint8_t source[6] = {0, 1, 2, 3, 4, 5};
    Buffer b = Buffer::copy_of("test", source, {3, 2}, {1, 3}, u8());
    check_new(b, {3, 2}, {2, 1});
    const uint8_t expected[6] = {0, 3, 1, 4, 2, 5};
    for (int i = 0; i < 6; ++i) CHECK_EQ(b.data()[i], expected[i]);
}

TEST_CASE(allocate_lays_out_an_empty_shape_in_c_order) {
    // No element to step to: C-contiguous strides whatever the order (normalize_strides()).
    check_new(Buffer::allocate("test", {0, 3}, f32(), {1, 0}), {0, 3}, {12, 4});
    check_new(Buffer::allocate("test", {}, f32()), {}, {});
}

TEST_CASE(allocate_refuses_with_the_entry_s_name) {
    CHECK_THROWS(hb::ValueError, Buffer::allocate("Buffer", {2, -1}, f32()),
                 "Buffer(): negative extent -1; every extent must be >= 0");
    CHECK_THROWS(hb::ValueError, Buffer::allocate("Buffer", {2, int64_t(1) << 31}, f32()),
                 "Buffer(): extent 2147483648 exceeds Halide's int32 limit (2**31 - 1); split the axis");
    CHECK_THROWS(hb::ValueError, Buffer::allocate("Buffer", {2, 3}, f32(), {0, 0}),
                 "Buffer(): order must be a permutation of 0..1; pass 'C', 'F' or each axis once, outermost in "
                 "memory first");
    CHECK_THROWS(hb::ValueError, Buffer::allocate_shared("Buffer", {2, 3}, f32(), {2, 0}),
                 "Buffer(): order must be a permutation of 0..1");
    CHECK_THROWS(hb::ValueError, Buffer::copy_of("copy", nullptr, {2, -3}, {3, 1}, u8()),
                 "copy(): negative extent -3");
    CHECK_THROWS(hb::BufferError, Buffer::copy_of("copy", nullptr, {2, 3}, {3, 1}, u8()),
                 "copy(): NULL data for 6 elements");
}

}  // namespace
