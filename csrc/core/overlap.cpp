// overlap.cpp: the overlap tests of overlap.h. The cheap answers first (what ordinary views
// are decided by, in a few comparisons per axis), then the exact search: both questions are
// whether a sum of strides times bounded integers reaches a window of bytes.
#include "core/overlap.h"

#include <algorithm>
#include <utility>

#include "core/constants.h"

namespace hb {
namespace {

/// Sums of strides times extents, which int64 may not hold for geometry nobody allocated.
using Wide = __int128;

Wide floor_div(Wide a, Wide b) {  // b > 0
    Wide q = a / b;
    return a % b != 0 && a < 0 ? q - 1 : q;
}
Wide ceil_div(Wide a, Wide b) {  // b > 0
    Wide q = a / b;
    return a % b != 0 && a > 0 ? q + 1 : q;
}
Wide gcd_of(Wide a, Wide b) {
    while (b != 0) a = std::exchange(b, a % b);
    return a;
}

// ---------------------------------------------------------------------------------------------
// The exact search: is there an integer x_i in [lo_i, hi_i] for each term such that
// sum c_i * x_i lies in [lo, hi]?
// ---------------------------------------------------------------------------------------------

/// A term of the sum: coefficient `c` times an integer in [lo, hi].
struct Term {
    Wide c, lo, hi;
};

/// What the search found.
enum class Found : uint8_t { no, yes, unknown };

/// The most terms a question has: two views' axes.
constexpr size_t kMaxTerms = 2 * size_t(kMaxDims);

/// The search over terms normalised to c > 0 times an integer in [0, r], c in decreasing order,
/// no two alike; `reach[d]` is the most terms d.. add up to, `step[d]` the gcd of their
/// coefficients (every sum of them is a multiple of it).
struct Search {
    Wide c[kMaxTerms], r[kMaxTerms], reach[kMaxTerms + 1], step[kMaxTerms + 1];
    size_t n = 0;
    int64_t &work;

    explicit Search(int64_t &work) : work(work) {}

