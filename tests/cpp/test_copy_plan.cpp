// test_copy_plan.cpp: the copy planner (device/device_copy.h: plan_copy(), row_by_row(),
// host_transfer()), the fold under it and the host loops (core/layout.h: fold_axes()) and the
// host element loops (core/strided.h), judged against a copy made
// element by element. Two byte arrays stand for the two sides; a plan's commands are carried
// out on them as a backend issues them (rows of bytes a pitch apart, slices a pitch apart), and
// the arrays must then equal the reference's, byte for byte: every element moved, and nothing
// between elements touched.
#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "core/layout.h"
#include "core/strided.h"
#include "device/device_copy.h"
#include "harness.h"

namespace {

using hb::CopyPlan;
using Shape = std::vector<int64_t>;

// ---------------------------------------------------------------------------------------------
// Adapter: how the planner is called and its plans carried out (the backends' part)
// ---------------------------------------------------------------------------------------------

/// One side's memory as a plan reaches it: its element at index 0, and the bytes around it
/// that belong to it, [lo, hi) from there.
struct View {
    uint8_t *first;
    int64_t lo, hi;
};

/// Copies `row_bytes` at byte `at` of each side (from its element at index 0), checked to lie
/// inside both, from side `from` to the other.
void move_row(const View side[2], const int64_t at[2], int64_t row_bytes, int from) {
    for (int s = 0; s < 2; ++s) CHECK(at[s] >= side[s].lo && at[s] + row_bytes <= side[s].hi);
    int to = 1 - from;
    std::memmove(side[to].first + at[to], side[from].first + at[from], size_t(row_bytes));
}

/// Carries out a plan's commands as a backend's rectangle copies do, from side `from` to the
/// other; checks the pitches every backend relies on.
void carry_out(const CopyPlan &plan, const View side[2], int from) {
    for (int s = 0; s < 2 && !plan.empty(); ++s) {
        CHECK(plan.row_pitch[s] >= plan.row_bytes);
        CHECK(plan.slice_pitch[s] >= plan.rows * plan.row_pitch[s]);
        CHECK(plan.row_pitch[s] > 0 && plan.slice_pitch[s] % plan.row_pitch[s] == 0);
    }
    int64_t commands = 0;
    int rc = plan.for_each([&](int64_t offset0, int64_t offset1) {
        ++commands;
        for (int64_t z = 0; z < plan.slices; ++z) {
            for (int64_t y = 0; y < plan.rows; ++y) {
                const int64_t at[2] = {offset0 + z * plan.slice_pitch[0] + y * plan.row_pitch[0],
                                       offset1 + z * plan.slice_pitch[1] + y * plan.row_pitch[1]};
                move_row(side, at, plan.row_bytes, from);
            }
        }
        return 0;
    });
    CHECK_EQ(rc, 0);
    CHECK_EQ(commands, plan.commands());
}

// ---------------------------------------------------------------------------------------------
// The reference and the layouts
// ---------------------------------------------------------------------------------------------

/// Calls f(offset_a, offset_b) for every index of `shape`, with each layout's byte offset.
template <typename F>
void for_each_element(const Shape &shape, const Shape &a, const Shape &b, F &&f) {
    for (int64_t n : shape) {
        if (n == 0) return;
    }
    Shape index(shape.size(), 0);
    while (true) {
        int64_t oa = 0, ob = 0;
        for (size_t i = 0; i < shape.size(); ++i) {
            oa += index[i] * a[i];
            ob += index[i] * b[i];
        }
        f(oa, ob);
        size_t k = shape.size();
        while (k > 0 && ++index[k - 1] == shape[k - 1]) index[--k] = 0;
        if (k == 0) return;
    }
}

/// The reference: every element of `src` copied to `dst`, one at a time.
void copy_elements(uint8_t *dst, const Shape &dst_strides, const uint8_t *src, const Shape &src_strides,
                   const Shape &shape, int64_t itemsize) {
    for_each_element(shape, dst_strides, src_strides,
                     [&](int64_t d, int64_t s) { std::memcpy(dst + d, src + s, size_t(itemsize)); });
}

/// A byte array for a layout, just large enough, and where its element at index 0 lies in it.
struct Memory {
    std::vector<uint8_t> bytes;
    int64_t origin = 0;
    uint8_t *first() { return bytes.data() + origin; }
    View view() { return View{first(), -origin, int64_t(bytes.size()) - origin}; }
};

/// Memory for `strides` over `shape`, filled with bytes from `fill` (distinct per side, so a
/// byte that lands in the wrong place shows).
Memory memory_for(const Shape &shape, const Shape &strides, int64_t itemsize, uint8_t fill) {
    int64_t lo = 0, hi = itemsize;
    for (size_t i = 0; i < shape.size(); ++i) {
        if (shape[i] > 1) (strides[i] < 0 ? lo : hi) += (shape[i] - 1) * strides[i];
    }
    Memory m;
    m.origin = -lo;
    m.bytes.resize(size_t(hi - lo));
    for (size_t k = 0; k < m.bytes.size(); ++k) m.bytes[k] = uint8_t(fill + k * 37 + (k >> 8));
    return m;
}

/// A plan for the copy of `shape` from side `from` to the other, carried out on fresh memory of
/// both layouts (and the same copy row by row), each compared with the reference; returns the
/// plan.
CopyPlan check_copy(const Shape &shape, const Shape &strides0, const Shape &strides1, int64_t itemsize, int from) {
    const Shape *strides[2] = {&strides0, &strides1};
    Memory original[2] = {memory_for(shape, strides0, itemsize, 1), memory_for(shape, strides1, itemsize, 128)};
    Memory expected[2] = {original[0], original[1]};
    int to = 1 - from;
    copy_elements(expected[to].first(), *strides[to], expected[from].first(), *strides[from], shape, itemsize);
    CopyPlan plan = hb::plan_copy(shape, strides0, strides1, itemsize);
    for (const CopyPlan &p : {plan, hb::row_by_row(plan)}) {
        Memory moved[2] = {original[0], original[1]};
        const View side[2] = {moved[0].view(), moved[1].view()};
        carry_out(p, side, from);
        CHECK(moved[to].bytes == expected[to].bytes);
        CHECK(moved[from].bytes == original[from].bytes);  // the source is only read
    }
    return plan;
}

/// Random layouts of random shapes (a fixed seed: the same cases every run).
struct Layouts {
    std::mt19937_64 random{20261};

