// halide_bridge.cpp: buffers over Halide's own buffers, sharing one residency state with them.
//
// An hl.Buffer (Halide::Buffer, Python's halide.Buffer) owns its host memory and a
// halide_buffer_t that Halide's JIT runtime reads and writes: the device allocation it makes
// for the buffer and the dirty flags live there. buffer_from_halide_struct() wraps that host
// memory and binds the struct to the new storage (Buffer::bind_struct(), raw_views.cpp): it is
// published for the storage's whole life, its residency fields taken in before every operation
// and written back after it, so the hl.Buffer and every view of the storage are one state. The storage
// keeps the struct's owner, hence the struct, alive. A struct already bound to a live storage
// gives a view of that storage, never a second state.
//
// bind_halide_struct() is the other way round: an hl.Buffer made over a view's memory
// (to_halide()) has its struct bound to the view's storage the same way (Buffer::publish_struct()),
// for as long as the hl.Buffer holds the memory; its owner ends the binding
// (unbind_halide_struct()) before it lets go.
//
// The rules of a struct someone else owns are the storage's (raw_views.cpp); what is Halide's is
// here: its element types, its geometry in NumPy's order, and the storage each struct is bound to.
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "core/constants.h"
#include "core/errors.h"
#include "interop/halide_bridge.h"

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

void remember_binding(const halide_buffer_t *external, std::weak_ptr<Storage> storage) {
    Bindings &b = bindings();
    std::lock_guard<std::mutex> guard(b.mutex);
    if (b.storages.size() >= b.sweep_at) {  // expired entries go now and then: amortised O(1)
        for (auto it = b.storages.begin(); it != b.storages.end();) {
            it = it->second.expired() ? b.storages.erase(it) : std::next(it);
        }
        b.sweep_at = 2 * b.storages.size() + 16;
    }
    b.storages[external] = std::move(storage);
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

Buffer buffer_from_halide_struct(const char *entry, halide_buffer_t *external, std::shared_ptr<void> owner) {
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

    // Still the same memory: a view of the storage it is bound to.
    std::optional<Buffer> same = Buffer::view_of_bound(bound_storage(external), external, dtype, shape, strides, mins);
    if (same)
        return std::move(*same);
    Buffer b = Buffer::wrap(entry, external->host, std::move(shape), std::move(strides), dtype, std::move(owner),
                            false, false);
    b.bind_struct(external);  // the view takes its coordinates
    remember_binding(external, b.storage_ref());
    return b;
}

std::shared_ptr<void> halide_owner_of(Buffer &view) {
    if (!view.view_covers_root() || !view.bound_struct()) return nullptr;
    return view.memory_facts().host_owner;  // a bound storage's host memory is the struct's owner's
}

std::unique_ptr<RawView> bind_halide_struct(Buffer &view, halide_buffer_t *external) {
    return view.publish_struct(external);
}

bool halide_struct_bound(Buffer &view, RawView &binding) { return view.struct_published(binding); }

void unbind_halide_struct(Buffer &view, const char *entry, std::unique_ptr<RawView> binding) {
    view.withdraw_struct(entry, std::move(binding));
}

}  // namespace hb
