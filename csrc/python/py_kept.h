// py_kept.h: Python objects held from C++, and how the garbage collector is shown them
// (py_kept.cpp).
#pragma once

#include <memory>

#include "python/py_glue.h"

namespace hb {

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
/// A tp_traverse for a pybind11 type holding its C++ object in a `Holder`: the instance's type,
/// then, once the holder is constructed, what visit_holder(holder, visit, arg) visits.
template <typename Holder, int (*visit_holder)(const Holder &, visitproc, void *)>
int traverse_instance(PyObject *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));  // a heap type: each instance holds a reference to it
    py::detail::value_and_holder v_h = instance_parts(self);
    if (!v_h.holder_constructed()) return 0;  // e.g. Buffer.__new__ alone: nothing held
    return visit_holder(v_h.holder<Holder>(), visit, arg);
}

}  // namespace hb
