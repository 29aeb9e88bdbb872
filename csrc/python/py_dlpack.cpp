// py_dlpack.cpp: the DLPack protocol in Python: Buffer.__dlpack__ / __dlpack_device__ (capsules
// of our managed tensors) and halide_buffer.from_dlpack (any producer, any 1.x version, legacy
// capsules, raw capsules). The managed tensors and the checks are dlpack.cpp's.
#include "python/py_dlpack.h"

#include <optional>
#include <string>

#include "core/errors.h"
#include "interop/cuda_interop.h"
#include "interop/dlpack.h"
#include "python/py_buffer.h"
#include "python/py_dlpack_exchange.h"
#include "python/py_glue.h"
#include "python/py_kept.h"
#include "python/py_module.h"
#include "python/py_residency.h"

namespace hb {
namespace {

constexpr const char *kExport = "__dlpack__";
constexpr const char *kImport = "from_dlpack";

// ---------------------------------------------------------------------------------------------
// Capsules
// ---------------------------------------------------------------------------------------------

/// A capsule's destructor: the tensor is deleted only when no consumer took it (a consumer
/// renames the capsule to the "used_" name), and then its lease leaves no mark (a consumer
/// that refused the tensor never wrote). Exceptions pending on the caller are preserved.
template <typename Managed>
void capsule_destructor(PyObject *capsule, const char *name) {
    if (!PyCapsule_IsValid(capsule, name)) return;
    py::error_scope pending;  // set aside, and restored on return
    auto *m = static_cast<Managed *>(PyCapsule_GetPointer(capsule, name));
    if (m) delete_unused(m);
}

void versioned_destructor(PyObject *c) { capsule_destructor<DLManagedTensorVersioned>(c, kDLTensorVersionedCapsule); }
void legacy_destructor(PyObject *c) { capsule_destructor<DLManagedTensor>(c, kDLTensorCapsule); }

/// A capsule owning `m`; if the capsule cannot be made, the tensor is deleted and the error raised.
template <typename Managed>
py::capsule capsule_of(Managed *m, const char *name, PyCapsule_Destructor destructor) {
    PyObject *c = PyCapsule_New(m, name, destructor);
    if (!c) {
        m->deleter(m);
        throw py::error_already_set();
    }
    return py::reinterpret_steal<py::capsule>(c);
}

// ---------------------------------------------------------------------------------------------
// Export: __dlpack__ and __dlpack_device__
// ---------------------------------------------------------------------------------------------

/// (major, minor) or (device_type, device_id): a pair of ints, or TypeError naming `what`.
std::pair<int64_t, int64_t> int_pair(py::handle value, const char *what, const char *example) {
    PyObject *v = value.ptr();
    if (PyTuple_Check(v) && PyTuple_GET_SIZE(v) == 2 && PyLong_Check(PyTuple_GET_ITEM(v, 0)) &&
        PyLong_Check(PyTuple_GET_ITEM(v, 1))) {
        int overflow = 0;
        int64_t a = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(v, 0), &overflow);
        int64_t b = overflow ? 0 : PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(v, 1), &overflow);
        if (!overflow) return {a, b};
    }
    throw TypeError(std::string(kExport) + "(): " + what + " must be a tuple of two ints such as " + example +
                    ", not " + py::repr(value).cast<std::string>());
}

/// The keywords of __dlpack__ (keyword-only, all optional).
struct DLPackArgs {
    py::handle stream = Py_None, max_version = Py_None, dl_device = Py_None, copy = Py_None;
};

/// Vectorcall arguments to DLPackArgs: consumers call __dlpack__ on every exchange, so this
/// bypasses pybind11's keyword matching (which builds each name anew per call).
DLPackArgs parse_dlpack_args(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    if (nargs != 0)
        throw TypeError(std::string(kExport) + "() takes keyword arguments only (stream, max_version, "
                        "dl_device, copy)");
    // Keyword names in calling code are interned strings: compared by address first.
    static PyObject *const kNames[] = {
        PyUnicode_InternFromString("max_version"), PyUnicode_InternFromString("copy"),
        PyUnicode_InternFromString("dl_device"), PyUnicode_InternFromString("stream")};
    DLPackArgs out;
    py::handle *slots[] = {&out.max_version, &out.copy, &out.dl_device, &out.stream};
    Py_ssize_t n = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i);
        int k = 0;
        while (k < 4 && name != kNames[k]) ++k;
        for (int j = 0; k == 4 && j < 4; ++j) {
            if (PyUnicode_Compare(name, kNames[j]) == 0) k = j;
        }
        if (k == 4)
            throw TypeError(std::string(kExport) + "() got an unexpected keyword argument '" +
                            py::str(name).cast<std::string>() + "'");
        *slots[k] = args[i];
    }
    return out;
}

}  // namespace

