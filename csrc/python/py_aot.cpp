// py_aot.cpp: halide_buffer.aot: the Pipeline type. A call's Python side: arguments by
// position or name, scalars converted and checked against the pipeline's metadata, buffer
// arguments as Buffer objects, the outputs the call allocated as Python objects, the result.
// Every argument is converted before the plan of the call (bounds queries, output allocation,
// the device, placement: interop/aot_call.cpp) runs, which it does without the GIL, through
// the embedder, but for a direct call.
#include "python/py_aot.h"

#include <string>
#include <vector>

#include "core/errors.h"
#include "core/layout.h"
#include "core/narrow_float.h"
#include "interop/aot.h"
#include "interop/aot_call.h"
#include "interop/aot_sizes.h"
#include "python/py_arguments.h"
#include "python/py_buffer.h"
#include "python/py_glue.h"
#include "python/py_module.h"

namespace hb {
namespace {

constexpr const char *kKinds[] = {"input_scalar", "input_buffer", "output_buffer"};

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

py::list argument_names_of(const AotPipeline &p) {
    py::list out;
    const halide_filter_metadata_t &m = p.metadata();
    for (int i = 0; i < m.num_arguments; ++i) {
        if (!is_user_context(m.arguments[i])) out.append(py::str(m.arguments[i].name));
    }
    return out;
}

// ---------------------------------------------------------------------------------------------
// Arguments
// ---------------------------------------------------------------------------------------------

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

    /// "an address", or the type's name: made only for a message.
    std::string name() const { return a.type.code == halide_type_handle ? "an address" : type_text(a.type); }

    std::string where() const { return where_of(p, a); }
    const char *value_type() const { return Py_TYPE(v.ptr())->tp_name; }
    ValueError out_of_range() const {
        return ValueError(where() + ": " + py::repr(v).cast<std::string>() + " is out of range for " + name() +
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
        throw TypeError(arg.where() + ": expected a number for " + arg.name() + ", not " + arg.value_type() +
                        "; pass an int or a float");
    }
    halide_scalar_value_t s = blank_scalar();
    const halide_type_t &t = arg.a.type;
    if (t.code == halide_type_bfloat && t.bits == 16) s.u16 = narrow_float_bits(x, 8, 7);
    else if (t.bits == 16) s.u16 = narrow_float_bits(x, 5, 10);
    else if (t.bits == 32) s.f32 = float(x);
    else if (t.bits == 64) s.f64 = x;
    else throw TypeError(arg.where() + ": scalars of " + arg.name() +
                         " are not supported; pass a float16, bfloat16, float32 or float64 parameter");
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
        throw TypeError(arg.where() + ": expected an int for " + arg.name() + ", not " + arg.value_type() +
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
    ScalarArg arg{p, a, v};
    if (t.code == halide_type_float || t.code == halide_type_bfloat) return float_scalar(arg);
    if (t.code == halide_type_handle) return address_scalar(arg);
    if (t.code == halide_type_uint && t.bits == 1) return bool_scalar(arg);
    return int_scalar(arg);
}

/// A buffer argument's element type and dimensions, checked.
void check_buffer(const AotPipeline &p, const Buffer &b, const halide_filter_argument_t &a) {
    const halide_type_t &t = b.dtype().halide;
    if (t.code != a.type.code || t.bits != a.type.bits || t.lanes != a.type.lanes)
        throw TypeError(where_of(p, a) + ": a " + b.dtype().name + " buffer where the pipeline takes " +
                        type_text(a.type) + "; pass a buffer of that type (b.bits() reinterprets same-size ones)");
    if (b.ndim() != a.dimensions)
        throw ValueError(where_of(p, a) + ": " + std::to_string(b.ndim()) + " axes where the pipeline takes " +
                         std::to_string(a.dimensions) + "; pass a buffer of " + std::to_string(a.dimensions) +
                         " axes");
}

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

/// Keyword arguments by name (vectorcall's: the names in `kwnames`, their values in `values`):
/// TypeError for an unknown name or a second value.
void take_keywords(const AotPipeline &p, PyObject *kwnames, PyObject *const *values, std::vector<py::object> &given) {
    const halide_filter_metadata_t &m = p.metadata();
    size_t n = given.size();
    Py_ssize_t count = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t j = 0; j < count; ++j) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, j), *value = values[j];
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

/// A call's scratch: the plan's, the Python objects of its arguments and the buffers over the
/// inputs that are not Buffers (the buffers the plan's scratch names live in these), kept until
/// the plan's scratch is finished.
struct PyCallScratch {
    CallScratch plan;
    std::vector<py::object> given;
    /// An argument given as memory of someone else's (an ndarray, a tensor) and not borrowed (a
    /// device pipeline's, or one a description would not do for): the Buffer over it lives here
    /// for the call alone, with no Python object (an output is returned as the object given, as
    /// NumPy's and PyTorch's out= arguments are).
    std::vector<std::optional<Buffer>> wrapped;
    /// The outputs given as memory of someone else's (an ndarray, a tensor): each one's index and
    /// where its memory is, which is where the result must be when the call returns.
    std::vector<std::pair<size_t, Home>> foreign_outputs;

