// py_processes.cpp: buffers across process boundaries: pickling (every protocol; protocol 5 out
// of band with no copy), copy.copy/deepcopy, shared memory (share_memory(), is_shared) and the
// handle multiprocessing sends for a shared buffer (halide_buffer/_processes.py registers it).
//
// A pickle carries the exact dtype by name, shape, byte strides, mins and the read-only flag,
// and the elements as one dense run of bytes: a dense view (any axis order) as it lies, a view
// with gaps or negative strides compacted in its memory order. Device state never travels.
#include "python/py_processes.h"

#include <string>
#include <vector>

#include <unistd.h>

#include "core/errors.h"
#include "core/text.h"
#include "python/py_buffer.h"
#include "python/py_from_host.h"
#include "python/py_glue.h"
#include "python/py_numpy.h"

namespace hb {
namespace {

constexpr const char *kLoads = "pickle.loads";

/// A sequence of ints read back from a pickle, or ValueError: the state is damaged.
std::vector<int64_t> ints_of(py::handle seq, const char *what) {
    std::vector<int64_t> out;
    if (!py::isinstance<py::tuple>(seq))
        throw ValueError(std::string(kLoads) + "(): the pickled Buffer's " + what + " is a " + type_name(seq) +
                         ", not a tuple of ints; the pickle is damaged: pickle the buffer again");
    for (py::handle v : seq) {
        int64_t n;
        if (!PyLong_Check(v.ptr()) || !as_int64(v, n))
            throw ValueError(std::string(kLoads) + "(): the pickled Buffer's " + what +
                             " holds something other than 64-bit ints; the pickle is damaged: pickle the "
                             "buffer again");
        out.push_back(n);
    }
    return out;
}

/// The dtype a pickle names, or ValueError naming it.
const DType &dtype_named(py::handle name) {
    const DType *t = py::isinstance<py::str>(name) ? dtype_by_name(name.cast<std::string>()) : nullptr;
    if (!t)
        throw ValueError(std::string(kLoads) + "(): the pickled Buffer's dtype " + py::repr(name).cast<std::string>() +
                         " is not one this halide_buffer knows (" + dtype_names() +
                         "); unpickle with the version that pickled it");
    return *t;
}

/// The geometry a pickle carries, read and checked against each other.
struct Geometry {
    const DType *dtype;
    std::vector<int64_t> shape, strides, mins;
};

Geometry geometry_of(py::handle dtype, py::handle shape, py::handle strides, py::handle mins) {
    Geometry g{&dtype_named(dtype), ints_of(shape, "shape"), ints_of(strides, "strides"), ints_of(mins, "mins")};
    if (g.strides.size() != g.shape.size() || g.mins.size() != g.shape.size())
        throw ValueError(std::string(kLoads) + "(): the pickled Buffer has " + std::to_string(g.shape.size()) +
                         " extents, " + std::to_string(g.strides.size()) + " strides and " +
                         std::to_string(g.mins.size()) + " mins; the pickle is damaged: pickle the buffer again");
    checked_count(kLoads, g.shape, g.dtype->itemsize);  // extents >= 0, at most 64 axes
    check_mins(kLoads, g.shape, g.mins);
    return g;
}

/// The state pickle records; `data` is the payload (PickleBuffer, bytes).
py::tuple state(py::object data, const Buffer &b, const std::vector<int64_t> &strides) {
    return py::make_tuple(std::move(data), b.dtype().name, to_tuple(b.shape()), to_tuple(strides), to_tuple(b.mins()),
                          b.readonly());
}

/// The unpickling function (halide_buffer._processes._rebuild, a plain Python function that
/// pickle records by name), looked up once and never released: pickles may be made at exit.
py::handle rebuild_function() {
    static py::handle rebuild = py::object(py::module_::import("halide_buffer._processes").attr("_rebuild")).release();
    return rebuild;
}

/// The elements as one dense run: the view itself, or a copy in its memory order.
Buffer dense_source(Buffer &b, bool out_of_band) {
    if (!b.is_dense()) return unlocked_if_may_copy(b, [&] { return b.current_host_copy("__reduce_ex__", CopyLayout::same_order); });
    // Out of band, the consumer gets our memory, writable unless it is read-only.
    unlocked_if_may_copy(b, [&] { return b.lease_host("__reduce_ex__", out_of_band ? Access::may_write : Access::read); });
    return b.view();
}

py::tuple reduce_ex(py::handle self, int protocol) {
    py::handle rebuild = rebuild_function();
    Buffer &b = buffer_of(self.ptr());
    Buffer source = dense_source(b, protocol >= 5);
    std::vector<int64_t> strides = source.strides();
    Buffer bytes = source.dense_bytes("__reduce_ex__");
    if (protocol < 5) {
        py::bytes data(reinterpret_cast<const char *>(bytes.data()), size_t(bytes.nbytes()));
        return py::make_tuple(rebuild, state(std::move(data), b, strides));
    }
    // Out of band: a PickleBuffer over our memory (through a 1-d uint8 ndarray, which tells the
    // consumer whether it may write).
    py::object holder = py::cast(std::move(bytes));
    Buffer &held = buffer_of(holder.ptr());
    held.note_ndarray_handed_out();
    py::array run = ndarray_view(holder, held, !b.readonly());
    py::object pickled = py::reinterpret_steal<py::object>(PyPickleBuffer_FromObject(run.ptr()));
    if (!pickled) throw py::error_already_set();
    return py::make_tuple(rebuild, state(std::move(pickled), b, strides));
}

Buffer rebuild_buffer(py::handle data, py::handle dtype, py::handle shape, py::handle strides, py::handle mins,
                      bool readonly) {
    Geometry g = geometry_of(dtype, shape, strides, mins);
    HeldBytes held = hold_bytes(data, !readonly);
    int64_t count = checked_count(kLoads, g.shape, g.dtype->itemsize);
    int64_t lo = 0, hi = 0;
    if (int64_t(held.len) != count * g.dtype->itemsize ||
        (count > 0 && !(byte_reach(g.shape, g.strides, g.dtype->itemsize, lo, hi) && lo >= 0 &&
                        hi <= int64_t(held.len))))
        throw ValueError(std::string(kLoads) + "(): the pickled Buffer's shape " + tuple_text(g.shape) + " (" +
                         g.dtype->name + ") and strides " + tuple_text(g.strides) + " do not describe its " +
                         std::to_string(held.len) + " bytes of data; the pickle is damaged: pickle the buffer again");
    // pickle's own in-band copies (bytes, bytearray) are nobody else's; other memory (an
    // out-of-band buffer) may be written by its owner at any time.
    bool private_copy = PyBytes_CheckExact(data.ptr()) || PyByteArray_CheckExact(data.ptr());
    Buffer b = Buffer::wrap(kLoads, held.data, g.shape, g.strides, *g.dtype, std::move(held.owner),
                            readonly || held.readonly, !private_copy);
    // Writable data arrived in read-only memory (in band before protocol 5): one copy, as NumPy.
    if (held.readonly && !readonly) return b.copy_keeping_layout(kLoads).with_mins(g.mins);
    return b.with_mins(g.mins);
}

Buffer rebuild_shared(int fd, int64_t offset, py::handle dtype, py::handle shape, py::handle strides,
                      py::handle mins, bool readonly) {
    Geometry g;
    try {
        g = geometry_of(dtype, shape, strides, mins);
    } catch (...) {
        close(fd);  // ours since detach()
        throw;
    }
    Buffer b = Buffer::from_shared(kLoads, fd, offset, g.shape, g.strides, *g.dtype, readonly);
    return b.with_mins(g.mins);
}

Buffer copy_of_buffer(py::handle self) {
    Buffer &b = buffer_of(self.ptr());
    return unlocked_if_may_copy(b, [&] { return b.current_host_copy("__deepcopy__", CopyLayout::same_order); });
}

/// A class whose objects belong to this process (a device's context and queue, a process's
/// counts): pickling them raises TypeError saying what to send instead. Without a rule of its
/// own, a pybind11 object pickled with protocol 0 or 1 would abort the interpreter.
void refuse_pickling(py::module_ &m, const char *name, const char *fix) {
    std::string message = std::string("pickle: a halide_buffer.") + name + " belongs to this process; " + fix;
    py::object cls = m.attr(name);
    reinterpret_cast<py::class_<py::object> &>(cls).def(
        "__reduce_ex__", [message](py::handle, py::handle) -> py::object { throw TypeError(message); },
        py::arg("protocol"), "Refused: the object belongs to this process.");
}

}  // namespace

void bind_processes(BufferClass &cls, py::module_ &m) {
    cls.def("__reduce_ex__", &reduce_ex, py::arg("protocol"),
            "Pickles the exact dtype, shape, strides, mins, read-only flag and the elements (downloaded "
            "once if the device copy is newer); protocol 5 hands the bytes out of band with no copy.")
        .def("__copy__", &copy_of_buffer, "An owned host copy keeping shape, memory order and mins (NumPy's "
             "copy.copy: the data is copied).")
        .def("__deepcopy__", [](py::handle self, py::handle) { return copy_of_buffer(self); }, py::arg("memo"),
             "An owned host copy keeping shape, memory order and mins.")
        .def("share_memory", [](py::handle self) {
            Buffer &b = buffer_of(self.ptr());
            // The device copy goes (its end waits for the device's queue): waited for here, without the GIL.
            unlocked_if_may_copy(b, [&] { b.device_sync(); });
            // With the GIL held throughout: no Python thread writes the memory while it moves.
            b.share_memory("share_memory");
            return py::reinterpret_borrow<py::object>(self);
        }, "Moves the storage into shared memory (once; returns self) so that multiprocessing sends a "
           "handle, not the data: child processes get views of the same memory.")
        .def_property_readonly("is_shared", [](py::handle self) { return buffer_of(self.ptr()).is_shared(); },
                               "the storage is in shared memory (share_memory(), Buffer(..., shared=True))")
        .def("_shared_handle", [](py::handle self) {
            Buffer::SharedHandle h = buffer_of(self.ptr()).shared_handle("_shared_handle");
            return py::make_tuple(h.fd, h.offset);
        }, "(descriptor, byte offset of the first element): what multiprocessing sends for a shared buffer.");
    m.def("_rebuild_buffer", &rebuild_buffer, "Unpickles a Buffer (see Buffer.__reduce_ex__).");
    py::object dtype_class = m.attr("DType");
    reinterpret_cast<py::class_<DType> &>(dtype_class).def("__reduce__", [](const DType &t) {
        static py::handle by_name = py::object(py::module_::import("halide_buffer._processes").attr("_dtype")).release();
        return py::make_tuple(by_name, py::make_tuple(t.name));
    }, "Pickles the dtype by name: the same DType object in the receiving process.");
    constexpr const char *device_fix =
        "in the receiving process use its own device (halide_buffer.opencl.device(), halide_buffer.cuda.device())";
    for (const char *name : {"Device", "OpenCLDevice", "CudaDevice"}) refuse_pickling(m, name, device_fix);
    refuse_pickling(m, "Transfers", "send its counts: (t.to_device, t.to_device_bytes, t.to_host, t.to_host_bytes)");
    m.def("_rebuild_shared_buffer", &rebuild_shared,
          "A view of a shared segment another process sent (takes the descriptor).");
}

}  // namespace hb
