// py_buffer.cpp: the Buffer Python type: construction, geometry, views, residency, raw access.
#include "python/py_buffer.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "core/constants.h"
#include "core/errors.h"
#include "python/py_buffer_data.h"
#include "python/py_buffer_protocol.h"
#include "python/py_cuda.h"
#include "python/py_dlpack.h"
#include "python/py_dlpack_exchange.h"
#include "python/py_dtype.h"
#include "python/py_from_host.h"
#include "python/py_glue.h"
#include "python/py_kept.h"
#include "python/py_module.h"
#include "python/py_numpy.h"
#include "python/py_processes.h"
#include "python/py_residency.h"

namespace hb {

bool as_int64(py::handle n, int64_t &out) {
    int overflow = 0;
    if (PyLong_CheckExact(n.ptr())) {  // the common case: read in place
        out = PyLong_AsLongLongAndOverflow(n.ptr(), &overflow);
        return !overflow;
    }
    py::object i = py::reinterpret_steal<py::object>(PyNumber_Index(n.ptr()));
    if (!i) throw py::error_already_set();
    out = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
    return !overflow;
}

bool as_uint64(py::handle n, uint64_t &out) {
    py::object i = py::reinterpret_steal<py::object>(PyNumber_Index(n.ptr()));
    if (!i) throw py::error_already_set();
    out = PyLong_AsUnsignedLongLong(i.ptr());
    if (!PyErr_Occurred()) return true;
    PyErr_Clear();  // negative, or more than 64 bits
    return false;
}

namespace {

/// as_int64(), or ValueError naming `what` and the fix.
int64_t to_int64(py::handle n, const char *entry, const char *what, const char *fix) {
    int64_t v;
    if (!as_int64(n, v))
        throw ValueError(std::string(entry) + "(): " + what + " " + py::str(n).cast<std::string>() +
                         " does not fit in 64 bits; " + fix);
    return v;
}

/// An int argument `name` of a method, or TypeError naming the entry and the argument; `fix`
/// says what to pass when the int does not fit in 64 bits.
int64_t int_arg(py::handle value, const char *entry, const char *name, const char *fix) {
    if (!is_integer(value))
        throw TypeError(std::string(entry) + "(): " + name + " must be an int, not " + type_name(value) +
                        "; pass an int, e.g. int(x)");
    return to_int64(value, entry, name, fix);
}

Axes to_shape(py::handle shape, const char *entry) {
    constexpr const char *fix = "use a smaller shape";
    if (is_integer(shape)) return {to_int64(shape, entry, "extent", fix)};
    if (is_array(shape))
        throw TypeError(std::string(entry) + "(): shape must be an int or a sequence of ints, not " +
                        type_name(shape) + "; Buffer(shape, dtype) allocates a new buffer: use "
                        "Buffer.from_host(obj) for a buffer of an array's data (copy=True to copy "
                        "it), or pass tuple(obj) if it holds a shape");
    if (!py::isinstance<py::sequence>(shape) || py::isinstance<py::str>(shape))
        throw TypeError(std::string(entry) + "(): shape must be an int or a sequence of ints, not " +
                        type_name(shape) + "; pass e.g. (480, 640)");
    Axes out;
    if (PyTuple_CheckExact(shape.ptr())) {  // the usual spelling: Python ints read in place
        Py_ssize_t n = PyTuple_GET_SIZE(shape.ptr());
        out.reserve(size_t(n));
        for (Py_ssize_t i = 0; i < n; ++i) {
            PyObject *item = PyTuple_GET_ITEM(shape.ptr(), i);
            int overflow = 0;
            long long v = PyLong_CheckExact(item) ? PyLong_AsLongLongAndOverflow(item, &overflow) : 0;
            if (!PyLong_CheckExact(item) || overflow) break;  // the general path below says what it is
            out.push_back(v);
        }
        if (out.size() == size_t(n)) return out;
        out.clear();
    }
    for (py::handle n : shape) {
        if (!is_integer(n))
            throw TypeError(std::string(entry) + "(): shape entries must be ints, not " + type_name(n) +
                            "; pass a shape such as (480, 640), or Buffer.from_host(values, "
                            "copy=True) for a buffer holding these values");
        out.push_back(to_int64(n, entry, "extent", fix));
    }
    return out;
}

/// The qualified name of obj's type, as Python code spells it: "numpy.ndarray", "bytes".
std::string qualified_type_name(py::handle obj) {
    py::handle type = reinterpret_cast<PyObject *>(Py_TYPE(obj.ptr()));
    py::object module = py::getattr(type, "__module__", py::none());
    py::object name = py::getattr(type, "__qualname__", py::none());
    if (!py::isinstance<py::str>(module) || !py::isinstance<py::str>(name)) return type_name(obj);
    std::string m = module.cast<std::string>();
    return m == "builtins" ? name.cast<std::string>() : m + "." + name.cast<std::string>();
}

/// Where the current data lives, for repr: the reader's view of the residency flags.
std::string residency_of(const Buffer::MemoryFacts &f) {
    if (!f.device_allocation) return "host";
    if (f.flags & kDeviceDirty) return "device (host copy stale)";
    if (f.flags & kHostDirty) return "host (device copy stale)";
    return "host and device";
}

/// Whose the host memory is, for repr: ours (shared with other processes or not), or the
/// Python object it was wrapped from.
std::string host_memory_of(const Buffer::MemoryFacts &f) {
    if (f.host_shared) return "shared";
    Kept *kept = f.host_owner ? kept_in(f.host_owner) : nullptr;
    py::handle origin = kept ? kept->origin() : py::handle();
    // Borrowed memory with no Python object behind it is another storage of ours (the host
    // copy of wrapped CUDA memory).
    return origin ? "wraps " + qualified_type_name(origin) : "owned";
}

/// Buffer(shape=..., dtype=..., mins=... when not all 0, data=<where the current data is>,
/// device=<its device>, memory=<whose the host memory is>, device_memory=<whose the device
/// memory is>, readonly), from one residency operation.
std::string repr_of(Buffer &b) {
    Buffer::MemoryFacts f = b.memory_facts();
    std::string out = "Buffer(shape=" + py::str(to_tuple(b.shape())).cast<std::string>() + ", dtype=" + b.dtype().name;
    if (std::any_of(b.mins().begin(), b.mins().end(), [](int64_t m) { return m != 0; }))
        out += ", mins=" + py::str(to_tuple(b.mins())).cast<std::string>();
    out += ", data=" + residency_of(f);
    if (f.device) out += ", device=" + f.device->description();
    out += ", memory=" + host_memory_of(f);
    if (f.device_memory) out += std::string(", device_memory=") + f.device_memory;
    if (b.readonly()) out += ", readonly";
    return out + ")";
}

/// IndexError for an index outside an axis, with the range that is inside.
IndexError index_out_of_range(const std::string &index, size_t axis, int64_t extent) {
    std::string where = "__getitem__(): index " + index + " is out of range for axis " + std::to_string(axis) +
                        " with extent " + std::to_string(extent);
    if (extent == 0) return IndexError(where + "; the axis is empty: only a slice such as 0:0 indexes it");
    return IndexError(where + "; use -" + std::to_string(extent) + " <= index < " + std::to_string(extent));
}

/// The items of b[key]: the tuple's, or the key alone (read in place: no tuple made for it).
struct KeyItems {
    PyObject *single;
    PyObject *const *first;
    size_t count;
    explicit KeyItems(py::handle key) : single(key.ptr()) {
        bool tuple = PyTuple_Check(single);
        first = tuple ? &PyTuple_GET_ITEM(single, 0) : &single;
        count = tuple ? size_t(PyTuple_GET_SIZE(single)) : 1;
    }
    KeyItems(const KeyItems &) = delete;
    KeyItems &operator=(const KeyItems &) = delete;
    PyObject *const *begin() const { return first; }
    PyObject *const *end() const { return first + count; }
};

/// The items of an index a Buffer takes: ints, slices of ints, '...'. Anything else (None,
/// masks, integer arrays, floats) is NumPy's, refused naming where to find it.
void check_index_items(const KeyItems &items) {
    for (py::handle item : items) {
        if (item.ptr() == Py_Ellipsis || (is_integer(item) && !PyBool_Check(item.ptr()))) continue;
        if (!PySlice_Check(item.ptr()))
            throw TypeError("__getitem__(): only ints, slices and '...' index a Buffer, not " + type_name(item) +
                            "; for NumPy's other indexes (None, boolean masks, integer arrays) index the "
                            "ndarray b.numpy() instead");
        auto *slice = reinterpret_cast<PySliceObject *>(item.ptr());  // its fields, read without a lookup
        py::handle step = slice->step;
        for (py::handle part : {py::handle(slice->start), py::handle(slice->stop), step}) {
            if (!part.is_none() && !is_integer(part))
                throw TypeError("__getitem__(): slice bounds and steps must be ints or None, not " +
                                type_name(part) + "; pass e.g. b[1:3] or b[::2]");
        }
        if (!step.is_none() && !py::bool_(py::reinterpret_borrow<py::object>(step)))
            throw ValueError("__getitem__(): slice step cannot be zero; use a nonzero step such as 1 or -1");
    }
}

/// Python index expression -> one AxisIndex per axis (positions, NumPy rules).
Index to_index(const Buffer &b, py::handle key) {
    KeyItems items(key);
    check_index_items(items);
    size_t n_ellipsis = 0, n_axes = 0;
    for (py::handle item : items) {
        if (item.ptr() == Py_Ellipsis) ++n_ellipsis;
        else ++n_axes;
    }
    if (n_ellipsis > 1)
        throw IndexError("__getitem__(): an index can only have a single ellipsis ('...'); remove the others");
    if (n_axes > 0 && b.ndim() == 0)
        throw IndexError("__getitem__(): a 0-d buffer has no axes to index; b[()] is the buffer itself, "
                         "b.numpy()[()] its value");
    if (n_axes > size_t(b.ndim()))
        throw IndexError("__getitem__(): too many indices: " + std::to_string(n_axes) + " for " +
                         std::to_string(b.ndim()) + " axes; use at most one int or slice per axis");
    Index out;  // at most one per axis: n_axes <= ndim, and '...' fills the rest
    size_t axis = 0;
    auto full = [&](size_t a) { return AxisIndex{true, 0, 1, b.shape()[a]}; };
    for (py::handle item : items) {
        if (item.ptr() == Py_Ellipsis) {
            for (size_t k = 0; k < b.ndim() - n_axes; ++k, ++axis) out.push_back(full(axis));
        } else if (PySlice_Check(item.ptr())) {
            Py_ssize_t start, stop, step;
            if (PySlice_Unpack(item.ptr(), &start, &stop, &step) < 0) throw py::error_already_set();
            Py_ssize_t len = PySlice_AdjustIndices(Py_ssize_t(b.shape()[axis]), &start, &stop, step);
            out.push_back(AxisIndex{true, start, step, len});
            ++axis;
        } else {  // an int (check_index_items)
            int64_t i;
            bool fits = as_int64(item, i);
            int64_t extent = b.shape()[axis];
            if (!fits) throw index_out_of_range(py::str(item).cast<std::string>(), axis, extent);
            if (i < -extent || i >= extent) throw index_out_of_range(std::to_string(i), axis, extent);
            out.push_back(AxisIndex{false, i < 0 ? i + extent : i, 0, 0});
            ++axis;
        }
    }
    while (axis < size_t(b.ndim())) out.push_back(full(axis++));
    return out;
}

/// A sequence of axes of an n-d buffer as ints, for a permutation check (permutation()) to
/// judge: an int out of range stays out of range. TypeError for anything but ints.
std::vector<int> to_axis_list(py::handle given, int n, const char *entry, const char *what, const char *example) {
    std::vector<int> axes;
    for (py::handle a : given) {
        if (!is_integer(a))
            throw TypeError(std::string(entry) + "(): " + what + " must be ints, not " + type_name(a) + "; pass e.g. " +
                            example);
        int64_t axis = to_int64(a, entry, "axis", "pass each axis exactly once");
        axes.push_back(axis < -n - 1 || axis > n ? n : int(axis));
    }
    return axes;
}

/// A single argument that is a sequence (not a str, nor an int-like array): the items of
/// b.transposed((1, 0)), b.contains(b.mins).
bool is_sequence_argument(py::handle arg) {
    return !is_integer(arg) && py::isinstance<py::sequence>(arg) && !py::isinstance<py::str>(arg);
}

std::vector<int> to_axes(const Buffer &b, py::args args) {
    if (args.size() == 0) {  // no axes: reverse them, like numpy.transpose
        std::vector<int> axes;
        for (int i = b.ndim(); i-- > 0;) axes.push_back(i);
        return axes;
    }
    py::handle given = args.size() == 1 && is_sequence_argument(args[0]) ? args[0] : py::handle(args);
    return to_axis_list(given, b.ndim(), "transposed", "axes", "b.transposed(1, 0)");
}

/// Buffer(order=): 'C', 'F', or the axes from outermost to innermost in memory.
std::vector<int> to_order(py::handle order, size_t ndim) {
    std::vector<int> axes(ndim);
    std::iota(axes.begin(), axes.end(), 0);
    if (PyUnicode_Check(order.ptr())) {
        Py_ssize_t length;
        const char *o = PyUnicode_AsUTF8AndSize(order.ptr(), &length);
        if (!o) throw py::error_already_set();
        if (length == 1 && o[0] == 'C') return axes;
        if (length == 1 && o[0] == 'F') return std::vector<int>(axes.rbegin(), axes.rend());
        throw ValueError("Buffer(): order " + py::repr(order).cast<std::string>() + " is not 'C', 'F' or a "
                         "sequence of axes; pass 'C' (the last axis innermost in memory), 'F' (the first "
                         "axis innermost), or the axes from outermost to innermost in memory, e.g. (1, 2, 0)");
    }
    if (!is_sequence_argument(order))
        throw TypeError("Buffer(): order must be 'C', 'F' or a sequence of axes, not " + type_name(order) +
                        "; pass e.g. order='F' or order=(1, 2, 0)");
    return to_axis_list(order, int(ndim), "Buffer", "the axes of order", "order=(1, 2, 0)");
}

/// The ints a method takes one per axis: given separately (b.contains(4, 7)), or as one
/// sequence passed alone (b.contains(b.mins)). TypeError naming the entry for anything else;
/// the count is the core's to check.
py::list per_axis_ints(py::handle args, const char *entry, const char *what, const char *example) {
    py::tuple items = py::reinterpret_borrow<py::tuple>(args);
    py::handle given = items.size() == 1 && is_sequence_argument(items[0]) ? items[0] : args;
    py::list out;
    for (py::handle v : given) {
        if (!is_integer(v))
            throw TypeError(std::string(entry) + "(): " + what + " must be ints, not " + type_name(v) +
                            "; pass one int per axis, as in " + example);
        out.append(v);
    }
    return out;
}

/// per_axis_ints() as int64s; one that does not fit is a ValueError naming `what` and the fix.
std::vector<int64_t> per_axis_int64(py::handle args, const char *entry, const char *what, const char *example,
                                    const char *fix) {
    std::vector<int64_t> out;
    for (py::handle v : per_axis_ints(args, entry, what, example)) out.push_back(to_int64(v, entry, what, fix));
    return out;
}

/// A coordinate as an int64: one beyond 64 bits becomes the nearest int64, which lies outside
/// every buffer just as it does.
int64_t saturated(py::handle n) {
    int64_t v;
    if (as_int64(n, v)) return v;
    py::object zero = py::int_(0);
    return n < zero ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max();
}

/// Buffer methods reach the core object through buffer_of(), which checks the type of self and
/// that it was initialised (Buffer.__new__ alone leaves it empty).
template <typename R, typename... A>
auto method(R (Buffer::*f)(A...)) {
    return [f](py::handle self, A... a) -> R { return (buffer_of(self.ptr()).*f)(a...); };
}
template <typename R, typename... A>
auto method(R (Buffer::*f)(A...) const) {
    return [f](py::handle self, A... a) -> R { return (buffer_of(self.ptr()).*f)(a...); };
}
template <typename F>
auto method(F f) {
    return [f](py::handle self) { return f(buffer_of(self.ptr())); };
}

PyTypeObject *buffer_type = nullptr;

/// What the garbage collector sees of a buffer: the Python objects its storage keeps (the host
/// memory's owner, a wrapped device handle's owner), when the buffer is their only holder (see
/// py_kept.cpp).
int traverse_buffer(const BufferHolder &b, visitproc visit, void *arg) {
    return b->visit_sole_owners([&](const std::shared_ptr<void> &owner) { return traverse_owner(owner, visit, arg); });
}

}  // namespace

bool is_array(py::handle obj) {
    PyObject *o = obj.ptr();
    // Python's own scalars and containers are never arrays: answered without an attribute lookup
    // (a failed hasattr() formats and drops an AttributeError), as they are on every hot path.
    if (PyLong_Check(o) || PyTuple_CheckExact(o) || PyList_CheckExact(o) || PyUnicode_CheckExact(o) ||
        PySlice_Check(o) || PyFloat_CheckExact(o) || o == Py_None || o == Py_Ellipsis)
        return false;
    return PyObject_CheckBuffer(o) || py::hasattr(obj, "__array__") || py::hasattr(obj, "__dlpack__");
}

bool is_integer(py::handle obj) {
    if (PyLong_CheckExact(obj.ptr())) return true;
    if (!PyIndex_Check(obj.ptr())) return false;
    if (!is_array(obj)) return true;
    PyObject *i = PyNumber_Index(obj.ptr());
    if (i) {
        Py_DECREF(i);
        return true;
    }
    if (!PyErr_ExceptionMatches(PyExc_TypeError)) throw py::error_already_set();
    PyErr_Clear();
    return false;
}

std::string type_name(py::handle obj) { return Py_TYPE(obj.ptr())->tp_name; }

namespace {

constexpr const char *kDefaultDType = "float64";

/// Buffer(shape, dtype, order=, shared=): what both ways into the constructor make.
Buffer new_buffer(py::handle shape, py::handle dtype, py::handle order, bool shared) {
    Axes s = to_shape(shape, "Buffer");
    const DType &t = to_dtype(dtype, "Buffer");
    if (!order && !shared) return Buffer::allocate("Buffer", std::move(s), t);  // 'C', not given
    std::vector<int> axes(s.size());
    if (order) axes = to_order(order, s.size());
    else std::iota(axes.begin(), axes.end(), 0);
    if (shared) return Buffer::allocate_shared("Buffer", s, t, axes);
    return Buffer::allocate("Buffer", std::move(s), t, axes);
}

/// Where a Buffer object keeps its Buffer: after pybind11's instance (see BufferHolder), at an
/// offset the type's setup fixes (make_room_for_buffer()); a Python subclass's instances keep
/// it at the same place, their own parts following the base type's.
Py_ssize_t buffer_offset = 0;

/// The Buffer type's setup (before PyType_Ready): room for the Buffer after pybind11's instance.
void make_room_for_buffer(PyHeapTypeObject *heap_type) {
    PyTypeObject *type = &heap_type->ht_type;
    constexpr Py_ssize_t align = alignof(Buffer);
    buffer_offset = (type->tp_basicsize + align - 1) / align * align;
    type->tp_basicsize = buffer_offset + Py_ssize_t(sizeof(Buffer));
}

/// Puts `b` into `v_h`'s instance, a Buffer object with no C++ object yet: the Buffer moved into
/// the room after pybind11's instance, and its holder, as pybind11's init_instance installs a
/// constructor's result (the value, then its holder).
void install(py::detail::value_and_holder &v_h, Buffer &&b) {
    auto *value = new (reinterpret_cast<char *>(v_h.inst) + buffer_offset) Buffer(std::move(b));
    v_h.value_ptr() = value;
    new (std::addressof(v_h.holder<BufferHolder>())) BufferHolder(value);
    v_h.set_holder_constructed();
}

/// The same for `self`, a new Buffer object, except for the entry in pybind11's registry of
/// instances: that registry finds the Python object of a C++ address being cast to Python, and
/// no Buffer address is ever cast (every Buffer a binding returns is a new object, see the
/// type_caster in py_buffer.h). An instance without the entry is freed as any other (pybind11
/// deregisters only registered ones); the entry would cost a hash-table node made and freed
/// with every buffer.
void install(PyObject *self, Buffer &&b) {
    static py::detail::type_info *const info = py::detail::get_type_info(typeid(Buffer));
    auto *inst = reinterpret_cast<py::detail::instance *>(self);
    py::detail::value_and_holder v_h = inst->get_value_and_holder(info);
    install(v_h, std::move(b));
    inst->owned = true;
}

/// b[key] as the type's mp_subscript: the same call as __getitem__'s (kept for introspection),
/// reached without looking the method up and dispatching it through pybind11.
PyObject *subscript_buffer(PyObject *self, PyObject *key) {
    PyObject *out = nullptr;
    c_call([&] {
        Buffer &b = buffer_of(self);
        out = new_buffer_object(b.indexed(to_index(b, key)));
        return 0;
    });
    return out;
}

/// Buffer(shape, dtype="float64", *, order="C", shared=False) as the type's tp_init. A call of
/// the type reaches it straight from type_call: pybind11's __init__ (kept for introspection and
/// explicit calls, making the same buffer through new_buffer()) would first be looked up as a
/// method, then dispatched through its overload machinery, costing as much as the buffer
/// itself. The C++ object is installed as pybind11 installs a constructor's.
int init_buffer(PyObject *self, PyObject *args, PyObject *kwargs) {
    return c_call([&] {
        static const char *keywords[] = {"shape", "dtype", "order", "shared", nullptr};
        PyObject *shape = nullptr, *dtype = nullptr, *order = nullptr, *shared = nullptr;
        Py_ssize_t given = PyTuple_GET_SIZE(args);
        if (!kwargs && (given == 1 || given == 2)) {  // Buffer(shape[, dtype]): nothing to match by name
            shape = PyTuple_GET_ITEM(args, 0);
            if (given == 2) dtype = PyTuple_GET_ITEM(args, 1);
        } else if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|O$OO:Buffer", const_cast<char **>(keywords),
                                                &shape, &dtype, &order, &shared)) {
            return -1;
        }
        bool share = false;  // pybind11's bool: None, a bool, or anything with __bool__ (numpy.bool_)
        if (shared && shared != Py_None) {
            PyNumberMethods *number = Py_TYPE(shared)->tp_as_number;
            if (!PyBool_Check(shared) && !(number && number->nb_bool))
                throw TypeError("Buffer(): shared must be a bool, not " + type_name(shared) +
                                "; pass shared=True for shared memory");
            int truth = PyObject_IsTrue(shared);
            if (truth < 0) throw py::error_already_set();
            share = truth;
        }
        if (instance_parts(self).holder_constructed())
            throw TypeError("Buffer(): this buffer is made already; make a new one with halide_buffer.Buffer(shape, dtype)");
        py::object default_dtype;
        if (!dtype) {
            default_dtype = py::str(kDefaultDType);
            dtype = default_dtype.ptr();
        }
        install(self, new_buffer(shape, dtype, order, share));
        return 0;
    });
}

}  // namespace

