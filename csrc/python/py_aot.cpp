// py_aot.cpp: halide_buffer.aot: calling a Halide AOT pipeline with Buffers (arguments by
// position or name, checked against the pipeline's metadata; outputs allocated by a bounds
// query when not given; the GIL released during the call).
#include <string>
#include <utility>
#include <vector>

#include "core/errors.h"
#include "interop/aot.h"
#include "backends/opencl_context.h"
#include "interop/cuda_interop.h"
#include "python/py_glue.h"

namespace hb {
namespace {

constexpr const char *kKinds[] = {"input_scalar", "input_buffer", "output_buffer"};

bool is_user_context(const halide_filter_argument_t &a) { return std::string(a.name) == "__user_context"; }
bool is_buffer(const halide_filter_argument_t &a) { return a.kind != halide_argument_kind_input_scalar; }

std::string type_text(halide_type_t t) {
    const DType *d = dtype_by_halide(t);
    return d ? d->name : "(" + std::to_string(t.code) + ", " + std::to_string(t.bits) + ", " +
                             std::to_string(t.lanes) + ")";
}

/// "'inp', 'offset', 'out'": the arguments a caller passes, in order, for a message.
std::string names_of(const AotPipeline &p) {
    const halide_filter_metadata_t &m = p.metadata();
    std::string names;
    for (int i = 0; i < m.num_arguments; ++i) {
        if (is_user_context(m.arguments[i])) continue;
        names += (names.empty() ? "'" : ", '") + std::string(m.arguments[i].name) + "'";
    }
    return names;
}

py::list arguments_of(const AotPipeline &p) {
    py::list out;
    const halide_filter_metadata_t &m = p.metadata();
    for (int i = 0; i < m.num_arguments; ++i) {
        const halide_filter_argument_t &a = m.arguments[i];
        if (is_user_context(a)) continue;
        py::dict d;
        d["name"] = a.name;
        d["kind"] = kKinds[a.kind];
        d["dtype"] = type_text(a.type);
        d["dimensions"] = a.dimensions;
        out.append(d);
    }
    return out;
}

// ---------------------------------------------------------------------------------------------
// Arguments
// ---------------------------------------------------------------------------------------------

/// "<pipeline>(): argument '<name>'": built only for an error message.
std::string where_of(const AotPipeline &p, const halide_filter_argument_t &a) {
    return p.name() + "(): argument '" + a.name + "'";
}

/// The highest value of a signed integer type (its lowest is -highest - 1).
long long int_max(halide_type_t t) { return t.bits == 64 ? LLONG_MAX : (1LL << (t.bits - 1)) - 1; }
/// The highest value of an unsigned integer (or address) type.
unsigned long long uint_max(halide_type_t t) { return t.bits == 64 ? ULLONG_MAX : (1ULL << t.bits) - 1; }

/// "from <lowest> to <highest>": the values of an integer (or address) type, for a message.
std::string range_of(halide_type_t t) {
    if (t.code == halide_type_int)
        return "from " + std::to_string(-int_max(t) - 1) + " to " + std::to_string(int_max(t));
    return "from 0 to " + std::to_string(uint_max(t));
}

/// What the steps of to_scalar() share: the argument, the value passed, the type's name.
struct ScalarArg {
    const AotPipeline &p;
    const halide_filter_argument_t &a;
    py::handle v;
    std::string name;  ///< "an address", or the type's name

