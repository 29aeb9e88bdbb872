// py_arguments.cpp: every object a user brings to a pipeline (a call, hb.dask, hb.torch) as a
// Buffer, and where the object's own memory is, so that an output is found there when the call
// returns.
//
// The order of the attempts is the order of their cost and of their precedence: our own Buffer
// (the object itself), an exact ndarray (the common case: one type check), Halide's typed capsule
// (consulted before anything else the object offers, as Halide's own runtime does; what the
// method raises is passed on), hl.Buffer (its own halide_buffer_t, not its host bytes), a
// pyopencl array (its device memory in place), a DLPack producer (the C exchange API where its
// type offers one, else __dlpack__: every dtype, bfloat16 and float8 included, CPU or CUDA), an
// object with __cuda_array_interface__, and last anything Buffer.from_host() wraps (the buffer
// protocol, __array__). An object is tried only for the kinds its type offers
// (py_argument_types.h: read once per type).
//
// A host pipeline's call borrows an ndarray or a CPU tensor instead: described for the call
// alone, with no Buffer (borrow_argument(), interop/aot_borrow.h).
#include "python/py_arguments.h"

#include <string>

#include "abi/halide_abi.h"
#include "core/errors.h"
#include "interop/aot_borrow.h"
#include "interop/halide_bridge.h"
#include "python/py_argument_types.h"
#include "python/py_buffer.h"
#include "python/py_dlpack.h"
#include "python/py_dlpack_exchange.h"
#include "python/py_dtype.h"
#include "python/py_from_host.h"
#include "python/py_glue.h"
#include "python/py_halide.h"
#include "python/py_kept.h"

