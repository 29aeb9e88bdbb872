// py_dlpack_exchange.cpp: DLPack 1.3's C exchange API, both sides. Ours: a static table on the
// Buffer type, as __dlpack_c_exchange_api__. Theirs: a producer whose type has one (PyTorch)
// is imported through it, with no __dlpack__ call and no capsule.
#include "python/py_dlpack_exchange.h"

#include <string>

#include "core/errors.h"
#include "interop/aot_borrow.h"
#include "interop/cuda_interop.h"
#include "interop/dlpack.h"
#include "python/py_argument_types.h"
#include "python/py_buffer.h"
#include "python/py_dlpack.h"
#include "python/py_glue.h"
#include "python/py_kept.h"
#include "python/py_module.h"

namespace hb {
namespace {

constexpr const char *kAttribute = "__dlpack_c_exchange_api__";

/// Takes ownership of a producer's versioned tensor: a buffer over it, or the tensor deleted
/// and the reason raised.
Buffer adopt_owned(const char *entry, DLManagedTensorVersioned *m, py::object producer, int copy,
                   bool producer_copied) {
    if (m->version.major != kDLPackMajor) refuse_major(entry, m);
    std::shared_ptr<void> owner = import_owner(m, nullptr, std::move(producer));  // deletes it, however this ends
    return adopt_import(check_import(entry, m->dl_tensor, m->flags, m->version), std::move(owner), copy,
                        producer_copied);
}

// ---------------------------------------------------------------------------------------------
// Our table
// ---------------------------------------------------------------------------------------------

int allocator(DLTensor *prototype, DLManagedTensorVersioned **out, void *error_ctx,
              void (*set_error)(void *, const char *, const char *)) {
    constexpr const char *entry = "DLPackManagedTensorAllocator";
    try {
        const DType *t = dtype_by_dlpack(prototype->dtype.code, prototype->dtype.bits);
        if (!t || prototype->dtype.lanes != 1)
            throw BufferError(std::string(entry) + "(): no dtype of the table has this DLPack type");
        if (prototype->device.device_type != kDLCPU)
            throw BufferError(std::string(entry) + "(): halide_buffer allocates on the CPU only");
        if (prototype->ndim < 0 || (prototype->ndim > 0 && !prototype->shape))
            throw BufferError(std::string(entry) + "(): the prototype has no valid shape");
        std::vector<int64_t> shape(prototype->shape, prototype->shape + prototype->ndim);
        *out = export_versioned(Buffer::allocate(entry, shape, *t), false);  // keeps the new memory
        return 0;
    } catch (const MemoryError &e) {
        set_error(error_ctx, "MemoryError", e.what());
    } catch (const std::bad_alloc &) {
        set_error(error_ctx, "MemoryError", "DLPackManagedTensorAllocator(): out of host memory; free memory and try again");
    } catch (const ValueError &e) {
        set_error(error_ctx, "ValueError", e.what());
    } catch (const std::exception &e) {
        set_error(error_ctx, "BufferError", e.what());
    }
    return -1;
}

int from_py_object(void *py_object, DLManagedTensorVersioned **out) {
    return c_call([&] {
        // What __dlpack__() does (the same export, run_export()), as the exchange API's consumer
        // asks it: a versioned tensor, no capsule.
        *out = run_export(buffer_of(static_cast<PyObject *>(py_object)), ExportRequest{ExportVia::exchange}).versioned;
        return 0;
    });
}

int to_py_object(DLManagedTensorVersioned *tensor, void **out) {
    return c_call([&] {
        Buffer b = adopt_owned("DLPackManagedTensorToPyObjectNoSync", tensor, py::none(), -1, false);
        *out = py::cast(std::move(b)).release().ptr();
        return 0;
    });
}

int current_work_stream(DLDeviceType type, int32_t id, void **out) {
    return c_call([&] {
        // Host memory has no stream to order work on; a CUDA device's is its default device's.
        *out = type == kDLCUDA
                   ? reinterpret_cast<void *>(embedder_cuda_device(id, "DLPackCurrentWorkStream")->stream_number())
                   : nullptr;
        return 0;
    });
}

const DLPackExchangeAPI kTable = {
    {{kDLPackMajor, kDLPackMinor}, nullptr},
    allocator,
    from_py_object,
    to_py_object,
    nullptr,  // dltensor_from_py_object_no_sync: optional; our element strides are not stored
    current_work_stream,
};

// ---------------------------------------------------------------------------------------------
// A producer's table
// ---------------------------------------------------------------------------------------------

/// What a producer's exchange API would hand over of a PyTorch tensor as it is, wrongly.
enum class Export : uint8_t {
    as_is,       ///< its memory holds its values
    refused,     ///< requires grad: its __dlpack__ refuses, with the producer's own error
    negated,     ///< is_neg(): a lazy negation, whose memory holds the values negated
    conjugated,  ///< is_conj(): a lazy conjugate, whose memory holds the values' conjugates
};

/// How a lazy view is named, and resolved, in messages and calls (one row per lazy Export).
struct LazyView {
    const char *what;     ///< "a lazily negated view (is_neg())"
    const char *holds;    ///< what its memory holds instead of its values
    const char *done;     ///< what the view does to what is written there, as seen through it
    const char *resolve;  ///< the tensor's method giving a tensor of its values (one copy)
};
constexpr LazyView kNegated{"a lazily negated view (is_neg())", "its values negated", "negated", "resolve_neg"};
constexpr LazyView kConjugated{"a lazily conjugated view (is_conj())", "its values' conjugates", "conjugated",
                               "resolve_conj"};

/// What `obj` (of type entry `type`) is for an export through the exchange API, which PyTorch's
/// table gives of every strided tensor as it is: a tensor that requires grad (its __dlpack__
/// refuses it), and one whose memory does not hold its values (its __dlpack__ exports a lazy
/// negation as it is, and refuses a lazy conjugate). Asked through the type's own getter and
/// methods (a tensor passes here on every call). `complex`: the elements may be complex (only
/// those have a lazy conjugate; false skips asking).
Export export_of(py::handle obj, const ArgumentType &type, bool complex = true) {
    static PyObject *const grad = PyUnicode_InternFromString("requires_grad");
    static PyObject *const is_neg = PyUnicode_InternFromString("is_neg");
    static PyObject *const is_conj = PyUnicode_InternFromString("is_conj");
    if (type_attribute_true(obj, type.requires_grad, grad, false)) return Export::refused;
    if (type_attribute_true(obj, type.is_neg, is_neg, true)) return Export::negated;
    if (complex && type_attribute_true(obj, type.is_conj, is_conj, true)) return Export::conjugated;
    return Export::as_is;
}

/// A tensor of the values of `obj`, a lazy view: its own memory, made by the producer's one copy
/// (either of PyTorch's resolve methods resolves both lazy bits). Refused where a copy is not
/// wanted: memory a pipeline writes (its results would read transformed: BufferError, which a
/// call names with the argument), and copy=False.
py::object values_of(py::handle obj, const LazyView &lazy, int copy, bool for_writing) {
    std::string head = std::string("from_dlpack(): the ") + type_name(obj) + " is " + lazy.what +
                       ", whose memory holds " + lazy.holds;
    if (for_writing)
        throw BufferError(head + ", so the pipeline's results would read " + lazy.done + " through it; pass a "
                          "tensor that is no such view (torch.empty_like(t)), or leave the output out to have one "
                          "allocated");
    if (copy == 0)
        throw BufferError(head + ", so they can be read only through a copy; pass copy=None or copy=True (one "
                          "copy, as x." + lazy.resolve + "() makes)");
    py::object values = py::reinterpret_steal<py::object>(
        PyObject_CallMethodNoArgs(obj.ptr(), py::str(lazy.resolve).ptr()));
    if (!values) throw py::error_already_set();
    return values;
}

/// The tensor of `obj` through the producer's table `api`; nothing when the table refuses it.
/// `copied`: `obj` is a copy made for this import (ours alone: copy=True makes no second one).
std::optional<Buffer> table_import(const DLPackExchangeAPI *api, py::handle obj, int copy, bool copied) {
    DLManagedTensorVersioned *m = nullptr;
    if (api->managed_tensor_from_py_object_no_sync(obj.ptr(), &m) != 0) {
        // What the table refuses (PyTorch: sparse and other non-strided layouts, quantized
        // dtypes) goes the producer's __dlpack__ way, so the same tensor raises the same
        // exception, with the producer's own message, on every path.
        PyErr_Clear();
        return std::nullopt;
    }
    const DLDevice &where = m->dl_tensor.device;
    if (where.device_type == kDLCUDA && api->current_work_stream) {
        // "No sync": the producer's work may still run on its current stream; ours waits for it.
        void *stream = nullptr;
        if (api->current_work_stream(kDLCUDA, where.device_id, &stream) != 0) {
            py::error_already_set error;
            if (m->deleter) m->deleter(m);
            throw error;
        }
        try {
            embedder_cuda_device(where.device_id, "from_dlpack")
                ->order_after(stream_of_number(reinterpret_cast<uintptr_t>(stream)));
        } catch (...) {
            if (m->deleter) m->deleter(m);
            throw;
        }
    }
    return adopt_owned("from_dlpack", m, py::reinterpret_borrow<py::object>(obj), copy, copied);
}

/// A CPU tensor as its producer's exchange API describes it without handing over ownership
/// (dltensor_from_py_object_no_sync), valid while `obj` is held, its memory holding its values:
/// false where the API or the tensor cannot (a device tensor, ordered on streams; a tensor that
/// requires grad or a lazy view, which the owning ways decide on).
bool borrowed_description(py::handle obj, const ArgumentType &type, DLTensor &t) {
    const DLPackExchangeAPI *api = type.exchange;
    if (!api || !api->dltensor_from_py_object_no_sync) return false;
    t = DLTensor{};
    if (api->dltensor_from_py_object_no_sync(obj.ptr(), &t) != 0) {
        PyErr_Clear();  // refused: the owning ways, which raise the producer's own error
        return false;
    }
    return t.device.device_type == kDLCPU && export_of(obj, type, t.dtype.code == kDLComplex) == Export::as_is;
}

}  // namespace

std::optional<Buffer> exchange_import(py::handle obj, int copy, bool for_writing) {
    const ArgumentType &type = argument_type(Py_TYPE(obj.ptr()));
    const DLPackExchangeAPI *api = type.exchange;
    if (!api) return std::nullopt;
    Export what = export_of(obj, type);
    if (what == Export::as_is) return table_import(api, obj, copy, false);
    if (what == Export::refused) return std::nullopt;
    py::object values = values_of(obj, what == Export::negated ? kNegated : kConjugated, copy, for_writing);
    if (std::optional<Buffer> b = table_import(api, values, copy, true)) return b;
    return buffer_from_dlpack(values, copy, false);  // what the table refuses: the producer's __dlpack__ answers
}

std::optional<Buffer> exchange_borrow(py::handle obj, const char *entry) {
    DLTensor t;
    if (!borrowed_description(obj, argument_type(Py_TYPE(obj.ptr())), t)) return std::nullopt;
    // No flags come with a borrowed description: it is taken as writable, as every tensor of the
    // producers offering it is (PyTorch has no read-only tensors).
    DLImport in = check_import(entry, t, 0, DLPackVersion{kDLPackMajor, kDLPackMinor});
    return wrap_import(entry, in, keep_object(obj), true);
}

bool exchange_describe(py::handle obj, const ArgumentType &type, const char *entry, BorrowedArgument &out) {
    DLTensor t;
    if (!borrowed_description(obj, type, t)) return false;
    // The import's own rules of a header and an element type (their refusals are the general
    // way's); packed sub-byte values take the general way.
    constexpr DLPackVersion kBorrowed{kDLPackMajor, kDLPackMinor};  // strides always given
    check_header(entry, t, kBorrowed);
    int packed;
    const DType &dtype = element_type(entry, t.dtype, false, packed);
    uintptr_t first;
    if (packed || __builtin_add_overflow(reinterpret_cast<uintptr_t>(t.data), uintptr_t(t.byte_offset), &first))
        return false;
    // Element strides made byte strides, in the description's own array, which
    // borrow_host_memory() reads before it writes; what overflows takes the general way.
    for (int i = 0; i < t.ndim; ++i) {
        if (__builtin_mul_overflow(t.strides[i], int64_t(dtype.itemsize), &out.byte_strides[i])) return false;
    }
    return borrow_host_memory(out, reinterpret_cast<uint8_t *>(first), t.ndim, t.shape, out.byte_strides, dtype);
}

void bind_dlpack_exchange(BufferClass &cls) {
    cls.attr(kAttribute) = py::capsule(&kTable, kExchangeAPICapsule);
}

}  // namespace hb
