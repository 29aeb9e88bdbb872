// py_glue.h: what the pybind11 binding files share.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <exception>
#include <memory>
#include <optional>
#include <string>

#include "backends/device_cuda.h"
#include "core/dtype.h"
#include "interop/dlpack.h"
#include "storage/buffer.h"

namespace hb {
namespace py = pybind11;

/// Runs a residency operation `op` on `b` (a lease: b.lease_host(), b.current_host_copy(); a
/// binding of to_halide()) and returns what it returns. One on a storage that may hold a
/// device copy may move data: it runs without the GIL, so other Python threads go on during
/// the copy; one that cannot (never on a device) keeps it: exports of small buffers are hot
/// paths.
template <typename F>
auto without_gil_if_may_copy(const Buffer &b, F &&op) -> decltype(op()) {
    if (!b.may_hold_device_copy()) return op();
    py::gil_scoped_release nogil;
    return op();
}

/// A tuple of Python ints: a shape, strides, mins (an Axes or a std::vector).
template <typename Values>
py::tuple to_tuple(const Values &v) {
    py::tuple t(v.size());
    for (size_t i = 0; i < v.size(); ++i) t[i] = py::int_(v[i]);
    return t;
}

// py_module.cpp
/// Sets the Python exception for a C++ exception of the core; false if it is not one of ours.
bool set_python_error(std::exception_ptr error);

/// Runs `f` (returning 0 or -1) for a C caller (a type slot, a DLPack table): a C++ exception
/// becomes the Python exception it maps to, and -1.
template <typename F>
int c_call(F &&f) noexcept {
    try {
        return f();
    } catch (py::error_already_set &e) {
        e.restore();
    } catch (const py::builtin_exception &e) {
        e.set_error();  // pybind11's own (a failed cast): the Python exception it stands for
    } catch (...) {
        if (!set_python_error(std::current_exception()))
            PyErr_SetString(PyExc_RuntimeError, "halide_buffer: unexpected internal error");
    }
    return -1;
}

// py_embedder.cpp
/// Installs the binding as the core's embedder (device/embedder.h), and its tests' hook.
void bind_embedder(py::module_ &m);

// py_dtype.cpp
void bind_dtype(py::module_ &m);
/// Any dtype spelling a user may pass (name, NumPy or ml_dtypes dtype, torch/jax dtype).
const DType &to_dtype(py::handle obj, const char *entry);
/// A NumPy dtype of big-endian elements ('>', not NumPy's isnative): this library reads
/// little-endian ones only.
inline bool big_endian(PyObject *descr) { return py::detail::array_descriptor_proxy(descr)->byteorder == '>'; }
/// The NumPy dtype object of a row (ml_dtypes for exotic rows), created once.
py::dtype numpy_dtype(const DType &t);

// py_device.cpp
void bind_device(py::module_ &m);

// py_buffer.cpp
/// How a Python Buffer object holds its Buffer: inside the object itself, after pybind11's
/// instance (the type's basic size makes room for it), so a buffer or view is one Python object
/// and no heap block of its own. The holder only ends the Buffer's life (its destructor, in
/// place): the memory is the object's, freed with it.
struct DestroyInPlace {
    void operator()(Buffer *b) const { b->~Buffer(); }
};
using BufferHolder = std::unique_ptr<Buffer, DestroyInPlace>;
using BufferClass = py::class_<Buffer, BufferHolder>;
void bind_buffer(py::module_ &m);
/// An array of values (an ndarray, a tensor, anything exporting memory), as opposed to a plain
/// integer or sequence: what a newcomer passes where a shape, an index or a handle goes.
bool is_array(py::handle obj);
/// True when `obj` is an integer: it has __index__ and, for an array, __index__ takes it (NumPy
/// and PyTorch give their arrays __index__, which refuses all but a single integer). Another
/// object's __index__ is its own: what it raises is passed on where it is called.
bool is_integer(py::handle obj);
/// A Python integer (anything with __index__) as int64_t / uint64_t; false when it does not
/// fit (for uint64_t: also when negative). What __index__ raises is passed on.
bool as_int64(py::handle n, int64_t &out);
bool as_uint64(py::handle n, uint64_t &out);
/// obj.<name>, or a null object when it has none (no AttributeError made: a miss costs a lookup
/// alone); any other exception the lookup raises is passed on.
inline py::object optional_attr(py::handle obj, PyObject *name) {
    PyObject *value = nullptr;
#if PY_VERSION_HEX >= 0x030D0000
    int found = PyObject_GetOptionalAttr(obj.ptr(), name, &value);
#else
    int found = _PyObject_LookupAttr(obj.ptr(), name, &value);
#endif
    if (found < 0) throw py::error_already_set();
    return py::reinterpret_steal<py::object>(value);
}
/// The name of obj's type, for messages ("numpy.ndarray").
std::string type_name(py::handle obj);
/// Whether `obj` is a halide_buffer.Buffer (or a subclass), without pybind11's type lookup.
bool is_buffer(py::handle obj);
/// The core Buffer inside a Python Buffer object (no type check: callers know the type).
Buffer &buffer_of(PyObject *self);
/// The Buffer whose _get_halide_buffer_t_capsule() made `capsule` (one of that name), or null
/// for a capsule someone else made.
Buffer *buffer_in_typed_capsule(PyObject *capsule);
/// A new Python Buffer object holding `b`: what every Buffer a binding returns becomes (see the
/// type_caster below).
PyObject *new_buffer_object(Buffer &&b);

// py_residency.cpp
void bind_residency(BufferClass &cls);
/// The device a call names: a Device (required), or None: where the buffer is, else the default.
DeviceChoice device_arg(py::handle device, const char *entry);
/// halide_buffer.transfers(): the process-wide counts.
void bind_transfer_totals(py::module_ &m);

// py_kept.cpp
/// A Python object held from C++: a storage's owner (what from_host() or from_dlpack() wrapped),
/// a wrapped device handle's owner, a device's stream object. Every such reference is one of
/// these, in an owner made by keep(), so that the garbage collector can be shown it
/// (traverse_owner()). Deleted with the GIL held, from any thread.
struct Kept {
    explicit Kept(py::object object) : object(std::move(object)) {}
    Kept(const Kept &) = delete;
    Kept &operator=(const Kept &) = delete;
    virtual ~Kept() = default;
    /// Visits each Python reference held (tp_traverse's contract): `object`, and any other a
    /// subclass holds.
    virtual int traverse(visitproc visit, void *arg) const {
        Py_VISIT(object.ptr());
        return 0;
    }
    /// The object whose memory or handle is kept, for repr: `object`, unless a subclass holds
    /// it otherwise.
    virtual py::handle origin() const { return object; }
    py::object object;  ///< the object kept (what device_detach_native() hands back); may be null
};
/// An owner holding `kept`, deleted (with the GIL) when the last copy goes.
std::shared_ptr<void> keep(std::unique_ptr<Kept> kept);
/// An owner holding `obj` (null for None). Buffer::keep_alive() is another thing: the storage
/// itself as an owner, for C++ holders (an export), with no Python object in it.
std::shared_ptr<void> keep_object(py::handle obj);
/// The Kept in an owner made by keep(); nullptr for none, or for an owner of the core's own
/// (another storage, memory lent out).
Kept *kept_in(const std::shared_ptr<void> &owner);
/// tp_traverse's share of an owner the caller holds: visits the objects it keeps, when the
/// reference is the caller's alone (no other copy of the owner exists).
int traverse_owner(const std::shared_ptr<void> &owner, visitproc visit, void *arg);
/// For py::custom_type_setup: instances of the type take part in cyclic garbage collection,
/// `traverse` visiting what they keep (see traverse_instance()).
void take_part_in_gc(PyHeapTypeObject *type, traverseproc traverse);
/// The C++ object and holder inside `self`, an instance of a py::class_ type with one C++ type
/// (pybind11's value_and_holder: value_ptr<T>(), holder_constructed(), holder<H>()).
///
/// The one place that names pybind11's private py::detail::instance. It is needed where a raw
/// PyObject * whose type is already known reaches our own code: the slots we install
/// (Pipeline's vectorcall, tp_traverse, the buffer protocol), own_buffer() and buffer_of(). pybind11's public way, py::cast, would
/// look the type up and check it again on every call, and a tp_traverse only reads pointers.
/// It assumes the instance layout and get_value_and_holder() of pybind11 2.12 (pyproject's
/// lower bound) through 3.1 (what it is built and tested with).
inline py::detail::value_and_holder instance_parts(PyObject *self) {
    return reinterpret_cast<py::detail::instance *>(self)->get_value_and_holder();
}
/// The Buffer of a Buffer slot's or method's own `self`, whose type CPython checked already (a
/// slot of the type, a method descriptor): read without a second check; buffer_of() for a
/// Buffer never initialised, which raises its error.
inline Buffer &own_buffer(PyObject *self) {
    Buffer *b = instance_parts(self).value_ptr<Buffer>();
    return b ? *b : buffer_of(self);
}
/// A tp_traverse for a pybind11 type holding its C++ object in a `Holder`: the instance's type,
/// then, once the holder is constructed, what visit_holder(holder, visit, arg) visits.
template <typename Holder, int (*visit_holder)(const Holder &, visitproc, void *)>
int traverse_instance(PyObject *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));  // a heap type: each instance holds a reference to it
    py::detail::value_and_holder v_h = instance_parts(self);
    if (!v_h.holder_constructed()) return 0;  // e.g. Buffer.__new__ alone: nothing held
    return visit_holder(v_h.holder<Holder>(), visit, arg);
}

