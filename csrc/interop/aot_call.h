// aot_call.h: the plan of one call of a Halide AOT pipeline, without Python: the argument
// vector (one builder for calls and bounds queries), the outputs not given allocated as
// aot_sizes.h sizes them, the device a call computes on, the placement of every buffer argument
// on it, and the call. Whoever passes the arguments (the binding, py_aot.cpp) converts every one of them
// into the call's scratch before the plan runs, and takes the outputs the plan allocated when
// it returns; the plan asks the rest (a long step run letting other threads go on, the default
// CUDA device) of the embedder (device/embedder.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "abi/halide_abi.h"
#include "backends/device_cuda.h"
#include "interop/aot.h"
#include "interop/aot_borrow.h"
#include "storage/buffer.h"

namespace hb {

/// The argument a pipeline's runtime takes for itself: we pass a null user context. Asked per
/// argument per call: inline.
inline bool is_user_context(const halide_filter_argument_t &a) {
    return a.name[0] == '_' && std::strcmp(a.name, "__user_context") == 0;
}
/// An input or output buffer argument (not a scalar).
inline bool is_buffer(const halide_filter_argument_t &a) { return a.kind != halide_argument_kind_input_scalar; }
/// An element type's dtype name, or "(code, bits, lanes)" for one no dtype has, for a message.
std::string type_text(halide_type_t t);
/// "<pipeline>(): argument '<name>'": built only for an error message.
std::string where_of(const AotPipeline &p, const halide_filter_argument_t &a);

/// The region a bounds query answered, as NumPy sees it: Halide's dimension 0 is the last axis.
struct Region {
    std::vector<int64_t> shape, mins;
};

/// A bounds query's arguments, converted by whoever passes them before the plan runs: per
/// argument of the pipeline, its scalar and whether one was given (else its default), and the
/// region asked of a buffer argument (an output's region, an input's covered region; none
/// where nothing was given).
struct QueryRequest {
    std::vector<halide_scalar_value_t> scalars;
    std::vector<uint8_t> scalar_given;
    std::vector<std::optional<Region>> regions;

    /// Ready for a pipeline of `n` arguments, nothing given.
    explicit QueryRequest(size_t n) : scalars(n, halide_scalar_value_t{}), scalar_given(n, 0), regions(n) {}
};

/// A halide_buffer_t for a bounds query: no memory, the pipeline fills in the dimensions.
struct Query {
    halide_buffer_t buf{};
    std::vector<halide_dimension_t> dims;
};

/// Scratch space of a call, reused (ScratchUse) so a call allocates nothing once warm.
struct CallScratch {
    // What whoever passes the arguments fills in after start(), before run_call(): every
    // argument converted, so the plan asks nothing of it.
    /// Each buffer argument given (its element type and dimensions checked against the
    /// argument's), null for none; it must stay where it is until the scratch is finished. The
    /// plan points an output it allocates at `allocated`.
    std::vector<Buffer *> buffers;
    /// Buffer argument i given as borrowed host memory instead (aot_borrow.h: a host pipeline's
    /// alone), described for the call; null for the others.
    const BorrowedArgument *borrowed(size_t i) const {
        return borrowing_ && borrowed_[i].given ? &borrowed_[i] : nullptr;
    }
    /// Room to describe buffer argument i in, for whoever fills the scratch in (its `given` set
    /// when it is described). The first in a call makes room for all: a call borrowing nothing
    /// costs nothing.
    BorrowedArgument &borrow(size_t i);
    /// Each scalar argument given, converted to its type; scalar_given says which were.
    std::vector<halide_scalar_value_t> scalars;
    std::vector<uint8_t> scalar_given;

    // What the plan makes of them.
    /// Each output the plan allocated (it was not given), for the caller to take when the call
    /// returns (after finish()).
    std::vector<std::optional<Buffer>> allocated;
    /// Each buffer argument's halide_buffer_t for this call alone (Buffer::lend), given back
    /// when the call ends.
    std::vector<RawView *> lent;
    /// A direct call's halide_buffer_t of each buffer argument and their dimensions (run_call()).
    std::vector<halide_buffer_t> direct;
    std::vector<halide_dimension_t> direct_dims;
    std::vector<void *> argv;
    /// A device pipeline's staging copy of a buffer argument (see aot_call.cpp's stage()), and
    /// the argument it stands for.
    struct Staged {
        std::optional<Buffer> copy;
        Buffer *given = nullptr;
    };
    /// Per argument, for a call that stages one; empty for most calls.
    std::vector<Staged> staged;
    std::vector<size_t> outputs, missing;

