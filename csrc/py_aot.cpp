// py_aot.cpp: halide_buffer.aot: calling a Halide AOT pipeline with Buffers (arguments by
// position or name, checked against the pipeline's metadata; outputs allocated by a bounds
// query when not given; the GIL released during the call).
#include <string>
#include <vector>

#include "aot.h"
#include "errors.h"
#include "py_glue.h"

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

/// A Python number as the scalar type an argument declares, range-checked.
halide_scalar_value_t to_scalar(const std::string &where, py::handle v, const halide_filter_argument_t &a) {
    halide_scalar_value_t s{};
    s.u64 = 0;
    halide_type_t t = a.type;
    std::string name = type_text(t);
    auto out_of_range = [&] {
        return ValueError(where + ": " + py::repr(v).cast<std::string>() + " is out of range for " + name);
    };
    if (t.code == halide_type_float) {
        if (!PyFloat_Check(v.ptr()) && !PyIndex_Check(v.ptr()))
            throw TypeError(where + ": expected a number for " + name + ", not " + Py_TYPE(v.ptr())->tp_name);
        double x = PyFloat_AsDouble(v.ptr());
        if (x == -1.0 && PyErr_Occurred()) throw py::error_already_set();
        if (t.bits == 32) s.f32 = float(x);
        else if (t.bits == 64) s.f64 = x;
        else throw TypeError(where + ": scalars of " + name + " are not supported; pass a float32 or float64 parameter");
        return s;
    }
    if (t.code == halide_type_handle) {
        if (v.is_none()) return s;
        if (!PyIndex_Check(v.ptr())) throw TypeError(where + ": expected an address (int) or None");
        s.handle = reinterpret_cast<void *>(v.cast<uintptr_t>());
        return s;
    }
    if (t.code == halide_type_uint && t.bits == 1) {  // bool
        if (!PyBool_Check(v.ptr()) && !PyIndex_Check(v.ptr()))
            throw TypeError(where + ": expected a bool, not " + Py_TYPE(v.ptr())->tp_name);
        s.b = PyObject_IsTrue(v.ptr()) == 1;
        return s;
    }
    if (!PyIndex_Check(v.ptr()) || PyBool_Check(v.ptr()))
        throw TypeError(where + ": expected an int for " + name + ", not " + Py_TYPE(v.ptr())->tp_name);
    py::object i = py::reinterpret_steal<py::object>(PyNumber_Index(v.ptr()));
    if (!i) throw py::error_already_set();
    if (t.code == halide_type_int) {
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
        long long lo = t.bits == 64 ? LLONG_MIN : -(1LL << (t.bits - 1)), hi = t.bits == 64 ? LLONG_MAX : (1LL << (t.bits - 1)) - 1;
        if (overflow || x < lo || x > hi) throw out_of_range();
        if (t.bits == 8) s.i8 = int8_t(x);
        else if (t.bits == 16) s.i16 = int16_t(x);
        else if (t.bits == 32) s.i32 = int32_t(x);
        else s.i64 = x;
        return s;
    }
    unsigned long long x = PyLong_AsUnsignedLongLong(i.ptr());
    if (PyErr_Occurred()) {
        PyErr_Clear();
        throw out_of_range();
    }
    if (t.bits < 64 && x > (1ULL << t.bits) - 1) throw out_of_range();
    if (t.bits == 8) s.u8 = uint8_t(x);
    else if (t.bits == 16) s.u16 = uint16_t(x);
    else if (t.bits == 32) s.u32 = uint32_t(x);
    else s.u64 = x;
    return s;
}

/// A buffer argument as a Buffer object (a Buffer, or anything Buffer.from_host wraps), its
/// element type and dimensions checked.
py::object to_buffer(const std::string &where, py::handle v, const halide_filter_argument_t &a) {
    py::object obj = py::isinstance<Buffer>(v) ? py::reinterpret_borrow<py::object>(v)
                                                : py::cast(buffer_from_host(v, false, true));
    Buffer &b = buffer_of(obj.ptr());
    const halide_type_t &t = b.dtype().halide;
    if (t.code != a.type.code || t.bits != a.type.bits || t.lanes != a.type.lanes)
        throw TypeError(where + ": a " + b.dtype().name + " buffer where the pipeline takes " + type_text(a.type) +
                        "; pass a buffer of that type (b.bits() reinterprets same-size ones)");
    if (b.ndim() != a.dimensions)
        throw ValueError(where + ": " + std::to_string(b.ndim()) + " axes where the pipeline takes " +
                         std::to_string(a.dimensions));
    return obj;
}

/// A halide_buffer_t for a bounds query: no memory, the pipeline fills in the dimensions.
struct Query {
    halide_buffer_t buf{};
    std::vector<halide_dimension_t> dims;
};

/// The output a bounds query asked for: allocated, with the queried coordinates.
py::object allocate_queried(const std::string &where, const Query &q) {
    const DType *dtype = dtype_by_halide(q.buf.type);
    std::vector<int64_t> shape, mins;
    for (int i = q.buf.dimensions; i-- > 0;) {  // Halide's dimension 0 is the last NumPy axis
        shape.push_back(q.dims[size_t(i)].extent);
        mins.push_back(q.dims[size_t(i)].min);
    }
    for (int64_t n : shape) {
        if (n <= 0)
            throw ValueError(where + ": the pipeline does not fix this output's size (its bounds query "
                             "gave an extent of " + std::to_string(n) + "); pass an output buffer");
    }
    return py::cast(Buffer::allocate("aot", shape, *dtype).with_mins(mins));
}