    std::string where() const { return where_of(p, a); }
    const char *value_type() const { return Py_TYPE(v.ptr())->tp_name; }
    ValueError out_of_range() const {
        return ValueError(where() + ": " + py::repr(v).cast<std::string>() + " is out of range for " + name +
                          "; pass a value " + range_of(a.type));
    }
};

/// A scalar with every byte zero, for a step to fill in.
halide_scalar_value_t blank_scalar() {
    halide_scalar_value_t s{};
    s.u64 = 0;
    return s;
}

halide_scalar_value_t float_scalar(const ScalarArg &arg) {
    // Anything with __float__ or __index__ (NumPy scalars too), but not text or bools.
    PyObject *v = arg.v.ptr();
    double x = PyBool_Check(v) ? -1.0 : PyFloat_AsDouble(v);
    if (PyBool_Check(v) || (x == -1.0 && PyErr_Occurred())) {
        PyErr_Clear();
        throw TypeError(arg.where() + ": expected a number for " + arg.name + ", not " + arg.value_type() +
                        "; pass an int or a float");
    }
    halide_scalar_value_t s = blank_scalar();
    if (arg.a.type.bits == 32) s.f32 = float(x);
    else if (arg.a.type.bits == 64) s.f64 = x;
    else throw TypeError(arg.where() + ": scalars of " + arg.name +
                         " are not supported; pass a float32 or float64 parameter");
    return s;
}

halide_scalar_value_t address_scalar(const ScalarArg &arg) {
    halide_scalar_value_t s = blank_scalar();
    if (arg.v.is_none()) return s;
    if (!is_integer(arg.v) || PyBool_Check(arg.v.ptr()))
        throw TypeError(arg.where() + ": expected an address (int) or None, not " + arg.value_type() +
                        "; pass the address as an int, or None for a null pointer");
    uint64_t address;
    if (!as_uint64(arg.v, address)) throw arg.out_of_range();
    s.handle = reinterpret_cast<void *>(uintptr_t(address));
    return s;
}

halide_scalar_value_t bool_scalar(const ScalarArg &arg) {
    if (!PyBool_Check(arg.v.ptr()) && !PyIndex_Check(arg.v.ptr()))
        throw TypeError(arg.where() + ": expected a bool, not " + arg.value_type() + "; pass True or False");
    halide_scalar_value_t s = blank_scalar();
    s.b = PyObject_IsTrue(arg.v.ptr()) == 1;
    return s;
}

/// A signed or unsigned integer type's value, range-checked.
halide_scalar_value_t int_scalar(const ScalarArg &arg) {
    halide_type_t t = arg.a.type;
    if (!is_integer(arg.v) || PyBool_Check(arg.v.ptr()))
        throw TypeError(arg.where() + ": expected an int for " + arg.name + ", not " + arg.value_type() +
                        "; pass an int (int(x) converts a number, rounding toward zero)");
    halide_scalar_value_t s = blank_scalar();
    if (t.code == halide_type_int) {
        int64_t x;
        if (!as_int64(arg.v, x) || x < -int_max(t) - 1 || x > int_max(t)) throw arg.out_of_range();
        if (t.bits == 8) s.i8 = int8_t(x);
        else if (t.bits == 16) s.i16 = int16_t(x);
        else if (t.bits == 32) s.i32 = int32_t(x);
        else s.i64 = x;
        return s;
    }
    uint64_t x;
    if (!as_uint64(arg.v, x) || x > uint_max(t)) throw arg.out_of_range();
    if (t.bits == 8) s.u8 = uint8_t(x);
    else if (t.bits == 16) s.u16 = uint16_t(x);
    else if (t.bits == 32) s.u32 = uint32_t(x);
    else s.u64 = x;
    return s;
}

/// A Python number as the scalar type an argument declares, range-checked.
halide_scalar_value_t to_scalar(const AotPipeline &p, py::handle v, const halide_filter_argument_t &a) {
    halide_type_t t = a.type;
    ScalarArg arg{p, a, v, t.code == halide_type_handle ? std::string("an address") : type_text(t)};
    if (t.code == halide_type_float) return float_scalar(arg);
    if (t.code == halide_type_handle) return address_scalar(arg);
    if (t.code == halide_type_uint && t.bits == 1) return bool_scalar(arg);
    return int_scalar(arg);
}

/// A buffer argument as a Buffer object (a Buffer, or anything Buffer.from_host wraps), its
/// element type and dimensions checked.
py::object to_buffer(const AotPipeline &p, py::handle v, const halide_filter_argument_t &a) {
    py::object obj = py::isinstance<Buffer>(v) ? py::reinterpret_borrow<py::object>(v)
                                                : py::cast(buffer_from_host(v, false, true));
    Buffer &b = buffer_of(obj.ptr());
    const halide_type_t &t = b.dtype().halide;
    if (t.code != a.type.code || t.bits != a.type.bits || t.lanes != a.type.lanes)
        throw TypeError(where_of(p, a) + ": a " + b.dtype().name + " buffer where the pipeline takes " +
                        type_text(a.type) + "; pass a buffer of that type (b.bits() reinterprets same-size ones)");
    if (b.ndim() != a.dimensions)
        throw ValueError(where_of(p, a) + ": " + std::to_string(b.ndim()) + " axes where the pipeline takes " +
                         std::to_string(a.dimensions) + "; pass a buffer of " + std::to_string(a.dimensions) +
                         " axes");
    return obj;
}

/// A halide_buffer_t for a bounds query: no memory, the pipeline fills in the dimensions.
struct Query {
    halide_buffer_t buf{};
    std::vector<halide_dimension_t> dims;
};

/// The region a bounds query answered, as NumPy sees it: Halide's dimension 0 is the last axis.
struct Region {
    std::vector<int64_t> shape, mins;
};
Region region_of(const Query &q) {
    Region r;
    for (int i = q.buf.dimensions; i-- > 0;) {
        r.shape.push_back(q.dims[size_t(i)].extent);
        r.mins.push_back(q.dims[size_t(i)].min);
    }
    return r;
}

/// Where every bounds query starts from: each dimension of an output not given asked for
/// empty, at one min, then at another. A pipeline that fixes the output's region (from its
/// inputs or constants) answers both alike; one that does not answers with a region grown from
/// the request (a vector or a tile of its schedule around it), which differs.
constexpr int32_t kRequestMins[] = {0, 1021};

/// The output the bounds queries found, allocated with their coordinates, when the pipeline
/// fixes it: both answers the same. An extent of 0 or less is empty, whatever its value (over
/// an empty input, a guarded GPU tiling answers -8 to one request and -24 to the other): an
/// output fixed as empty, for which the call computes nothing.
py::object allocate_queried(const std::string &where, const Query &first, const Query &second) {
    Region r = region_of(first), again = region_of(second);
    for (Region *answer : {&r, &again}) {
        for (int64_t &n : answer->shape) n = std::max<int64_t>(n, 0);
    }
    if (r.shape != again.shape || r.mins != again.mins)
        throw ValueError(where + ": the pipeline does not fix this output's size (its bounds queries answer "
                         "with the region asked for, grown to its schedule's vectors or tiles: shape " +
                         tuple_text(r.shape) + " at mins " + tuple_text(r.mins) + " for one request, " +
                         tuple_text(again.shape) + " at mins " + tuple_text(again.mins) + " for another); "
                         "pass an output buffer");
    return py::cast(Buffer::allocate("aot", r.shape, *dtype_by_halide(first.buf.type)).with_mins(r.mins));
}

/// Per-thread scratch space of a call, reused so a call allocates nothing once warm; emptied
/// (references dropped) when the call ends, however it ends.
struct CallScratch {
    std::vector<py::object> given;
    /// Each buffer argument's halide_buffer_t for this call alone (Buffer::lend), given back
    /// when the call ends.
    std::vector<RawView *> lent;
    std::vector<halide_scalar_value_t> scalars;
    std::vector<void *> argv;
    std::vector<Query> queries[2];  // one per request (kRequestMins)
    std::vector<size_t> outputs, missing;