    /// Ready for a pipeline of `n` arguments.
    void start(size_t n);
    /// Gives every lent view back (what the call left in it taken in) and drops the staging
    /// copies. Runs when the call ends, however it ends, before the buffers it names may go;
    /// `allocated` stays for the caller.
    void finish();

private:
    std::vector<BorrowedArgument> borrowed_;
    bool borrowing_ = false;  ///< borrowed_ is this call's (else none is given)
};

/// This thread's scratch for one call (start() it), finish()ed when the call ends, however it
/// ends. A nested call (an argument's __array__ calling a pipeline) gets scratch of its own.
/// `Scratch` is CallScratch, or a caller's scratch holding one with what the caller keeps.
template <typename Scratch>
struct ScratchUse {
    ScratchUse() : thread(here()), scratch(thread.busy ? nested.emplace() : thread.scratch), was_busy(thread.busy) {
        thread.busy = true;
    }
    ~ScratchUse() {
        scratch.finish();
        thread.busy = was_busy;
    }
    ScratchUse(const ScratchUse &) = delete;
    ScratchUse &operator=(const ScratchUse &) = delete;

    /// This thread's scratch, and whether a call is using it (one thread-local look-up a call).
    struct Thread {
        Scratch scratch;
        bool busy = false;
    };
    static Thread &here() {
        thread_local Thread t;
        return t;
    }

    Thread &thread;
    std::optional<Scratch> nested;  ///< a nested call's (declared before `scratch`, which may refer to it)
    Scratch &scratch;
    bool was_busy;
};

/// Bytes of buffer arguments up to which a host pipeline whose Buffers nothing has touched yet
/// (never on a device, no halide_buffer_t out: Buffer::residency_untouched()) is called
/// directly, on halide_buffer_t's made for the call, on the calling thread as it is: letting
/// other threads go on would cost more than such a call (NumPy's ufuncs keep the GIL below 500
/// elements, for the same reason). A call on borrowed memory alone is direct at any size, and
/// lets other threads go on above it.
constexpr int64_t kDirectCallBytes = 64 * 1024;

/// Whether `p` computes on a GPU (OpenCL or CUDA), in our memory or its runtime's own: else a
/// host pipeline, which may take borrowed host memory (aot_borrow.h).
inline bool is_device_pipeline(const AotPipeline &p) {
    return p.device_interface() || p.uses_cuda() || p.uses_opencl();
}

/// ValueError naming the pipeline and the arguments unless every output given (a Buffer or borrowed)
/// has memory of its own: its elements distinct (not an expanded or overlapping view), sharing no
/// byte with another output, nor with an input unless it is the very same view (a call in place).
/// Whatever Halide's schedule, the results would otherwise overwrite each other, or the pipeline
/// read what it has overwritten already (aot_overlap.cpp).
void refuse_overlapping_outputs(const AotPipeline &p, const CallScratch &s);

/// One call of `p` with the arguments in `s` (started, then filled in): builds the argument
/// vector (TypeError for a missing input). A host pipeline on borrowed memory and small untouched
/// Buffers is then called directly (kDirectCallBytes); otherwise a CUDA pipeline's device is chosen
/// on the calling thread (the embedder's, the package's in the binding, where no argument is on
/// one), and the rest runs as one step through the embedder's run_unlocked(), asking the embedder
/// nothing: it chooses the device the call computes on (DeviceError where it has none; a CUDA
/// pipeline's, the one chosen), places every buffer argument there (the outputs not given allocated first into
/// s.allocated, sized by bounds queries), lends each to the call, and runs the pipeline
/// (PipelineError for a failure), unless every output is empty: then there is nothing to
/// compute, and the pipeline is not run. The outputs are s.outputs, in the pipeline's order.
void run_call(const AotPipeline &p, CallScratch &s);

/// Halide's bounds query for given output regions: the region of each input buffer the pipeline
/// reads to compute them, and the region of each output it writes (the one asked for, or more:
/// a vectorized or tiled schedule may round it up). Scalars come from args.scalars (their
/// defaults where not given), regions from args.regions: every output's is required; an input's,
/// optional, is the region it covers (a pipeline clamping to its input's own bounds needs it;
/// the answer is then clipped to it). Returns each buffer argument's name and region, in the
/// pipeline's order. No memory is touched: every buffer is a query.
std::vector<std::pair<const char *, Region>> required_regions(const AotPipeline &p, const QueryRequest &args);

}  // namespace hb