py::object call(py::handle self, py::args args, py::kwargs kwargs) {
    const AotPipeline &p = self.cast<const AotPipeline &>();
    const halide_filter_metadata_t &m = p.metadata();
    size_t n = size_t(m.num_arguments);
    std::vector<py::object> given(n);
    std::vector<size_t> order;  // the arguments a caller names, in order
    for (size_t i = 0; i < n; ++i) {
        if (!is_user_context(m.arguments[i])) order.push_back(i);
    }
    if (args.size() > order.size())
        throw TypeError(p.name() + "() takes " + std::to_string(order.size()) + " arguments, " +
                        std::to_string(args.size()) + " given");
    for (size_t k = 0; k < args.size(); ++k) given[order[k]] = py::reinterpret_borrow<py::object>(args[k]);
    for (auto item : kwargs) {
        std::string key = py::str(item.first);
        size_t k = 0;
        while (k < order.size() && key != m.arguments[order[k]].name) ++k;
        if (k == order.size())
            throw TypeError(p.name() + "() got an unexpected keyword argument '" + key + "'");
        if (given[order[k]]) throw TypeError(p.name() + "() got multiple values for argument '" + key + "'");
        given[order[k]] = py::reinterpret_borrow<py::object>(item.second);
    }

    std::vector<halide_scalar_value_t> scalars(n);
    std::vector<void *> argv(n, nullptr);
    std::vector<Query> queries(n);
    std::vector<size_t> outputs, missing;
    for (size_t i = 0; i < n; ++i) {
        const halide_filter_argument_t &a = m.arguments[i];
        std::string where = p.name() + "(): argument '" + a.name + "'";
        if (is_user_context(a)) {
            argv[i] = &scalars[i];  // a null user_context
        } else if (!is_buffer(a)) {
            if (!given[i] || given[i].is_none()) {
                if (!a.scalar_def) throw TypeError(where + " is missing; pass a " + type_text(a.type));
                scalars[i] = *a.scalar_def;
            } else {
                scalars[i] = to_scalar(where, given[i], a);
            }
            argv[i] = &scalars[i];
        } else if (given[i] && !given[i].is_none()) {
            given[i] = to_buffer(where, given[i], a);
            if (a.kind == halide_argument_kind_output_buffer) outputs.push_back(i);
        } else if (a.kind == halide_argument_kind_output_buffer) {
            missing.push_back(i);
            outputs.push_back(i);
        } else {
            throw TypeError(where + " is missing; pass a " + type_text(a.type) + " buffer of " +
                            std::to_string(a.dimensions) + " axes");
        }
    }

    auto prepare = [&](size_t i) {
        Buffer &b = buffer_of(given[i].ptr());
        bool output = m.arguments[i].kind == halide_argument_kind_output_buffer;
        run_lease(b, [&] { b.prepare_for_pipeline(p.name().c_str(), p.device_interface(), output); });
        argv[i] = b.raw(p.name().c_str());
    };
    for (size_t i = 0; i < n; ++i) {
        if (given[i] && is_buffer(m.arguments[i])) prepare(i);
    }
    if (!missing.empty()) {  // Halide's bounds query: host == NULL asks for the required shape
        for (size_t i : missing) {
            Query &q = queries[i];
            q.dims.assign(size_t(m.arguments[i].dimensions), halide_dimension_t{0, 0, 0, 0});
            q.buf.type = m.arguments[i].type;
            q.buf.dimensions = m.arguments[i].dimensions;
            q.buf.dim = q.dims.data();
            argv[i] = &q.buf;
        }
        try {
            py::gil_scoped_release nogil;
            p.call(argv.data());
        } catch (const PipelineError &e) {
            throw PipelineError(std::string(e.what()) + "; this was the bounds query for the outputs not "
                                "given: pass output buffers", e.code);
        }
        for (size_t i : missing) {
            given[i] = allocate_queried(p.name() + "(): output '" + m.arguments[i].name + "'", queries[i]);
            prepare(i);
        }
    }
    {
        py::gil_scoped_release nogil;
        p.call(argv.data());
    }
    if (outputs.size() == 1) return given[outputs[0]];
    py::tuple result(outputs.size());
    for (size_t k = 0; k < outputs.size(); ++k) result[k] = given[outputs[k]];
    return std::move(result);
}

}  // namespace

void bind_aot(py::module_ &m) {
    py::class_<AotPipeline, std::shared_ptr<AotPipeline>>(
        m, "Pipeline", "A Halide AOT pipeline loaded with halide_buffer.aot.load(); call it with Buffers.")
        .def_property_readonly("name", &AotPipeline::name)
        .def_property_readonly("target", [](const AotPipeline &p) { return std::string(p.metadata().target); },
                               "the Halide target string it was compiled for")
        .def_property_readonly("arguments", &arguments_of,
                               "name, kind, dtype and dimensions of each argument, in call order")
        .def("__call__", &call, "Runs the pipeline; returns its output buffer(s), allocated when not given.")
        .def("__repr__", [](const AotPipeline &p) {
            return "Pipeline(" + p.name() + ", target=" + p.metadata().target + ")";
        });
    m.def("_aot_load", &AotPipeline::load, py::arg("library_path"), py::arg("function_name"));
}

}  // namespace hb