    void start(size_t n) {
        given.assign(n, py::object());
        lent.assign(n, nullptr);
        scalars.assign(n, halide_scalar_value_t{});
        argv.assign(n, nullptr);
        outputs.clear();
        missing.clear();
    }
    /// Gives every lent view back (what the call left in it taken in), then drops the references.
    void finish() {
        for (size_t i = 0; i < lent.size(); ++i) {
            if (!lent[i]) continue;
            try {
                buffer_of(given[i].ptr()).take_back(std::exchange(lent[i], nullptr));
            } catch (...) {
                // Only a failed lock wait: the view stays lent (left alone) rather than be lost.
            }
        }
        given.clear();
    }
};

/// Halide's bounds query (host == NULL: the pipeline fills in the region it needs) for each
/// output not given, every dimension asked for empty at `min`; the answers land in `queries`.
void ask_bounds(const AotPipeline &p, CallScratch &s, std::vector<Query> &queries, int32_t min) {
    const halide_filter_metadata_t &m = p.metadata();
    queries.resize(size_t(m.num_arguments));
    for (size_t i : s.missing) {
        Query &q = queries[i];
        q.dims.assign(size_t(m.arguments[i].dimensions), halide_dimension_t{min, 0, 0, 0});
        q.buf = halide_buffer_t{};
        q.buf.type = m.arguments[i].type;
        q.buf.dimensions = m.arguments[i].dimensions;
        q.buf.dim = q.dims.data();
        s.argv[i] = &q.buf;
    }
    try {
        py::gil_scoped_release nogil;
        p.call(s.argv.data());
    } catch (const PipelineError &e) {
        throw PipelineError(std::string(e.what()) + "; this was the bounds query for the outputs not "
                            "given: pass output buffers", e.code);
    }
}

/// The CUDA device of a call: that of the first buffer argument on one, else the default
/// device (DeviceError without a driver). Remembered for the runtime's calls outside ours.
std::shared_ptr<CudaDevice> cuda_call_device(const halide_filter_metadata_t &m, const std::vector<py::object> &given) {
    std::shared_ptr<CudaDevice> device;
    for (size_t i = 0; i < given.size() && !device; ++i) {
        if (given[i] && is_buffer(m.arguments[i])) device = cuda_device_of(buffer_of(given[i].ptr()));
    }
    if (!device) device = cuda_device(0, "hb.aot");
    remember_pipeline_device(device);
    return device;
}

/// The OpenCL device of a call: that of the first buffer argument on one, else the default
/// device; null when the pipeline's runtime keeps a context of its own (a library opened
/// before halide_buffer: see opencl_context.h), whose memory is its own.
std::shared_ptr<OpenCLDevice> opencl_call_device(const AotPipeline &p, const std::vector<py::object> &given) {
    ocl::api(p.name().c_str());  // DeviceError naming the pipeline and what to install, without a loader
    const halide_filter_metadata_t &m = p.metadata();
    std::shared_ptr<OpenCLDevice> device;
    for (size_t i = 0; i < given.size() && !device; ++i) {
        if (!given[i] || !is_buffer(m.arguments[i])) continue;
        Buffer &b = buffer_of(given[i].ptr());
        if (b.may_hold_device_copy()) device = std::dynamic_pointer_cast<OpenCLDevice>(b.device());
    }
    try {
        if (!device) device = default_opencl_device();
    } catch (const DeviceError &e) {
        throw DeviceError(p.name() + "(): no OpenCL device to run on: " + e.what(), e.code, e.name);
    }
    return p.runs_in_our_context(*device) ? device : nullptr;
}

/// The device a call computes on, in our memory: a CUDA pipeline's (always), an OpenCL
/// pipeline's whose runtime asks us for its context; null for a host pipeline, or one whose
/// runtime keeps memory of its own.
std::shared_ptr<Device> call_device(const AotPipeline &p, const std::vector<py::object> &given) {
    if (p.uses_cuda()) return cuda_call_device(p.metadata(), given);
    if (p.uses_opencl() && p.device_interface()) return opencl_call_device(p, given);
    return nullptr;
}

/// This thread's scratch for one call (start() it), emptied when the call ends, however it
/// ends. A nested call (an argument's __array__ calling a pipeline) gets scratch of its own.
struct ScratchUse {
    ScratchUse() : scratch(busy() ? nested : shared()), was_busy(busy()) { busy() = true; }
    ~ScratchUse() {
        scratch.finish();
        busy() = was_busy;
    }
    ScratchUse(const ScratchUse &) = delete;
    ScratchUse &operator=(const ScratchUse &) = delete;

