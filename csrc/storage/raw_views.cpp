// raw_views.cpp: the halide_buffer_t's handed to foreign code (Buffer::raw(), lend()) and those
// foreign code owns over a storage's memory (an hl.Buffer's: bind_struct(), publish_struct()):
// publishing the storage's one residency state into them, and taking in what a pipeline's
// runtime or the struct's owner left there (flags, device memory it allocated or freed).
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "core/constants.h"
#include "core/errors.h"
#include "core/layout.h"
#include "storage/buffer.h"
#include "storage/storage_op.h"

namespace hb {

namespace {

/// The same elements at the same addresses: host, type, extents and strides (coordinates aside).
bool same_memory(const halide_buffer_t &a, const halide_buffer_t &b) {
    if (a.host != b.host || a.dimensions != b.dimensions || a.type.code != b.type.code ||
        a.type.bits != b.type.bits)
        return false;
    for (int i = 0; i < a.dimensions; ++i) {
        if (a.dim[i].extent != b.dim[i].extent || a.dim[i].stride != b.dim[i].stride) return false;
    }
    return true;
}

/// The same elements as the storage's root, whatever the view's mins (set_min, translated, an
/// output at mins): a pipeline's allocation for it covers the storage, and our device copy of
/// the storage is the whole of its memory (device memory mirrors host memory; coordinates name
/// its elements, they do not move them).
bool raw_covers_root(const halide_buffer_t &view, const halide_buffer_t &root) { return same_memory(view, root); }

/// The bytes of a view's elements (what a runtime's copy of them moves).
int64_t element_bytes(const halide_buffer_t &buf) {
    int64_t n = (buf.type.bits + 7) / 8;
    for (int i = 0; i < buf.dimensions; ++i) n *= buf.dim[i].extent;
    return n;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Storage: taking in and publishing (the caller holds the storage's mutex)
// ---------------------------------------------------------------------------------------------

void Storage::add_raw_view(RawView *r) {
    raw_views.push_back(r);
    ++published_views;
}

void Storage::remove_raw_view(RawView *r) {
    raw_views.erase(r);
    --published_views;
}

void Storage::absorb_raw_views() {
    for (RawView *r : raw_views) {
        if (!r->lent) absorb(*r);  // a running call's: taken in when the call gives it back
    }
}

void Storage::absorb(RawView &r) {
    r.pull();
    if (r.buf.device != r.published_device) {
        if (!r.buf.device) {
            let_go(r);
        } else if (!root.device && raw_covers_root(r.buf, root)) {
            // A pipeline's runtime allocated the whole storage: its allocation becomes ours to track.
            root.device = r.published_device = r.buf.device;
            root.device_interface = r.buf.device_interface;
            device_side().memory = device_memory::Runtime{r.call_device};
            ever_on_device = true;
        } else if (!bring_home(r)) {
            return;  // tried again by the next operation; until then its flags describe its own copy
        }
    }
    if (r.buf.flags != r.published) {
        // Halide's flags, as a pipeline left them; device_dirty means nothing without a device.
        root.flags = root.device ? r.buf.flags : r.buf.flags & ~kDeviceDirty;
        r.published = r.buf.flags;
        if (!(root.flags & kHostDirty)) host_flag_cleared = true;
    }
}

void Storage::let_go(RawView &r) {
    bool whole = runtime_memory() && r.published_device == root.device;
    r.published_device = 0;
    if (!whole) return;  // one of our view handles, forgotten by foreign code: republished on use
    release_device("let_go", DeviceRelease::gone);  // the runtime freed the storage's allocation through it
}

bool Storage::bring_home(RawView &r) {
    // A pipeline's allocation for part of the storage. The storage keeps one device copy, so
    // the part comes home at once, onto a host copy made current first, and is freed.
    if ((root.flags & kDeviceDirty) && copy_root_home() != 0) return false;
    DeviceCall call("bring_home", r.call_device.get());  // the device of the call whose runtime made it
    const halide_device_interface_t *interface = r.buf.device_interface;
    bool newer = r.buf.flags & kDeviceDirty;
    int64_t bytes = element_bytes(r.buf);  // what the runtime's copy moves: the elements, not the gaps
    if (call.attempt([&] { return interface->copy_to_host(nullptr, &r.buf); }) != 0) return false;
    if (newer) record_transfer(&device_side().transfers, Direction::to_host, bytes);
    interface->device_free(nullptr, &r.buf);  // a failure here strands the runtime's memory, not data
    r.published_device = r.buf.device;
    if (newer) root.flags = (root.flags & ~kDeviceDirty) | kHostDirty;
    r.buf.flags = r.published = root.flags;
    return true;
}

void Storage::refuse_lent(const char *entry) const {
    for (const RawView *r : raw_views) {
        if (r->lent && r->buf.device && r->buf.device == r->published_device)
            throw BufferError(std::string(entry) + "(): a pipeline call running in another thread computes in "
                              "the buffer's device copy; free or move it after the call returns");
    }
}

void Storage::forget_view_handles() {
    // Called after absorb_raw_views(): what the views show is ours to take back (refuse_lent()
    // came first: no running call is shown our device memory).
    for (RawView *r : raw_views) {
        if (r->lent) continue;
        r->buf.device = r->published_device = 0;
        r->buf.device_interface = nullptr;
        r->buf.padding = nullptr;
        r->handle.reset();
    }
}

void Storage::publish(RawView &r, bool may_copy) {
    if (r.buf.device != r.published_device) return;  // a pipeline's allocation still to bring home
    uint64_t device_field = 0;
    const halide_device_interface_t *interface = nullptr;
    if (root.device && runtime_memory()) {
        if (raw_covers_root(r.buf, root)) {
            device_field = root.device;
            interface = root.device_interface;
        } else if (may_copy) {
            download("_get_raw_halide_buffer_t");  // a view the pipeline's runtime cannot describe
        }
    } else if (root.device) {
        device_field = device()->view_field(root, r.buf.host - root.host, r.handle);
        if (device_field) interface = root.device_interface;
        if (device_field && r.shown_as) {
            if (raw_covers_root(r.buf, root) || part_in_place(*device(), r.buf.host - root.host, is_forward(r.buf))) {
                interface = r.shown_as;  // the runtime computes in our memory as it is
            } else {
                // A part of the storage: the pipeline's runtime cannot take our interface, so it
                // is shown without device memory (the runtime allocates its own; it comes home
                // after), over a current host copy.
                if (may_copy) download("_get_raw_halide_buffer_t");
                if (!(root.flags & kDeviceDirty)) {
                    device_field = 0;
                    interface = nullptr;
                    r.handle.reset();
                }
            }
        }
    } else {
        r.handle.reset();
    }
    r.buf.device = r.published_device = device_field;
    r.buf.device_interface = interface;
    r.buf.padding = device_field ? root.padding : nullptr;  // where our CUDA pointers find their allocation
    r.buf.flags = r.published = effective_flags();
    r.push();
}

void Storage::publish_all() {
    for (RawView *r : raw_views) {
        if (!r->lent) publish(*r, false);
    }
}

void RawView::pull() {
    if (!external) return;
    if (!same_memory(*external, buf)) {
        // Its owner changed its geometry in place: it describes other memory now. What it shows
        // stays its own (absorb lets go of a device copy it held, without freeing it).
        external = nullptr;
        buf.device = 0;
        buf.device_interface = nullptr;
        buf.padding = nullptr;
        return;
    }
    buf.device = external->device;
    buf.device_interface = external->device_interface;
    buf.flags = external->flags;
    buf.padding = external->padding;
}

void RawView::push() const {
    if (!external) return;
    external->device = buf.device;
    external->device_interface = buf.device_interface;
    // Without device memory the host copy is the only one: shown host dirty, since Halide's
    // runtime uploads only that into device memory it makes (the next absorb takes the flag in).
    external->flags = buf.device ? buf.flags : buf.flags | kHostDirty;
    external->padding = buf.padding;
}

// ---------------------------------------------------------------------------------------------
// Buffer: the views it hands out
// ---------------------------------------------------------------------------------------------

Buffer::~Buffer() {
    if (!raw_) return;
    StorageOp op(*storage_);  // flags (and device memory) a pipeline left in this view outlive it
    storage_->remove_raw_view(raw_.get());
}

void Buffer::expect_overwrite(RawView &view) {
    StorageOp op(*storage_);  // a lent view is not republished
    halide_buffer_t &buf = view.buf;
    if (buf.flags & kDeviceDirty) return;
    // A view covering its storage is overwritten whole. A part shown in a current device copy
    // (computed in place) leaves the rest as it is there; one shown without device memory must
    // go up first (a runtime's allocation for it comes home whole, the bytes between its
    // elements included).
    bool in_current_copy = buf.device && !(storage_->root.flags & kHostDirty);
    if (!raw_covers_root(buf, storage_->root) && !in_current_copy) return;
    buf.flags &= ~kHostDirty;
    view.published = buf.flags;  // not news to take in: the storage's own flags stay as they are
}

void Buffer::expect_upload(RawView &view) {
    StorageOp op(*storage_);  // a lent view is not republished
    halide_buffer_t &buf = view.buf;
    if (buf.device) {
        // The pipeline reads the device copy it is shown. One we placed for it was uploaded just
        // now: a standing lease's host_dirty must not make its runtime upload it again.
        if (view.shown_as && !(storage_->root.flags & kHostDirty)) {
            buf.flags &= ~kHostDirty;
            view.published = buf.flags;
        }
        return;
    }
    buf.flags = kHostDirty;
    view.published = buf.flags;
}

void Buffer::describe(halide_buffer_t &buf, halide_dimension_t *dims) const {
    int n = ndim();
    for (int i = 0; i < n; ++i) {
        // NumPy axis i is Halide dimension n - 1 - i.
        halide_dimension_t &d = dims[n - 1 - i];
        d.min = int32_t(mins_[size_t(i)]);
        d.extent = int32_t(shape_[size_t(i)]);
        d.stride = int32_t(strides_[size_t(i)] / dtype_->itemsize);
        d.flags = 0;
    }
    buf = halide_buffer_t{};
    buf.host = data_;
    buf.type = dtype_->halide;
    buf.dimensions = n;
    buf.dim = n ? dims : nullptr;
}

std::unique_ptr<RawView> Buffer::new_raw_view() const {
    auto r = std::make_unique<RawView>();
    r->dims.resize(size_t(ndim()));
    describe(r->buf, r->dims.data());
    storage_->add_raw_view(r.get());
    return r;
}

void Buffer::publish_for_call(RawView &view, const halide_device_interface_t *shown_as) {
    view.shown_as = shown_as;
    // After the StorageOp took in what the view held: that was the previous call's.
    Device *call = TargetDevice::current();
    view.call_device = call ? call->shared_from_this() : nullptr;
    storage_->publish(view, true);
}

namespace {

/// BufferError for a dtype Halide has no type for, naming `entry`.
void refuse_no_halide_type(const char *entry, const DType &dtype) {
    if (!dtype.has_halide_type())
        throw BufferError(std::string(entry) + "(): Halide has no type for " + dtype.name +
                          "; pass a buffer of another dtype");
}

}  // namespace

halide_buffer_t *Buffer::raw(const char *entry, const halide_device_interface_t *shown_as) {
    refuse_no_halide_type(entry, *dtype_);
    StorageOp op(*storage_);
    if (!raw_) raw_ = new_raw_view();
    publish_for_call(*raw_, shown_as);
    return &raw_->buf;
}

RawView *Buffer::lend(const char *entry, const halide_device_interface_t *shown_as) {
    refuse_no_halide_type(entry, *dtype_);
    StorageOp op(*storage_);
    // The view's own, unless another call has it: then one for this call alone.
    if (!raw_) raw_ = new_raw_view();
    RawView *view = raw_->lent ? new_raw_view().release() : raw_.get();
    publish_for_call(*view, shown_as);
    view->lent = true;
    return view;
}

void Buffer::take_back(RawView *view) {
    if (view == raw_.get() && view->buf.device == view->published_device && view->buf.flags == view->published) {
        // The call left it as it was shown (a host pipeline's input, say): nothing to take in,
        // and no lock needed to hand it back (its next operation republishes it).
        view->lent.store(false, std::memory_order_release);
        return;
    }
    // Only this view is news (the others are taken in by their next operation): the state is
    // republished everywhere when the call changed it, else in this view alone.
    StorageOp op(*storage_, false, false);
    Storage &s = *storage_;
    view->lent = false;
    // Shown host dirty without device memory, it has both now and is host dirty no more: the
    // call's runtime allocated for it and uploaded its elements (a copy of our bytes, counted).
    if (view->buf.device && !view->published_device && (view->published & kHostDirty) &&
        !(view->buf.flags & kHostDirty))
        record_transfer(&s.device_side().transfers, Direction::to_device, element_bytes(view->buf));
    uint64_t flags = s.root.flags, device = s.root.device;
    s.absorb(*view);
    if (s.root.flags != flags || s.root.device != device) s.publish_all();
    else s.publish(*view, false);
    if (view == raw_.get()) return;
    storage_->remove_raw_view(view);
    delete view;
}

// ---------------------------------------------------------------------------------------------
// Buffer: halide_buffer_t's others own, describing the storage's memory
// ---------------------------------------------------------------------------------------------

void Buffer::bind_struct(halide_buffer_t *external) {
    StorageOp op(*storage_);
    Storage &s = *storage_;
    // The view and the root take the owner's coordinates, so that its struct covers the storage.
    int n = ndim();
    for (int i = 0; i < n; ++i) {
        int32_t min = external->dim[n - 1 - i].min;  // NumPy axis i is Halide dimension n - 1 - i
        mins_[size_t(i)] = min;
        s.root.dim[n - 1 - i].min = min;
    }
    auto r = std::make_unique<RawView>();
    r->dims.assign(external->dim, external->dim + n);
    r->buf = s.root;
    r->buf.dim = n ? r->dims.data() : nullptr;
    r->buf.device = 0;
    r->buf.device_interface = nullptr;
    r->published = r->buf.flags;  // the owner's flags are news unless they are the root's
    r->external = external;
    s.add_raw_view(r.get());
    s.bound = std::move(r);
    s.absorb(*s.bound);  // its device copy and flags become the storage's
}

const halide_buffer_t *Buffer::bound_struct() {
    // Set once, by bind_struct() on a storage no one else holds yet: read without the lock.
    if (!storage_->bound) return nullptr;
    StorageOp op(*storage_);
    return storage_->bound->external;
}

std::optional<Buffer> Buffer::view_of_bound(std::shared_ptr<Storage> storage, const halide_buffer_t *external,
                                            const DType &dtype, const Axes &shape, const Axes &strides,
                                            const Axes &mins) {
    if (!storage) return std::nullopt;
    Buffer b;
    b.storage_ = std::move(storage);
    b.dtype_ = &dtype;
    b.data_ = external->host;
    b.shape_ = shape;
    b.strides_ = strides;
    b.mins_ = mins;
    if (b.bound_struct() != external) return std::nullopt;  // its owner changed it in place: not that memory
    return b;
}

std::unique_ptr<RawView> Buffer::publish_struct(halide_buffer_t *external) {
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

bool Buffer::struct_published(RawView &view) {
    StorageOp op(*storage_);  // takes in what changed there first: a struct changed in place lets go
    return view.external != nullptr;
}

void Buffer::withdraw_struct(const char *entry, std::unique_ptr<RawView> view) {
    StorageOp op(*storage_);  // takes in what the struct shows: a runtime's result becomes the storage's
    Storage &s = *storage_;
    auto detach = [&] {
        if (halide_buffer_t *external = std::exchange(view->external, nullptr)) {
            // Nothing of the storage's for its owner to free: our device copy stays the storage's.
            external->device = 0;
            external->device_interface = nullptr;
            external->padding = nullptr;
            external->flags = kHostDirty;
        }
        s.remove_raw_view(view.get());
    };
    try {
        if (view->external && s.runtime_memory() && view->buf.device == s.root.device) {
            // A pipeline runtime's device copy (Halide's JIT's) that the owner would free with the
            // struct: it lives as long as the owner, its data coming home first.
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

}  // namespace hb