int tri_state(py::handle value, const char *entry) {
    if (value.is_none()) return -1;
    if (PyBool_Check(value.ptr())) return value.ptr() == Py_True;
    throw TypeError(std::string(entry) + "(): copy must be True, False or None, not " +
                    py::repr(value).cast<std::string>() + "; pass True to always copy, False never to, "
                    "None to copy only when needed");
}

namespace {

/// The capsule of an export's managed tensor (versioned or legacy).
py::capsule capsule_for(const Exported &e) {
    if (e.versioned) return capsule_of(e.versioned, kDLTensorVersionedCapsule, versioned_destructor);
    return capsule_of(e.legacy, kDLTensorCapsule, legacy_destructor);
}

/// stream= read for the plan: None, an int (not a bool) as sign and magnitude, or anything
/// else, named by its repr (whether it is an error depends on where the data is: plan_export()),
/// written into `s` (a default StreamArg: None).
void read_stream(py::handle stream, StreamArg &s) {
    if (stream.is_none()) return;
    PyObject *v = stream.ptr();
    if (!PyLong_Check(v) || PyBool_Check(v)) {
        s.kind = StreamArg::Kind::other;
        s.text = py::repr(stream).cast<std::string>();
        return;
    }
    s.kind = StreamArg::Kind::integer;
    int overflow = 0;
    long long value = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (!overflow) {
        s.negative = value < 0;
        s.magnitude = s.negative ? uint64_t(0) - uint64_t(value) : uint64_t(value);
    } else {
        s.negative = overflow < 0;
        unsigned long long big = overflow > 0 ? PyLong_AsUnsignedLongLong(v) : 0;
        if (overflow > 0 && !(big == static_cast<unsigned long long>(-1) && PyErr_Occurred())) {
            s.magnitude = big;  // a handle in the upper half of the address space
        } else {
            PyErr_Clear();
            s.fits = false;
        }
    }
    if (!s.fits || !PyLong_CheckExact(v)) s.text = py::repr(stream).cast<std::string>();
}

/// __dlpack__'s arguments converted (every TypeError of an argument of the wrong Python type).
ExportRequest export_request(const DLPackArgs &a) {
    ExportRequest r;
    r.copy = tri_state(a.copy, kExport);
    if (!a.dl_device.is_none()) r.dl_device = int_pair(a.dl_device, "dl_device", "(1, 0)");
    if (!a.max_version.is_none()) r.max_version = int_pair(a.max_version, "max_version", "(1, 0)");
    read_stream(a.stream, r.stream);
    return r;
}

/// __dlpack__: its arguments converted, the export carried out (run_export()), its capsule.
py::capsule dlpack_export(py::handle self, const DLPackArgs &a) {
    Buffer &b = own_buffer(self.ptr());  // a method of the Buffer type: its descriptor checked self
    return capsule_for(run_export(b, export_request(a)));
}

// Both are plain CPython methods (no pybind11 dispatch): they run on every exchange.

PyObject *dlpack_method(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    PyObject *capsule = nullptr;
    c_call([&] {
        capsule = dlpack_export(self, parse_dlpack_args(args, nargs, kwnames)).release().ptr();
        return 0;
    });
    return capsule;
}

PyObject *dlpack_device_method(PyObject *self, PyObject *) {
    PyObject *device = nullptr;
    c_call([&] {
        DLDevice d = dlpack_device_of(buffer_of(self));
        device = py::make_tuple(int(d.device_type), d.device_id).release().ptr();
        return 0;
    });
    return device;
}

PyMethodDef kDLPackMethods[] = {
    {"__dlpack__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(dlpack_method)),
     METH_FASTCALL | METH_KEYWORDS,
     "__dlpack__($self, /, *, stream=None, max_version=None, dl_device=None, copy=None)\n--\n\n"
     "A DLPack capsule (versioned when max_version >= (1, 0)) of the host data, or of the CUDA "
     "device copy of a buffer on a CUDA device (its stream handshake per DLPack; dl_device=(1, 0) "
     "asks for the host copy); a writable lease unless the buffer is read-only."},
    {"__dlpack_device__", dlpack_device_method, METH_NOARGS,
     "__dlpack_device__($self, /)\n--\n\n(DLPack device type, device id): (2, ordinal) for a buffer "
     "on a CUDA device, else (1, 0), the CPU."},
};

// ---------------------------------------------------------------------------------------------
// Import: from_dlpack
// ---------------------------------------------------------------------------------------------

}  // namespace