// py_dlpack.cpp
void bind_dlpack(BufferClass &cls, py::module_ &m);
/// copy= of the DLPack entry points: -1 (None), 0 (False) or 1 (True); TypeError otherwise.
int tri_state(py::handle value, const char *entry);
/// What keeps an imported tensor alive (exactly one of `versioned`, `legacy`): runs its deleter
/// once, with the GIL, when the last buffer over it dies.
std::shared_ptr<void> import_owner(DLManagedTensorVersioned *versioned, DLManagedTensor *legacy,
                                   py::object producer);
/// A Buffer over a DLPack producer's tensor (not a Buffer, not a raw capsule): its C exchange
/// API where its type has one, else __dlpack__; `copy` as tri_state() gives it. `for_writing`:
/// memory a pipeline will write, refused when the producer cannot say it is writable (a legacy
/// capsule carries no read-only flag) or when it does not hold the tensor's values (a lazy view,
/// see exchange_import()).
Buffer buffer_from_dlpack(py::handle obj, int copy, bool for_writing);

// py_dlpack_exchange.cpp
/// DLPack 1.3's C exchange API: our table on the Buffer type.
void bind_dlpack_exchange(BufferClass &cls);
/// A producer's exchange API, when its type has one: the fast import; nothing when it has none
/// or when the producer's __dlpack__ must answer (a tensor that requires grad). A PyTorch tensor
/// whose memory does not hold its values (a lazy negation or conjugate) is imported as a tensor of
/// its values, one copy; with copy=False, or `for_writing`, it raises BufferError instead.
std::optional<Buffer> exchange_import(py::handle obj, int copy, bool for_writing);
/// A CPU tensor of a producer whose exchange API describes its objects without handing over
/// ownership (dltensor_from_py_object_no_sync), wrapped while `obj` is held: a pipeline call's
/// argument, for that call alone. Nothing when the API or the tensor cannot.
std::optional<Buffer> exchange_borrow(py::handle obj, const char *entry);
struct ArgumentType;      // py_argument_types.h
struct BorrowedArgument;  // interop/aot_borrow.h
/// The same tensor described into `out` for one call of a host pipeline (no Buffer: see
/// aot_borrow.h); false, with nothing described, where it cannot be (exchange_borrow()'s cases,
/// packed values, a dtype or layout a description cannot say): the general way takes it. A
/// malformed description is refused as check_import() refuses it, naming `entry`.
bool exchange_describe(py::handle obj, const ArgumentType &type, const char *entry, BorrowedArgument &out);

