// residency.cpp: where the current data is, and every copy that moves it (the state machine:
// docs/architecture.md). The halide_buffer_t's handed to foreign code are raw_views.cpp's.
//
// The state is the storage's root halide_buffer_t: its flags (host_dirty, device_dirty, never
// both) and its device fields. Every rule below is one function, and every device operation
// is a call through root.device_interface: ours, or the one a pipeline's Halide runtime set.
// One transfer moves the whole storage (every view of it shares one state), so a crop's host
// read downloads its parent too: simple, exact, and never stale.
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "core/constants.h"
#include "core/errors.h"
#include "core/live_counts.h"
#include "storage/buffer.h"
#include "storage/storage_op.h"

namespace hb {

// ---------------------------------------------------------------------------------------------
// Storage: the rules (the caller holds the storage's mutex)
// ---------------------------------------------------------------------------------------------

Storage::~Storage() {
    if (root.device) release_device("~Storage", DeviceRelease::dying);  // most storages never had one
    if (auto *owned = std::get_if<host_memory::Owned>(&host_memory)) {
        if (owned->mapped_bytes) unmap_pages(static_cast<uint8_t *>(owned->allocation), owned->mapped_bytes);
        else std::free(owned->allocation);
    } else if (auto *shared = std::get_if<host_memory::Shared>(&host_memory)) {
        forget_shared_storage(shared->segment->identity());
    }  // borrowed memory's owner goes with the variant
    --live_counts().storages;
}

namespace {

const DeviceMemory kNoDeviceMemory{};
const std::shared_ptr<Device> kNoDevice;
const Transfers kNoTransfers;

/// The device our backends' memory lives on (null for none, or a runtime's).
std::shared_ptr<Device> *device_in(DeviceMemory &m) {
    auto *ours = std::get_if<device_memory::Ours>(&m);
    return ours ? &ours->device : nullptr;
}

/// Whether the storage's device memory is someone else's, wrapped: its allocation says.
bool wraps_device_memory(const Storage &s) {
    return std::holds_alternative<device_memory::Ours>(s.device_memory()) && s.device()->allocation(s.root)->wrapped();
}

/// A device as a message names it beside `other`: its description, and where the two read alike
/// (a zero-copy device and its copying twin share one context and queue), which one it is.
std::string told_apart(const Device &d, const Device &other) {
    std::string text = d.description();
    if (text != other.description() || d.zero_copy() == other.zero_copy()) return text;
    return (d.zero_copy() ? "the zero-copy " : "the copying ") + text;
}

}  // namespace

const DeviceMemory &Storage::device_memory() const { return device_side_ ? device_side_->memory : kNoDeviceMemory; }

const std::shared_ptr<Device> &Storage::device() const {
    std::shared_ptr<Device> *d = device_side_ ? device_in(device_side_->memory) : nullptr;
    return d ? *d : kNoDevice;
}

Device *Storage::operation_device() const {
    if (auto *runtime = std::get_if<device_memory::Runtime>(&device_memory())) return runtime->call_device.get();
    return device().get();
}

const Transfers &Storage::transfers() const { return device_side_ ? device_side_->transfers : kNoTransfers; }

void Storage::move_device(std::shared_ptr<Device> to) { *device_in(device_side().memory) = std::move(to); }

uint64_t Storage::effective_flags() const {
    // Borrowed memory its owner may write (external writes): its host copy counts as newer
    // unless the device holds newer data.
    if (external_writes && !(root.flags & kDeviceDirty)) return root.flags | kHostDirty;
    return root.flags;
}

int Storage::copy_root_home() {
    DeviceCall call("copy_root_home", operation_device());
    int64_t bytes = byte_span(&root).size();
    int rc = call.attempt([&] { return root.device_interface->copy_to_host(nullptr, &root); });
    // Our backend counts where the bytes move; a pipeline runtime's copies are counted here.
    if (rc == 0 && runtime_memory()) record_transfer(&device_side().transfers, Direction::to_host, bytes);
    return rc;
}

void Storage::download(const char *entry) {
    if (!(root.flags & kDeviceDirty)) return;
    if (readonly)
        throw BufferError(std::string(entry) + "(): the device copy is newer, but the buffer wraps "
                          "read-only memory it cannot be written into; wrap a writable copy "
                          "(Buffer.from_host(obj, copy=True)) for device outputs");
    check(copy_root_home(), entry, "copying to the host");
}

void Storage::note_queued_work(uint64_t ticket) {
    uint64_t kept = queued_work.load(std::memory_order_relaxed);
    while (kept < ticket && !queued_work.compare_exchange_weak(kept, ticket, std::memory_order_release)) {
    }
}

void Storage::await_queued_work() {
    uint64_t ticket = queued_work.load(std::memory_order_acquire);
    if (!ticket) return;
    // Our device memory's device; the ticket is the call's, which placed the storage there. Memory
    // that left the device since waited as it ended (free_device()).
    if (const std::shared_ptr<Device> &d = device()) d->wait_for(ticket);
    queued_work.compare_exchange_strong(ticket, 0, std::memory_order_acq_rel);  // a newer ticket stays
}

void Storage::prepare_host_write(const char *entry) {
    download(entry);  // waits for every queued command too, where it maps or copies
    await_queued_work();
}

void Storage::allocate_device(const char *entry, const DeviceChoice &on) {
    if (root.device) {
        const std::shared_ptr<Device> &device = this->device();
        if (on.required && on.device != device && device && on.device->take_over(root, *device)) {
            move_device(on.device);  // the same memory, used from another stream from now on
            return;
        }
        if (on.required && on.device != device) {
            refuse_bound(entry);  // device_free() would not help there
            throw ValueError(std::string(entry) + "(): the buffer's device copy is on " +
                             (device ? told_apart(*device, *on.device) : std::string("a pipeline runtime's device")) +
                             ", not " + (device ? told_apart(*on.device, *device) : on.device->description()) +
                             "; call device_free() first to move it");
        }
        return;
    }
    refuse_bound(entry);
    if (!on.device)
        throw ValueError(std::string(entry) + "(): the buffer has no device allocation and no device "
                         "was given; pass device=halide_buffer.opencl.device() or halide_buffer.cuda.device()");
    const halide_device_interface_t *interface = on.device->interface();
    DeviceCall(entry, on.device.get())("allocating device memory",
                                       [&] { return interface->device_malloc(nullptr, &root, interface); });
    device_side().memory = device_memory::Ours{on.device, nullptr};
    adopt_allocation();
    ever_on_device = true;
    // The new device copy is empty: the host holds the data.
    root.flags |= kHostDirty;
}

void Storage::upload(const char *entry, const DeviceChoice &on) {
    allocate_device(entry, on);
    uint64_t flags = effective_flags();
    if (!(flags & kHostDirty)) return;
    root.flags = flags;
    int64_t bytes = byte_span(&root).size();
    DeviceCall(entry, operation_device())("copying to the device", [&] {
        return root.device_interface->copy_to_device(nullptr, &root, root.device_interface);
    });
    if (runtime_memory()) record_transfer(&device_side().transfers, Direction::to_device, bytes);
}

std::shared_ptr<void> Storage::free_device(const char *entry) {
    if (!root.device) return nullptr;
    refuse_lent(entry);
    download(entry);  // freeing never loses data: a newer device copy comes home first
    // Zero-copy memory a pool keeps is not waited for as it goes back, and the host memory stays
    // the storage's: work still queued on it finishes first.
    await_queued_work();
    return release_device(entry, DeviceRelease::free);
}

std::shared_ptr<void> Storage::release_device(const char *entry, DeviceRelease how) {
    switch (how) {
        case DeviceRelease::dying: {
            // Nothing to keep, no one to tell: no one can read it. A runtime's memory the owner's own
            // halide_buffer_t shows is the owner's to free (an hl.Buffer does).
            bool owners = bound && bound->external && bound->external->device == root.device;
            if (root.device && root.device_interface && !owners) {
                TargetDevice target(operation_device());
                root.device_interface->device_free(nullptr, &root);
            }
            return nullptr;
        }
        case DeviceRelease::gone:
            // The runtime freed it through a view: the data it held is gone with it.
            root.device = 0;
            root.device_interface = nullptr;
            root.flags &= ~kDeviceDirty;
            break;
        case DeviceRelease::detach:
            // Wrapped memory goes back to its owner. Memory handed to consumers without a reference
            // of their own (lent) stays valid while the storage lives: its owner is kept (the caller
            // gets it too).
            forget_view_handles();
            if (const auto &owner = std::get<device_memory::Ours>(device_memory()).owner;
                owner && device()->allocation(root)->lent())
                device_side().lent_memory.push_back(owner);
            DeviceCall(entry, device().get())("detaching the device memory",
                                              [&] { return root.device_interface->detach_native(nullptr, &root); });
            break;
        case DeviceRelease::free: {
            // Ours or wrapped, through our interface; a runtime's, through the interface it set and
            // with the device of the call that made it (operation_device()).
            DeviceCall call(entry, operation_device());
            if (std::shared_ptr<void> lent = device() ? device()->retire_lent(root) : nullptr) {
                // Consumers may still use it: freed with the storage, and whoever owns it kept till then.
                DeviceSide &d = device_side();
                d.lent_memory.push_back(std::move(lent));
                if (auto *ours = std::get_if<device_memory::Ours>(&d.memory); ours && ours->owner)
                    d.lent_memory.push_back(ours->owner);
            } else {
                // A failure keeps the allocation (and every view's handle into it): device_free() again.
                call("freeing device memory", [&] { return root.device_interface->device_free(nullptr, &root); });
            }
            break;
        }
    }
    forget_view_handles();
    if (!device_side_) return nullptr;
    // A wrapped allocation's owner is the caller's: dropped after the lock is let go.
    std::shared_ptr<void> owner;
    if (auto *ours = std::get_if<device_memory::Ours>(&device_side_->memory)) owner = std::move(ours->owner);
    device_side_->memory = device_memory::None{};
    return owner;
}

void Storage::refuse_bound(const char *entry) const {
    if (bound)
        throw BufferError(std::string(entry) + "(): the buffer's memory is an hl.Buffer's (Buffer.from_halide), "
                          "which holds device memory only from Halide's runtime; copy it into a buffer of its "
                          "own first: b.copy()");
}

bool Storage::part_in_place(const Device &on, int64_t offset, bool forward) const {
    // Memory its owner may write at any time is newer on the host at every call: the whole of it
    // would go up for each part. Such parts go up alone, as the runtime uploads them.
    if (bound || external_writes || !forward) return false;
    if (root.device && device().get() == &on) return on.shows_part(&root, offset);
    // An allocation made now starts at the storage's lowest byte, which for a storage laid out
    // backwards lies before root's element: the part's place is counted from there.
    return on.shows_part(nullptr, offset - byte_span(&root).lo);
}

void Storage::adopt_allocation() {
    // Our backend's copies through any handle into this allocation move the whole storage
    // (one state covers it), and are counted as this storage's.
    DeviceAllocation *a = device()->allocation(root);
    a->whole = &root;
    a->transfers = &device_side().transfers;
}

// ---------------------------------------------------------------------------------------------
// Buffer: each operation is one rule inside one StorageOp
// ---------------------------------------------------------------------------------------------

ReadOnlyError read_only_memory(const char *entry) {
    return ReadOnlyError(std::string(entry) + "(): the buffer wraps read-only memory; use "
                         "Buffer.from_host(obj, copy=True) for a writable copy");
}

namespace {

/// The refusal of a pipeline output over read-only memory (Halide has no read-only flag).
ReadOnlyError read_only_output(const char *entry) {
    return ReadOnlyError(std::string(entry) + "(): an output wraps read-only memory; pass a writable buffer");
}

}  // namespace

bool Buffer::host_dirty() {
    StorageOp op(*storage_);
    return storage_->effective_flags() & kHostDirty;
}

bool Buffer::device_dirty() {
    StorageOp op(*storage_);
    return storage_->effective_flags() & kDeviceDirty;
}

void Buffer::set_host_dirty(bool value) {
    StorageOp op(*storage_);
    Storage &s = *storage_;
    if (value && (s.root.flags & kDeviceDirty))
        throw ValueError("set_host_dirty(): the device copy is newer (device_dirty); call "
                         "copy_to_host() before writing on the host");
    if (value) {
        s.root.flags |= kHostDirty;
    } else {
        s.root.flags &= ~kHostDirty;
        s.host_flag_cleared = true;
    }
}

void Buffer::set_device_dirty(bool value) {
    StorageOp op(*storage_);
    Storage &s = *storage_;
    if (value && !s.root.device)
        throw ValueError("set_device_dirty(): the buffer has no device allocation; call "
                         "copy_to_device() or device_malloc() first");
    // The effective flags: wrapped memory its owner may write (external writes) counts as newer
    // on the host, so a claim that the device is newer would download the device copy over the
    // owner's writes.
    if (value && (s.effective_flags() & kHostDirty) && !(s.root.flags & kHostDirty))
        throw ValueError("set_device_dirty(): the buffer wraps memory its owner may write at any time, so "
                         "the host copy counts as newer; write on the device through a device lease "
                         "(halide_buffer.opencl.as_array(b), b.__dlpack__ to a device consumer), or wrap "
                         "with Buffer.from_host(obj, external_writes=False) to promise that only the "
                         "buffer writes it");
    if (value && (s.root.flags & kHostDirty))
        throw ValueError("set_device_dirty(): the host copy is newer (host_dirty); call "
                         "copy_to_device() before writing on the device");
    if (value && s.readonly)
        throw ValueError("set_device_dirty(): the buffer wraps read-only memory, which the device "
                         "copy could never be written back into; wrap a writable copy "
                         "(Buffer.from_host(obj, copy=True))");
    if (value) s.root.flags |= kDeviceDirty;
    else s.root.flags &= ~kDeviceDirty;
}

bool Buffer::has_device_allocation() {
    StorageOp op(*storage_);
    return storage_->root.device != 0;
}

std::shared_ptr<Device> Buffer::device() {
    StorageOp op(*storage_);
    return storage_->device();
}

Buffer::MemoryFacts Buffer::memory_facts() {
    StorageOp op(*storage_);
    const Storage &s = *storage_;
    static constexpr const char *kDeviceMemory[] = {nullptr, "owned", "a pipeline runtime's"};
    const char *whose = wraps_device_memory(s) ? "wrapped" : kDeviceMemory[s.device_memory().index()];
    auto *borrowed = std::get_if<host_memory::Borrowed>(&s.host_memory);
    return MemoryFacts{s.effective_flags(), s.root.device != 0, whose, s.device(),
                       std::holds_alternative<host_memory::Shared>(s.host_memory),
                       borrowed ? borrowed->owner : nullptr};
}

void Buffer::copy_to_host() {
    StorageOp op(*storage_);
    storage_->download("copy_to_host");
}

void Buffer::copy_to_device(const DeviceChoice &on) {
    StorageOp op(*storage_);
    storage_->upload("copy_to_device", on);
}

void Buffer::device_malloc(const DeviceChoice &on) {
    StorageOp op(*storage_);
    storage_->allocate_device("device_malloc", on);
}

void Buffer::device_free() {
    StorageOp op(*storage_);
    op.defer(storage_->free_device("device_free"));
}

void Buffer::device_sync() {
    StorageOp op(*storage_);
    Storage &s = *storage_;
    if (!s.root.device) return;
    DeviceCall("device_sync", s.operation_device())("waiting for the device", [&] {
        return s.root.device_interface->device_sync(nullptr, &s.root);
    });
}

void Buffer::device_wrap_native(const std::shared_ptr<Device> &on, uint64_t native, uint64_t offset,
                                std::shared_ptr<void> owner) {
    constexpr const char *entry = "device_wrap_native";
    StorageOp op(*storage_);
    Storage &s = *storage_;
    s.refuse_bound(entry);
    if (s.root.device)
        throw ValueError(std::string(entry) + "(): the buffer already has a device allocation; call "
                         "device_free() first");
    if (s.readonly)
        throw ValueError(std::string(entry) + "(): the buffer wraps read-only memory, which the "
                         "wrapped device data could never be written back into; wrap a writable "
                         "buffer");
    // The wrapped data becomes the current copy: over memory its owner may write at any time
    // (external writes), the next read would download it over the owner's newer writes.
    if (s.external_writes)
        throw ValueError(std::string(entry) + "(): the buffer wraps host memory its owner may write at any "
                         "time, whose writes the device data would overwrite on the next read; wrap the "
                         "device memory in a buffer of its own (halide_buffer.opencl.wrap, "
                         "halide_buffer.cuda.wrap), or wrap the host memory with "
                         "Buffer.from_host(obj, external_writes=False)");
    const halide_device_interface_t *interface = on->interface();
    DeviceCall(entry, on.get())("wrapping the device memory",
                                [&] { return interface->wrap_native(nullptr, &s.root, native, interface); });
    // The buffer's lowest byte is `offset` bytes into the native memory; all of it must fit.
    const DeviceAllocation *a = on->allocation(s.root);
    uint64_t needed = uint64_t(byte_span(&s.root).size());
    if (offset > a->size || needed > a->size - offset) {
        uint64_t size = a->size;
        interface->detach_native(nullptr, &s.root);
        throw ValueError(std::string(entry) + "(): the device memory holds " + std::to_string(size) +
                         " bytes, the buffer needs " + std::to_string(needed) + " from offset " +
                         std::to_string(offset) + "; wrap a larger allocation");
    }
    on->finish_wrap(s.root, offset);
    s.device_side().memory = device_memory::Ours{on, std::move(owner)};
    s.adopt_allocation();
    s.ever_on_device = true;
    // The wrapped memory is the current copy; the host's previous contents are superseded.
    s.root.flags = kDeviceDirty;
}

std::shared_ptr<void> Buffer::device_detach_native() {
    constexpr const char *entry = "device_detach_native";
    StorageOp op(*storage_);
    Storage &s = *storage_;
    if (!s.root.device) return nullptr;
    if (!wraps_device_memory(s))
        throw ValueError(std::string(entry) + "(): the device allocation was not wrapped with "
                         "device_wrap_native(); use device_free()");
    s.refuse_lent(entry);
    s.download(entry);
    return s.release_device(entry, DeviceRelease::detach);
}

void Buffer::begin_host_read() {
    // Never on a device and no halide_buffer_t out: nothing can have made the host stale.
    if (residency_untouched()) return;
    StorageOp op(*storage_);
    storage_->download("copy_to_host");
}

HostWriteMark Buffer::begin_host_write(const char *entry) {
    if (storage_->readonly)
        throw read_only_memory(entry);
    HostWriteMark lease;
    if (residency_untouched()) return lease;  // host_dirty since construction: nothing to change
    StorageOp op(*storage_);
    Storage &s = *storage_;
    s.prepare_host_write(entry);
    if (!(s.root.flags & kHostDirty)) {
        lease.storage_ = storage_;
        lease.generation_ = s.generation;
    }
    s.root.flags |= kHostDirty;
    return lease;
}

void HostWriteMark::withdraw() {
    if (!storage_) return;
    std::shared_ptr<Storage> storage = std::move(storage_);  // outlives the lock
    std::unique_lock<SmallLock> lock(storage->mutex, std::try_to_lock);
    if (!lock.owns_lock()) wait_for_lock(lock);
    // Any operation since (or a halide_buffer_t out, which foreign code may have acted on)
    // could rest on the mark: then it stays.
    if (storage->generation == generation_ && storage->raw_views.empty()) storage->root.flags &= ~kHostDirty;
}

Buffer::DeviceView Buffer::begin_device_use(const char *entry, const DeviceChoice &on, bool write) {
    StorageOp op(*storage_);
    Storage &s = *storage_;
    s.refuse_bound(entry);
    if (s.runtime_memory())
        throw BufferError(std::string(entry) + "(): the device copy belongs to a pipeline's Halide "
                          "runtime; call copy_to_host() and device_free() first");
    if (write && s.readonly)
        throw ReadOnlyError(std::string(entry) + "(): the buffer wraps read-only memory; pass "
                          "writable=False for a device view to read");
    if (on.same_kind && s.device() && std::strcmp(s.device()->kind(), on.device->kind()) != 0)
        throw BufferError(std::string(entry) + "(): the buffer left " + on.device->description() + " meanwhile "
                          "(another thread moved it to " + s.device()->description() + "); export it again");
    s.upload(entry, on);
    if (write) s.root.flags = kDeviceDirty;  // the consumer may write: a lease
    Device::Handout h = s.device()->hand_out(s.root, data_ - s.root.host);
    return DeviceView{h.native, h.offset, s.device()};
}

void Buffer::prepare_for_pipeline(const char *entry, const halide_device_interface_t *interface, bool output) {
    if (output && storage_->readonly)
        throw read_only_output(entry);
    if (!interface) {  // a host-only pipeline reads and writes the host copy
        if (output) begin_host_write(entry);
        else begin_host_read();
        return;
    }
    StorageOp op(*storage_);
    Storage &s = *storage_;
    if (s.root.device && s.root.device_interface != interface) op.defer(s.free_device(entry));
}

bool Buffer::view_covers_root() const {
    // raw_covers_root() of the halide_buffer_t raw() would publish (axes reversed, strides in
    // elements): mins aside.
    const halide_buffer_t &root = storage_->root;
    int n = ndim();
    if (data_ != root.host || n != root.dimensions || dtype_->halide.code != root.type.code ||
        dtype_->halide.bits != root.type.bits)
        return false;
    for (int i = 0; i < n; ++i) {
        const halide_dimension_t &d = root.dim[n - 1 - i];
        if (d.extent != shape_[size_t(i)] ||
            int64_t(d.stride) * dtype_->itemsize != strides_[size_t(i)])
            return false;
    }
    return true;
}

void Buffer::prepare_for_pipeline(const char *entry, const halide_device_interface_t *interface, bool output,
                                  const std::shared_ptr<Device> &device) {
    if (output && storage_->readonly)
        throw read_only_output(entry);
    StorageOp op(*storage_);
    Storage &s = *storage_;
    bool whole = view_covers_root();
    bool forward = std::all_of(strides_.begin(), strides_.end(), [](int64_t stride) { return stride >= 0; });
    bool in_place = whole || s.part_in_place(*device, data_ - s.root.host, forward);
    if (!in_place || s.bound) {
        // A part of a storage the device cannot show as it is: shown without device memory over
        // a current host copy (see publish()); the runtime allocates for it, and that comes home
        // after. Our device copy stays; one under another runtime's interface goes. So for an
        // hl.Buffer's storage, whose device copy only Halide's runtime makes. (An empty storage
        // is placed like any other: Halide's runtimes cannot allocate one.)
        if (s.runtime_memory() && s.root.device_interface != interface)
            op.defer(s.free_device(entry));
        else
            s.download(entry);
        return;
    }
    if (s.root.device && s.device() != device) {
        // The same memory used from another stream is taken over; elsewhere: home first, then placed.
        if (s.device() && s.root.device_interface == device->interface() && device->take_over(s.root, *s.device()))
            s.move_device(device);
        else
            op.defer(s.free_device(entry));
    }
    DeviceChoice on{device, true};
    // An output covering its storage is overwritten whole: allocated. A part computed in place
    // needs the rest of the storage current on the device too (the call leaves all of it device
    // dirty): uploaded, as an input is.
    output && whole ? s.allocate_device(entry, on) : s.upload(entry, on);
}

}  // namespace hb
