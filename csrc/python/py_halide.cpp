// py_halide.cpp: the bridge to the halide package: Buffer.from_halide(), Buffer.to_halide(), and
// opening the OpenCL loader where Halide's JIT runtime finds it.
//
// from_halide() binds the hl.Buffer's own halide_buffer_t to a storage over its host memory
// (buffer_from_halide_struct(), halide_bridge.cpp), so both are one residency state. to_halide()
// gives that very hl.Buffer back for a view covering it. For any other view it makes an hl.Buffer with Halide's
// buffer-protocol constructor over an ndarray of the same bytes, of an integer type that
// constructor reads (it reads no bfloat16 and no 'L' uint64), whose halide_buffer_t then gets the
// real element type (Halide::Buffer takes its type from there), and binds that struct to the
// view's storage (bind_halide_struct()): one residency state again, for as long as the hl.Buffer
// lives. The ndarray's base is the binding (a capsule): the hl.Buffer holds the ndarray alone,
// through its Py_buffer, which it releases before its Halide::Buffer frees the device memory its
// struct shows. So the capsule dies first, and ends the binding then: a newer device copy comes
// home, and the struct is left showing none of the storage's device memory. Nothing refers back
// from the storage to the hl.Buffer (no cycle to collect); while it lives, to_halide() of the same
// view gives it again.
#include "python/py_halide.h"

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backends/opencl_api.h"
#include "core/errors.h"
#include "core/layout.h"
#include "interop/halide_bridge.h"
#include "python/py_buffer.h"
#include "python/py_dtype.h"
#include "python/py_glue.h"
#include "python/py_kept.h"
#include "python/py_module.h"