bool is_buffer(py::handle obj) { return PyObject_TypeCheck(obj.ptr(), buffer_type); }

namespace {

/// The capsule's destructor: lets go of the Buffer object its context holds.
void release_capsule_owner(PyObject *capsule) {
    Py_XDECREF(static_cast<PyObject *>(PyCapsule_GetContext(capsule)));
}

/// Buffer._get_halide_buffer_t_capsule(): raw()'s struct in Halide's typed capsule, which holds a
/// reference to the Buffer object (whose view the struct describes) for as long as it lives.
py::object typed_capsule(py::handle self) {
    halide_buffer_t *raw = buffer_of(self.ptr()).raw("_get_halide_buffer_t_capsule");
    py::object capsule = py::reinterpret_steal<py::object>(
        PyCapsule_New(raw, kHalideBufferCapsule, &release_capsule_owner));
    if (!capsule) throw py::error_already_set();
    if (PyCapsule_SetContext(capsule.ptr(), self.inc_ref().ptr()) != 0) {
        self.dec_ref();
        throw py::error_already_set();
    }
    return capsule;
}

}  // namespace

Buffer *buffer_in_typed_capsule(PyObject *capsule) {
    if (PyCapsule_GetDestructor(capsule) != &release_capsule_owner) return nullptr;
    return &buffer_of(static_cast<PyObject *>(PyCapsule_GetContext(capsule)));
}