// py_aot.cpp
void bind_aot(py::module_ &m);

// py_arguments.cpp
/// A pipeline's name and an argument's, for messages ("<pipeline>(): argument '<name>'"),
/// built into text only when a message needs it.
struct ArgumentName {
    const char *pipeline;
    const char *argument;
    std::string text() const;
};
/// Where the memory of the object an argument came from is, which is where a call leaves an
/// output it wrote (bring_home()).
enum class Home : uint8_t {
    own_rule,  ///< a Buffer, an hl.Buffer, a typed capsule: their own residency state says
    host,      ///< host memory (an ndarray, a CPU tensor, the buffer protocol)
    device,    ///< device memory (a CUDA tensor, __cuda_array_interface__, a pyopencl array)
};
/// A Buffer over an object that is not a Buffer, and its home.
struct Argument {
    Buffer buffer;
    Home home;
};
/// Any object a user brings as a buffer argument (not a Buffer: the caller takes those as they
/// are), wrapped without a copy (but a PyTorch tensor whose memory does not hold its values, a
/// lazy negation or conjugate: an input is read through one copy of its values, an output is
/// refused); TypeError naming the argument for an object no attempt takes.
/// `input`: the pipeline reads it (else writes it: read-only memory is refused). `borrow`: the
/// Buffer lives no longer than the caller holds `obj` (a call's argument): a CPU tensor is then
/// described by its producer's exchange API without a managed tensor (exchange_borrow()).
Argument adopt_argument(py::handle obj, const ArgumentName &name, bool input, bool borrow);
/// `obj` described into `out` for one call of a host pipeline, with no Buffer (aot_borrow.h): an
/// ndarray, or a CPU tensor of a producer whose exchange API describes it (PyTorch); false, with
/// nothing described, for anything else and wherever a description would not do (a byte order,
/// a dtype or a layout it cannot say, a read-only output, a tensor that requires grad or is a
/// lazy view): adopt_argument() then takes it, and refuses what it must, with its messages (a
/// malformed producer's description is refused here, as there, naming the pipeline).
bool borrow_argument(py::handle obj, const ArgumentName &name, bool input, BorrowedArgument &out);
/// ReadOnlyError naming the output when `b`'s memory is read-only: refused before anything of
/// the call moves.
void refuse_read_only_output(const Buffer &b, const ArgumentName &name);
/// The data of `b`, written by a pipeline, made current in its home: one counted copy when it is
/// elsewhere, nothing for Home::own_rule.
void bring_home(Buffer &b, Home home);
/// _argument(), for the package's Python callers (hb.dask).
void bind_arguments(py::module_ &m);