    /// Whether terms d.. can add up to a value in [lo, hi] (branch and bound: each term's value
    /// tried only where the terms after it can still close the gap).
    Found from(size_t d, Wide lo, Wide hi) {
        if (hi < 0 || lo > reach[d]) return Found::no;
        if (d == n) return Found::yes;  // 0 lies in [lo, hi]
        if (floor_div(hi, step[d]) * step[d] < lo) return Found::no;  // no multiple of the gcd in the window
        Wide rest = reach[d + 1];
        Wide first = std::max<Wide>(0, ceil_div(lo - rest, c[d])), last = std::min(r[d], floor_div(hi, c[d]));
        if (d + 1 == n) return first <= last ? Found::yes : Found::no;  // the last term closes any gap left
        for (Wide u = first; u <= last; ++u) {
            if (--work < 0) return Found::unknown;
            Found f = from(d + 1, lo - c[d] * u, hi - c[d] * u);
            if (f != Found::no) return f;
        }
        return Found::no;
    }
};

/// Whether sum c_i * x_i, each x_i an integer in [lo_i, hi_i] (lo_i <= hi_i), can lie in [lo, hi]:
/// terms normalised to positive coefficients over [0, r] (c * x = c * hi + |c| * (hi - x) for
/// c < 0), terms of equal coefficient merged (their ranges add: two halves of one image, two
/// crops of one image with the same strides become two or three terms), the window's gcd
/// checked, then searched, at most `work` nodes (unknown beyond).
Found sum_reaches(const Term *terms, size_t count, Wide lo, Wide hi, int64_t &work) {
    Search s(work);
    for (size_t i = 0; i < count; ++i) {
        const Term &t = terms[i];
        Wide base = t.c < 0 ? t.c * t.hi : t.c * t.lo;
        lo -= base;
        hi -= base;
        if (t.c != 0 && t.hi != t.lo) {
            s.c[s.n] = t.c < 0 ? -t.c : t.c;
            s.r[s.n++] = t.hi - t.lo;
        }
    }
    // Decreasing coefficients, equal ones merged.
    size_t order[kMaxTerms];
    for (size_t i = 0; i < s.n; ++i) order[i] = i;
    std::sort(order, order + s.n, [&](size_t a, size_t b) { return s.c[a] > s.c[b]; });
    Wide c[kMaxTerms], r[kMaxTerms];
    size_t n = 0;
    for (size_t k = 0; k < s.n; ++k) {
        size_t i = order[k];
        if (n > 0 && c[n - 1] == s.c[i]) {
            r[n - 1] += s.r[i];
        } else {
            c[n] = s.c[i];
            r[n++] = s.r[i];
        }
    }
    s.n = n;
    s.reach[n] = 0;
    s.step[n] = 0;
    for (size_t d = n; d-- > 0;) {
        s.c[d] = c[d];
        s.r[d] = r[d];
        s.reach[d] = s.reach[d + 1] + c[d] * r[d];
        s.step[d] = gcd_of(c[d], s.step[d + 1]);
    }
    if (n == 0) return lo <= 0 && 0 <= hi ? Found::yes : Found::no;
    return s.from(0, lo, hi);
}

Overlap verdict(Found f) { return f == Found::yes ? Overlap::some : f == Found::no ? Overlap::none : Overlap::maybe; }

/// An axis that steps (extent > 1), by |stride|.
struct Axis {
    int64_t stride, extent;
};

/// internal_overlap() where the axes do not nest: two axes of one |stride| overlap; else, is
/// there a nonzero m, |m_i| <= extent_i - 1, with |sum m_i * stride_i| < itemsize? Its first
/// nonzero m_j may be taken positive (m and -m are alike), those before it 0: one search per j.
Overlap exact_internal(const Axis *axes, size_t k, int64_t itemsize, int64_t work) {
    for (size_t j = 1; j < k; ++j) {
        if (axes[j].stride == axes[j - 1].stride) return Overlap::some;  // (1, 0) and (0, 1): one element
    }
    Term terms[kMaxDims];
    bool undecided = false;
    for (size_t j = 0; j < k; ++j) {
        size_t n = 0;
        terms[n++] = Term{axes[j].stride, 1, axes[j].extent - 1};
        for (size_t i = j + 1; i < k; ++i) terms[n++] = Term{axes[i].stride, -(axes[i].extent - 1), axes[i].extent - 1};
        Found f = sum_reaches(terms, n, -(itemsize - 1), itemsize - 1, work);
        if (f == Found::yes) return Overlap::some;
        undecided |= f == Found::unknown;
    }
    return undecided ? Overlap::maybe : Overlap::none;
}

/// The very same elements: one first element, itemsize and shape, and the strides of every axis
/// that steps.
bool same_view(const ByteView &a, const ByteView &b) {
    if (a.data != b.data || a.itemsize != b.itemsize || a.ndim != b.ndim) return false;
    for (size_t i = 0; i < a.ndim; ++i) {
        if (a.shape[i] != b.shape[i] || (a.shape[i] > 1 && a.strides[i] != b.strides[i])) return false;
    }
    return true;
}

}  // namespace

Overlap internal_overlap(const ByteView &v, int64_t work) {
    // The axes that step, by increasing |stride|: collected innermost first, as a C-ordered view
    // has them, whose insertion sort then moves nothing.
    if (v.ndim > size_t(kMaxDims)) return Overlap::maybe;  // no view has so many axes
    Axis axes[kMaxDims];
    size_t k = 0;
    bool repeats = false;
    for (size_t i = v.ndim; i-- > 0;) {
        int64_t n = v.shape[i], s = v.strides[i] < 0 ? -v.strides[i] : v.strides[i];
        if (n == 0) return Overlap::none;  // no element at all
        if (n == 1) continue;
        repeats |= s == 0;
        size_t j = k++;
        for (; j > 0 && axes[j - 1].stride > s; --j) axes[j] = axes[j - 1];
        axes[j] = Axis{s, n};
    }
    if (repeats) return Overlap::some;  // an axis of stride 0: its elements are one
    // Nested axes: each |stride| reaches past everything the axes inside it reach, so two
    // elements differing on it lie at least an itemsize apart.
    int64_t reach = 0, end;
    for (size_t j = 0; j < k; ++j) {
        int64_t span;
        if (__builtin_add_overflow(reach, v.itemsize, &end) || axes[j].stride < end ||
            __builtin_mul_overflow(axes[j].extent - 1, axes[j].stride, &span) ||
            __builtin_add_overflow(reach, span, &reach))
            return exact_internal(axes, k, v.itemsize, work);
    }
    return Overlap::none;
}

Overlap views_overlap(const ByteView &a, const ByteView &b, int64_t work) {
    if (a.ndim > size_t(kMaxDims) || b.ndim > size_t(kMaxDims)) return Overlap::maybe;  // no view has so many axes
    bool nested;
    if (spans_apart(address_span(a, nested), address_span(b, nested))) return Overlap::none;
    if (same_view(a, b)) return Overlap::same;
    // An element of a at offset + sum k_i * s_i and one of b at sum l_j * t_j (from b's first
    // element) share a byte when their starts differ by less than the itemsize of the one in front.
    Wide offset = Wide(reinterpret_cast<intptr_t>(a.data)) - Wide(reinterpret_cast<intptr_t>(b.data));
    Term terms[kMaxTerms];
    size_t n = 0;
    for (size_t i = 0; i < a.ndim; ++i) terms[n++] = Term{a.strides[i], 0, a.shape[i] - 1};
    for (size_t j = 0; j < b.ndim; ++j) terms[n++] = Term{-b.strides[j], 0, b.shape[j] - 1};
    return verdict(sum_reaches(terms, n, -(a.itemsize - 1) - offset, b.itemsize - 1 - offset, work));
}

}  // namespace hb