namespace hb {
namespace {

/// "Expected ...; pass ..." for an object no attempt can take.
std::string kinds_taken() {
    return "pass a halide_buffer.Buffer, a NumPy array (or anything with the buffer protocol or "
           "__array__), a DLPack tensor (PyTorch, JAX, CuPy), an object with __cuda_array_interface__, a "
           "pyopencl array, a halide.Buffer, or an object with _get_halide_buffer_t_capsule()";
}

/// The halide_buffer_t of Halide's typed capsule protocol: obj._get_halide_buffer_t_capsule()
/// must return a capsule of our ABI's name (another ABI version lays the struct out otherwise).
Buffer from_typed_capsule(py::handle obj, py::handle method, const ArgumentName &name) {
    py::object capsule = py::reinterpret_steal<py::object>(PyObject_CallNoArgs(method.ptr()));
    if (!capsule) throw py::error_already_set();  // the object's own exception, as it raised it
    std::string what = type_name(obj) + "._get_halide_buffer_t_capsule()";
    if (!PyCapsule_CheckExact(capsule.ptr()))
        throw TypeError(name.text() + ": " + what + " returned " + type_name(capsule) +
                        ", not a capsule; the object is broken (it must return a PyCapsule named '" +
                        kHalideBufferCapsule + "')");
    const char *given = PyCapsule_GetName(capsule.ptr());
    if (!given && PyErr_Occurred()) throw py::error_already_set();
    if (!given || std::string(given) != kHalideBufferCapsule)
        throw ValueError(name.text() + ": " + what + " returned a capsule named '" + (given ? given : "") +
                        "', not '" + kHalideBufferCapsule + "'; halide_buffer speaks Halide's ABI " +
                        kHalideBufferCapsule + " only: pass a buffer of a runtime of that version, or its data "
                        "through the buffer protocol or DLPack");
    auto *raw = static_cast<halide_buffer_t *>(PyCapsule_GetPointer(capsule.ptr(), given));
    if (!raw) throw py::error_already_set();
    // One of ours (an object handing on a Buffer's capsule): that view, one residency state.
    if (Buffer *ours = buffer_in_typed_capsule(capsule.ptr())) return ours->view();
    // The capsule keeps the struct alive (its producer's rule); the object, its memory.
    py::tuple owner = py::make_tuple(obj, capsule);
    return buffer_from_halide_struct(name.pipeline, raw, keep_object(owner));
}

/// A tensor that requires grad (PyTorch's attribute): refused with the argument's name (a call
/// computes no gradient; the producer's own refusal would not say which argument).
void refuse_grad(py::handle obj, const ArgumentName &name) {
    static PyObject *const attr = PyUnicode_InternFromString("requires_grad");
    py::object grad = optional_attr(obj, attr);
    if (grad && PyObject_IsTrue(grad.ptr()) == 1)
        throw TypeError(name.text() + ": the " + type_name(obj) + " requires grad, and a Halide pipeline "
                        "computes no gradient; pass x.detach()");
}

/// What a wrapping step refused, said of the argument: "Buffer.from_host(): <what>; <fix>"
/// becomes "<pipeline>(): argument '<name>': <what>; <fix>", of the same kind.
template <typename Error>
[[noreturn]] void rethrow_named(const Error &e, const ArgumentName &name) {
    std::string what = e.what();
    size_t entry_end = what.find("(): ");
    if (entry_end != std::string::npos && what.find(' ') > entry_end) what.erase(0, entry_end + 4);
    throw Error(name.text() + ": " + what);
}

/// `wrap()`'s Buffer; the core's refusals (a stride, a byte order, a dtype) name the argument.
template <typename Wrap>
Buffer named_wrap(const ArgumentName &name, Wrap &&wrap) {
    try {
        return wrap();
    } catch (const BufferError &e) {  // no wrapping step raises its ReadOnlyError (read-only outputs: refuse_read_only_output())
        rethrow_named(e, name);
    } catch (const ValueError &e) {
        rethrow_named(e, name);
    } catch (const TypeError &e) {
        rethrow_named(e, name);
    }
}

/// The Buffer the package's `wrap` (halide_buffer.opencl.wrap, .cuda.wrap) made of `obj`.
Buffer wrapped_by(py::object wrap, py::handle obj) { return buffer_of(wrap(obj).ptr()).view(); }

bool is_exact_ndarray(py::handle obj) {
    return Py_TYPE(obj.ptr()) == reinterpret_cast<PyTypeObject *>(py::detail::npy_api::get().PyArray_Type_);
}

/// The Argument of `obj` as kind `k`, or nothing where the object is none after all (an
/// attribute its type offers, as a property, that this object raises AttributeError for).
std::optional<Argument> try_kind(ArgumentKind k, py::handle obj, const ArgumentName &name, bool input, bool borrow) {
    static PyObject *const capsule_method = PyUnicode_InternFromString("_get_halide_buffer_t_capsule");
    static PyObject *const dlpack = PyUnicode_InternFromString("__dlpack__");
    static PyObject *const cuda_interface = PyUnicode_InternFromString("__cuda_array_interface__");
    static PyObject *const array_method = PyUnicode_InternFromString("__array__");
    switch (k) {
    case kTypedCapsule:
        if (py::object method = optional_attr(obj, capsule_method))
            return Argument{from_typed_capsule(obj, method, name), Home::own_rule};
        return std::nullopt;
    case kHalideBuffer:
        if (!is_halide_buffer(obj)) return std::nullopt;
        return Argument{buffer_from_halide(obj), Home::own_rule};
    case kPyOpenCLArray:
        return Argument{wrapped_by(py::module_::import("halide_buffer.opencl").attr("wrap"), obj), Home::device};
    case kDLPack: {
        if (!optional_attr(obj, dlpack)) return std::nullopt;
        if (borrow) {
            std::optional<Buffer> b = exchange_borrow(obj, name.pipeline);
            if (b) return Argument{std::move(*b), Home::host};
        }
        refuse_grad(obj, name);
        Buffer b = named_wrap(name, [&] { return buffer_from_dlpack(obj, -1, !input); });
        Home home = b.has_device_allocation() ? Home::device : Home::host;
        return Argument{std::move(b), home};
    }
    case kCudaInterface:
        if (!optional_attr(obj, cuda_interface)) return std::nullopt;
        return Argument{wrapped_by(py::module_::import("halide_buffer.cuda").attr("wrap"), obj), Home::device};
    case kHostMemory:
        if (!PyObject_CheckBuffer(obj.ptr()) && !optional_attr(obj, array_method)) return std::nullopt;
        return Argument{named_wrap(name, [&] { return buffer_from_host(obj, false, true); }), Home::host};
    default:
        return std::nullopt;
    }
}

/// The kinds an object may offer by an attribute of its own (the others are its type's alone).
constexpr unsigned kAttributeKinds = 1u << kTypedCapsule | 1u << kDLPack | 1u << kCudaInterface | 1u << kHostMemory;

/// The Argument of `obj` as found: the kinds its type offers, in the order the file's head
/// gives (every kind an attribute gives, for an object asked one by one).
Argument find_argument(py::handle obj, const ArgumentName &name, bool input, bool borrow) {
    if (is_exact_ndarray(obj))
        return Argument{named_wrap(name, [&] { return buffer_from_host(obj, false, true); }), Home::host};
    const ArgumentType &type = argument_type(Py_TYPE(obj.ptr()));
    for (int k = 0; k < kArgumentKinds; ++k) {
        if (!type.offers(ArgumentKind(k)) && !(type.ask_each && kAttributeKinds & (1u << k))) continue;
        if (std::optional<Argument> found = try_kind(ArgumentKind(k), obj, name, input, borrow)) return std::move(*found);
    }
    throw TypeError(name.text() + ": " + type_name(obj) + " holds no memory a pipeline can take; " + kinds_taken());
}

/// An ndarray (any subclass) described into `out`: false where it cannot be (a byte order, a
/// dtype or a layout a description cannot say, a read-only output).
bool describe_ndarray(py::handle obj, bool input, BorrowedArgument &out) {
    static_assert(sizeof(Py_intptr_t) == sizeof(int64_t), "NumPy's shape and strides read as int64");
    auto *a = py::detail::array_proxy(obj.ptr());
    if (!input && !(a->flags & py::detail::npy_api::NPY_ARRAY_WRITEABLE_)) return false;
    if (big_endian(a->descr)) return false;
    const DType *dtype;
    try {
        dtype = &to_dtype(a->descr, "aot");
    } catch (const std::exception &) {
        return false;  // no dtype of the table: the general way says so
    }
    return borrow_host_memory(out, reinterpret_cast<uint8_t *>(a->data), a->nd,
                              reinterpret_cast<const int64_t *>(a->dimensions),
                              reinterpret_cast<const int64_t *>(a->strides), *dtype);
}

}  // namespace

std::string ArgumentName::text() const { return std::string(pipeline) + "(): argument '" + argument + "'"; }

bool borrow_argument(py::handle obj, const ArgumentName &name, bool input, BorrowedArgument &out) {
    if (py::detail::npy_api::get().PyArray_Check_(obj.ptr())) return describe_ndarray(obj, input, out);
    const ArgumentType &type = argument_type(Py_TYPE(obj.ptr()));
    // A producer's exchange API, where DLPack is the first kind its type offers (PyTorch).
    bool dlpack_first = type.offers(kDLPack) && (type.offered & ((1u << kDLPack) - 1)) == 0;
    return dlpack_first && type.exchange && exchange_describe(obj, type, name.pipeline, out);
}

Argument adopt_argument(py::handle obj, const ArgumentName &name, bool input, bool borrow) {
    Argument a = find_argument(obj, name, input, borrow);
    if (!input) refuse_read_only_output(a.buffer, name);
    return a;
}

void refuse_read_only_output(const Buffer &b, const ArgumentName &name) {
    if (b.readonly())
        throw ReadOnlyError(name.text() + ": the output's memory is read-only, and the pipeline writes it; pass "
                            "writable memory (numpy.empty_like(x), a new hb.Buffer), or leave the output out to "
                            "have one allocated");
}

void bring_home(Buffer &b, Home home) {
    if (home == Home::host) {
        unlocked_if_may_copy(b, [&] { b.copy_to_host(); });
    } else if (home == Home::device && b.has_device_allocation()) {
        unlocked_if_may_copy(b, [&] { b.copy_to_device(DeviceChoice{}); });
    }
}

void bind_arguments(py::module_ &m) {
    m.def("_argument", [](py::handle obj, const std::string &entry, const std::string &argument) -> py::object {
        if (is_buffer(obj)) return py::reinterpret_borrow<py::object>(obj);
        // Owned, not borrowed: the Buffer outlives this call.
        return py::cast(adopt_argument(obj, ArgumentName{entry.c_str(), argument.c_str()}, true, false).buffer);
    }, py::arg("obj"), py::arg("entry"), py::arg("argument"),
       "Any object a pipeline takes as an input, as a Buffer (the object itself when it is one): "
       "hb.dask's inputs that are not dask arrays.");
}

}  // namespace hb