namespace hb {
namespace {

constexpr const char *kFromHalide = "Buffer.from_halide";
constexpr const char *kToHalide = "to_halide";

/// halide.Buffer, kept for the process once found (a hot path: no lookup per call). Without
/// `entry`: null while the halide package was never imported (nothing can be one of its
/// buffers then). With it: the package is imported, or ModuleNotFoundError names `entry`.
PyObject *halide_buffer_class(const char *entry) {
    static PyObject *type = nullptr;  // a strong reference, never released
    if (type) return type;
    static PyObject *const name = PyUnicode_InternFromString("halide");  // asked on every argument: made once
    py::object halide = py::reinterpret_steal<py::object>(PyImport_GetModule(name));
    if (!halide && PyErr_Occurred()) throw py::error_already_set();
    bool imported = halide && !halide.is_none();  // None in sys.modules: its import was blocked
    if (!imported && !entry) return nullptr;
    if (!imported) {
        try {
            halide = py::module_::import("halide");
        } catch (py::error_already_set &e) {
            if (!e.matches(PyExc_ModuleNotFoundError)) throw;
            std::string why = py::str(e.value()).cast<std::string>();
            PyErr_SetString(PyExc_ModuleNotFoundError,
                            (std::string(entry) + "(): the halide package is not installed (" + why +
                             "); pip install 'halide>=21,<22'").c_str());
            throw py::error_already_set();
        }
    }
    type = py::object(halide.attr("Buffer")).release().ptr();
    return type;
}

}  // namespace

bool is_halide_buffer_type(PyTypeObject *type) {
    PyObject *hl_buffer = halide_buffer_class(nullptr);
    // A subtype check: pybind11's metaclass defines no __instancecheck__ for isinstance() to ask.
    return hl_buffer && PyType_IsSubtype(type, reinterpret_cast<PyTypeObject *>(hl_buffer));
}

bool is_halide_buffer(py::handle obj) { return is_halide_buffer_type(Py_TYPE(obj.ptr())); }

namespace {

/// The address of a halide.Buffer's halide_buffer_t (Halide's _get_raw_halide_buffer_t()).
halide_buffer_t *raw_struct_of(py::handle h) {
    static PyObject *name = PyUnicode_InternFromString("_get_raw_halide_buffer_t");
    py::object address = py::reinterpret_steal<py::object>(PyObject_CallMethodNoArgs(h.ptr(), name));
    if (!address) throw py::error_already_set();
    return reinterpret_cast<halide_buffer_t *>(address.cast<uintptr_t>());
}

/// The struct of the last hl.Buffer asked about, remembered while that object lives: a loop over
/// one hl.Buffer finds it once, as Halide's method call costs more than the rest of
/// from_halide(). The struct lives in the object's Halide::Buffer for the object's life (in-place
/// crops and set_min change its fields, never its address, and its fields are read anew each
/// time). The entry goes when its object dies (a weak reference's callback, run before the
/// object's memory can be another's) or another object is asked about: one entry, so live
/// hl.Buffers cost nothing here. Guarded by the GIL.
struct LastStruct {
    PyObject *object = nullptr;   ///< borrowed: the weak reference says when it dies
    halide_buffer_t *raw = nullptr;
    PyObject *weakref = nullptr;  ///< strong
};

LastStruct &last_struct() {
    static LastStruct last;  // trivially destructible: callbacks may run at exit
    return last;
}

/// Forgets the remembered object (its weak reference dropped).
void forget_last_struct() {
    LastStruct &last = last_struct();
    PyObject *weakref = last.weakref;
    last = LastStruct{};
    Py_XDECREF(weakref);
}

/// The weak reference's callback: the remembered object died.
PyObject *last_struct_died(PyObject *, PyObject *weakref) {
    if (last_struct().weakref == weakref) forget_last_struct();
    Py_RETURN_NONE;
}

PyMethodDef kLastStructDied = {"_halide_struct_died", last_struct_died, METH_O, nullptr};

/// raw_struct_of(h), remembered while h lives and is the last asked about (never remembered for
/// an object without weak references).
halide_buffer_t *known_struct_of(py::handle h) {
    LastStruct &last = last_struct();
    if (last.object == h.ptr()) return last.raw;
    halide_buffer_t *raw = raw_struct_of(h);
    static PyObject *const callback = PyCFunction_New(&kLastStructDied, nullptr);  // kept for the process
    if (!callback) throw py::error_already_set();
    PyObject *weakref = PyWeakref_NewRef(h.ptr(), callback);
    if (!weakref) {
        PyErr_Clear();  // no weak references: nothing would tell of its death, so nothing is kept
        return raw;
    }
    forget_last_struct();
    last = LastStruct{h.ptr(), raw, weakref};
    return raw;
}

/// The NumPy dtype Halide's buffer-protocol constructor reads for `itemsize` bytes: unsigned
/// integers, but int64 for 8 bytes (it reads 'l', not 'L').
const DType *carrier_of(int itemsize) {
    static const DType *const rows[] = {dtype_by_name("uint8"), dtype_by_name("uint16"), dtype_by_name("uint32"),
                                        dtype_by_name("int64")};
    return rows[itemsize == 1 ? 0 : itemsize == 2 ? 1 : itemsize == 4 ? 2 : 3];
}

/// TypeError for a dtype Halide has no type for, naming what to pass instead.
TypeError no_halide_type(const DType &t) {
    std::string what = std::string(kToHalide) + "(): Halide has no type for " + t.name + "; ";
    if (const DType *u = dtype_bits_of(t))
        return TypeError(what + "pass b.bits() for the same bytes as " + u->name);
    return TypeError(what + "pass a buffer of a dtype it has over the same bytes, e.g. "
                     "Buffer.from_host(b.numpy().view(numpy.float64))");
}

/// An hl.Buffer made by to_halide(), bound to its view's storage: the base of the ndarray the
/// hl.Buffer holds, deleted (with the GIL) when the hl.Buffer releases that ndarray.
struct HalideBinding {
    explicit HalideBinding(Buffer v) : view(std::move(v)) {}
    Buffer view;                   ///< the view the hl.Buffer describes (mins aside); keeps the storage
    std::unique_ptr<RawView> raw;  ///< its struct's binding; null until bound
    halide_buffer_t *external = nullptr;
    PyObject *object = nullptr;    ///< the hl.Buffer, borrowed: it lives while the binding does
};

/// The live bindings, by storage and by struct. Guarded by the GIL.
struct Bindings {
    std::unordered_multimap<const void *, HalideBinding *> by_storage;
    std::unordered_map<const halide_buffer_t *, HalideBinding *> by_struct;
};

Bindings &bindings() {
    static Bindings *l = new Bindings;  // never destroyed: capsules may die at interpreter exit
    return *l;
}

void forget_binding(HalideBinding *binding) {
    Bindings &l = bindings();
    auto range = l.by_storage.equal_range(binding->view.keep_alive().get());
    for (auto it = range.first; it != range.second; ++it) {
        if (it->second == binding) {
            l.by_storage.erase(it);
            break;
        }
    }
    auto it = l.by_struct.find(binding->external);
    if (it != l.by_struct.end() && it->second == binding) l.by_struct.erase(it);
}

/// The capsule's destructor: the hl.Buffer lets go of the memory, so the binding ends now,
/// before its Halide::Buffer frees what its struct shows.
void end_binding(void *p) {
    std::unique_ptr<HalideBinding> binding(static_cast<HalideBinding *>(p));
    if (binding->object) forget_binding(binding.get());
    if (!binding->raw) return;
    std::exception_ptr error;
    try {
        unlocked_if_may_copy(binding->view,
                                [&] { unbind_halide_struct(binding->view, kToHalide, std::move(binding->raw)); });
    } catch (...) {
        error = std::current_exception();
    }
    if (error) {  // a failed download: nothing to raise to, so said as unraisable
        if (!set_python_error(error)) PyErr_SetString(PyExc_RuntimeError, "halide_buffer: unexpected internal error");
        PyErr_WriteUnraisable(nullptr);
    }
}

/// Whether `h` (a binding's struct) still describes `b` exactly: its owner moved no coordinate.
bool describes(const halide_buffer_t &h, const Buffer &b) {
    int n = b.ndim();
    if (h.dimensions != n) return false;
    for (int i = 0; i < n; ++i) {
        if (h.dim[n - 1 - i].min != b.mins()[size_t(i)]) return false;
    }
    return true;
}

/// The live hl.Buffer to_halide() made for a view with b's geometry and mins, still bound; null
/// when there is none.
py::object live_binding(const Buffer &b) {
    // The candidates first, each hl.Buffer held: checking one may let other threads run (the
    // GIL released around the storage's lock), which may end other bindings meanwhile.
    std::vector<std::pair<py::object, HalideBinding *>> candidates;
    auto range = bindings().by_storage.equal_range(b.keep_alive().get());
    for (auto it = range.first; it != range.second; ++it) {
        HalideBinding *binding = it->second;
        const Buffer &v = binding->view;
        if (v.data() != b.data() || &v.dtype() != &b.dtype() || v.shape() != b.shape() || v.strides() != b.strides())
            continue;
        if (describes(*binding->external, b))
            candidates.emplace_back(py::reinterpret_borrow<py::object>(binding->object), binding);
    }
    for (auto &[h, held] : candidates) {  // each alive while h is held
        HalideBinding *binding = held;  // a variable of its own: C++17 lambdas cannot capture a structured binding
        bool bound = false;
        unlocked_if_may_copy(binding->view, [&] { bound = halide_struct_bound(binding->view, *binding->raw); });
        if (bound) return h;
    }
    return py::object();
}

py::object to_halide_object(py::handle self) {
    Buffer &b = buffer_of(self.ptr());
    if (std::shared_ptr<void> owner = halide_owner_of(b)) return kept_in(owner)->object;  // one state already
    const DType &t = b.dtype();
    if (dtype_by_halide(t.halide) != &t) throw no_halide_type(t);
    check_mins(kToHalide, b.shape(), b.mins());  // an hl.Buffer holds each axis's min and max in int32s
    if (py::object h = live_binding(b)) return h;  // bound already: one object, one state
    py::handle halide_buffer = halide_buffer_class(kToHalide);
    // Every refusal came first: the lease is the first change (a new hl.Buffer may be written on
    // the host before Halide marks anything).
    unlocked_if_may_copy(b, [&] { return b.lease_host(kToHalide, Access::write); });
    auto owned = std::make_unique<HalideBinding>(b.view());
    HalideBinding *binding = owned.get();
    py::capsule base(owned.release(), &end_binding);  // from here the capsule owns the binding
    std::vector<py::ssize_t> shape(b.shape().begin(), b.shape().end());
    std::vector<py::ssize_t> strides(b.strides().begin(), b.strides().end());
    py::object h;
    {
        // The hl.Buffer's Py_buffer is the only reference to this ndarray once it is made.
        py::array bytes(numpy_dtype(*carrier_of(t.itemsize)), std::move(shape), std::move(strides), b.data(), base);
        base = py::capsule();
        h = halide_buffer(bytes);  // reverse_axes: NumPy's last axis is Halide's dimension 0
    }
    halide_buffer_t *raw = raw_struct_of(h);
    raw->type = t.halide;
    bool moved = false;
    for (int64_t m : b.mins()) moved = moved || m != 0;
    if (moved) {
        py::list mins;
        for (size_t i = b.mins().size(); i-- > 0;) mins.append(b.mins()[i]);
        h.attr("set_min")(mins);
    }
    unlocked_if_may_copy(b, [&] { binding->raw = bind_halide_struct(binding->view, raw); });
    binding->external = raw;
    binding->object = h.ptr();
    bindings().by_storage.emplace(binding->view.keep_alive().get(), binding);
    bindings().by_struct[raw] = binding;
    return h;
}

}  // namespace

Buffer buffer_from_halide(py::handle obj) {
    if (!is_halide_buffer(obj))
        throw TypeError(std::string(kFromHalide) + "(): expected a halide.Buffer, not " + type_name(obj) +
                        "; for other memory use Buffer.from_host(obj)");
    halide_buffer_t *raw;
    try {
        raw = known_struct_of(obj);
    } catch (py::error_already_set &) {
        // Halide refuses an undefined buffer (halide.Buffer()): said in our words.
        if (!obj.attr("defined")().cast<bool>())
            throw ValueError(std::string(kFromHalide) + "(): the halide.Buffer is undefined (halide.Buffer() "
                             "holds no memory); pass one with memory, e.g. halide.Buffer(halide.Float(32), "
                             "[640, 480])");
        throw;
    }
    auto it = bindings().by_struct.find(raw);
    if (it != bindings().by_struct.end()) {
        // An hl.Buffer to_halide() made: a view of the storage it is bound to, with its mins.
        HalideBinding *binding = it->second;
        bool bound = false;
        unlocked_if_may_copy(binding->view, [&] { bound = halide_struct_bound(binding->view, *binding->raw); });
        if (bound) {
            std::vector<int64_t> mins(size_t(raw->dimensions));
            for (int i = 0; i < raw->dimensions; ++i) mins[size_t(raw->dimensions - 1 - i)] = raw->dim[i].min;
            return binding->view.with_mins(mins);
        }
    }
    return buffer_from_halide_struct(kFromHalide, raw, keep_object(obj));
}

void bind_halide(py::module_ &m) {
    auto cls = py::reinterpret_borrow<BufferClass>(m.attr("Buffer"));
    cls.def_static("from_halide", &buffer_from_halide, py::arg("buffer"),
                   "A Buffer over a halide.Buffer's host memory, without a copy, sharing one residency "
                   "state with it: its device copy (made by Halide's JIT) and dirty flags are the buffer's. "
                   "The halide.Buffer is kept alive.")
        .def("to_halide", &to_halide_object,
             "A halide.Buffer over this buffer's memory, without a copy, sharing one residency state with it "
             "while it lives: the halide.Buffer it came from (Buffer.from_halide) when the view covers it; "
             "else the halide.Buffer made for this view before, while it lives; else a new one, made as a "
             "host write lease (a newer device copy is downloaded; the buffer is marked host dirty). When it "
             "dies, a newer device copy comes home.");
    m.def("_opencl_load_library", [] { return ocl::api("opencl.load_library").path; },
          "Opens the OpenCL loader (RTLD_GLOBAL) from the candidates given; returns its path.");
}

}  // namespace hb
