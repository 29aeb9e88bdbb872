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
// protocol, __array__).
#include <string>

#include "abi/halide_abi.h"
#include "core/errors.h"
#include "python/py_glue.h"

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
    return Buffer::from_halide(name.pipeline, raw, keep_object(owner));
}

/// A pyopencl.array.Array (by its type's module and name: pyopencl need not be imported).
bool is_pyopencl_array(py::handle obj) {
    PyTypeObject *type = Py_TYPE(obj.ptr());
    if (std::string(type->tp_name) != "Array") return false;
    py::object module = py::getattr(reinterpret_cast<PyObject *>(type), "__module__", py::none());
    return py::isinstance<py::str>(module) && module.cast<std::string>().rfind("pyopencl", 0) == 0;
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
    } catch (const ReadOnlyError &e) {
        rethrow_named(e, name);
    } catch (const BufferError &e) {
        rethrow_named(e, name);
    } catch (const ValueError &e) {
        rethrow_named(e, name);
    } catch (const TypeError &e) {
        rethrow_named(e, name);
    }
}

/// The Buffer the package's `wrap` (halide_buffer.opencl.wrap, .cuda.wrap) made of `obj`.
Buffer wrapped_by(py::object wrap, py::handle obj) { return buffer_of(wrap(obj).ptr()).view(); }

/// The Argument of `obj` as found (the kinds in the order the file's head gives).
Argument find_argument(py::handle obj, const ArgumentName &name, bool input, bool borrow) {
    static PyObject *const capsule_method = PyUnicode_InternFromString("_get_halide_buffer_t_capsule");
    static PyObject *const dlpack = PyUnicode_InternFromString("__dlpack__");
    static PyObject *const cuda_interface = PyUnicode_InternFromString("__cuda_array_interface__");
    static PyObject *const array_method = PyUnicode_InternFromString("__array__");
    if (Py_TYPE(obj.ptr()) == reinterpret_cast<PyTypeObject *>(py::detail::npy_api::get().PyArray_Type_))
        return Argument{named_wrap(name, [&] { return buffer_from_host(obj, false, true); }), Home::host};
    if (py::object method = optional_attr(obj, capsule_method))
        return Argument{from_typed_capsule(obj, method, name), Home::own_rule};
    if (is_halide_buffer(obj)) return Argument{buffer_from_halide(obj), Home::own_rule};
    if (is_pyopencl_array(obj))
        return Argument{wrapped_by(py::module_::import("halide_buffer.opencl").attr("wrap"), obj), Home::device};
    if (optional_attr(obj, dlpack)) {
        if (borrow) {
            std::optional<Buffer> b = exchange_borrow(obj, name.pipeline);
            if (b) return Argument{std::move(*b), Home::host};
        }
        refuse_grad(obj, name);
        Buffer b = named_wrap(name, [&] { return buffer_from_dlpack(obj, -1, !input); });
        Home home = b.has_device_allocation() ? Home::device : Home::host;
        return Argument{std::move(b), home};
    }
    if (optional_attr(obj, cuda_interface))
        return Argument{wrapped_by(py::module_::import("halide_buffer.cuda").attr("wrap"), obj), Home::device};
    if (PyObject_CheckBuffer(obj.ptr()) || optional_attr(obj, array_method))
        return Argument{named_wrap(name, [&] { return buffer_from_host(obj, false, true); }), Home::host};
    throw TypeError(name.text() + ": " + type_name(obj) + " holds no memory a pipeline can take; " + kinds_taken());
}

}  // namespace

std::string ArgumentName::text() const { return std::string(pipeline) + "(): argument '" + argument + "'"; }

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
        without_gil_if_may_copy(b, [&] { b.copy_to_host(); });
    } else if (home == Home::device && b.has_device_allocation()) {
        without_gil_if_may_copy(b, [&] { b.copy_to_device(DeviceChoice{}); });
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
