// aot_sizes.cpp: the sizes of the outputs nobody gave (see aot_sizes.h): the region a pipeline
// fixes, else the largest region whose required input regions lie within the inputs, found with
// bounds queries and kept per pipeline, regions and scalars.
#include "interop/aot_sizes.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "core/constants.h"
#include "core/errors.h"
#include "core/text.h"

namespace hb {

namespace {

// ---------------------------------------------------------------------------------------------
// What the bounds queries answer
// ---------------------------------------------------------------------------------------------

/// Every argument's region in one bounds query's answer (none for scalars): required_regions()'
/// pairs, placed at their arguments.
std::vector<std::optional<Region>> answer_of(const AotPipeline &p, const QueryRequest &asked) {
    const halide_filter_metadata_t &m = p.metadata();
    std::vector<std::optional<Region>> out(size_t(m.num_arguments));
    auto answer = required_regions(p, asked);
    for (size_t j = 0, i = 0; i < out.size(); ++i) {
        if (is_buffer(m.arguments[i])) out[i] = std::move(answer[j++].second);
    }
    return out;
}

bool is_output(const halide_filter_argument_t &a) { return a.kind == halide_argument_kind_output_buffer; }

/// Whether every element of `need` lies in `cover` (an empty `need` does).
bool inside(const Region &need, const Region &cover) {
    for (int64_t n : need.shape) {
        if (n <= 0) return true;
    }
    for (size_t a = 0; a < need.shape.size(); ++a) {
        if (need.mins[a] < cover.mins[a] || need.mins[a] + need.shape[a] > cover.mins[a] + cover.shape[a])
            return false;
    }
    return true;
}

/// The first input whose needed region (in `answer`) leaves the region it covers, or -1.
int64_t input_left(const QueryRequest &covers, const std::vector<std::optional<Region>> &answer,
                   const halide_filter_metadata_t &m) {
    for (size_t i = 0; i < answer.size(); ++i) {
        if (!is_output(m.arguments[i]) && covers.regions[i] && answer[i] && !inside(*answer[i], *covers.regions[i]))
            return int64_t(i);
    }
    return -1;
}

// ---------------------------------------------------------------------------------------------
// Outputs the pipeline fixes
// ---------------------------------------------------------------------------------------------

/// Where the test of a fixed output starts from: each axis of an output not given asked for
/// empty at one min, then at another. A pipeline that fixes the output's region (from its
/// inputs, scalars or constants) answers both alike; one that does not answers with a region
/// grown from the request (a vector or a tile of its schedule around it), which differs.
constexpr int64_t kRequestMins[] = {0, 1021};

/// An answer's region with its empty extents as 0, whatever their value (over an empty input, a
/// guarded GPU tiling answers -8 to one request and -24 to the other).
Region emptied(Region r) {
    for (int64_t &n : r.shape) n = std::max<int64_t>(n, 0);
    return r;
}

/// The region of each output `open` names that the pipeline fixes (both requests answered alike);
/// none for the others.
std::vector<std::optional<Region>> fixed_regions(const AotPipeline &p, const QueryRequest &args,
                                                 const std::vector<size_t> &open) {
    std::vector<std::optional<Region>> answers[2];
    for (int r = 0; r < 2; ++r) {
        QueryRequest asked = args;
        for (size_t i : open) {
            size_t n = size_t(p.metadata().arguments[i].dimensions);
            asked.regions[i] = Region{std::vector<int64_t>(n, 0), std::vector<int64_t>(n, kRequestMins[r])};
        }
        answers[r] = answer_of(p, asked);
    }
    std::vector<std::optional<Region>> out(args.regions.size());
    for (size_t i : open) {
        Region a = emptied(*answers[0][i]), b = emptied(*answers[1][i]);
        if (a.shape == b.shape && a.mins == b.mins) out[i] = std::move(a);
    }
    return out;
}

// ---------------------------------------------------------------------------------------------
// The largest region within the inputs
// ---------------------------------------------------------------------------------------------

/// How far a side is grown before it counts as growing without end: a side still inside the
/// inputs this far out reads them through a boundary condition. (Far enough for a 2**27-element
/// axis upsampled twice; near enough that a downsampler's index arithmetic stays in int32.)
constexpr int64_t kReach = int64_t(1) << 28;

/// The largest t in [lo, hi) with ok(t), for ok true at lo, false at hi and monotone between:
/// galloping from the end `from_hi` names (the answer is expected near it), then halving.
int64_t last_fitting(int64_t lo, int64_t hi, bool from_hi, const std::function<bool(int64_t)> &ok) {
    for (int64_t step = 1; hi - lo > 1; step *= 2) {
        int64_t t = from_hi ? std::max(lo + 1, hi - step) : std::min(hi - 1, lo + step);
        if (ok(t)) {
            lo = t;
            if (from_hi) break;
        } else {
            hi = t;
            if (!from_hi) break;
        }
    }
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        (ok(mid) ? lo : hi) = mid;
    }
    return lo;
}

/// The search for the outputs the pipeline does not fix: every probe one bounds query of
/// `asked`, the searched outputs' regions set in it as they grow.
class Search {
public:
    Search(const AotPipeline &p, const QueryRequest &args, std::vector<size_t> open)
        : p_(p), m_(p.metadata()), covers_(args), asked_(args), open_(std::move(open)) {}

