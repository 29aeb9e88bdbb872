// test_call_plan.cpp: the plan of a Halide AOT pipeline call (interop/aot_call.h: run_call(),
// required_regions(), output_regions()) on real pipelines, loaded through the project's own
// loader (interop/aot.h). tests/test_cpp_core.py builds their library from the `halide` wheel
// and names it with --pipelines:
//
//   hb_cpp_affine(inp, offset, affine): affine(x, y) = uint8(inp(x, y) * 2 + x + 3 * y + offset),
//       inp uint8 2-D, offset int16 (no default); the output covers the input's region (fixed).
//   hb_cpp_stencil(inp, stencil): stencil(x, y) = inp(x - 1, y) + inp(x + 2, y) + inp(x, y + 1),
//       uint8, wrapping; the output's region is the caller's (not fixed).
#include <dlfcn.h>

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/errors.h"
#include "core/live_counts.h"
#include "device/embedder.h"
#include "harness.h"
#include "interop/aot.h"
#include "interop/aot_call.h"
#include "interop/aot_sizes.h"

namespace {

using hb::AotPipeline;
using hb::Buffer;
using Shape = std::vector<int64_t>;

// ---------------------------------------------------------------------------------------------
// Adapter: what a caller without Python does: the arguments, by name, converted into the call's
// scratch (or a QueryRequest) before the plan runs; this program as the core's embedder, its
// steps run as they are and counted.
// ---------------------------------------------------------------------------------------------

/// The arguments of a call or a bounds query, by name; what the plan did with them.
struct Given {
    std::map<std::string, Buffer *> buffers;
    std::map<std::string, halide_scalar_value_t> scalars;
    std::map<std::string, std::pair<Shape, Shape>> regions;  ///< (mins, shape), NumPy's order
    std::vector<std::unique_ptr<Buffer>> allocated;           ///< the outputs the plan allocated
    /// Steps the plan ran through the embedder's run_unlocked(), the outermost ones (those a
    /// binding would let other threads go for); a step inside one runs as it is.
    int unlocked_steps = 0;
};

int *g_counted = nullptr;  // the Given whose steps are counted now
int g_depth = 0;

void run_counted(hb::Step step) {
    if (g_depth++ == 0 && g_counted) ++*g_counted;
    try {
        step();
    } catch (...) {
        --g_depth;
        throw;
    }
    --g_depth;
}

/// Counts `given`'s steps from now on.
void count_steps(Given &given) {
    hb::install_embedder(hb::Embedder{nullptr, run_counted, nullptr, nullptr});
    g_counted = &given.unlocked_steps;
}

std::string name_of(const AotPipeline &p, size_t i) { return p.metadata().arguments[i].name; }

/// One call of `p`: the arguments converted into the scratch, the plan run, its scratch
/// finished (every lent view given back), the outputs it allocated taken; the indices of its
/// outputs.
std::vector<size_t> call(const AotPipeline &p, Given &given) {
    count_steps(given);
    hb::ScratchUse<hb::CallScratch> use;
    hb::CallScratch &s = use.scratch;
    s.start(size_t(p.metadata().num_arguments));
    for (size_t i = 0; i < s.buffers.size(); ++i) {
        if (auto found = given.buffers.find(name_of(p, i)); found != given.buffers.end()) s.buffers[i] = found->second;
        if (auto found = given.scalars.find(name_of(p, i)); found != given.scalars.end()) {
            s.scalars[i] = found->second;
            s.scalar_given[i] = 1;
        }
    }
    hb::run_call(p, s);
    s.finish();
    for (size_t i : s.missing) given.allocated.push_back(std::make_unique<Buffer>(std::move(*s.allocated[i])));
    return s.outputs;
}

/// A bounds query's arguments, converted.
hb::QueryRequest request(const AotPipeline &p, Given &given) {
    count_steps(given);
    hb::QueryRequest q(size_t(p.metadata().num_arguments));
    for (size_t i = 0; i < q.regions.size(); ++i) {
        if (auto found = given.scalars.find(name_of(p, i)); found != given.scalars.end()) {
            q.scalars[i] = found->second;
            q.scalar_given[i] = 1;
        }
        if (auto found = given.regions.find(name_of(p, i)); found != given.regions.end())
            q.regions[i] = hb::Region{found->second.second, found->second.first};
    }
    return q;
}

/// required_regions() or output_regions() as {name: (mins, shape)}.
using Regions = std::map<std::string, std::pair<Shape, Shape>>;
template <typename Ask>
Regions regions(const AotPipeline &p, Given &given, Ask ask) {
    Regions out;
    for (const auto &[name, r] : ask(p, request(p, given))) out[name] = {r.mins, r.shape};
    return out;
}
Regions required_regions(const AotPipeline &p, Given &given) { return regions(p, given, hb::required_regions); }
Regions output_regions(const AotPipeline &p, Given &given) { return regions(p, given, hb::output_regions); }

// ---------------------------------------------------------------------------------------------
// The pipelines, their references, buffers
// ---------------------------------------------------------------------------------------------

const AotPipeline &pipeline(const char *name) {
    const std::string &library = hb_test::options().pipelines;
    if (library.empty())
        hb_test::fail(__FILE__, __LINE__, "the call plan's cases load pipelines: pass --pipelines LIBRARY "
                                          "(tests/test_cpp_core.py builds it)");
    static std::map<std::string, std::shared_ptr<AotPipeline>> loaded;
    std::shared_ptr<AotPipeline> &p = loaded[name];
    if (!p) p = AotPipeline::load(library, name);
    return *p;
}
const AotPipeline &affine() { return pipeline("hb_cpp_affine"); }
const AotPipeline &stencil() { return pipeline("hb_cpp_stencil"); }

/// The name of the pipeline's output (Halide names it after its Func, uniquely in the process
/// that generated it).
std::string output_of(const AotPipeline &p) {
    const halide_filter_metadata_t &m = p.metadata();
    for (int i = 0; i < m.num_arguments; ++i) {
        if (m.arguments[i].kind == halide_argument_kind_output_buffer) return m.arguments[i].name;
    }
    hb_test::fail(__FILE__, __LINE__, p.name() + " has no output");
}

/// The refusal of an output no region of which lies within the inputs, as the plan words it.
std::string not_within(const AotPipeline &p) {
    return p.name() + "(): output '" + output_of(p) + "': no region of it lies within the inputs";
}

const hb::DType &u8() { return *hb::dtype_by_name("uint8"); }

/// A uint8 buffer of `shape` at `mins`, element (i, j) = (i * 31 + j * 7 + 3) % 256.
Buffer input(const Shape &shape, const Shape &mins = {0, 0}) {
    Buffer b = Buffer::allocate("test", shape, u8()).with_mins(mins);
    for (int64_t i = 0; i < shape[0]; ++i) {
        for (int64_t j = 0; j < shape[1]; ++j) b.data()[i * b.strides()[0] + j] = uint8_t((i * 31 + j * 7 + 3) % 256);
    }
    return b;
}

uint8_t at(const Buffer &b, int64_t y, int64_t x) {  // Halide coordinates
    return b.data()[(y - b.mins()[0]) * b.strides()[0] + (x - b.mins()[1]) * b.strides()[1]];
}

/// Every element of `out` is `expected(input, y, x)`, at Halide coordinates (y, x).
template <typename F>
void check_values(const Buffer &out, const Buffer &in, F expected) {
    for (int64_t y = out.mins()[0]; y < out.mins()[0] + out.shape()[0]; ++y) {
        for (int64_t x = out.mins()[1]; x < out.mins()[1] + out.shape()[1]; ++x)
            hb_test::within("y " + std::to_string(y) + ", x " + std::to_string(x),
                            [&] { CHECK_EQ(int(at(out, y, x)), int(expected(in, y, x))); });
    }
}

uint8_t affine_value(const Buffer &in, int64_t y, int64_t x, int offset) {
    return uint8_t(at(in, y, x) * 2 + x + 3 * y + offset);
}

halide_scalar_value_t scalar_i16(int16_t v) {
    halide_scalar_value_t s{};
    s.i16 = v;
    return s;
}

Shape axes(const hb::Axes &a) { return Shape(a.begin(), a.end()); }

/// Halide's own bounds query, made directly through <name>_argv (no plan): the input region
/// hb_cpp_stencil reads for the output region (mins, shape), as (mins, shape). The reference
/// for required_regions().
std::pair<Shape, Shape> stencil_reads(const Shape &mins, const Shape &shape) {
    void *library = dlopen(hb_test::options().pipelines.c_str(), RTLD_NOW | RTLD_LOCAL);
    CHECK(library);
    auto argv = reinterpret_cast<int (*)(void **)>(dlsym(library, "hb_cpp_stencil_argv"));
    CHECK(argv);
    halide_dimension_t in_dims[2] = {}, out_dims[2] = {{int32_t(mins[1]), int32_t(shape[1]), 1, 0},
                                                       {int32_t(mins[0]), int32_t(shape[0]), int32_t(shape[1]), 0}};
    halide_buffer_t in{}, out{};
    for (halide_buffer_t *b : {&in, &out}) {
        b->type = halide_type_t{halide_type_uint, 8, 1};
        b->dimensions = 2;
    }
    in.dim = in_dims;
    out.dim = out_dims;
    void *args[] = {&in, &out};
    CHECK_EQ(argv(args), 0);
    dlclose(library);
    return {{in_dims[1].min, in_dims[0].min}, {in_dims[1].extent, in_dims[0].extent}};
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// run_call()
// ---------------------------------------------------------------------------------------------

TEST_CASE(call_plan_computes_into_the_outputs_given) {
    const AotPipeline &p = affine();
    Buffer in = input({4, 20}), out = Buffer::allocate("test", {4, 20}, u8());
    Given given;
    given.buffers = {{"inp", &in}, {output_of(p), &out}};
    given.scalars = {{"offset", scalar_i16(-7)}};
    int64_t direct = hb::live_counts().direct_calls;
    std::vector<size_t> outputs = call(p, given);
    CHECK_EQ(outputs, std::vector<size_t>{2});
    CHECK(given.allocated.empty());
    // Small host buffers nothing touched: called directly, on the caller's thread as it is.
    CHECK_EQ(given.unlocked_steps, 0);
    CHECK_EQ(hb::live_counts().direct_calls.load(), direct + 1);
    check_values(out, in, [](const Buffer &b, int64_t y, int64_t x) { return affine_value(b, y, x, -7); });
}

TEST_CASE(call_plan_lends_buffers_a_halide_buffer_t_was_handed_out_of) {
    // Touched buffers go the other way: each lent its own halide_buffer_t, in one unlocked step.
    const AotPipeline &p = affine();
    Buffer in = input({4, 20}), out = Buffer::allocate("test", {4, 20}, u8());
    in.raw("test");
    Given given;
    given.buffers = {{"inp", &in}, {output_of(p), &out}};
    given.scalars = {{"offset", scalar_i16(5)}};
    int64_t direct = hb::live_counts().direct_calls;
    call(p, given);
    CHECK_EQ(given.unlocked_steps, 1);
    CHECK_EQ(hb::live_counts().direct_calls.load(), direct);
    check_values(out, in, [](const Buffer &b, int64_t y, int64_t x) { return affine_value(b, y, x, 5); });
}

TEST_CASE(call_plan_allocates_an_omitted_output_where_the_bounds_query_puts_it) {
    const AotPipeline &p = affine();
    Buffer in = input({5, 18}, {2, -3});  // the output follows the input's coordinates
    Given given;
    given.buffers = {{"inp", &in}};
    given.scalars = {{"offset", scalar_i16(9)}};
    call(p, given);
    CHECK_EQ(given.allocated.size(), size_t(1));
    const Buffer &out = *given.allocated[0];
    CHECK_EQ(axes(out.shape()), (Shape{5, 18}));
    CHECK_EQ(axes(out.mins()), (Shape{2, -3}));
    CHECK_EQ(given.unlocked_steps, 1);  // one step: the two bounds queries, then the run
    check_values(out, in, [](const Buffer &b, int64_t y, int64_t x) { return affine_value(b, y, x, 9); });
    // The region output_regions() gives for an input covering the same region.
    Given asked;
    asked.regions = {{"inp", {{2, -3}, {5, 18}}}};
    asked.scalars = given.scalars;
    CHECK(output_regions(p, asked) == (Regions{{output_of(p), {{2, -3}, {5, 18}}}}));
}

TEST_CASE(call_plan_runs_no_pipeline_for_empty_outputs) {
    // Nothing to compute: the pipeline is not run (its vectorized loop would refuse an empty
    // output), for an output given or allocated.
    const AotPipeline &p = affine();
    Buffer in = input({0, 16}), out = Buffer::allocate("test", {0, 16}, u8());
    Given given;
    given.buffers = {{"inp", &in}, {output_of(p), &out}};
    given.scalars = {{"offset", scalar_i16(1)}};
    call(p, given);
    CHECK_EQ(given.unlocked_steps, 0);
    given.buffers.erase(output_of(p));
    call(p, given);
    CHECK_EQ(given.allocated.size(), size_t(1));
    CHECK_EQ(axes(given.allocated[0]->shape()), (Shape{0, 16}));
    CHECK_EQ(given.unlocked_steps, 1);  // the bounds queries alone, in the plan's one step
}

TEST_CASE(call_plan_allocates_an_output_the_pipeline_does_not_fix_within_its_input) {
    // The stencil reads x from 1 before to 2 after and y to 1 after: over a 6 x 6 input, the
    // largest output region inside it is x in [1, 4), y in [0, 5) (aot_sizes.h).
    const AotPipeline &p = stencil();
    Buffer in = input({6, 6});
    Given given;
    given.buffers = {{"inp", &in}};
    call(p, given);
    CHECK_EQ(given.allocated.size(), size_t(1));
    const Buffer &out = *given.allocated[0];
    CHECK_EQ(axes(out.shape()), (Shape{5, 3}));
    CHECK_EQ(axes(out.mins()), (Shape{0, 1}));
    check_values(out, in, [](const Buffer &b, int64_t y, int64_t x) {
        return uint8_t(at(b, y, x - 1) + at(b, y, x + 2) + at(b, y + 1, x));
    });
}

TEST_CASE(call_plan_refuses_an_output_no_region_of_which_lies_within_its_input) {
    const AotPipeline &p = stencil();
    Buffer in = input({1, 6});  // one row: y + 1 is never inside
    Given given;
    given.buffers = {{"inp", &in}};
    CHECK_THROWS(hb::ValueError, call(p, given), not_within(p));
    CHECK(given.allocated.empty());
}

TEST_CASE(call_plan_computes_a_stencil_over_the_input_it_reads) {
    // The input covers what the output region reads: x from 1 before to 2 after, y to 1 after.
    const AotPipeline &p = stencil();
    Buffer in = input({6, 9}, {0, -1}), out = Buffer::allocate("test", {5, 6}, u8());
    Given given;
    given.buffers = {{"inp", &in}, {output_of(p), &out}};
    call(p, given);
    check_values(out, in, [](const Buffer &b, int64_t y, int64_t x) {
        return uint8_t(at(b, y, x - 1) + at(b, y, x + 2) + at(b, y + 1, x));
    });
}

TEST_CASE(call_plan_names_the_argument_missing) {
    // A scalar without a default, and an input, left out: TypeError naming the pipeline and it.
    const AotPipeline &p = affine();
    Buffer in = input({2, 16});
    Given no_offset;
    no_offset.buffers = {{"inp", &in}};
    CHECK_THROWS(hb::TypeError, call(p, no_offset),
                 "hb_cpp_affine(): argument 'offset' is missing; pass a value of type int16");
    Given no_input;
    no_input.scalars = {{"offset", scalar_i16(1)}};
    CHECK_THROWS(hb::TypeError, call(p, no_input),
                 "hb_cpp_affine(): argument 'inp' is missing; pass a uint8 buffer of 2 axes");
    CHECK(no_input.allocated.empty());
    CHECK_EQ(no_input.unlocked_steps, 0);  // refused before anything ran
}

TEST_CASE(call_plan_reports_halides_refusal_of_a_wrong_buffer_as_a_pipeline_error) {
    // The element type and axes are the caller's to check (the binding's check_buffer()); one that
    // reaches the pipeline anyway is refused by Halide's own checks, named after the pipeline.
    const AotPipeline &p = affine();
    Buffer wide = Buffer::allocate("test", {4, 16}, *hb::dtype_by_name("int16"));
    Given given;
    given.buffers = {{"inp", &wide}};
    given.scalars = {{"offset", scalar_i16(0)}};
    hb::PipelineError e = CAUGHT(hb::PipelineError, call(p, given));
    hb_test::check_message(e.what(), "hb_cpp_affine(): Input buffer inp has type uint8 but type of the buffer "
                                     "passed in is int16", __FILE__, __LINE__);
    CHECK_EQ(e.code, -3);  // halide_error_code_bad_type
}

// ---------------------------------------------------------------------------------------------
// required_regions() and output_regions()
// ---------------------------------------------------------------------------------------------

TEST_CASE(required_regions_are_what_the_pipelines_bounds_query_says) {
    const AotPipeline &p = stencil();
    for (const auto &[mins, shape] : {std::pair<Shape, Shape>{{3, 5}, {4, 6}}, {{-10, 0}, {1, 1}}, {{0, 7}, {9, 2}}}) {
        Given given;
        given.regions = {{output_of(p), {mins, shape}}};
        Regions answer = required_regions(p, given);
        hb_test::within("output region " + hb_test::text(mins) + " " + hb_test::text(shape), [&] {
            CHECK_EQ(answer.size(), size_t(2));
            CHECK(answer[output_of(p)] == std::make_pair(mins, shape));  // computed as asked
            CHECK(answer["inp"] == stencil_reads(mins, shape));
            // The stencil's reach: x from 1 before to 2 after, y to 1 after.
            CHECK(answer["inp"] == std::make_pair(Shape{mins[0], mins[1] - 1}, Shape{shape[0] + 1, shape[1] + 3}));
        });
    }
}

TEST_CASE(required_regions_refuse_a_region_they_cannot_ask_for) {
    const AotPipeline &p = stencil();
    std::string where = "hb_cpp_stencil(): argument '" + output_of(p) + "'";
    Given three_axes;
    three_axes.regions = {{output_of(p), {{0, 0, 0}, {2, 2, 2}}}};
    CHECK_THROWS(hb::ValueError, required_regions(p, three_axes),
                 where + ": a region of 3 axes for a buffer of 2; pass one min and one extent per axis");
    Given none;
    none.regions = {{"inp", {{0, 0}, {4, 4}}}};
    CHECK_THROWS(hb::TypeError, required_regions(p, none), where + ": no region asked for");
}

TEST_CASE(output_regions_follow_a_pipeline_that_fixes_them_and_lie_within_the_inputs_otherwise) {
    const AotPipeline &a = affine();
    Given given;
    given.regions = {{"inp", {{-4, 100}, {3, 32}}}};
    given.scalars = {{"offset", scalar_i16(0)}};
    CHECK(output_regions(a, given) == (Regions{{output_of(a), {{-4, 100}, {3, 32}}}}));
    const AotPipeline &s = stencil();
    CHECK(output_regions(s, given) == (Regions{{output_of(s), {{-4, 101}, {2, 29}}}}));
}