/// What keeps an imported tensor alive: the producer object and the managed tensor, whose
/// deleter runs exactly once, when the last buffer or view over it dies (with the GIL held:
/// producers' deleters may touch Python objects), before the producer is let go.
struct ImportOwner final : Kept {
    ImportOwner(DLManagedTensorVersioned *v, DLManagedTensor *l, py::object producer)
        : Kept(std::move(producer)), versioned(v), legacy(l) {}
    ~ImportOwner() override {
        if (versioned && versioned->deleter) versioned->deleter(versioned);
        if (legacy && legacy->deleter) legacy->deleter(legacy);
    }
    DLManagedTensorVersioned *versioned;
    DLManagedTensor *legacy;
};

std::shared_ptr<void> import_owner(DLManagedTensorVersioned *v, DLManagedTensor *l, py::object producer) {
    return keep(std::make_unique<ImportOwner>(v, l, std::move(producer)));
}

namespace {

/// Takes a capsule: checks it, marks it used, and makes the buffer. A check that fails leaves
/// the capsule as it was: its destructor then deletes the tensor.
Buffer from_capsule(py::handle capsule, py::object producer, int copy, bool producer_copied = false,
                    bool for_writing = false) {
    const char *name = PyCapsule_GetName(capsule.ptr());
    if (!name && PyErr_Occurred()) throw py::error_already_set();
    std::string n = name ? name : "";
    if (n == kDLTensorVersionedCapsule) {
        auto *m = static_cast<DLManagedTensorVersioned *>(PyCapsule_GetPointer(capsule.ptr(), name));
        if (!m) throw py::error_already_set();
        if (m->version.major != kDLPackMajor) {
            PyCapsule_SetName(capsule.ptr(), kUsedDLTensorVersionedCapsule);
            refuse_major(kImport, m);
        }
        DLImport in = check_import(kImport, m->dl_tensor, m->flags, m->version);
        PyCapsule_SetName(capsule.ptr(), kUsedDLTensorVersionedCapsule);
        return adopt_import(in, import_owner(m, nullptr, std::move(producer)), copy, producer_copied);
    }
    if (n == kDLTensorCapsule) {
        auto *m = static_cast<DLManagedTensor *>(PyCapsule_GetPointer(capsule.ptr(), name));
        if (!m) throw py::error_already_set();
        if (for_writing)  // left unconsumed: the capsule's destructor gives the tensor back
            throw BufferError(std::string(kImport) + "(): the " + type_name(producer) + " came as a legacy DLPack "
                              "capsule, which cannot say whether its memory is read-only (a JAX array is immutable); "
                              "pass writable memory (a NumPy array, a torch tensor), or leave the output out to have "
                              "one allocated");
        DLImport in = check_import(kImport, m->dl_tensor, 0, DLPackVersion{0, 0});
        PyCapsule_SetName(capsule.ptr(), kUsedDLTensorCapsule);
        return adopt_import(in, import_owner(nullptr, m, std::move(producer)), copy, producer_copied);
    }
    if (n == kUsedDLTensorCapsule || n == kUsedDLTensorVersionedCapsule)
        throw BufferError(std::string(kImport) + "(): the capsule was already consumed (named '" + n +
                          "'); a DLPack capsule can be taken once: call __dlpack__() again");
    throw BufferError(std::string(kImport) + "(): a capsule named '" + n + "' is no DLPack tensor; pass "
                      "an object with __dlpack__ or a 'dltensor'/'dltensor_versioned' capsule");
}

/// What a producer's __dlpack_device__() returned, checked: a (device type, device id) pair of
/// ints in the range of DLPack's fields.
DLDevice producer_device(py::handle obj, py::handle where) {
    auto text = [&](const char *what) {
        return std::string(kImport) + "(): " + Py_TYPE(obj.ptr())->tp_name + ".__dlpack_device__() returned " +
               py::repr(where).cast<std::string>() + ", " + what + "; the producer is broken";
    };
    PyObject *w = where.ptr();
    if (!PyTuple_Check(w) || PyTuple_GET_SIZE(w) != 2) throw TypeError(text("not a (device type, device id) tuple"));
    int32_t fields[2];
    for (Py_ssize_t i = 0; i < 2; ++i) {
        PyObject *item = PyTuple_GET_ITEM(w, i);
        py::object index = py::reinterpret_steal<py::object>(
            PyIndex_Check(item) && !PyBool_Check(item) ? PyNumber_Index(item) : nullptr);
        if (!index) {
            PyErr_Clear();
            throw TypeError(text("whose fields are not both ints"));
        }
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
        if (overflow || v < INT32_MIN || v > INT32_MAX)
            throw ValueError(text("whose fields do not fit DLPack's 32-bit device type and id"));
        fields[i] = int32_t(v);
    }
    return DLDevice{static_cast<DLDeviceType>(fields[0]), fields[1]};
}

/// The capsule of a producer: the newest version we read first; producers from before
/// max_version get the old call. `copied` tells whether the producer was asked to copy.
py::object capsule_from(py::handle obj, int copy, bool &copied) {
    py::object method = obj.attr("__dlpack__");
    py::dict kwargs, stream;
    // A producer on a CUDA device makes our stream wait for its work (DLPack's handshake).
    py::object device_of = py::getattr(obj, "__dlpack_device__", py::none());
    if (!device_of.is_none()) {
        DLDevice where = producer_device(obj, device_of());
        if (where.device_type == kDLCUDA)
            stream["stream"] = embedder_cuda_device(where.device_id, kImport)->stream_number();
    }
    kwargs["max_version"] = py::make_tuple(kDLPackMajor, kDLPackMinor);
    if (copy != -1) kwargs["copy"] = py::bool_(copy == 1);
    kwargs.attr("update")(stream);
    py::object capsule;
    try {
        capsule = method(**kwargs);
        copied = copy == 1;  // a producer that takes copy=True copies (not all say so in the flags)
    } catch (py::error_already_set &e) {
        if (!e.matches(PyExc_TypeError)) throw;
        capsule = method(**stream);
        copied = false;
    }
    if (!PyCapsule_CheckExact(capsule.ptr()))
        throw TypeError(std::string(kImport) + "(): " + Py_TYPE(obj.ptr())->tp_name + ".__dlpack__() returned " +
                        Py_TYPE(capsule.ptr())->tp_name + ", not a DLPack capsule; the producer is broken");
    return capsule;
}

}  // namespace