    std::vector<std::optional<Region>> run() {
        seed();
        for (size_t i : open_) {
            for (size_t a = 0; a < asked_.regions[i]->shape.size(); ++a) {
                grow(i, a, false);
                grow(i, a, true);
            }
        }
        // The regions the pipeline writes for the regions found: at least those (a schedule's
        // vectors may round them up), their inputs inside the covered regions all the same.
        std::vector<std::optional<Region>> answer = answer_of(p_, asked_), out(answer.size());
        for (size_t i : open_) out[i] = emptied(std::move(*answer[i]));
        return out;
    }

private:
    /// Whether the regions in asked_ need only what the inputs cover; a query that fails (a
    /// region far out overflowing the pipeline's arithmetic) counts as not.
    bool fits() {
        try {
            return input_left(covers_, answer_of(p_, asked_), m_) < 0;
        } catch (const PipelineError &) {
            return false;
        } catch (const ValueError &) {
            return false;
        }
    }

    /// The region an output is sized like where a side grows without end: the first covered
    /// input of as many axes, else the first covered input, its axes matched from the innermost
    /// (Halide's dimension 0) and one element at 0 along the output's others.
    Region reference(size_t i) const {
        size_t n = size_t(m_.arguments[i].dimensions);
        const Region *like = nullptr;
        for (size_t j = 0; j < covers_.regions.size() && !(like && like->shape.size() == n); ++j) {
            const auto &c = covers_.regions[j];
            if (c && !is_output(m_.arguments[j]) && (!like || c->shape.size() == n)) like = &*c;
        }
        Region r{std::vector<int64_t>(n, 1), std::vector<int64_t>(n, 0)};
        if (!like) return r;
        for (size_t k = 0; k < n && k < like->shape.size(); ++k) {
            r.shape[n - 1 - k] = like->shape[like->shape.size() - 1 - k];
            r.mins[n - 1 - k] = like->mins[like->shape.size() - 1 - k];
        }
        return r;
    }

    /// Where every searched output starts from, the first that needs only what the inputs
    /// cover: its reference's region (an elementwise pipeline's answer already), one element at
    /// the reference's centre (a stencil's), at its first or its last element (a vector of the
    /// schedule ending or starting there), at 0. ValueError naming the first output for none.
    void seed() {
        std::vector<std::optional<Region>> where;
        Region element;
        for (int kind = 0; kind < 5; ++kind) {
            for (size_t i : open_) {
                Region r = reference(i);
                for (size_t a = 0; a < r.shape.size() && kind > 0; ++a) {
                    int64_t last = r.mins[a] + std::max<int64_t>(r.shape[a], 1) - 1;
                    r.mins[a] = kind == 1 ? r.mins[a] + r.shape[a] / 2 : kind == 2 ? r.mins[a] : kind == 3 ? last : 0;
                    r.shape[a] = 1;
                }
                asked_.regions[i] = std::move(r);
            }
            std::vector<std::optional<Region>> answer = answer_of(p_, asked_);  // a failure is the caller's
            if (input_left(covers_, answer, m_) < 0) return;
            if (kind == 1) where = answer, element = *asked_.regions[open_.front()];
        }
        refuse(where, element);
    }