    int64_t below(int64_t n) { return int64_t(random() % uint64_t(n)); }

    Shape shape() {
        Shape s(size_t(below(5)));  // 0 to 4 axes
        for (int64_t &n : s) n = below(8) == 0 ? 0 : 1 + below(4);
        return s;
    }
    /// Strides for `shape`: the axes in a random order, each forwards or backwards, with gaps
    /// between elements and between rows now and then, and (`broadcast`: for a side only read)
    /// an axis repeating its elements (stride 0) now and then.
    Shape strides(const Shape &shape, int64_t itemsize, bool broadcast) {
        Shape order(shape.size()), out(shape.size());
        for (size_t i = 0; i < order.size(); ++i) order[i] = int64_t(i);
        std::shuffle(order.begin(), order.end(), random);
        int64_t step = itemsize * (below(6) == 0 ? 2 : 1);
        for (int64_t axis : order) {
            int64_t n = shape[size_t(axis)];
            if (n == 1 && below(2) == 0) {
                out[size_t(axis)] = below(2) ? 12345 : -7;  // an extent-1 axis never steps
                continue;
            }
            if (broadcast && below(5) == 0) {
                out[size_t(axis)] = 0;
                continue;
            }
            out[size_t(axis)] = below(3) == 0 ? -step : step;
            // The next axis after this one's rows, a row or an element further now and then (a
            // pitch that is a whole number of rows, or not).
            int64_t gap = below(4) == 0 ? step : below(4) == 0 ? itemsize : 0;
            step = step * std::max<int64_t>(n, 1) + gap;
        }
        return out;
    }
    int64_t itemsize() { return int64_t(1) << below(5); }  // 1 to 16 bytes, as the dtypes have
};

Shape c_order(const Shape &shape, int64_t itemsize) { return hb::c_strides(shape, itemsize); }

/// "shape (2, 3), strides (6, 2) and (2, 4), itemsize 2": a generated case, for a failure.
std::string layout_text(const Shape &shape, const Shape &a, const Shape &b, int64_t itemsize) {
    using hb_test::text;
    return "shape " + text(shape) + ", strides " + text(a) + " and " + text(b) + ", itemsize " + text(itemsize);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// plan_copy()
// ---------------------------------------------------------------------------------------------

TEST_CASE(copy_plan_of_one_dense_layout_is_one_command) {
    Shape shape{3, 4, 5};
    CopyPlan plan = check_copy(shape, c_order(shape, 4), c_order(shape, 4), 4, 1);
    CHECK_EQ(plan.commands(), 1);
    CHECK_EQ(plan.row_bytes, 3 * 4 * 5 * 4);  // every axis merged into the row
    CHECK(plan.loop.empty());
    // Fortran order on both sides: the same single row, the axes ordered by the strides.
    Shape f{4, 12, 48};
    plan = check_copy(shape, f, f, 4, 0);
    CHECK_EQ(plan.commands(), 1);
    CHECK_EQ(plan.row_bytes, 240);
}

TEST_CASE(copy_plan_merges_axes_contiguous_on_both_sides) {
    // Rows of 12 bytes, dense on the device, 20 bytes apart on the host: the two inner axes
    // merge into one row, the outer one is the rows of one command.
    Shape shape{2, 3, 4};
    CopyPlan plan = check_copy(shape, {12, 4, 1}, {20, 4, 1}, 1, 1);
    CHECK_EQ(plan.row_bytes, 12);
    CHECK_EQ(plan.rows, 2);
    CHECK_EQ(plan.row_pitch[0], 12);
    CHECK_EQ(plan.row_pitch[1], 20);
    CHECK_EQ(plan.commands(), 1);
    // Contiguous on one side only: no merge, the row is one axis.
    plan = check_copy(shape, {12, 4, 1}, {24, 8, 1}, 1, 0);
    CHECK_EQ(plan.row_bytes, 4);
    CHECK_EQ(plan.rows * plan.slices * plan.commands(), 6);
}

TEST_CASE(copy_plan_orders_axes_by_the_device_side) {
    // Transposed on the host: no axis is contiguous on both sides, so a row is one element; the
    // device's inner axis (6 elements) is the rows, the other axis a loop of 4 commands.
    Shape shape{4, 6};
    CopyPlan plan = check_copy(shape, {12, 2}, {2, 8}, 2, 1);
    CHECK_EQ(plan.row_bytes, 2);
    CHECK_EQ(plan.rows, 6);
    CHECK_EQ(plan.row_pitch[0], 2);
    CHECK_EQ(plan.row_pitch[1], 8);
    CHECK_EQ(plan.commands(), 4);
    check_copy(shape, {12, 2}, {2, 8}, 2, 0);
    // The sides' roles swapped: the rows are still the axis of 6 (the most elements a command
    // can cover), now the device's outer one.
    plan = check_copy(shape, {2, 8}, {12, 2}, 2, 1);
    CHECK_EQ(plan.rows, 6);
    CHECK_EQ(plan.row_pitch[0], 8);
    CHECK_EQ(plan.row_pitch[1], 2);
    CHECK_EQ(plan.commands(), 4);
}

TEST_CASE(copy_plan_takes_as_slices_only_a_whole_number_of_rows) {
    // Rows of 12 bytes, 16 bytes apart on both sides; slices 32 bytes apart on the device, 40 on
    // the host: no rectangle can say so (OpenCL and CUDA count a slice pitch in rows), so one
    // axis is the rows and the other a loop of commands.
    Shape shape{3, 2, 12};
    CopyPlan plan = check_copy(shape, {32, 16, 1}, {40, 16, 1}, 1, 1);
    CHECK_EQ(plan.row_bytes, 12);
    CHECK_EQ(plan.slices, 1);
    CHECK_EQ(plan.rows * plan.commands(), 6);
    // 48 bytes apart on the host: three rows' pitch, one command of 3 slices of 2 rows.
    plan = check_copy(shape, {32, 16, 1}, {48, 16, 1}, 1, 1);
    CHECK_EQ(plan.rows, 2);
    CHECK_EQ(plan.slices, 3);
    CHECK_EQ(plan.commands(), 1);
}

TEST_CASE(copy_plan_flips_negative_strides) {
    // Backwards on the device (every axis), forwards on the host, and the reverse.
    Shape shape{3, 4, 5};
    Shape forwards = c_order(shape, 2), backwards{-40, -10, -2};
    CopyPlan plan = check_copy(shape, backwards, forwards, 2, 1);
    CHECK_EQ(plan.start[0], -(2 * 40 + 3 * 10 + 4 * 2));  // the lowest element of side 0
    for (int from = 0; from < 2; ++from) {
        check_copy(shape, forwards, backwards, 2, from);
        check_copy(shape, backwards, backwards, 2, from);
    }
    // A backwards axis on both sides is still one dense row.
    plan = check_copy(shape, backwards, backwards, 2, 1);
    CHECK_EQ(plan.commands(), 1);
    CHECK_EQ(plan.row_bytes, 120);
}

TEST_CASE(copy_plan_repeats_a_broadcast_axis_outside_the_commands) {
    // Side 0 read with an axis of stride 0 (a broadcast view): that axis can be no row or
    // pitch, so it is a loop; every host element gets its device element.
    Shape shape{3, 5};
    CopyPlan plan = check_copy(shape, {0, 4}, {20, 4}, 4, 0);
    CHECK_EQ(plan.row_bytes, 20);
    CHECK_EQ(plan.loop.size(), size_t(1));
    CHECK_EQ(plan.loop[0].stride[0], 0);
    CHECK_EQ(plan.commands(), 3);
    // A host source repeated along an axis, written to the device.
    check_copy(shape, {20, 4}, {4, 0}, 4, 1);
}

TEST_CASE(copy_plan_drops_extent_1_axes_and_has_no_command_for_no_element) {
    CopyPlan plan = check_copy({1, 6, 1}, {999, 2, -5}, {3, 2, 77}, 2, 1);
    CHECK_EQ(plan.commands(), 1);
    CHECK_EQ(plan.row_bytes, 12);
    for (const Shape &shape : {Shape{0}, Shape{3, 0, 2}}) {
        CopyPlan none = hb::plan_copy(shape, Shape(shape.size(), 1), Shape(shape.size(), 1), 1);
        CHECK(none.empty());
        CHECK_EQ(none.commands(), 0);
        CHECK_EQ(none.for_each([](int64_t, int64_t) { return 1; }), 0);  // no command runs
    }
    // No axis at all: one element.
    plan = check_copy({}, {}, {}, 8, 0);
    CHECK_EQ(plan.commands(), 1);
    CHECK_EQ(plan.row_bytes, 8);
}

TEST_CASE(copy_plans_of_random_layouts_match_an_element_by_element_copy) {
    Layouts layouts;
    for (int k = 0; k < 3000; ++k) {
        Shape shape = layouts.shape();
        int64_t itemsize = layouts.itemsize();
        int from = int(layouts.below(2));
        // Only the side read may repeat elements (a written one would be written twice).
        Shape s0 = layouts.strides(shape, itemsize, from == 0);
        Shape s1 = layouts.strides(shape, itemsize, from == 1);
        hb_test::within(layout_text(shape, s0, s1, itemsize) + ", from side " + hb_test::text(from),
                        [&] { check_copy(shape, s0, s1, itemsize, from); });
    }
}

// ---------------------------------------------------------------------------------------------
// host_transfer(): a direct plan, or one through a staging copy in the device's order
// ---------------------------------------------------------------------------------------------

namespace {

/// What host_transfer() gave its runner: how many commands, and whether it ran them on the
/// host's memory itself (else on a staging copy).
struct Transfer {
    int64_t commands = 0;
    bool direct = true;
};

/// A read or write of `shape` between device memory laid out as `device_strides` and host
/// memory laid out as `host_strides`, through host_transfer(), whose runner carries out the
/// plans it is given between the device's array and the host memory (or staging copy) it is
/// pointed at; compared with the reference.
Transfer check_transfer(const Shape &shape, const Shape &device_strides, const Shape &host_strides, int64_t itemsize,
                        hb::Direction direction) {
    Memory device = memory_for(shape, device_strides, itemsize, 3);
    Memory host = memory_for(shape, host_strides, itemsize, 200);
    Memory expected[2] = {device, host};
    bool to_host = direction == hb::Direction::to_host;
    if (to_host) copy_elements(expected[1].first(), host_strides, expected[0].first(), device_strides, shape, itemsize);
    else copy_elements(expected[0].first(), device_strides, expected[1].first(), host_strides, shape, itemsize);
    halide_buffer_t root{};
    hb::DeviceRegion region{&root, 0, shape, device_strides, itemsize};
    hb::HostRegion host_region{host.first(), host_strides};
    hb::DenseLayout staging = hb::dense_layout_like(shape, device_strides, itemsize);
    Transfer t;
    int rc = hb::host_transfer(region, host_region, direction, [&](const CopyPlan &plan, uint8_t *at) {
        t.commands += plan.commands();
        t.direct = at == host.first();
        View there = t.direct ? host.view() : View{at, -staging.origin, staging.bytes - staging.origin};
        const View side[2] = {device.view(), there};
        carry_out(plan, side, to_host ? 0 : 1);
        return 0;
    });
    CHECK_EQ(rc, 0);
    CHECK(device.bytes == expected[0].bytes);
    CHECK(host.bytes == expected[1].bytes);
    return t;
}

}  // namespace

TEST_CASE(host_transfer_runs_the_direct_plan_when_the_host_layout_costs_no_more) {
    Shape shape{4, 5, 6};
    for (hb::Direction d : {hb::Direction::to_host, hb::Direction::to_device}) {
        Transfer t = check_transfer(shape, c_order(shape, 2), c_order(shape, 2), 2, d);
        CHECK(t.direct);
        CHECK_EQ(t.commands, 1);
        // Rows apart on the host (a crop of a wider array): still one rectangle, in place.
        t = check_transfer(shape, c_order(shape, 2), {160, 16, 2}, 2, d);
        CHECK(t.direct);
        CHECK_EQ(t.commands, 1);
    }
}

TEST_CASE(host_transfer_stages_a_host_layout_that_costs_more_commands) {
    // Transposed on the host: directly one command per element pair of rows; staged in the
    // device's order, one command, with the host gathered (write) or scattered (read) around it.
    Shape shape{4, 5, 6};
    Shape transposed{4, 16, 80};
    for (hb::Direction d : {hb::Direction::to_host, hb::Direction::to_device}) {
        Transfer t = check_transfer(shape, c_order(shape, 8), {8, 32, 160}, 8, d);
        CHECK(!t.direct);
        CHECK_EQ(t.commands, 1);
        // Backwards on the device: the staging copy runs backwards too, still one command.
        t = check_transfer(shape, {-240, -48, -8}, {8, 32, 160}, 8, d);
        CHECK(!t.direct);
        CHECK_EQ(t.commands, 1);
        t = check_transfer(shape, c_order(shape, 4), transposed, 4, d);
        CHECK(!t.direct);
    }
}

TEST_CASE(host_transfers_of_random_layouts_match_an_element_by_element_copy) {
    Layouts layouts;
    for (int k = 0; k < 1500; ++k) {
        Shape shape = layouts.shape();
        int64_t itemsize = layouts.itemsize();
        auto d = layouts.below(2) ? hb::Direction::to_host : hb::Direction::to_device;
        bool to_host = d == hb::Direction::to_host;
        Shape device = layouts.strides(shape, itemsize, to_host);
        Shape host = layouts.strides(shape, itemsize, !to_host);
        hb_test::within(layout_text(shape, device, host, itemsize) + (to_host ? ", to the host" : ", to the device"),
                        [&] { check_transfer(shape, device, host, itemsize, d); });
    }
}

// ---------------------------------------------------------------------------------------------
// core/layout.h: fold_axes(), the one fold under both the copy planner and the host loops
// ---------------------------------------------------------------------------------------------

namespace {

/// A fold's axes as (extent, stride0, stride1) triples, outermost first.
std::vector<Shape> axes_of(const hb::Folded &f) {
    std::vector<Shape> out;
    for (const hb::FoldedAxis &a : f.axes) out.push_back(Shape{a.extent, a.stride[0], a.stride[1]});
    return out;
}

}  // namespace

TEST_CASE(fold_axes_merges_what_both_layouts_step_through_contiguously) {
    // C order on both sides, one axis of extent 1 with a stray stride: one run of 60 elements.
    hb::Folded f = hb::fold_axes({3, 1, 4, 5}, {80, 999, 20, 4}, {80, -7, 20, 4}, hb::Repeats::innermost);
    CHECK(!f.empty);
    CHECK((axes_of(f) == std::vector<Shape>{{60, 4, 4}}));
    CHECK_EQ(f.start[0], 0);
    // Rows 20 bytes apart on the second side: the inner two axes merge, the outer one does not.
    f = hb::fold_axes({2, 3, 4}, {48, 16, 4}, {60, 16, 4}, hb::Repeats::innermost);
    CHECK((axes_of(f) == std::vector<Shape>{{2, 48, 60}, {12, 4, 4}}));
    // Transposed on the first side: ordered by it (its inner axis last), nothing merges.
    f = hb::fold_axes({4, 6}, {4, 16}, {24, 4}, hb::Repeats::innermost);
    CHECK((axes_of(f) == std::vector<Shape>{{6, 16, 4}, {4, 4, 24}}));
    // No element: empty, no axes.
    f = hb::fold_axes({3, 0, 2}, {8, 4, 2}, {8, 4, 2}, hb::Repeats::innermost);
    CHECK(f.empty);
    CHECK(f.axes.empty());
}

TEST_CASE(fold_axes_flips_the_first_layouts_backward_axes_in_both) {
    // Backwards on the first side: flipped, each side's start moved to the axis's last element;
    // the second side follows (its stride changes sign), then the two merge as one run.
    hb::Folded f = hb::fold_axes({3, 4}, {-16, -4}, {-16, -4}, hb::Repeats::innermost);
    CHECK((axes_of(f) == std::vector<Shape>{{12, 4, 4}}));
    CHECK_EQ(f.start[0], -(2 * 16 + 3 * 4));
    CHECK_EQ(f.start[1], -(2 * 16 + 3 * 4));
    f = hb::fold_axes({3, 4}, {-16, 4}, {16, 4}, hb::Repeats::innermost);
    CHECK((axes_of(f) == std::vector<Shape>{{3, 16, -16}, {4, 4, 4}}));
    CHECK_EQ(f.start[0], -32);
    CHECK_EQ(f.start[1], 32);
}

TEST_CASE(fold_axes_puts_repeats_where_it_is_told) {
    // An axis of stride 0 on the first side: innermost for the host loops, outermost for the
    // copy planner (a row or a pitch cannot repeat); the other axes keep their order.
    Shape shape{3, 5}, s0{0, 4}, s1{20, 4};
    CHECK((axes_of(hb::fold_axes(shape, s0, s1, hb::Repeats::innermost)) == std::vector<Shape>{{5, 4, 4}, {3, 0, 20}}));
    CHECK((axes_of(hb::fold_axes(shape, s0, s1, hb::Repeats::outermost)) == std::vector<Shape>{{3, 0, 20}, {5, 4, 4}}));
    CHECK((hb::memory_order(Shape{0, 4, 8}) == std::vector<int>{2, 1, 0}));
    CHECK((hb::memory_order(Shape{0, 4, 8}, hb::Repeats::outermost) == std::vector<int>{0, 2, 1}));
    CHECK((hb::memory_order(Shape{4, -8, 4}) == std::vector<int>{1, 0, 2}));  // by |stride|, ties in axis order
}

// ---------------------------------------------------------------------------------------------
// core/strided.h: the host's element loops
// ---------------------------------------------------------------------------------------------

TEST_CASE(copy_strided_of_random_layouts_matches_an_element_by_element_copy) {
    Layouts layouts;
    for (int k = 0; k < 3000; ++k) {
        Shape shape = layouts.shape();
        int64_t itemsize = layouts.itemsize();
        Shape dst_strides = layouts.strides(shape, itemsize, false);
        Shape src_strides = layouts.strides(shape, itemsize, true);  // a broadcast source too
        Memory dst = memory_for(shape, dst_strides, itemsize, 9);
        Memory src = memory_for(shape, src_strides, itemsize, 99);
        Memory expected = dst;
        copy_elements(expected.first(), dst_strides, src.first(), src_strides, shape, itemsize);
        hb::copy_strided(dst.first(), dst_strides, src.first(), src_strides, shape, itemsize);
        hb_test::within(layout_text(shape, dst_strides, src_strides, itemsize),
                        [&] { CHECK(dst.bytes == expected.bytes); });
    }
}

TEST_CASE(fill_strided_sets_every_element_and_nothing_between) {
    Layouts layouts;
    const uint8_t pattern[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    for (int k = 0; k < 2000; ++k) {
        Shape shape = layouts.shape();
        int64_t itemsize = layouts.itemsize();
        Shape strides = layouts.strides(shape, itemsize, false);
        Memory m = memory_for(shape, strides, itemsize, 50);
        Memory expected = m;
        for_each_element(shape, strides, strides,
                         [&](int64_t at, int64_t) { std::memcpy(expected.first() + at, pattern, size_t(itemsize)); });
        hb::fill_strided(m.first(), strides, shape, pattern, itemsize);
        hb_test::within(layout_text(shape, strides, strides, itemsize), [&] { CHECK(m.bytes == expected.bytes); });
    }
}

TEST_CASE(ranges_overlap_when_the_bytes_of_two_layouts_meet) {
    uint8_t memory[64] = {};
    Shape shape{2, 4};
    // Rows 16 bytes apart: the second array's rows between the first's, or on top of them.
    CHECK(!hb::ranges_overlap(memory, {16, 2}, memory + 32, {16, 2}, shape, 2));  // [0, 24) and [32, 56)
    CHECK(hb::ranges_overlap(memory, {16, 2}, memory + 8, {16, 2}, shape, 2));  // interleaved: within reach
    CHECK(hb::ranges_overlap(memory, {16, 2}, memory + 22, {-16, -2}, shape, 2));
    CHECK(!hb::ranges_overlap(memory, {8, 2}, memory + 16, {8, 2}, shape, 2));  // end to end
    CHECK(hb::ranges_overlap(memory, {8, 2}, memory + 15, {8, 2}, shape, 2));
    CHECK(!hb::ranges_overlap(memory, {8, 2}, memory, {8, 2}, {2, 0}, 2));  // no element
}
