// aot_call.cpp: the plan of an AOT pipeline call (see aot_call.h): the argument vector, the
// bounds queries that allocate the outputs not given, the device of the call, the placement
// of its buffers, the call; and required_regions()' bounds query.
#include "interop/aot_call.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <utility>

#include "backends/opencl_api.h"
#include "backends/opencl_context.h"
#include "core/constants.h"
#include "core/dtype.h"
#include "core/errors.h"
#include "core/live_counts.h"
#include "core/text.h"
#include "device/embedder.h"
#include "interop/aot_sizes.h"
#include "interop/cuda_interop.h"

namespace hb {

std::string type_text(halide_type_t t) {
    const DType *d = dtype_by_halide(t);
    return d ? d->name : "(" + std::to_string(t.code) + ", " + std::to_string(t.bits) + ", " +
                             std::to_string(t.lanes) + ")";
}

std::string where_of(const AotPipeline &p, const halide_filter_argument_t &a) {
    return p.name() + "(): argument '" + a.name + "'";
}

namespace {

/// `v` as `n` copies of `value`, filled in place when it has that size already (a warm
/// scratch's vectors mostly do): no call out of line.
template <typename T>
void refill(std::vector<T> &v, size_t n, const T &value) {
    if (v.size() != n) v.resize(n);
    for (T &x : v) x = value;
}

}  // namespace

void CallScratch::start(size_t n) {
    refill(buffers, n, static_cast<Buffer *>(nullptr));
    borrowing_ = false;
    refill(scalars, n, halide_scalar_value_t{});
    refill(scalar_given, n, uint8_t(0));
    allocated.clear();  // made room in when the call allocates an output (few calls do)
    staged.clear();     // likewise, when it stages a buffer
    refill(lent, n, static_cast<RawView *>(nullptr));
    refill(argv, n, static_cast<void *>(nullptr));
    outputs.clear();
    missing.clear();
}

BorrowedArgument &CallScratch::borrow(size_t i) {
    if (!borrowing_) {
        if (borrowed_.size() != buffers.size()) borrowed_.resize(buffers.size());
        for (BorrowedArgument &b : borrowed_) b.given = false;
        borrowing_ = true;
    }
    return borrowed_[i];
}

void CallScratch::finish() {
    for (size_t i = 0; i < lent.size(); ++i) {
        if (!lent[i]) continue;
        try {
            buffers[i]->take_back(std::exchange(lent[i], nullptr));
        } catch (...) {
            // Only a failed lock wait: the view stays lent (left alone) rather than be lost.
        }
    }
    staged.clear();  // `buffers` keeps its size for the next start() to fill in
}

namespace {

// ---------------------------------------------------------------------------------------------
// The argument vector
// ---------------------------------------------------------------------------------------------

/// The argument vector of a call or a bounds query, in `argv`: a null user context, each scalar
/// as given (its default when none was; TypeError without one), each buffer argument as
/// `buffer(i)` passes it. `scalars` holds the values given, and the defaults taken.
template <typename OnBuffer>
void build_argv(const AotPipeline &p, std::vector<void *> &argv, std::vector<halide_scalar_value_t> &scalars,
                const std::vector<uint8_t> &scalar_given, OnBuffer &&buffer) {
    const halide_filter_metadata_t &m = p.metadata();
    for (size_t i = 0; i < argv.size(); ++i) {
        const halide_filter_argument_t &a = m.arguments[i];
        if (is_user_context(a)) {
            argv[i] = &scalars[i];  // a null user_context
        } else if (!is_buffer(a)) {
            if (!scalar_given[i]) {
                if (!a.scalar_def)
                    throw TypeError(where_of(p, a) + " is missing; pass a value of type " + type_text(a.type));
                scalars[i] = *a.scalar_def;
            }
            argv[i] = &scalars[i];
        } else {
            buffer(i, a);
        }
    }
}

/// A call's buffer argument i: the buffer given (borrowed memory passed as described), else an
/// output noted as missing (allocated by enter_buffers()); TypeError for a missing input.
void call_buffer(CallScratch &s, const AotPipeline &p, size_t i, const halide_filter_argument_t &a) {
    bool output = a.kind == halide_argument_kind_output_buffer;
    const BorrowedArgument *borrowed = s.borrowed(i);
    if (borrowed) s.argv[i] = const_cast<halide_buffer_t *>(&borrowed->buf);  // Halide's ABI: not const
    bool given = s.buffers[i] || borrowed;
    if (!given && !output)
        throw TypeError(where_of(p, a) + " is missing; pass a " + type_text(a.type) + " buffer of " +
                        std::to_string(a.dimensions) + " axes");
    if (!given) s.missing.push_back(i);
    if (output) s.outputs.push_back(i);
}

/// Buffer argument i's element count (a Buffer, or borrowed memory).
int64_t size_of(const CallScratch &s, size_t i) {
    return s.buffers[i] ? s.buffers[i]->size() : s.borrowed(i)->size();
}

// ---------------------------------------------------------------------------------------------
// Bounds queries
// ---------------------------------------------------------------------------------------------

/// A query's halide_buffer_t for argument `a`, its dimensions as they are in q.dims.
void point_query(Query &q, const halide_filter_argument_t &a) {
    q.buf = halide_buffer_t{};
    q.buf.type = a.type;
    q.buf.dimensions = a.dimensions;
    q.buf.dim = q.dims.data();
}

Region region_of(const Query &q) {
    Region r;
    for (int i = q.buf.dimensions; i-- > 0;) {
        r.shape.push_back(q.dims[size_t(i)].extent);
        r.mins.push_back(q.dims[size_t(i)].min);
    }
    return r;
}

/// Runs the bounds query in `argv`; a failure's PipelineError says which query it was (`what`).
void run_query(const AotPipeline &p, std::vector<void *> &argv, const char *what) {
    try {
        embedder().run_unlocked([&] { p.call(argv.data()); });
    } catch (const PipelineError &e) {
        throw PipelineError(std::string(e.what()) + "; this was the bounds query for " + what, e.code);
    }
}

// ---------------------------------------------------------------------------------------------
// The device of a call
// ---------------------------------------------------------------------------------------------

/// The CUDA device of a call: that of the first buffer argument on one, else the embedder's
/// device 0 (DeviceError without a driver). Remembered for the runtime's calls outside ours.
/// Chosen before the call's step, with the GIL held, as an export's device is: the embedder's
/// device is the package's, which Python gives.
std::shared_ptr<CudaDevice> cuda_call_device(const CallScratch &s) {
    std::shared_ptr<CudaDevice> device;
    for (size_t i = 0; i < s.buffers.size() && !device; ++i) {
        if (s.buffers[i]) device = cuda_device_of(*s.buffers[i]);
    }
    if (!device) device = std::dynamic_pointer_cast<CudaDevice>(embedder().cuda_device(0, "hb.aot"));
    remember_pipeline_device(device);
    return device;
}

/// The OpenCL device of a call: that of the first buffer argument on one, else the default
/// device; null when the pipeline's runtime keeps a context of its own (a library opened
/// before halide_buffer: see opencl_context.h), whose memory is its own.
std::shared_ptr<OpenCLDevice> opencl_call_device(const AotPipeline &p, const CallScratch &s) {
    ocl::api(p.name().c_str());  // DeviceError naming the pipeline and what to install, without a loader
    std::shared_ptr<OpenCLDevice> device;
    for (size_t i = 0; i < s.buffers.size() && !device; ++i) {
        Buffer *b = s.buffers[i];
        if (b && b->may_hold_device_copy()) device = std::dynamic_pointer_cast<OpenCLDevice>(b->device());
    }
    try {
        if (!device) device = default_opencl_device();
    } catch (const DeviceError &e) {
        throw DeviceError(p.name() + "(): no OpenCL device to run on: " + e.what(), e.code, e.name);
    }
    return p.runs_in_our_context(*device) ? device : nullptr;
}

/// The device a call computes on, in our memory: a CUDA pipeline's (always: `cuda`, chosen
/// before the step), an OpenCL pipeline's whose runtime asks us for its context; null for a
/// host pipeline, or one whose runtime keeps memory of its own.
std::shared_ptr<Device> call_device(const AotPipeline &p, const CallScratch &s, std::shared_ptr<CudaDevice> cuda) {
    if (p.uses_cuda()) return cuda;
    if (p.uses_opencl() && p.device_interface()) return opencl_call_device(p, s);
    return nullptr;
}

// ---------------------------------------------------------------------------------------------
// Placement
// ---------------------------------------------------------------------------------------------

/// Whether a buffer must reach pipeline `p` through a staging copy. Halide's device runtimes
/// allocate device memory only for non-negative strides and a size above 0 (they abort the
/// process otherwise), and compute in ours only as it is laid out forward: a view with a
/// negative stride is staged, and so is an empty one, whose staging storage (empty itself) is
/// then given device memory of ours, so the runtime allocates none.
bool needs_staging(const AotPipeline &p, const Buffer &b) {
    if (!is_device_pipeline(p)) return false;
    if (b.size() == 0) return true;
    return std::any_of(b.strides().begin(), b.strides().end(), [](int64_t stride) { return stride < 0; });
}

/// A pipeline whose runtime keeps device memory of its own (an OpenCL library opened before
/// halide_buffer) would allocate an empty argument's itself, and abort: refused instead.
void refuse_empty_without_device(const AotPipeline &p, const CallScratch &s, const std::shared_ptr<Device> &device) {
    if (device || !is_device_pipeline(p)) return;
    const halide_filter_metadata_t &m = p.metadata();
    for (size_t i = 0; i < s.buffers.size(); ++i) {
        if (s.buffers[i] && s.buffers[i]->size() == 0)
            throw ValueError(where_of(p, m.arguments[i]) + " is empty, and the pipeline's runtime keeps device "
                             "memory of its own, where Halide cannot allocate an empty buffer; load the pipeline "
                             "after importing halide_buffer, or leave the empty output out of the call");
    }
}

/// Puts a forward copy in place of buffer argument i (its shape, coordinates and memory order,
/// non-negative strides): an input's values copied into it now, an output's copied out of it
/// after the call (copy_back_staged()).
void stage(const AotPipeline &p, CallScratch &s, size_t i, bool output) {
    if (s.staged.empty()) s.staged.resize(s.buffers.size());
    CallScratch::Staged &st = s.staged[i];
    st.given = s.buffers[i];
    Buffer &copy = st.copy.emplace(Buffer::allocate_like(p.name().c_str(), *st.given, st.given->dtype()));
    if (!output) copy.copy_from(p.name().c_str(), *st.given);
    s.buffers[i] = &copy;
}

/// Copies each staged output into the buffer it stands for, once the call gave its view back.
void copy_back_staged(const AotPipeline &p, CallScratch &s) {
    if (s.staged.empty()) return;
    for (size_t i : s.outputs) {
        if (!s.staged[i].given) continue;
        s.buffers[i]->take_back(std::exchange(s.lent[i], nullptr));
        s.staged[i].given->copy_from(p.name().c_str(), *s.buffers[i]);
    }
}

/// Prepares buffer argument i for the call and passes a halide_buffer_t lent to the call alone:
/// on `device` when there is one (shown to the pipeline as on its device interface), else as
/// the pipeline needs it.
void enter_buffer(const AotPipeline &p, CallScratch &s, size_t i, const std::shared_ptr<Device> &device) {
    bool output = p.metadata().arguments[i].kind == halide_argument_kind_output_buffer;
    if (needs_staging(p, *s.buffers[i])) stage(p, s, i, output);
    Buffer &b = *s.buffers[i];
    if (device) b.prepare_for_pipeline(p.name().c_str(), p.device_interface(), output, device);
    else b.prepare_for_pipeline(p.name().c_str(), p.device_interface(), output);
    s.lent[i] = b.lend(p.name().c_str(), device ? p.device_interface() : nullptr);
    s.argv[i] = &s.lent[i]->buf;
}

/// The outputs not given, sized by sized_outputs() (aot_sizes.h) for the inputs given (the
/// regions they cover) and the scalars, allocated into s.allocated with their coordinates, on
/// `device` when the call has one (a zero-copy device's pool: Buffer::allocate_on()).
void allocate_missing(const AotPipeline &p, CallScratch &s, Device *device) {
    const halide_filter_metadata_t &m = p.metadata();
    QueryRequest asked(s.buffers.size());
    for (size_t i = 0; i < s.buffers.size(); ++i) {
        asked.scalars[i] = s.scalars[i];  // build_argv() put the defaults of those not given in
        asked.scalar_given[i] = !is_buffer(m.arguments[i]) && !is_user_context(m.arguments[i]);
        const BorrowedArgument *b = s.borrowed(i);
        if (s.buffers[i]) asked.regions[i] = Region{s.buffers[i]->shape(), s.buffers[i]->mins()};
        else if (b) asked.regions[i] = Region{{b->shape, b->shape + b->ndim}, std::vector<int64_t>(size_t(b->ndim))};
    }
    std::vector<std::optional<Region>> sized = sized_outputs(p, asked);
    s.allocated.resize(s.buffers.size());
    for (size_t i : s.missing) {
        const Region &r = *sized[i];
        s.buffers[i] = &s.allocated[i].emplace(
            Buffer::allocate_on("aot", device, r.shape, *dtype_by_halide(m.arguments[i].type)).with_mins(r.mins));
    }
}

/// Enters every Buffer given (borrowed memory is passed as described), then allocates the
/// outputs not given and enters them.
void enter_buffers(const AotPipeline &p, CallScratch &s, const std::shared_ptr<Device> &gpu) {
    for (size_t i = 0; i < s.buffers.size(); ++i) {
        if (s.buffers[i]) enter_buffer(p, s, i, gpu);
    }
    if (s.missing.empty()) return;
    allocate_missing(p, s, gpu.get());
    for (size_t i : s.missing) enter_buffer(p, s, i, gpu);
}

/// A device pipeline overwrites its outputs whole: their old host contents need not go up.
/// Its inputs without a device copy it can use must: its runtime uploads only host-dirty ones.
void expect_transfers(const AotPipeline &p, CallScratch &s) {
    if (!p.device_interface()) return;
    const halide_filter_metadata_t &m = p.metadata();
    for (size_t i = 0; i < s.buffers.size(); ++i) {
        if (!s.lent[i]) continue;
        Buffer &b = *s.buffers[i];
        if (m.arguments[i].kind == halide_argument_kind_output_buffer) b.expect_overwrite(*s.lent[i]);
        else b.expect_upload(*s.lent[i]);
    }
}

/// Whether every output of the call is empty: there is nothing to compute, and the pipeline is
/// not run (Halide's own code would refuse a vectorized or tiled loop over an empty output,
/// reading its region as starting a vector before the min).
bool nothing_to_compute(const CallScratch &s) {
    if (s.outputs.empty()) return false;
    for (size_t i : s.outputs) {
        if (size_of(s, i) != 0) return false;
    }
    return true;
}

/// Calls a host pipeline on borrowed memory and small Buffers nothing has touched
/// (kDirectCallBytes) directly: each Buffer described by a halide_buffer_t made for the call
/// alone, on the calling thread as it is. Nothing needs publishing, lending or taking back: such
/// a storage has no device copy and no halide_buffer_t out, and is host dirty since it was made,
/// as a host pipeline leaves its outputs; the calling thread keeps every other operation off it
/// meanwhile (the binding: it holds the GIL, which an operation on such a storage never lets
/// go). On borrowed memory alone, a call above kDirectCallBytes lets other threads go on (the
/// memory's owner is held for the call; its other users are theirs to order, as with any
/// library computing on it). False, having done nothing, for any other call.
bool call_directly(const AotPipeline &p, CallScratch &s) {
    if (is_device_pipeline(p) || !s.missing.empty()) return false;
    size_t n = s.buffers.size();
    s.direct.resize(n);
    s.direct_dims.resize(n * kMaxDims);
    int64_t bytes = 0;
    bool buffers = false;
    for (size_t i = 0; i < n; ++i) {
        if (const Buffer *b = s.buffers[i]) {
            if (!b->residency_untouched()) return false;  // the argv slots written are the lent way's to overwrite
            bytes += b->size() * b->dtype().itemsize;
            buffers = true;
            b->describe(s.direct[i], &s.direct_dims[i * kMaxDims]);
            s.direct[i].flags = kHostDirty;  // the state it has had since it was made
            s.argv[i] = &s.direct[i];
        } else if (const BorrowedArgument *b = s.borrowed(i)) {
            bytes += b->size() * b->itemsize;
        }
    }
    if (buffers && bytes > kDirectCallBytes) return false;
    std::atomic<int64_t> &counted = live_counts().direct_calls;
    counted.store(counted.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    if (nothing_to_compute(s)) return true;
    if (bytes > kDirectCallBytes) embedder().run_unlocked([&] { p.call(s.argv.data()); });
    else p.call(s.argv.data());
    return true;
}

/// On a device sharing the host's memory, a call returns with its kernels queued, and they read
/// and write the host memory of its buffers itself: each storage keeps the call's ticket, which a
/// host write waits for (Storage::await_queued_work()), so the write comes after them, as it would
/// with copies.
void note_queued_work(const CallScratch &s, Device *device) {
    if (!device || !device->zero_copy()) return;
    uint64_t ticket = device->ticket_queued_work();
    for (const Buffer *b : s.buffers) {
        if (b) b->note_queued_work(ticket);
    }
}

/// On a device sharing the host's memory, memory its owner may write at any time (external writes) is,
/// where aligned for it, the very memory the call's kernels read and write, not a copy taken
/// before they ran: the call returns once they finished, so that a write its owner makes after
/// the call comes after them. (Such memory that was copied waits too: one rule, asked cheaply.)
void wait_for_owners(const CallScratch &s, const Device *device) {
    if (!device || !device->zero_copy()) return;
    for (const Buffer *b : s.buffers) {
        if (b && b->external_writes()) return device->synchronize();
    }
}

}  // namespace

void run_call(const AotPipeline &p, CallScratch &s) {
    build_argv(p, s.argv, s.scalars, s.scalar_given,
               [&](size_t i, const halide_filter_argument_t &a) { call_buffer(s, p, i, a); });
    refuse_overlapping_outputs(p, s);
    if (call_directly(p, s)) return;
    // What only the embedder gives is asked for now, on the calling thread: a CUDA pipeline's
    // device may be the package's (the binding's: Python's). The rest is one step that may copy,
    // wait on a device or compute: other threads go on meanwhile, and the step takes back nothing
    // it let go (the binding's GIL).
    std::shared_ptr<CudaDevice> cuda = p.uses_cuda() ? cuda_call_device(s) : nullptr;
    embedder().run_unlocked([&] {
        // A device pipeline runs on the device of its first argument on one, else the default
        // device, and its arguments are placed there: it reads and writes our device copies as
        // they are.
        std::shared_ptr<Device> device = call_device(p, s, std::move(cuda));
        TargetDevice target(device.get());  // the device our hooks give the pipeline's runtime
        enter_buffers(p, s, device);
        if (nothing_to_compute(s)) return;
        refuse_empty_without_device(p, s, device);
        expect_transfers(p, s);
        p.call(s.argv.data());
        note_queued_work(s, device.get());
        copy_back_staged(p, s);
        wait_for_owners(s, device.get());
    });
}

std::vector<std::pair<const char *, Region>> required_regions(const AotPipeline &p, const QueryRequest &args) {
    const halide_filter_metadata_t &m = p.metadata();
    size_t n = size_t(m.num_arguments);
    std::vector<Query> queries(n);
    std::vector<void *> argv(n, nullptr);
    std::vector<halide_scalar_value_t> scalars = args.scalars;
    build_argv(p, argv, scalars, args.scalar_given, [&](size_t i, const halide_filter_argument_t &a) {
        Query &q = queries[i];
        q.dims.assign(size_t(a.dimensions), halide_dimension_t{0, 0, 0, 0});
        const std::optional<Region> &asked = args.regions[i];
        if (!asked && a.kind == halide_argument_kind_output_buffer)
            throw TypeError(where_of(p, a) + ": no region asked for; pass the output's (mins, shape)");
        if (asked) {
            const std::vector<int64_t> &mins = asked->mins, &shape = asked->shape;
            if (mins.size() != size_t(a.dimensions) || shape.size() != size_t(a.dimensions))
                throw ValueError(where_of(p, a) + ": a region of " + std::to_string(shape.size()) +
                                 " axes for a buffer of " + std::to_string(a.dimensions) + "; pass one min and "
                                 "one extent per axis");
            check_mins(p.name().c_str(), shape, mins);
            checked_count(p.name().c_str(), shape, 1);
            for (size_t d = 0; d < shape.size(); ++d)
                q.dims[shape.size() - 1 - d] = halide_dimension_t{int32_t(mins[d]), int32_t(shape[d]), 0, 0};
        }
        point_query(q, a);
        argv[i] = &q.buf;
    });
    live_counts().bounds_queries.fetch_add(1, std::memory_order_relaxed);
    run_query(p, argv, "the output regions asked for");
    std::vector<std::pair<const char *, Region>> out;
    for (size_t i = 0; i < n; ++i) {
        if (is_buffer(m.arguments[i])) out.emplace_back(m.arguments[i].name, region_of(queries[i]));
    }
    return out;
}

}  // namespace hb