    void start(size_t n) {
        plan.start(n);
        if (given.size() != n) given.resize(n);  // finish() left every one empty
        wrapped.clear();  // made room in for the first argument that is no Buffer
        foreign_outputs.clear();
    }
    void finish() {
        plan.finish();  // takes the lent views back into the buffers `given` and `wrapped` hold
        plan.allocated.clear();  // outputs of a call that failed
        wrapped.clear();
        for (py::object &v : given) v = py::object();  // the references let go, the room kept
        foreign_outputs.clear();
    }
};

/// Scalar argument i's value `v`, converted into `value`; false when none was given (None, or
/// nothing).
bool scalar_given(const AotPipeline &p, size_t i, py::handle v, halide_scalar_value_t &value) {
    if (!v || v.is_none()) return false;
    value = to_scalar(p, v, p.metadata().arguments[i]);
    return true;
}

/// Whether borrowed memory's element type and dimensions are argument `a`'s.
bool fits(const BorrowedArgument &b, const halide_filter_argument_t &a) {
    const halide_type_t &t = b.buf.type;
    return t.code == a.type.code && t.bits == a.type.bits && t.lanes == a.type.lanes && b.ndim == a.dimensions;
}

/// Buffer argument i as given (a Buffer, or a Buffer over what the user brought: see
/// adopt_argument()), its element type and dimensions checked; null when none was given, or
/// when it was borrowed for a host pipeline's call (`borrow`: described in s.plan.borrow(i)).
Buffer *given_buffer(const AotPipeline &p, PyCallScratch &s, size_t i, bool borrow) {
    py::object &v = s.given[i];
    if (!v || v.is_none()) {
        v = py::object();  // None: an output the plan allocates
        return nullptr;
    }
    const halide_filter_argument_t &a = p.metadata().arguments[i];
    bool output = a.kind == halide_argument_kind_output_buffer;
    bool ours = is_buffer(v);
    if (borrow && !ours) {
        BorrowedArgument &described = s.plan.borrow(i);
        if (borrow_argument(v, ArgumentName{p.name().c_str(), a.name}, !output, described) && fits(described, a))
            return nullptr;
        described.given = false;  // the general way, whose checks say what is wrong
    }
    Buffer *b;
    if (ours) {
        b = &buffer_of(v.ptr());
        if (output) refuse_read_only_output(*b, ArgumentName{p.name().c_str(), a.name});
    } else {
        Argument arg = adopt_argument(v, ArgumentName{p.name().c_str(), a.name}, !output, true);
        if (output && arg.home == Home::own_rule) {
            // An hl.Buffer or a typed capsule's struct: its state is the Buffer's, returned.
            v = py::cast(std::move(arg.buffer));
            b = &buffer_of(v.ptr());
        } else {
            // Memory of someone else's: the object itself is returned (an output is made current
            // in it first), the Buffer over it lives for the call alone.
            if (output) s.foreign_outputs.emplace_back(i, arg.home);
            s.wrapped.resize(s.given.size());  // no reallocation once made: `b` points into it
            b = &s.wrapped[i].emplace(std::move(arg.buffer));
        }
    }
    check_buffer(p, *b, a);
    return b;
}

/// Converts every argument given into the plan's scratch, in the pipeline's order: the plan
/// then runs without asking anything of Python.
void convert_arguments(const AotPipeline &p, PyCallScratch &s) {
    const halide_filter_metadata_t &m = p.metadata();
    bool borrow = !is_device_pipeline(p);  // a host pipeline's arguments need no bookkeeping beyond the call
    for (size_t i = 0; i < s.given.size(); ++i) {
        const halide_filter_argument_t &a = m.arguments[i];
        if (is_user_context(a)) continue;
        if (is_buffer(a)) s.plan.buffers[i] = given_buffer(p, s, i, borrow);
        else s.plan.scalar_given[i] = scalar_given(p, i, s.given[i], s.plan.scalars[i]);
    }
}

/// What a call returns: its one output, or a tuple of its outputs in the pipeline's order.
py::object call_outputs(const PyCallScratch &s) {
    const std::vector<size_t> &outputs = s.plan.outputs;
    if (outputs.size() == 1) return s.given[outputs[0]];
    py::tuple result(outputs.size());
    for (size_t j = 0; j < outputs.size(); ++j) result[j] = s.given[outputs[j]];
    return std::move(result);
}

py::object call_with(const AotPipeline &p, PyObject *const *args, size_t npos, PyObject *kwnames) {
    ScratchUse<PyCallScratch> use;
    PyCallScratch &scratch = use.scratch;
    scratch.start(size_t(p.metadata().num_arguments));
    take_positional(p, args, npos, scratch.given);
    take_keywords(p, kwnames, args + npos, scratch.given);
    convert_arguments(p, scratch);
    run_call(p, scratch.plan);  // without the GIL, but for a direct call
    if (!scratch.foreign_outputs.empty() || !scratch.plan.missing.empty()) {
        scratch.plan.finish();  // the lent views taken back: the flags say where the result is
        // The user looks for the result in the memory they passed, whether or not they keep what
        // the call returns: it is made current there now (Buffers keep the lazy rule).
        for (const auto &[i, home] : scratch.foreign_outputs) bring_home(*scratch.wrapped[i], home);
        // The outputs the plan allocated become Python Buffers.
        for (size_t i : scratch.plan.missing) scratch.given[i] = py::cast(std::move(*scratch.plan.allocated[i]));
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

/// A bounds query's arguments, converted: scalars by name from `scalars`, the regions of
/// outputs from `outputs` and of inputs from `inputs` ({name: (mins, shape)}).
QueryRequest query_request(const AotPipeline &p, const py::dict &scalars, const py::dict &outputs,
                           const py::dict &inputs) {
    const halide_filter_metadata_t &m = p.metadata();
    QueryRequest q(size_t(m.num_arguments));
    for (size_t i = 0; i < q.regions.size(); ++i) {
        const halide_filter_argument_t &a = m.arguments[i];
        if (is_user_context(a)) continue;
        if (!is_buffer(a)) {
            py::object v = scalars.contains(a.name) ? py::object(scalars[a.name]) : py::object();
            q.scalar_given[i] = scalar_given(p, i, v, q.scalars[i]);
            continue;
        }
        const py::dict &given = a.kind == halide_argument_kind_output_buffer ? outputs : inputs;
        if (!given.contains(a.name)) continue;
        Region &r = q.regions[i].emplace();
        region_arg(p, a, given[a.name], r.mins, r.shape);
    }
    return q;
}

/// Pipeline.required_regions(): the plan's bounds query (interop/aot_call.h) for the output
/// regions in `outputs` ({name: (mins, shape)}, NumPy's axis order), scalars by name (their
/// defaults where absent), the regions `inputs` cover (optional, same form). Returns
/// {buffer name: (mins, shape)}.
py::dict required_regions_of(const AotPipeline &p, py::dict scalars, py::dict outputs, py::dict inputs) {
    py::dict out;
    for (const auto &[name, r] : required_regions(p, query_request(p, scalars, outputs, inputs)))
        out[name] = py::make_tuple(to_tuple(r.mins), to_tuple(r.shape));
    return out;
}

/// Pipeline.output_regions(): output_regions() (interop/aot_sizes.h) for inputs covering `inputs`
/// ({name: (mins, shape)}) and scalars by name. Returns {output name: (mins, shape)}.
py::dict output_regions_of(const AotPipeline &p, py::dict scalars, py::dict inputs) {
    py::dict out;
    for (const auto &[name, r] : output_regions(p, query_request(p, scalars, py::dict(), inputs)))
        out[name] = py::make_tuple(to_tuple(r.mins), to_tuple(r.shape));
    return out;
}

/// The type's vectorcall: `pipeline(...)` comes straight here from the interpreter, with no
/// argument tuple or keyword dict made (and no pybind11 dispatch); PyObject_Call's tuple and
/// dict come through PyVectorcall_Call, the type's tp_call.
PyObject *pipeline_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    PyObject *result = nullptr;
    c_call([&] {
        const AotPipeline &p = *instance_parts(self).value_ptr<AotPipeline>();
        result = call_with(p, args, size_t(PyVectorcall_NARGS(nargsf)), kwnames).release().ptr();
        return 0;
    });
    return result;
}

/// Where a Pipeline object keeps its vectorcall function: after pybind11's instance.
vectorcallfunc &vectorcall_slot(PyObject *self) {
    return *reinterpret_cast<vectorcallfunc *>(reinterpret_cast<char *>(self) + Py_TYPE(self)->tp_vectorcall_offset);
}

/// The type's tp_alloc: pybind11's instance, its vectorcall function set.
PyObject *pipeline_alloc(PyTypeObject *type, Py_ssize_t items) {
    PyObject *self = PyType_GenericAlloc(type, items);
    if (self) vectorcall_slot(self) = pipeline_vectorcall;
    return self;
}

/// The Pipeline type as vectorcall wants it (before PyType_Ready): room for the function after
/// pybind11's instance, its offset, and the allocation that sets it.
void add_vectorcall(PyHeapTypeObject *heap_type) {
    PyTypeObject *type = &heap_type->ht_type;
    type->tp_vectorcall_offset = type->tp_basicsize;
    type->tp_basicsize += Py_ssize_t(sizeof(vectorcallfunc));
    type->tp_alloc = pipeline_alloc;
    type->tp_call = PyVectorcall_Call;
    type->tp_flags |= Py_TPFLAGS_HAVE_VECTORCALL;
}

/// _innermost_steps_one(): innermost_steps_one() of a shape and element strides given as tuples
/// (a torch.Size and a tensor's stride()).
bool innermost_steps_one_of(const py::tuple &shape, const py::tuple &strides) {
    constexpr const char *entry = "_innermost_steps_one";
    if (shape.size() != strides.size())
        throw ValueError(std::string(entry) + "(): " + std::to_string(shape.size()) + " extents and " +
                         std::to_string(strides.size()) + " strides; pass one stride per axis");
    Axes extents(shape.size()), steps(strides.size());
    for (size_t i = 0; i < extents.size(); ++i) {
        extents[i] = shape[i].cast<int64_t>();
        steps[i] = strides[i].cast<int64_t>();
    }
    return innermost_steps_one(extents.data(), steps.data(), extents.size());
}

}  // namespace

void bind_aot(py::module_ &m) {
    py::class_<AotPipeline, std::shared_ptr<AotPipeline>>(
        m, "Pipeline", py::custom_type_setup(add_vectorcall), "A Halide AOT pipeline loaded with halide_buffer.aot.load(); call it with Buffers. "
                       "Immutable: copies are the pipeline itself; a pickle holds its library path and "
                       "function name, and unpickling loads it again.")
        .def_property_readonly("name", &AotPipeline::name)
        .def_property_readonly("library_path", &AotPipeline::library_path,
                               "the library's path, absolute when it names a file (a name the system's "
                               "library search found stays as given)")
        .def_property_readonly("target", [](const AotPipeline &p) { return std::string(p.metadata().target); },
                               "the Halide target string it was compiled for")
        .def_property_readonly("device_api", [](const AotPipeline &p) -> py::object {
            if (p.uses_opencl()) return py::str("opencl");
            if (p.uses_cuda()) return py::str("cuda");
            return py::none();
        }, "'opencl' or 'cuda': the device API the pipeline computes with, read from its target as a "
           "call places its buffers; None for a host pipeline")
        .def_property_readonly("arguments", &arguments_of,
                               "name, kind, dtype and dimensions of each argument, in call order")
        .def_property_readonly("argument_names", &argument_names_of,
                               "the arguments' names, in call order (positional calls follow it)")
        .def("__call__", [](py::handle self, py::args args, py::kwargs kwargs) {
            PyObject *result = PyVectorcall_Call(self.ptr(), args.ptr(), kwargs.ptr());
            if (!result) throw py::error_already_set();
            return py::reinterpret_steal<py::object>(result);
        }, "Runs the pipeline; returns its output buffer(s), allocated when not given (sized as "
           "output_regions() says).")
        .def("required_regions", &required_regions_of, py::arg("scalars"), py::arg("outputs"),
             py::arg("inputs") = py::dict(),
             "Halide's bounds query: {buffer name: (mins, shape)}, the region of each input buffer the "
             "pipeline reads to compute the given output regions ({output name: (mins, shape)}), and the "
             "region of each output it writes (at least the one asked for); scalars by name ({name: "
             "value}; defaults where absent); inputs: the region each input covers ({name: (mins, "
             "shape)}), for pipelines that clamp to their inputs' own bounds.")
        .def("output_regions", &output_regions_of, py::arg("scalars"), py::arg("inputs"),
             "The region each output gets when a call allocates it ({output name: (mins, shape)}), for inputs "
             "covering the regions in `inputs` ({name: (mins, shape)}) and scalars by name (defaults where "
             "absent): the region the pipeline fixes (its bounds queries about two different empty regions "
             "answer alike), else the largest region whose required input regions lie within the inputs; "
             "ValueError naming the output where no element of it does.")
        .def("__repr__", [](const AotPipeline &p) {
            return "Pipeline(" + p.name() + ", target=" + p.metadata().target + ")";
        })
        .def("__reduce__", [](const AotPipeline &p) {
            py::object rebuild = py::module_::import("halide_buffer.aot").attr("_unpickle");
            return py::make_tuple(rebuild, py::make_tuple(p.library_path(), p.name()));
        }, "(halide_buffer.aot._unpickle, (library_path, name)): unpickling loads the pipeline again")
        .def("__copy__", [](py::object self) { return self; })
        .def("__deepcopy__", [](py::object self, py::handle) { return self; }, py::arg("memo"));
    // Calls skip pybind11's dispatch: the slots are ours (__call__ above stays for introspection;
    // defining it took them, and from Python 3.12 the vectorcall flag, away: given back).
    auto *type = reinterpret_cast<PyTypeObject *>(m.attr("Pipeline").ptr());
    type->tp_call = PyVectorcall_Call;
    type->tp_flags |= Py_TPFLAGS_HAVE_VECTORCALL;
    PyType_Modified(type);
    // hb.aot.load() gives an OpenCL pipeline's first call the loader candidates (they come from
    // the package: halide_buffer.opencl), so this binding calls nothing above it.
    m.def("_aot_load", &AotPipeline::load, py::arg("library_path"), py::arg("function_name"));
    m.def("_innermost_steps_one", &innermost_steps_one_of, py::arg("shape"), py::arg("strides"),
          "Whether a layout (strides in elements, as torch gives them) meets Halide's default "
          "constraint as a pipeline takes it: its last axis steps one element (core/layout.h's rule).");
}

}  // namespace hb