// py_cuda.cpp
/// halide_buffer.CudaDevice, the CUDA entry points, Buffer.__cuda_array_interface__.
void bind_cuda(py::module_ &m, BufferClass &cls);

// py_halide.cpp
/// Buffer.from_halide(), Buffer.to_halide(), _opencl_load_library(): the bridge to the halide package.
void bind_halide(py::module_ &m);
/// True for a halide.Buffer (false, at no cost, while the halide package was never imported).
bool is_halide_buffer(py::handle obj);
/// True for halide.Buffer and its subclasses (false while the halide package was never imported:
/// none of its objects exists then).
bool is_halide_buffer_type(PyTypeObject *type);
/// Buffer.from_halide(): a Buffer sharing one residency state with the halide.Buffer `obj`.
Buffer buffer_from_halide(py::handle obj);

// py_from_host.cpp
/// Buffer.from_host(): wrap (or copy) anything with the buffer protocol or an ndarray.
Buffer buffer_from_host(py::handle obj, bool copy, bool external_writes);
/// The bytes of a buffer-protocol object as one run (PyBUF_SIMPLE), writable when asked and the
/// exporter allows it, held until `owner` is released.
struct HeldBytes {
    uint8_t *data;
    size_t len;
    bool readonly;
    std::shared_ptr<void> owner;
};
HeldBytes hold_bytes(py::handle obj, bool writable);

// py_buffer_protocol.cpp
/// Replaces pybind11's buffer slots of `type` with ours.
void install_buffer_protocol(py::handle type);

// py_numpy.cpp
/// An ndarray of the exact dtype over the buffer's host memory, kept alive by `self`.
py::array ndarray_view(py::handle self, Buffer &b, bool writable);
void bind_numpy(BufferClass &cls);
// py_buffer_data.cpp
void bind_buffer_data(BufferClass &cls);
// py_processes.cpp
void bind_processes(BufferClass &cls, py::module_ &m);

}  // namespace hb

namespace pybind11::detail {
/// A Buffer returned by a binding (every view, from_host(), from_halide(), ...) is a new object
/// by construction: it goes straight into a new instance (hb::new_buffer_object()), where
/// pybind11's generic cast would first search its registry for a live instance at the
/// temporary's address and then move it through a type-erased constructor.
template <>
class type_caster<hb::Buffer> : public type_caster_base<hb::Buffer> {
public:
    using type_caster_base<hb::Buffer>::cast;
    static handle cast(hb::Buffer &&src, return_value_policy, handle) {
        return hb::new_buffer_object(std::move(src));
    }
};
}  // namespace pybind11::detail
