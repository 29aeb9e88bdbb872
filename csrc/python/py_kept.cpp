// py_kept.cpp: Python objects held from C++, and how the garbage collector is shown them.
//
// A buffer keeps Python objects alive from C++: what from_host() wrapped, a DLPack producer, a
// wrapped device handle's owner; a device keeps its stream object. An object that stores the
// buffer made from it then closes a reference cycle the collector cannot see, so each such
// reference is a Kept, in an owner made by keep(), and the types holding them (Buffer,
// CudaDevice) visit it in their tp_traverse.
//
// The count must be exact: tp_traverse may visit an object only for a reference the visited-from
// object really owns, or the collector frees what is still in use. A storage is shared by every
// view of it and by C++ holders (DLPack exports); an owner may be copied (a detached one handed
// back). So a Python object visits a kept object only when it is the sole holder at each step
// (PyTorch's rule for the Python objects a tensor's C++ holds): the Buffer of its storage
// (Buffer::visit_sole_owners), the storage of the owner (traverse_owner). A reference shared
// with anyone else is not shown, and a cycle through it is not collected: safe, never early.
#include "python/py_kept.h"

#include "python/py_glue.h"

namespace hb {
namespace {

/// The deleter of every owner keep() makes: what kept_in() recognises (std::get_deleter).
struct KeptDeleter {
    void operator()(void *p) const {
        if (PyGILState_Check()) {  // the usual case, a Python thread letting go: no GIL dance
            delete static_cast<Kept *>(p);
            return;
        }
        py::gil_scoped_acquire gil;
        delete static_cast<Kept *>(p);
    }
};

}  // namespace

std::shared_ptr<void> keep(std::unique_ptr<Kept> kept) {
    // Stored as the Kept base, so kept_in() can cast the void pointer back. Should the control
    // block fail to allocate, the deleter still runs.
    return std::shared_ptr<void>(static_cast<void *>(kept.release()), KeptDeleter{});
}

std::shared_ptr<void> keep_object(py::handle obj) {
    if (obj.is_none()) return nullptr;
    return keep(std::make_unique<Kept>(py::reinterpret_borrow<py::object>(obj)));
}

Kept *kept_in(const std::shared_ptr<void> &owner) {
    if (!owner || !std::get_deleter<KeptDeleter>(owner)) return nullptr;
    return static_cast<Kept *>(owner.get());
}

int traverse_owner(const std::shared_ptr<void> &owner, visitproc visit, void *arg) {
    if (owner.use_count() != 1) return 0;  // none, or also someone else's
    Kept *kept = kept_in(owner);
    return kept ? kept->traverse(visit, arg) : 0;
}

void take_part_in_gc(PyHeapTypeObject *heap_type, traverseproc traverse) {
    PyTypeObject *type = &heap_type->ht_type;
    type->tp_flags |= Py_TPFLAGS_HAVE_GC;
    type->tp_traverse = traverse;
    // No tp_clear. Clearing a buffer's references would mean letting go of the memory's owner
    // (or the storage) while the buffer, its views, exports or a raw halide_buffer_t in foreign
    // code may still point into it. It is never needed either: a cycle through a buffer also
    // passes through a Python object that refers to the buffer (the producer's __dict__ or
    // slots, a list, a dict), and the collector clears that one; the buffer then dies of its
    // last reference, releasing the storage and the owner in order, as it always does.
    type->tp_clear = nullptr;
}

}  // namespace hb