Buffer buffer_from_dlpack(py::handle obj, int copy, bool for_writing) {
    if (std::optional<Buffer> fast = exchange_import(obj, copy, for_writing)) return std::move(*fast);
    bool copied = false;
    py::object capsule = capsule_from(obj, copy, copied);
    // What the producer copied for us is ours alone: no second copy.
    return from_capsule(capsule, py::reinterpret_borrow<py::object>(obj), copy, copied, for_writing);
}

namespace {

Buffer from_dlpack(py::handle obj, py::handle device, py::handle copy_arg) {
    int copy = tri_state(copy_arg, kImport);
    std::optional<DeviceChoice> on;
    if (!device.is_none()) on = device_arg(device, kImport);
    Buffer out = [&] {
        if (is_buffer(obj)) {  // ours: the same storage (one residency state), or a copy
            Buffer &b = buffer_of(obj.ptr());
            if (copy != 1) return b.view();
            return unlocked_if_may_copy(b, [&] { return b.current_host_copy(kImport); });
        }
        if (PyCapsule_CheckExact(obj.ptr())) return from_capsule(obj, py::none(), copy);
        if (!py::hasattr(obj, "__dlpack__"))
            throw TypeError(std::string(kImport) + "(): " + Py_TYPE(obj.ptr())->tp_name + " has no __dlpack__ "
                            "and is no DLPack capsule; pass a tensor of a DLPack library (NumPy, PyTorch, JAX, "
                            "CuPy), or use Buffer.from_host(obj, copy=True) for other data");
        return buffer_from_dlpack(obj, copy, false);
    }();
    if (on) {
        py::gil_scoped_release nogil;
        out.copy_to_device(*on);
    }
    return out;
}

}  // namespace

void bind_dlpack(BufferClass &cls, py::module_ &m) {
    for (PyMethodDef &def : kDLPackMethods) {
        py::object method = py::reinterpret_steal<py::object>(
            PyDescr_NewMethod(reinterpret_cast<PyTypeObject *>(cls.ptr()), &def));
        if (!method) throw py::error_already_set();
        cls.attr(def.ml_name) = method;
    }
    m.def("from_dlpack", &from_dlpack, py::arg("obj"), py::kw_only(), py::arg("device") = py::none(),
          py::arg("copy") = py::none(),
          "A Buffer over any DLPack producer's tensor (copy=None/False: without copying), or over a "
          "raw capsule; copy=True copies (and unpacks packed sub-byte values). A PyTorch tensor whose "
          "memory does not hold its values (a lazy negation or conjugate: is_neg(), is_conj()) is read "
          "through one copy of its values with copy=None or True, and refused with copy=False.");
}

}  // namespace hb
