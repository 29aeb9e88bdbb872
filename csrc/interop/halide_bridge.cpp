// halide_bridge.cpp: buffers over Halide's own buffers, sharing one residency state with them.
//
// An hl.Buffer (Halide::Buffer, Python's halide.Buffer) owns its host memory and a
// halide_buffer_t that Halide's JIT runtime reads and writes: the device allocation it makes
// for the buffer and the dirty flags live there. Buffer::from_halide() wraps that host memory
// and binds the struct to the new storage (Storage::bound, raw_views.cpp): it is published for
// the storage's whole life, its residency fields taken in before every operation and written
// back after it, so the hl.Buffer and every view of the storage are one state. The storage
// keeps the struct's owner, hence the struct, alive. A struct already bound to a live storage
// gives a view of that storage, never a second state.
//
// Buffer::bind_halide() is the other way round: an hl.Buffer made over a view's memory
// (to_halide()) has its struct bound to the view's storage the same way, for as long as the
// hl.Buffer holds the memory; its owner ends the binding (unbind_halide()) before it lets go.
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/constants.h"
#include "core/errors.h"
#include "storage/buffer.h"
#include "storage/storage_op.h"

namespace hb {
namespace {

/// Storages by the halide_buffer_t bound to them. An entry's struct lives as long as its
/// storage (which keeps the struct's owner); expired entries go when a new one comes.
struct Bindings {
    std::mutex mutex;  ///< a leaf: nothing else is locked, and nothing dies, while it is held
    std::unordered_map<const halide_buffer_t *, std::weak_ptr<Storage>> storages;
    size_t sweep_at = 16;  ///< the size at which expired entries are swept out
};

Bindings &bindings() {
    static Bindings b;
    return b;
}

std::shared_ptr<Storage> bound_storage(const halide_buffer_t *external) {
    Bindings &b = bindings();
    std::lock_guard<std::mutex> guard(b.mutex);
    auto it = b.storages.find(external);
    return it == b.storages.end() ? nullptr : it->second.lock();
}

void remember_binding(const halide_buffer_t *external, const std::shared_ptr<Storage> &storage) {
    Bindings &b = bindings();
    std::lock_guard<std::mutex> guard(b.mutex);
    if (b.storages.size() >= b.sweep_at) {  // expired entries go now and then: amortised O(1)
        for (auto it = b.storages.begin(); it != b.storages.end();) {
            it = it->second.expired() ? b.storages.erase(it) : std::next(it);
        }
        b.sweep_at = 2 * b.storages.size() + 16;
    }
    b.storages[external] = storage;
}

/// "int", "uint", ... for Halide's type codes, in messages.
std::string halide_type_text(const halide_type_t &t) {
    static const char *const names[] = {"int", "uint", "float", "handle", "bfloat"};
    std::string code = t.code < 5 ? names[t.code] : "code " + std::to_string(t.code);
    std::string out = code + std::to_string(t.bits);
    if (t.lanes != 1) out += "x" + std::to_string(t.lanes);
    return out;
}

/// The dtype of a Halide element type, or TypeError naming `entry`.
const DType &dtype_of_halide(const char *entry, const halide_type_t &t) {
    const DType *d = dtype_by_halide(t);
    if (!d)
        throw TypeError(std::string(entry) + "(): the hl.Buffer's elements are of Halide type " +
                        halide_type_text(t) + ", which no dtype holds; pass an hl.Buffer of a numeric type "
                        "(int, uint, float, bfloat, bool)");
    return *d;
}

}  // namespace

Buffer Buffer::from_halide(const char *entry, halide_buffer_t *external, std::shared_ptr<void> owner) {
    const DType &dtype = dtype_of_halide(entry, external->type);
    int n = external->dimensions;
    if (n < 0 || (n > 0 && !external->dim))
        throw ValueError(std::string(entry) + "(): the hl.Buffer's halide_buffer_t has " + std::to_string(n) +
                         " dimensions" + (n > 0 ? " and no shape" : "") + "; pass a defined hl.Buffer");
    // Halide's dimension 0 is the innermost: NumPy's last axis. Strides in elements become bytes.
    Axes shape(static_cast<size_t>(n)), strides(shape), mins(shape);
    bool empty = false;
    for (int i = 0; i < n; ++i) {
        const halide_dimension_t &d = external->dim[n - 1 - i];
        shape[size_t(i)] = d.extent;
        strides[size_t(i)] = int64_t(d.stride) * dtype.itemsize;
        mins[size_t(i)] = d.min;
        empty = empty || d.extent == 0;
    }
    if (!external->host && !empty)
        throw ValueError(std::string(entry) + "(): the hl.Buffer has no host memory (a bounds query, or "
                         "deallocated); pass an hl.Buffer with memory, e.g. after h.allocate()");

    if (std::shared_ptr<Storage> storage = bound_storage(external)) {
        Buffer b;
        b.storage_ = std::move(storage);
        b.dtype_ = &dtype;
        b.data_ = external->host;
        b.shape_ = shape;
        b.strides_ = strides;
        b.mins_ = mins;
        if (b.bound_struct() == external) return b;  // still the same memory: a view of that storage
    }
    Buffer b = wrap(entry, external->host, shape, strides, dtype, std::move(owner), false, false);
    b.mins_ = std::move(mins);
    b.bind(external);
    remember_binding(external, b.storage_);
    return b;
}

std::unique_ptr<RawView> Buffer::bind_halide(const char * /*entry*/, halide_buffer_t *external) {
    StorageOp op(*storage_);
    std::unique_ptr<RawView> view = new_raw_view();
    view->external = external;
    try {
        // Shown the shared state now: a device copy it can show (a pipeline runtime's covering the
        // storage, or ours), else host only over a current host copy.
        storage_->publish(*view, true);
    } catch (...) {
        view->external = nullptr;
        storage_->remove_raw_view(view.get());
        throw;
    }
    return view;
}

bool Buffer::halide_bound(RawView &view) {
    StorageOp op(*storage_);  // takes in what changed there first: a struct changed in place lets go
    return view.external != nullptr;
}

void Buffer::unbind_halide(const char *entry, std::unique_ptr<RawView> view) {
    StorageOp op(*storage_);  // takes in what the struct shows: a JIT result becomes the storage's
    Storage &s = *storage_;
    auto detach = [&] {
        if (halide_buffer_t *external = std::exchange(view->external, nullptr)) {
            // Nothing of the storage's for Halide to free: our device copy stays the storage's.
            external->device = 0;
            external->device_interface = nullptr;
            external->padding = nullptr;
            external->flags = kHostDirty;
        }
        s.remove_raw_view(view.get());
    };
    try {
        if (view->external && s.runtime_memory() && view->buf.device == s.root.device) {
            // A pipeline runtime's device copy (the JIT's) that Halide would free with the struct:
            // it lives as long as the hl.Buffer, its data coming home first.
            op.defer(s.free_device(entry));
        } else if (view->external) {
            s.download(entry);  // whoever still holds the struct (an ImageParam) reads the host
        }
    } catch (...) {
        detach();
        throw;
    }
    detach();
}

std::shared_ptr<void> Buffer::halide_owner() {
    if (!storage_->bound || !view_covers_root() || !bound_struct()) return nullptr;
    return std::get<host_memory::Borrowed>(storage_->host_memory).owner;  // a bound storage's is its owner's
}

}  // namespace hb
