// test_overlap.cpp: whether strided views share memory (core/overlap.h: internal_overlap(),
// views_overlap()), on the views users make (expanded, as_strided, interleaved channels, halves,
// crops, reversed, other itemsizes over the same bytes, empty) and on random small geometry,
// judged against the bytes each element occupies, enumerated one by one.
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/constants.h"
#include "core/overlap.h"
#include "harness.h"

namespace {

using hb::Overlap;
using Shape = std::vector<int64_t>;

// ---------------------------------------------------------------------------------------------
// Adapter: views as the tests write them (offsets in bytes from one address), and the reference
// ---------------------------------------------------------------------------------------------

/// Where the views of these tests lie: an address nothing reads (the tests only compare
/// addresses), with room on both sides for any stride.
constexpr uintptr_t kOrigin = uintptr_t(1) << 40;

/// A view whose first element lies `at` bytes past kOrigin.
struct View {
    int64_t at;
    Shape shape, strides;
    int64_t itemsize;

    hb::ByteView bytes() const {
        return hb::ByteView{reinterpret_cast<const uint8_t *>(kOrigin + uintptr_t(at)), shape.data(), strides.data(),
                            shape.size(), itemsize};
    }
    std::string text() const {
        return "at " + hb_test::text(at) + ", shape " + hb_test::text(shape) + ", strides " + hb_test::text(strides) +
               ", itemsize " + hb_test::text(itemsize);
    }
};

Overlap internal(const View &v, int64_t work = hb::kOverlapWork) { return hb::internal_overlap(v.bytes(), work); }
Overlap between(const View &a, const View &b, int64_t work = hb::kOverlapWork) {
    return hb::views_overlap(a.bytes(), b.bytes(), work);
}

/// The byte offset of each element, in index order.
std::vector<int64_t> element_starts(const View &v) {
    std::vector<int64_t> starts;
    for (int64_t n : v.shape)
        if (n == 0) return starts;
    std::vector<int64_t> index(v.shape.size(), 0);
    for (;;) {
        int64_t at = v.at;
        for (size_t i = 0; i < index.size(); ++i) at += index[i] * v.strides[i];
        starts.push_back(at);
        size_t i = index.size();
        while (i > 0 && ++index[i - 1] == v.shape[i - 1]) index[--i] = 0;
        if (i == 0) return starts;
    }
}

/// The reference of internal_overlap(): two elements whose bytes meet.
bool elements_meet(const View &v) {
    std::vector<int64_t> starts = element_starts(v);
    for (size_t i = 0; i < starts.size(); ++i)
        for (size_t j = i + 1; j < starts.size(); ++j)
            if (starts[i] - starts[j] < v.itemsize && starts[j] - starts[i] < v.itemsize) return true;
    return false;
}

/// The reference of views_overlap(): a byte both views' elements occupy.
bool views_meet(const View &a, const View &b) {
    std::set<int64_t> bytes;
    for (int64_t at : element_starts(a))
        for (int64_t k = 0; k < a.itemsize; ++k) bytes.insert(at + k);
    for (int64_t at : element_starts(b))
        for (int64_t k = 0; k < b.itemsize; ++k)
            if (bytes.count(at + k)) return true;
    return false;
}

/// A C-contiguous view of `shape` at `at`.
View dense(int64_t at, Shape shape, int64_t itemsize) {
    Shape strides(shape.size());
    int64_t s = itemsize;
    for (size_t i = shape.size(); i-- > 0;) {
        strides[i] = s;
        s *= shape[i];
    }
    return View{at, shape, strides, itemsize};
}

// ---------------------------------------------------------------------------------------------
// One view
// ---------------------------------------------------------------------------------------------

TEST_CASE(overlap_dense_transposed_cropped_stepped_and_reversed_views_have_distinct_elements) {
    View image = dense(0, {6, 8, 3}, 4);  // rows, columns, channels of float32
    CHECK(internal(image) == Overlap::none);
    CHECK(internal(View{0, {3, 8, 6}, {4, 12, 96}, 4}) == Overlap::none);                // transposed
    CHECK(internal(View{96 + 12, {4, 5, 3}, image.strides, 4}) == Overlap::none);      // a crop
    CHECK(internal(View{0, {3, 4, 1}, {192, 24, 4}, 4}) == Overlap::none);            // steps of 2, one channel
    CHECK(internal(View{500, {6, 8, 3}, {-96, 12, -4}, 4}) == Overlap::none);          // reversed axes
    CHECK(internal(View{0, {1, 1, 5}, {0, -7, 4}, 4}) == Overlap::none);               // extent-1 axes' strides
    CHECK(internal(View{0, {}, {}, 8}) == Overlap::none);                              // a scalar
}

TEST_CASE(overlap_an_expanded_view_repeats_its_elements) {
    // torch.zeros(1, 3).expand(4, 3): stride 0 on an axis of 4.
    CHECK(internal(View{0, {4, 3}, {0, 4}, 4}) == Overlap::some);
    CHECK(internal(View{0, {2, 3, 2}, {24, 8, 0}, 4}) == Overlap::some);  // an inner axis repeated
    CHECK(internal(View{0, {1, 3}, {0, 4}, 4}) == Overlap::none);         // stride 0 on an axis of 1 never steps
    CHECK(internal(View{0, {0, 3}, {4, 0}, 4}) == Overlap::none);         // empty: no element at all
    CHECK(internal(View{0, {3, 0}, {0, 4}, 4}) == Overlap::none);
}

TEST_CASE(overlap_as_strided_rows_that_overlap_share_elements) {
    // np.lib.stride_tricks.as_strided(x, (4, 3), (8, 4)) of float32: row r starts at element 2r.
    CHECK(internal(View{0, {4, 3}, {8, 4}, 4}) == Overlap::some);
    CHECK(internal(View{0, {4, 3}, {12, 4}, 4}) == Overlap::none);     // rows just touching
    CHECK(internal(View{0, {4, 3}, {-8, 4}, 4}) == Overlap::some);     // the same, rows reversed
    CHECK(internal(View{0, {5}, {2}, 4}) == Overlap::some);            // elements 2 bytes apart, 4 wide
    CHECK(internal(View{0, {5}, {-3}, 4}) == Overlap::some);
    CHECK(internal(View{0, {5}, {4}, 4}) == Overlap::none);
    CHECK(internal(View{0, {3, 2}, {4, 4}, 4}) == Overlap::some);      // two axes of one stride
    CHECK(internal(View{0, {3, 2}, {4, -4}, 4}) == Overlap::some);     // ... of one |stride|
}

TEST_CASE(overlap_axes_that_do_not_nest_are_decided_exactly) {
    // Offsets 0, 2, 4 and 3, 5, 7: interleaved, distinct bytes.
    CHECK(internal(View{0, {2, 3}, {3, 2}, 1}) == Overlap::none);
    // Offsets 0, 2, 4 and 4, 6, 8: element (0, 2) is element (1, 0).
    CHECK(internal(View{0, {2, 3}, {4, 2}, 1}) == Overlap::some);
    // Only the outermost combination meets: 7 * 10 - 10 * 7 = 0.
    CHECK(internal(View{0, {8, 11}, {10, 7}, 1}) == Overlap::some);
    CHECK(internal(View{0, {7, 11}, {10, 7}, 1}) == Overlap::none);
}

// ---------------------------------------------------------------------------------------------
// Two views
// ---------------------------------------------------------------------------------------------

TEST_CASE(overlap_interleaved_channels_share_no_byte) {
    View image = dense(0, {6, 8, 3}, 4);
    View red{0, {6, 8}, {96, 12}, 4}, green{4, {6, 8}, {96, 12}, 4};  // img[..., 0], img[..., 1]
    CHECK(between(red, green) == Overlap::none);
    CHECK(between(green, red) == Overlap::none);
    CHECK(between(red, image) == Overlap::some);
    View rg{0, {6, 8, 2}, {96, 12, 4}, 4}, blue{8, {6, 8}, {96, 12}, 4};
    CHECK(between(rg, blue) == Overlap::none);
    CHECK(between(rg, green) == Overlap::some);
}

TEST_CASE(overlap_halves_and_crops_of_one_image) {
    View left{0, {6, 4}, {32, 4}, 4}, right{16, {6, 4}, {32, 4}, 4};  // of a (6, 8) float32 image
    CHECK(between(left, right) == Overlap::none);
    CHECK(between(right, left) == Overlap::none);
    View top{0, {4, 8}, {32, 4}, 4}, lower{96, {3, 8}, {32, 4}, 4}, below{128, {2, 8}, {32, 4}, 4};
    CHECK(between(top, lower) == Overlap::some);  // rows 0..3 and 3..5: one row in common
    CHECK(between(lower, top) == Overlap::some);
    CHECK(between(top, below) == Overlap::none);  // rows 0..3 and 4..5
    View middle{36, {4, 6}, {32, 4}, 4}, edge{64, {1}, {4}, 4};  // rows 1..4, columns 1..6; (2, 0)
    CHECK(between(middle, edge) == Overlap::none);  // spans meet, elements do not
    CHECK(between(middle, View{36 + 3 * 32 + 5 * 4, {1}, {4}, 4}) == Overlap::some);  // its last element
}

TEST_CASE(overlap_the_very_same_view_is_same_and_anything_else_is_some) {
    View image = dense(64, {6, 8}, 4);
    CHECK(between(image, image) == Overlap::same);
    CHECK(between(View{64, {6, 1}, {32, 4}, 4}, View{64, {6, 1}, {32, 99}, 4}) == Overlap::same);  // extent-1 strides
    CHECK(between(View{64, {48}, {4}, 4}, image) == Overlap::some);                // the same bytes, other axes
    CHECK(between(View{64, {5, 8}, {32, 4}, 4}, image) == Overlap::some);          // a crop at its first element
    CHECK(between(View{64, {6, 8}, {32, 4}, 2}, image) == Overlap::some);          // other itemsize
    CHECK(between(View{64 + 5 * 32 + 28, {6, 8}, {-32, -4}, 4}, image) == Overlap::some);  // reversed
    CHECK(between(View{64, {8, 6}, {4, 32}, 4}, image) == Overlap::some);          // transposed
}

TEST_CASE(overlap_views_of_other_itemsizes_over_the_same_bytes) {
    View floats{0, {8}, {8}, 4};  // every other float32 of 16
    CHECK(between(View{1, {8}, {8}, 1}, floats) == Overlap::some);     // a byte inside each
    CHECK(between(View{5, {8}, {8}, 1}, floats) == Overlap::none);     // a byte in each gap
    CHECK(between(floats, View{3, {8}, {8}, 2}) == Overlap::some);     // straddling each float's end
    CHECK(between(floats, View{4, {8}, {8}, 4}) == Overlap::none);     // the floats between
    CHECK(between(View{2, {8}, {8}, 4}, floats) == Overlap::some);     // unaligned, straddling
    CHECK(between(View{63, {1}, {1}, 1}, floats) == Overlap::none);    // past the last float's end
    CHECK(between(View{59, {1}, {1}, 1}, floats) == Overlap::some);    // its last byte
}

TEST_CASE(overlap_empty_views_share_nothing) {
    View image = dense(0, {6, 8}, 4);
    CHECK(between(View{0, {0, 8}, {32, 4}, 4}, image) == Overlap::none);
    CHECK(between(image, View{0, {6, 0}, {32, 4}, 4}) == Overlap::none);
    CHECK(between(View{0, {0}, {4}, 4}, View{0, {0}, {4}, 4}) == Overlap::none);
}

/// A view of `n` axes of extent 2 whose strides are close, so that few subset sums are ruled out
/// early: 2**n elements, at `at`.
View knots(int64_t at, size_t n) {
    Shape shape(n, 2), strides(n);
    for (size_t i = 0; i < n; ++i) strides[i] = int64_t(1000003 + 7919 * i * i);
    return View{at, shape, strides, 1};
}

TEST_CASE(overlap_past_the_work_limit_is_maybe) {
    // Twelve axes: decided within the default limit, not within a smaller one.
    View a = knots(0, 12), b = knots(5, 12);
    CHECK_EQ(internal(a), elements_meet(a) ? Overlap::some : Overlap::none);
    CHECK_EQ(between(a, b), views_meet(a, b) ? Overlap::some : Overlap::none);
    CHECK_EQ(between(a, b), Overlap::none);
    CHECK_EQ(internal(a, 1000), Overlap::maybe);
    CHECK_EQ(between(a, b, 1000), Overlap::maybe);
    // Twenty: past the default limit (in about a millisecond), answered as undecided.
    CHECK_EQ(internal(knots(0, 20)), Overlap::maybe);
    CHECK_EQ(between(knots(0, 20), knots(5, 20)), Overlap::maybe);
    // One term left (both views' strides alike, merged) is decided without a node: the search
    // closes the gap with its last term at once.
    CHECK_EQ(between(View{0, {10}, {4}, 4}, View{8, {10}, {4}, 4}, 0), Overlap::some);
    CHECK_EQ(between(View{0, {10}, {8}, 4}, View{4, {10}, {8}, 4}, 0), Overlap::none);
    // The limit counts nodes: a question the first node decides needs exactly one (two crops of
    // one 4x4 image five bytes apart: two terms, the first one's first value closes the gap).
    View image{0, {4, 4}, {4, 1}, 1}, moved{5, {4, 4}, {4, 1}, 1};
    CHECK_EQ(between(image, moved, 1), Overlap::some);
    CHECK_EQ(between(image, moved, 0), Overlap::maybe);
    // The cheap answers need no search: spans apart, the very same view.
    CHECK_EQ(between(knots(0, 20), knots(1 << 26, 20), 0), Overlap::none);
    CHECK_EQ(between(knots(0, 20), knots(0, 20), 0), Overlap::same);
}

TEST_CASE(overlap_views_of_the_most_axes_a_buffer_has_are_decided) {
    // hb::kMaxDims axes of extent 1 (the most a buffer has): decided, not refused as too many.
    View a{0, Shape(size_t(hb::kMaxDims), 1), Shape(size_t(hb::kMaxDims), 1), 4};
    View b{64, Shape(size_t(hb::kMaxDims), 1), Shape(size_t(hb::kMaxDims), 1), 4};
    View c{2, Shape(size_t(hb::kMaxDims), 1), Shape(size_t(hb::kMaxDims), 1), 4};
    CHECK_EQ(between(a, b), Overlap::none);
    CHECK_EQ(between(b, a), Overlap::none);
    CHECK_EQ(between(a, c), Overlap::some);
    CHECK_EQ(internal(a), Overlap::none);
}

// ---------------------------------------------------------------------------------------------
// Random small geometry against the reference
// ---------------------------------------------------------------------------------------------

View random_view(std::mt19937_64 &rng) {
    std::uniform_int_distribution<int> ndim(0, 3), extent(0, 4), stride(-12, 12), at(0, 24);
    static const int64_t itemsizes[] = {1, 2, 4, 8};
    View v{at(rng), {}, {}, itemsizes[rng() % 4]};
    for (int i = ndim(rng); i > 0; --i) {
        v.shape.push_back(rng() % 8 == 0 ? 0 : extent(rng) % 4 + 1);
        v.strides.push_back(stride(rng));
    }
    return v;
}

TEST_CASE(overlap_of_random_views_matches_the_bytes_of_their_elements) {
    std::mt19937_64 rng(20261207);
    int some = 0, none = 0;
    for (int round = 0; round < 4000; ++round) {
        View v = random_view(rng);
        hb_test::within(v.text(), [&] {
            bool meet = elements_meet(v);
            CHECK_EQ(internal(v), meet ? Overlap::some : Overlap::none);
            (meet ? some : none) += 1;
        });
    }
    CHECK(some > 400 && none > 400);  // both answers well represented
}

TEST_CASE(overlap_of_random_pairs_matches_the_bytes_of_their_elements) {
    std::mt19937_64 rng(7);
    int counts[3] = {0, 0, 0};
    for (int round = 0; round < 6000; ++round) {
        View a = random_view(rng), b = random_view(rng);
        if (round % 5 == 0) b.strides = a.strides, b.shape = a.shape;  // often alike: crops, channels
        if (round % 17 == 0) b = a;                                    // now and then the very same
        hb_test::within(a.text() + " and " + b.text(), [&] {
            bool same = a.at == b.at && a.itemsize == b.itemsize && a.shape == b.shape && !element_starts(a).empty();
            for (size_t i = 0; i < a.shape.size() && same; ++i) same = a.shape[i] == 1 || a.strides[i] == b.strides[i];
            Overlap expected = same ? Overlap::same : views_meet(a, b) ? Overlap::some : Overlap::none;
            CHECK_EQ(between(a, b), expected);
            CHECK_EQ(between(b, a), expected);
            counts[int(expected)] += 1;
        });
    }
    CHECK(counts[0] > 600 && counts[1] > 100 && counts[2] > 600);
}

}  // namespace