    /// The ValueError for an output no element of which fits: what one `element` of it needs.
    [[noreturn]] void refuse(const std::vector<std::optional<Region>> &answer, const Region &element) const {
        const halide_filter_argument_t &out = m_.arguments[open_.front()];
        size_t in = size_t(input_left(covers_, answer, m_));
        const Region &need = *answer[in], &has = *covers_.regions[in];
        throw ValueError(p_.name() + "(): output '" + out.name + "': no region of it lies within the inputs (the "
                         "pipeline does not fix its size, and even one element of it at " + tuple_text(element.mins) +
                         " needs input '" + m_.arguments[in].name + "' over shape " + tuple_text(need.shape) +
                         " at mins " + tuple_text(need.mins) + ", beyond its shape " + tuple_text(has.shape) +
                         " at mins " + tuple_text(has.mins) + ": the input is smaller than one element reads, or "
                         "the pipeline gathers from a region that does not shrink with the output); pass an output "
                         "buffer");
    }

    /// Grows axis `a` of output i on its high side (`high`) or its low side as far as the
    /// inputs hold what it needs.
    void grow(size_t i, size_t a, bool high) {
        Region &r = *asked_.regions[i];
        const int64_t min = r.mins[a], extent = r.shape[a], max = min + extent - 1;
        int64_t cap = std::min(kReach, kInt32Max - extent);
        cap = std::min(cap, high ? kInt32Max - max : min - kInt32Min);
        if (cap <= 0) return;
        auto set = [&](int64_t t) {
            r.shape[a] = extent + t;
            r.mins[a] = high ? min : min - t;
        };
        auto ok = [&](int64_t t) {
            set(t);
            return fits();
        };
        Region ref = reference(i);
        int64_t guess = high ? ref.mins[a] + ref.shape[a] - 1 - max : min - ref.mins[a];
        int64_t t;
        if (ok(cap)) {
            t = std::max<int64_t>(guess, 0);  // without end: as far as the reference goes
        } else if (guess <= 0 || guess >= cap) {
            t = last_fitting(0, cap, false, ok);
        } else if (ok(guess)) {
            t = last_fitting(guess, cap, false, ok);
        } else {
            t = last_fitting(0, guess, true, ok);
        }
        set(t);
    }