    static CallScratch &shared() {
        thread_local CallScratch s;
        return s;
    }
    static bool &busy() {
        thread_local bool b = false;
        return b;
    }

    CallScratch nested;  ///< a nested call's (declared first: constructed before `scratch` refers to it)
    CallScratch &scratch;
    bool was_busy;
};

/// Positional arguments in metadata order (a pipeline's __user_context is ours to pass).
void take_positional(const AotPipeline &p, PyObject *const *pos, size_t npos, std::vector<py::object> &given) {
    const halide_filter_metadata_t &m = p.metadata();
    size_t k = 0;
    for (size_t i = 0; i < given.size() && k < npos; ++i) {
        if (!is_user_context(m.arguments[i])) given[i] = py::reinterpret_borrow<py::object>(pos[k++]);
    }
    if (k < npos)
        throw TypeError(p.name() + "() takes " + std::to_string(k) + " arguments, " + std::to_string(npos) +
                        " given; pass at most " + std::to_string(k) + " (" + names_of(p) + ")");
}

/// Keyword arguments by name: TypeError for an unknown name or a second value.
void take_keywords(const AotPipeline &p, PyObject *kwargs, std::vector<py::object> &given) {
    const halide_filter_metadata_t &m = p.metadata();
    size_t n = given.size();
    Py_ssize_t at = 0;
    PyObject *key, *value;
    while (kwargs && PyDict_Next(kwargs, &at, &key, &value)) {
        size_t i = 0;
        while (i < n && (is_user_context(m.arguments[i]) ||
                         PyUnicode_CompareWithASCIIString(key, m.arguments[i].name) != 0))
            ++i;
        std::string name = py::repr(key);  // quoted, with what is not printable escaped (a NUL)
        if (i == n)
            throw TypeError(p.name() + "() got an unexpected keyword argument " + name + "; its arguments are " +
                            names_of(p));
        if (given[i])
            throw TypeError(p.name() + "() got multiple values for argument " + name +
                            "; pass it by position or by name, not both");
        given[i] = py::reinterpret_borrow<py::object>(value);
    }
}

/// Every argument for the call: scalars (or their defaults) into the scratch's scalars, buffers
/// as Buffer objects, the outputs not given noted as missing; TypeError for a missing input.
void convert_arguments(const AotPipeline &p, CallScratch &s) {
    const halide_filter_metadata_t &m = p.metadata();
    for (size_t i = 0; i < s.given.size(); ++i) {
        const halide_filter_argument_t &a = m.arguments[i];
        bool absent = !s.given[i] || s.given[i].is_none();
        if (is_user_context(a)) {
            s.argv[i] = &s.scalars[i];  // a null user_context
        } else if (!is_buffer(a)) {
            if (absent && !a.scalar_def)
                throw TypeError(where_of(p, a) + " is missing; pass a value of type " + type_text(a.type));
            s.scalars[i] = absent ? *a.scalar_def : to_scalar(p, s.given[i], a);
            s.argv[i] = &s.scalars[i];
        } else if (!absent) {
            s.given[i] = to_buffer(p, s.given[i], a);
            if (a.kind == halide_argument_kind_output_buffer) s.outputs.push_back(i);
        } else if (a.kind == halide_argument_kind_output_buffer) {
            s.given[i] = py::object();  // None: allocated by enter_buffers()
            s.missing.push_back(i);
            s.outputs.push_back(i);
        } else {
            throw TypeError(where_of(p, a) + " is missing; pass a " + type_text(a.type) + " buffer of " +
                            std::to_string(a.dimensions) + " axes");
        }
    }
}

/// Prepares buffer argument i for the call and passes a halide_buffer_t lent to the call alone:
/// on `device` when there is one (shown to the pipeline as on its device interface), else as
/// the pipeline needs it.
void enter_buffer(const AotPipeline &p, CallScratch &s, size_t i, const std::shared_ptr<Device> &device) {
    Buffer &b = buffer_of(s.given[i].ptr());
    bool output = p.metadata().arguments[i].kind == halide_argument_kind_output_buffer;
    if (device) {  // places the buffer on the device: may allocate and copy, whatever it held before
        py::gil_scoped_release nogil;
        b.prepare_for_pipeline(p.name().c_str(), p.device_interface(), output, device);
    } else {
        run_lease(b, [&] { b.prepare_for_pipeline(p.name().c_str(), p.device_interface(), output); });
    }
    s.lent[i] = b.lend(p.name().c_str(), device ? p.device_interface() : nullptr);
    s.argv[i] = &s.lent[i]->buf;
}

/// Enters every buffer given, then allocates the outputs not given (bounds queries) and
/// enters them.
void enter_buffers(const AotPipeline &p, CallScratch &s, const std::shared_ptr<Device> &gpu) {
    const halide_filter_metadata_t &m = p.metadata();
    for (size_t i = 0; i < s.given.size(); ++i) {
        if (s.given[i] && is_buffer(m.arguments[i])) enter_buffer(p, s, i, gpu);
    }
    if (s.missing.empty()) return;
    for (int r = 0; r < 2; ++r) ask_bounds(p, s, s.queries[r], kRequestMins[r]);
    for (size_t i : s.missing) {
        s.given[i] = allocate_queried(p.name() + "(): output '" + m.arguments[i].name + "'", s.queries[0][i],
                                      s.queries[1][i]);
        enter_buffer(p, s, i, gpu);
    }
}

/// A device pipeline overwrites its outputs whole: their old host contents need not go up.
/// Its inputs without a device copy it can use must: its runtime uploads only host-dirty ones.
void expect_transfers(const AotPipeline &p, CallScratch &s) {
    if (!p.device_interface()) return;
    const halide_filter_metadata_t &m = p.metadata();
    for (size_t i = 0; i < s.given.size(); ++i) {
        if (!s.lent[i]) continue;
        Buffer &b = buffer_of(s.given[i].ptr());
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
        if (buffer_of(s.given[i].ptr()).size() != 0) return false;
    }
    return true;
}

/// What a call returns: its one output, or a tuple of its outputs in the pipeline's order.
py::object call_outputs(const CallScratch &s) {
    if (s.outputs.size() == 1) return s.given[s.outputs[0]];
    py::tuple result(s.outputs.size());
    for (size_t j = 0; j < s.outputs.size(); ++j) result[j] = s.given[s.outputs[j]];
    return std::move(result);
}

py::object call_with(const AotPipeline &p, PyObject *const *pos, size_t npos, PyObject *kwargs) {
    ScratchUse use;
    CallScratch &scratch = use.scratch;
    scratch.start(size_t(p.metadata().num_arguments));
    take_positional(p, pos, npos, scratch.given);
    take_keywords(p, kwargs, scratch.given);
    convert_arguments(p, scratch);
    // A device pipeline runs on the device of its first argument on one, else the default device,
    // and its arguments are placed there: it reads and writes our device copies as they are.
    std::shared_ptr<Device> device = call_device(p, scratch.given);
    TargetDevice target(device.get());  // the device our hooks give the pipeline's runtime
    enter_buffers(p, scratch, device);
    if (nothing_to_compute(scratch)) return call_outputs(scratch);
    expect_transfers(p, scratch);
    {
        py::gil_scoped_release nogil;
        p.call(scratch.argv.data());
    }
    return call_outputs(scratch);
}

/// An output region as required_regions() takes it: (mins, shape), sequences of ints.
void region_arg(const AotPipeline &p, const halide_filter_argument_t &a, py::handle region, std::vector<int64_t> &mins,
                std::vector<int64_t> &shape) {
    auto fail = [&] {
        return TypeError(where_of(p, a) + ": a region is (mins, shape), two sequences of ints, not " +
                         py::repr(region).cast<std::string>() + "; pass e.g. ((0, 0), (480, 640))");
    };
    if (!py::isinstance<py::sequence>(region) || py::len(region) != 2) throw fail();
    for (int part = 0; part < 2; ++part) {
        py::handle values = py::reinterpret_borrow<py::sequence>(region)[part];
        if (!py::isinstance<py::sequence>(values)) throw fail();
        for (py::handle v : values) {
            int64_t x;
            if (!is_integer(v) || !as_int64(v, x)) throw fail();
            (part ? shape : mins).push_back(x);
        }
    }
}

/// Halide's bounds query for given output regions: the region of each input buffer the pipeline
/// reads to compute them, and the region of each output it writes (the one asked for, or more:
/// a vectorized or tiled schedule may round it up, and the output buffer must then cover that).
/// `scalars` maps scalar argument names to values (their defaults when absent); `outputs` maps
/// every output's name to (mins, shape), NumPy's axis order; `inputs` (optional, same form) gives
/// the region an input covers, which a pipeline clamping to its input's own bounds needs (its
/// answer is then clipped to it). Returns {buffer name: (mins, shape)}. No memory is touched:
/// every buffer is a query.
py::dict required_regions(const AotPipeline &p, py::dict scalars, py::dict outputs, py::dict inputs) {
    const halide_filter_metadata_t &m = p.metadata();
    size_t n = size_t(m.num_arguments);
    std::vector<halide_scalar_value_t> values(n);
    std::vector<Query> queries(n);
    std::vector<void *> argv(n, nullptr);
    for (size_t i = 0; i < n; ++i) {
        const halide_filter_argument_t &a = m.arguments[i];
        if (is_user_context(a)) {
            argv[i] = &values[i];
            continue;
        }
        if (!is_buffer(a)) {
            py::object v = scalars.contains(a.name) ? py::object(scalars[a.name]) : py::object(py::none());
            if (v.is_none() && !a.scalar_def)
                throw TypeError(where_of(p, a) + " is missing; pass a value of type " + type_text(a.type));
            values[i] = v.is_none() ? *a.scalar_def : to_scalar(p, v, a);
            argv[i] = &values[i];
            continue;
        }
        Query &q = queries[i];
        q.dims.assign(size_t(a.dimensions), halide_dimension_t{0, 0, 0, 0});
        bool output = a.kind == halide_argument_kind_output_buffer;
        if (output && !outputs.contains(a.name))
            throw TypeError(where_of(p, a) + ": no region asked for; pass the output's (mins, shape)");
        py::dict &given = output ? outputs : inputs;
        if (given.contains(a.name)) {
            std::vector<int64_t> mins, shape;
            region_arg(p, a, given[a.name], mins, shape);
            if (mins.size() != size_t(a.dimensions) || shape.size() != size_t(a.dimensions))
                throw ValueError(where_of(p, a) + ": a region of " + std::to_string(shape.size()) +
                                 " axes for a buffer of " + std::to_string(a.dimensions) + "; pass one min and "
                                 "one extent per axis");
            check_mins(p.name().c_str(), shape, mins);
            checked_count(p.name().c_str(), shape, 1);
            for (size_t d = 0; d < shape.size(); ++d)
                q.dims[shape.size() - 1 - d] = halide_dimension_t{int32_t(mins[d]), int32_t(shape[d]), 0, 0};
        }
        q.buf.type = a.type;
        q.buf.dimensions = a.dimensions;
        q.buf.dim = q.dims.data();
        argv[i] = &q.buf;
    }
    try {
        py::gil_scoped_release nogil;
        p.call(argv.data());
    } catch (const PipelineError &e) {
        throw PipelineError(std::string(e.what()) + "; this was the bounds query for the output regions asked for",
                            e.code);
    }
    py::dict out;
    for (size_t i = 0; i < n; ++i) {
        if (!is_buffer(m.arguments[i])) continue;
        Region r = region_of(queries[i]);
        out[m.arguments[i].name] = py::make_tuple(to_tuple(r.mins), to_tuple(r.shape));
    }
    return out;
}

/// The type's call slot: `pipeline(...)` goes straight here (no pybind11 dispatch).
PyObject *pipeline_call(PyObject *self, PyObject *args, PyObject *kwargs) {
    PyObject *result = nullptr;
    c_call([&] {
        const AotPipeline &p = *instance_parts(self).value_ptr<AotPipeline>();
        result = call_with(p, &PyTuple_GET_ITEM(args, 0), size_t(PyTuple_GET_SIZE(args)), kwargs).release().ptr();
        return 0;
    });
    return result;
}

}  // namespace

void bind_aot(py::module_ &m) {
    py::class_<AotPipeline, std::shared_ptr<AotPipeline>>(
        m, "Pipeline", "A Halide AOT pipeline loaded with halide_buffer.aot.load(); call it with Buffers. "
                       "Immutable: copies are the pipeline itself; a pickle holds its library path and "
                       "function name, and unpickling loads it again.")
        .def_property_readonly("name", &AotPipeline::name)
        .def_property_readonly("library_path", &AotPipeline::library_path,
                               "the library's path, absolute when it names a file (a name the system's "
                               "library search found stays as given)")
        .def_property_readonly("target", [](const AotPipeline &p) { return std::string(p.metadata().target); },
                               "the Halide target string it was compiled for")
        .def_property_readonly("arguments", &arguments_of,
                               "name, kind, dtype and dimensions of each argument, in call order")
        .def("__call__", [](py::handle self, py::args args, py::kwargs kwargs) {
            const AotPipeline &p = self.cast<const AotPipeline &>();
            return call_with(p, &PyTuple_GET_ITEM(args.ptr(), 0), args.size(), kwargs.ptr());
        }, "Runs the pipeline; returns its output buffer(s), allocated when not given (when the pipeline "
           "fixes their size).")
        .def("required_regions", &required_regions, py::arg("scalars"), py::arg("outputs"),
             py::arg("inputs") = py::dict(),
             "Halide's bounds query: {buffer name: (mins, shape)}, the region of each input buffer the "
             "pipeline reads to compute the given output regions ({output name: (mins, shape)}), and the "
             "region of each output it writes (at least the one asked for); scalars by name ({name: "
             "value}; defaults where absent); inputs: the region each input covers ({name: (mins, "
             "shape)}), for pipelines that clamp to their inputs' own bounds.")
        .def("__repr__", [](const AotPipeline &p) {
            return "Pipeline(" + p.name() + ", target=" + p.metadata().target + ")";
        })
        .def("__reduce__", [](const AotPipeline &p) {
            py::object rebuild = py::module_::import("halide_buffer.aot").attr("_unpickle");
            return py::make_tuple(rebuild, py::make_tuple(p.library_path(), p.name()));
        }, "(halide_buffer.aot._unpickle, (library_path, name)): unpickling loads the pipeline again")
        .def("__copy__", [](py::object self) { return self; })
        .def("__deepcopy__", [](py::object self, py::handle) { return self; }, py::arg("memo"));
    // Calls skip pybind11's dispatch: the slot is ours (__call__ above stays for introspection).
    reinterpret_cast<PyTypeObject *>(m.attr("Pipeline").ptr())->tp_call = pipeline_call;
    m.def("_aot_load", [](const std::string &path, const std::string &name) {
        std::shared_ptr<AotPipeline> p = AotPipeline::load(path, name);
        // Its first call opens the OpenCL loader our devices use: the candidates come from Python.
        if (p->uses_opencl()) py::module_::import("halide_buffer.opencl").attr("_choose_loader")();
        return p;
    }, py::arg("library_path"), py::arg("function_name"));
}

}  // namespace hb
