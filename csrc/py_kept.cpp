// py_kept.cpp: Python objects held from C++.
#include "py_glue.h"

namespace hb {
namespace {

/// The deleter of every owner keep() makes: what kept_in() recognises (std::get_deleter).
struct KeptDeleter {
    void operator()(void *p) const {
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

}  // namespace hb