    const AotPipeline &p_;
    const halide_filter_metadata_t &m_;
    const QueryRequest &covers_;
    QueryRequest asked_;
    std::vector<size_t> open_;
};

/// Extents a search gives an empty input's empty axes, twice: an output's axis that grows with
/// them is empty over the empty input.
constexpr int64_t kStandIns[] = {16, 37};

/// The search, over inputs that may be empty: each empty axis of an input stood in for by two
/// extents in turn; an output's axis whose answers differ is empty, at its first answer's min.
std::vector<std::optional<Region>> largest_regions(const AotPipeline &p, const QueryRequest &args,
                                                   const std::vector<size_t> &open) {
    bool any_empty = false;
    for (const auto &r : args.regions) {
        if (r) any_empty = any_empty || std::find(r->shape.begin(), r->shape.end(), 0) != r->shape.end();
    }
    if (!any_empty) return Search(p, args, open).run();
    std::vector<std::optional<Region>> found[2];
    for (int k = 0; k < 2; ++k) {
        QueryRequest standing = args;
        for (size_t i = 0; i < standing.regions.size(); ++i) {
            if (!standing.regions[i] || is_output(p.metadata().arguments[i])) continue;
            for (int64_t &n : standing.regions[i]->shape) n = n == 0 ? kStandIns[k] : n;
        }
        found[k] = Search(p, standing, open).run();
    }
    for (size_t i : open) {
        Region &r = *found[0][i];
        for (size_t a = 0; a < r.shape.size(); ++a) {
            if (r.shape[a] != found[1][i]->shape[a] || r.mins[a] != found[1][i]->mins[a]) r.shape[a] = 0;
        }
    }
    return std::move(found[0]);
}

// ---------------------------------------------------------------------------------------------
// What is kept
// ---------------------------------------------------------------------------------------------

/// What the outputs' regions depend on: the pipeline (its metadata, loaded for the process),
/// every scalar's bits, every region given.
struct Key {
    const void *pipeline;
    std::vector<int64_t> words;
    bool operator==(const Key &o) const { return pipeline == o.pipeline && words == o.words; }
};

struct KeyHash {
    size_t operator()(const Key &k) const {
        size_t h = std::hash<const void *>()(k.pipeline);
        for (int64_t w : k.words) h = h * 1000003u ^ std::hash<int64_t>()(w);
        return h;
    }
};

Key key_of(const AotPipeline &p, const QueryRequest &args) {
    Key k{&p.metadata(), {}};
    for (size_t i = 0; i < args.regions.size(); ++i) {
        int64_t bits = 0;
        std::memcpy(&bits, &args.scalars[i], sizeof bits);
        k.words.push_back(args.scalar_given[i] ? bits : -1);
        k.words.push_back(args.scalar_given[i]);
        const auto &r = args.regions[i];
        k.words.push_back(r ? int64_t(r->shape.size()) : -1);
        if (r) {
            k.words.insert(k.words.end(), r->mins.begin(), r->mins.end());
            k.words.insert(k.words.end(), r->shape.begin(), r->shape.end());
        }
    }
    return k;
}

/// At most this many answers kept for the process (all pipelines together); when full, the next
/// answer clears them: a program sizes outputs for a few shapes.
constexpr size_t kKept = 1024;

struct Kept {
    std::mutex lock;
    std::unordered_map<Key, std::vector<std::optional<Region>>, KeyHash> answers;
};

Kept &kept() {
    static Kept *k = new Kept;  // never destroyed: calls may run on threads at exit
    return *k;
}

}  // namespace

std::vector<std::optional<Region>> sized_outputs(const AotPipeline &p, const QueryRequest &args) {
    Key key = key_of(p, args);
    {
        std::lock_guard<std::mutex> hold(kept().lock);
        auto found = kept().answers.find(key);
        if (found != kept().answers.end()) return found->second;
    }
    const halide_filter_metadata_t &m = p.metadata();
    std::vector<size_t> open;
    for (size_t i = 0; i < args.regions.size(); ++i) {
        if (is_output(m.arguments[i]) && !args.regions[i]) open.push_back(i);
    }
    std::vector<std::optional<Region>> out = fixed_regions(p, args, open);
    std::vector<size_t> unfixed;
    for (size_t i : open) {
        if (!out[i]) unfixed.push_back(i);
    }
    if (!unfixed.empty()) {
        QueryRequest held = args;  // the fixed outputs asked for their regions while the rest grow
        for (size_t i : open) {
            if (out[i]) held.regions[i] = out[i];
        }
        std::vector<std::optional<Region>> found = largest_regions(p, held, unfixed);
        for (size_t i : unfixed) out[i] = std::move(found[i]);
    }
    std::lock_guard<std::mutex> hold(kept().lock);
    if (kept().answers.size() >= kKept) kept().answers.clear();
    kept().answers.emplace(std::move(key), out);
    return out;
}

std::vector<std::pair<const char *, Region>> output_regions(const AotPipeline &p, const QueryRequest &args) {
    std::vector<std::optional<Region>> sized = sized_outputs(p, args);
    std::vector<std::pair<const char *, Region>> out;
    for (size_t i = 0; i < sized.size(); ++i) {
        if (sized[i]) out.emplace_back(p.metadata().arguments[i].name, std::move(*sized[i]));
    }
    return out;
}

}  // namespace hb