PyObject *new_buffer_object(Buffer &&b) {
    py::object self = py::reinterpret_steal<py::object>(py::detail::make_new_instance(buffer_type));
    if (!self) throw py::error_already_set();
    install(self.ptr(), std::move(b));
    return self.release().ptr();
}

Buffer &buffer_of(PyObject *self) {
    if (!PyObject_TypeCheck(self, buffer_type))
        throw TypeError(std::string("Buffer: expected a halide_buffer.Buffer, not ") +
                        Py_TYPE(self)->tp_name + "; call the method on a Buffer");
    Buffer *b = instance_parts(self).value_ptr<Buffer>();
    if (!b) throw TypeError("Buffer: the object was never initialised; construct it with "
                            "halide_buffer.Buffer(shape, dtype)");
    return *b;
}

void bind_buffer(py::module_ &m) {
    BufferClass cls(m, "Buffer", py::buffer_protocol(), py::custom_type_setup([](PyHeapTypeObject *type) {
        make_room_for_buffer(type);
        take_part_in_gc(type, traverse_instance<BufferHolder, traverse_buffer>);
    }), R"doc(
A Halide runtime buffer: host memory (owned or borrowed), a halide_buffer_t describing it in
Halide's terms, and the residency state of its data shared by every view.

Buffer(shape, dtype="float64") allocates owned, zero-filled, 128-byte aligned host memory;
order= chooses the memory layout ('C', 'F' or the axes outermost first), shared=True puts it
in shared memory that multiprocessing hands to child processes as it is.
)doc");
    buffer_type = reinterpret_cast<PyTypeObject *>(cls.ptr());
    install_buffer_protocol(cls);

    // A constructor as py::init defines one, but with the Buffer installed in the object, where
    // py::init would allocate it on the heap.
    cls.def("__init__", [](py::detail::value_and_holder &v_h, py::handle shape, py::handle dtype, py::handle order,
                           bool shared) { install(v_h, new_buffer(shape, dtype, order, shared)); },
            py::detail::is_new_style_constructor(), py::arg("shape"), py::arg("dtype") = kDefaultDType,
            py::kw_only(), py::arg("order") = "C", py::arg("shared") = false)
        .def_static("from_host", &buffer_from_host, py::arg("obj"), py::arg("copy") = false,
                    py::kw_only(), py::arg("external_writes") = true,
                    "Wrap (copy=False) or copy anything with the buffer protocol or an ndarray of "
                    "any dtype, ml_dtypes included. copy=True also copies what numpy.asarray() reads "
                    "(lists, nested sequences, numbers), in the dtype NumPy picks. external_writes=False "
                    "promises that wrapped writable memory changes only through this buffer.")
        .def_static("make_with_shape_of", [](py::handle other, py::handle dtype) {
            constexpr const char *entry = "Buffer.make_with_shape_of";
            if (!PyObject_TypeCheck(other.ptr(), buffer_type))
                throw TypeError(std::string(entry) + "(): other must be a halide_buffer.Buffer, not " +
                                type_name(other) + "; pass Buffer.from_host(a) for an array (a view: "
                                "nothing is copied)");
            Buffer &o = buffer_of(other.ptr());
            return Buffer::allocate_like(entry, o, dtype.is_none() ? o.dtype() : to_dtype(dtype, entry));
        }, py::arg("other"), py::arg("dtype") = py::none(),
           "A new owned, zero-filled buffer with other's shape, mins and memory order (the order of "
           "its strides, packed densely), and other's dtype unless dtype is given (Halide's "
           "make_with_shape_of).")
        .def_static("make_scalar", [](py::handle dtype) {
            return Buffer::allocate("Buffer.make_scalar", {}, to_dtype(dtype, "Buffer.make_scalar"));
        }, py::arg("dtype") = "float64", "A new owned 0-d buffer: one zero element (Halide's make_scalar).")
        .def_static("make_interleaved", [](py::handle shape, py::handle dtype) {
            constexpr const char *entry = "Buffer.make_interleaved";
            return Buffer::allocate_interleaved(entry, to_shape(shape, entry), to_dtype(dtype, entry));
        }, py::arg("shape"), py::arg("dtype") = "float64",
           "A new owned, zero-filled buffer in Halide's interleaved layout: shape lists the channels "
           "first, (channels, height, width), and the channels are innermost in memory, so "
           "b.transposed(1, 2, 0) is a C-contiguous (height, width, channels) array.")
        // --- geometry
        .def_property_readonly("shape", method([](Buffer &b) { return to_tuple(b.shape()); }))
        .def_property_readonly("strides", method([](Buffer &b) { return to_tuple(b.strides()); }))
        .def_property_readonly("mins", method([](Buffer &b) { return to_tuple(b.mins()); }),
                               "Halide coordinate of the first element of each axis")
        .def_property_readonly("ndim", method(&Buffer::ndim))
        .def_property_readonly("size", method(&Buffer::size))
        .def_property_readonly("nbytes", method(&Buffer::nbytes))
        .def_property_readonly("itemsize", method([](Buffer &b) { return b.dtype().itemsize; }))
        .def_property_readonly("dtype", method([](Buffer &b) { return &b.dtype(); }),
                               py::return_value_policy::reference)
        .def_property_readonly("readonly", method(&Buffer::readonly))
        .def_property_readonly("external_writes", method(&Buffer::external_writes),
                               "wrapped writable memory whose owner may write it at any time")
        .def_property_readonly("is_c_contiguous", method(&Buffer::is_c_contiguous))
        .def("contains", [](py::handle self, py::args coords) {
            std::vector<int64_t> c;
            for (py::handle v : per_axis_ints(coords, "contains", "coordinates", "b.contains(*b.mins)"))
                c.push_back(saturated(v));
            return buffer_of(self.ptr()).contains(c);
        }, "Whether these Halide coordinates, one per axis (or one sequence of them), lie inside "
           "[min, min + extent) on every axis.")
        .def("set_min", [](py::handle self, py::args mins) {
            Buffer &b = buffer_of(self.ptr());
            b.set_min(per_axis_int64(mins, "set_min", "mins", "b.set_min(*b.mins)",
                                     "pass mins inside Halide's int32 coordinates [-2**31, 2**31 - 1]"));
        }, "Sets this buffer's mins, one per axis (or one sequence of them), in place: the elements "
           "stay, their coordinates change. Views made before keep theirs; translated() makes a view "
           "instead.")
        .def("__len__", method([](Buffer &b) {
            if (b.ndim() == 0) throw TypeError("len(): a 0-d buffer has no length; use b.size");
            return b.shape()[0];
        }))
        .def("shares_storage_with", [](py::handle self, py::handle other) {
            Buffer &b = buffer_of(self.ptr());
            if (!PyObject_TypeCheck(other.ptr(), buffer_type))
                throw TypeError("shares_storage_with(): other must be a halide_buffer.Buffer, not " + type_name(other) +
                                "; for an array use numpy.shares_memory(b.numpy(), other)");
            return b.shares_storage_with(buffer_of(other.ptr()));
        }, py::arg("other"))
        // --- views
        .def("cropped", [](py::handle self, py::handle axis, py::handle min, py::handle extent) {
            constexpr const char *fix = "crop within the mins and extents shown by b.mins and b.shape";
            Buffer &b = buffer_of(self.ptr());
            return b.cropped(int_arg(axis, "cropped", "axis", "pass an axis of b"), int_arg(min, "cropped", "min", fix),
                             int_arg(extent, "cropped", "extent", fix));
        }, py::arg("axis"), py::arg("min"), py::arg("extent"))
        .def("sliced", [](py::handle self, py::handle axis, py::handle pos) {
            Buffer &b = buffer_of(self.ptr());
            return b.sliced(int_arg(axis, "sliced", "axis", "pass an axis of b"),
                            int_arg(pos, "sliced", "pos", "slice at a coordinate shown by b.mins and b.shape"));
        }, py::arg("axis"), py::arg("pos"))
        .def("translated", [](py::handle self, py::handle axis, py::handle delta) {
            Buffer &b = buffer_of(self.ptr());
            constexpr const char *fix = "use a smaller delta";
            if (!delta.is_none())
                return b.translated(int_arg(axis, "translated", "axis", "pass an axis of b"),
                                    int_arg(delta, "translated", "delta", fix));
            if (!is_sequence_argument(axis))
                throw TypeError("translated(): a lone argument must be a sequence of deltas, one per axis, not " +
                                type_name(axis) + "; pass translated(axis, delta) to move one axis");
            return b.translated(per_axis_int64(py::make_tuple(axis), "translated", "deltas",
                                               "b.translated((1, 0))", fix));
        }, py::arg("axis"), py::arg("delta") = py::none(),
           "A view whose mins are moved: translated(axis, delta) adds delta to mins[axis], "
           "translated(deltas) adds one delta per axis. No data moves.")
        .def("embedded", [](py::handle self, py::handle axis, py::handle pos) {
            Buffer &b = buffer_of(self.ptr());
            return b.embedded(int_arg(axis, "embedded", "axis", "pass an axis of the result"),
                              int_arg(pos, "embedded", "pos", "pass a pos inside Halide's int32 coordinates"));
        }, py::arg("axis"), py::arg("pos") = 0,
           "A view with a new axis of extent 1 at axis (numpy.expand_dims' numbering) whose min is pos.")
        .def("add_dimension", method(&Buffer::add_dimension),
             "A view with a new outermost axis (axis 0; Halide's new last dimension) of extent 1 and min 0.")
        .def("transposed", [](py::handle self, py::args axes) {
            Buffer &b = buffer_of(self.ptr());
            return b.transposed(to_axes(b, axes));
        })
        .def("__getitem__", [](py::handle self, py::handle key) {
            Buffer &b = buffer_of(self.ptr());
            return b.indexed(to_index(b, key));
        })
        .def("bits", method(&Buffer::bits))
        .def("copy", method([](Buffer &b) { return unlocked_if_may_copy(b, [&] { return b.current_host_copy("copy"); }); }), "A C-contiguous host copy in a new storage (the device copy is downloaded first if newer).")
        // --- Halide
        .def("_get_raw_halide_buffer_t", method([](Buffer &b) {
            return reinterpret_cast<uintptr_t>(b.raw("_get_raw_halide_buffer_t"));
        }), "Address of the halide_buffer_t describing this view (Halide's extension protocol).")
        .def("_get_halide_buffer_t_capsule", &typed_capsule,
             "Halide's typed capsule protocol: a PyCapsule named 'halide.halide_buffer_t.v21' holding the "
             "halide_buffer_t* of this view (the struct _get_raw_halide_buffer_t() gives, under the same "
             "rules); the capsule keeps the buffer alive.")
        .def("__repr__", method(&repr_of));
    bind_numpy(cls);
    bind_buffer_data(cls);
    bind_residency(cls);
    bind_dlpack(cls, m);
    bind_dlpack_exchange(cls);
    bind_cuda(m, cls);
    bind_processes(cls, m);  // last: it also gives the other classes their pickling rule
    // After every def: setting __init__ on the type resets tp_init to Python's slot wrapper.
    buffer_type->tp_init = init_buffer;
    reinterpret_cast<PyHeapTypeObject *>(buffer_type)->as_mapping.mp_subscript = subscript_buffer;
}

}  // namespace hb
