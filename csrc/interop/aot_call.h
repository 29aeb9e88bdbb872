// aot_call.h: the plan of one call of a Halide AOT pipeline, without Python: the argument
// vector (one builder for calls and bounds queries), the bounds queries that size the outputs
// not given, the device a call computes on, the placement of every buffer argument on it, and
// the call. Whoever passes the arguments (the binding, py_aot.cpp) converts its own values and
// lends the plan three things through CallArguments: a way to run a long step letting other
// threads go on (the binding: without the GIL), a home for each output the plan allocates (a
// Python Buffer), and the default CUDA device (the package's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "abi/halide_abi.h"
#include "backends/device_cuda.h"
#include "interop/aot.h"
#include "storage/buffer.h"

namespace hb {

/// The argument a pipeline's runtime takes for itself: we pass a null user context.
bool is_user_context(const halide_filter_argument_t &a);
/// An input or output buffer argument (not a scalar).
bool is_buffer(const halide_filter_argument_t &a);
/// An element type's dtype name, or "(code, bits, lanes)" for one no dtype has, for a message.
std::string type_text(halide_type_t t);
/// "<pipeline>(): argument '<name>'": built only for an error message.
std::string where_of(const AotPipeline &p, const halide_filter_argument_t &a);

/// A step of the plan lent to a hook for the length of that hook's call: neither copied nor
/// allocated (the callable stays the caller's).
class Step {
public:
    template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, Step>>>
    Step(F &&f)  // NOLINT: made implicitly from a lambda
        : f_(const_cast<void *>(static_cast<const void *>(&f))),
          run_([](void *f) { (*static_cast<std::remove_reference_t<F> *>(f))(); }) {}
    void operator()() const { run_(f_); }

private:
    void *f_;
    void (*run_)(void *);
};

/// What the plan asks of whoever passed the arguments, call and bounds query alike.
class Arguments {
public:
    /// The value given for scalar argument `i`, converted to its type (errors name the
    /// argument); false when none was given, for the plan to take the default.
    virtual bool scalar(size_t i, halide_scalar_value_t &value) = 0;
    /// Runs `step` so that other threads go on meanwhile; it may copy, wait on a device or run
    /// the pipeline. The binding runs it without the GIL. The plan runs this way exactly the
    /// steps the binding released the GIL for: the pipeline call and its bounds queries, the
    /// placement of a buffer on the call's device, and the host placement of a buffer that may
    /// hold a device copy (run_lease()'s rule). Everything else runs on the caller's thread as
    /// it is (for the binding: with the GIL held).
    virtual void unlocked(Step step) = 0;

protected:
    ~Arguments() = default;
};

/// A call's arguments.
class CallArguments : public Arguments {
public:
    /// Buffer argument `i` as given (its element type and dimensions checked against the
    /// argument's), or null when none was given. It must stay where it is until the call's
    /// scratch is finished.
    virtual Buffer *buffer(size_t i) = 0;
    /// Takes output `i`, which the plan allocated, and returns where it now lives (the binding:
    /// inside a new Python Buffer), which must stay there until the call's scratch is finished.
    virtual Buffer &keep_output(size_t i, Buffer output) = 0;
    /// The CUDA device a CUDA pipeline computes on when no buffer argument is on one.
    virtual std::shared_ptr<CudaDevice> default_cuda_device() = 0;

protected:
    ~CallArguments() = default;
};

/// A bounds query's arguments (required_regions()).
class QueryArguments : public Arguments {
public:
    /// The region asked of buffer argument `i` (an output's region, an input's covered region),
    /// NumPy's axis order; false when none was given.
    virtual bool region(size_t i, std::vector<int64_t> &mins, std::vector<int64_t> &shape) = 0;

protected:
    ~QueryArguments() = default;
};

/// A halide_buffer_t for a bounds query: no memory, the pipeline fills in the dimensions.
struct Query {
    halide_buffer_t buf{};
    std::vector<halide_dimension_t> dims;
};

/// The region a bounds query answered, as NumPy sees it: Halide's dimension 0 is the last axis.
struct Region {
    std::vector<int64_t> shape, mins;
};

/// Scratch space of a call, reused (ScratchUse) so a call allocates nothing once warm.
struct CallScratch {
    /// Each buffer argument given or allocated (null for a scalar, and for an output not given
    /// until it is allocated).
    std::vector<Buffer *> buffers;
    /// Each buffer argument's halide_buffer_t for this call alone (Buffer::lend), given back
    /// when the call ends.
    std::vector<RawView *> lent;
    std::vector<halide_scalar_value_t> scalars;
    std::vector<void *> argv;
    std::vector<Query> queries[2];  // one per request (see aot_call.cpp)
    std::vector<size_t> outputs, missing;

    /// Ready for a pipeline of `n` arguments.
    void start(size_t n);
    /// Gives every lent view back (what the call left in it taken in). Runs when the call
    /// ends, however it ends, before the buffers it names may go.
    void finish();
};

/// This thread's scratch for one call (start() it), finish()ed when the call ends, however it
/// ends. A nested call (an argument's __array__ calling a pipeline) gets scratch of its own.
/// `Scratch` is CallScratch, or a caller's scratch holding one with what the caller keeps.
template <typename Scratch>
struct ScratchUse {
    ScratchUse() : scratch(busy() ? nested : shared()), was_busy(busy()) { busy() = true; }
    ~ScratchUse() {
        scratch.finish();
        busy() = was_busy;
    }
    ScratchUse(const ScratchUse &) = delete;
    ScratchUse &operator=(const ScratchUse &) = delete;

    static Scratch &shared() {
        thread_local Scratch s;
        return s;
    }
    static bool &busy() {
        thread_local bool b = false;
        return b;
    }

    Scratch nested;  ///< a nested call's (declared first: constructed before `scratch` refers to it)
    Scratch &scratch;
    bool was_busy;
};

/// One call of `p` in `s` (started): builds the argument vector (TypeError for a missing
/// input), chooses the device the call computes on (DeviceError where it has none), places
/// every buffer argument there (the outputs not given allocated first, sized by bounds
/// queries, and handed to args.keep_output()), lends each to the call, and runs the pipeline
/// (PipelineError for a failure), unless every output is empty: then there is nothing to
/// compute, and the pipeline is not run. The outputs are s.outputs, in the pipeline's order.
void run_call(const AotPipeline &p, CallScratch &s, CallArguments &args);

/// Halide's bounds query for given output regions: the region of each input buffer the pipeline
/// reads to compute them, and the region of each output it writes (the one asked for, or more:
/// a vectorized or tiled schedule may round it up). Scalars come from args.scalar() (their
/// defaults when absent), regions from args.region(): every output's is required; an input's,
/// optional, is the region it covers (a pipeline clamping to its input's own bounds needs it;
/// the answer is then clipped to it). Returns each buffer argument's name and region, in the
/// pipeline's order. No memory is touched: every buffer is a query.
std::vector<std::pair<const char *, Region>> required_regions(const AotPipeline &p, QueryArguments &args);

/// The region of each output as a call sizes an output it is not given (the bounds queries asked
/// twice, about different empty regions: ValueError naming the output when the answers differ,
/// for a pipeline that does not fix it), for inputs covering the regions args.region() gives
/// (outputs' regions are not asked for) and scalars from args.scalar(). What a caller
/// allocating outputs itself (hb.torch's op, its fake kernel) sizes them by.
std::vector<std::pair<const char *, Region>> output_regions(const AotPipeline &p, QueryArguments &args);

}  // namespace hb
