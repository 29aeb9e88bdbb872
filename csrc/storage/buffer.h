// buffer.h: the Buffer core. A Buffer is a view (dtype, shape, strides, mins) onto a Storage,
// which owns or borrows the host memory and holds the one residency state shared by the
// buffer and all its views. No Python in here: the bindings wrap it.
//
// Axis order is NumPy's (axis 0 outermost); strides are in bytes. The halide_buffer_t that
// raw() publishes lists the same axes reversed (dim 0 innermost), strides in elements.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "abi/halide_abi.h"
#include "core/axes.h"
#include "core/dtype.h"
#include "core/layout.h"
#include "device/device.h"
#include "device/embedder.h"
#include "storage/lease.h"
#include "storage/raw_view.h"
#include "storage/storage.h"

namespace hb {

/// How Buffer::current_host_copy() lays out its copy.
enum class CopyLayout : uint8_t {
    c_order,     ///< C-contiguous, mins 0 (copy())
    same_order,  ///< dense in the view's memory order, with its mins (copy_keeping_layout())
};

/// One axis of an index expression, already normalised to positions by the caller.
struct AxisIndex {
    bool keep;       ///< false: an integer index (the axis disappears); true: a slice
    int64_t start;   ///< first position taken
    int64_t step;    ///< slices only: distance between taken positions (may be negative)
    int64_t length;  ///< slices only: number of positions taken
};

/// An index expression, one AxisIndex per axis, held in place: one is made for every b[key].
struct Index {
    AxisIndex axes[kMaxDims];
    size_t size = 0;
    /// The next axis's index; the caller gives at most one per axis of the buffer.
    void push_back(const AxisIndex &a) { axes[size++] = a; }
};

class Buffer {
public:
    /// Owned, zero-filled, 128-byte aligned, C-contiguous storage.
    static Buffer allocate(const char *entry, Axes shape, const DType &dtype);
    /// The same, laid out densely in `order`: the axes from outermost to innermost in memory (a
    /// permutation; negative axes count from the end).
    static Buffer allocate(const char *entry, Axes shape, const DType &dtype,
                           const std::vector<int> &order);
    /// allocate(), on a zero-copy device (Device::host_block()) in host memory from its pool with
    /// device memory over it, reused from one storage to the next; its contents are undefined
    /// (for outputs written whole). Anywhere else, or with no device: allocate().
    static Buffer allocate_on(const char *entry, Device *device, Axes shape, const DType &dtype);
    /// allocate() with other's shape, mins and memory order (Halide's make_with_shape_of).
    static Buffer allocate_like(const char *entry, const Buffer &other, const DType &dtype);
    /// allocate() in Halide's interleaved layout: axis 0 (the channels, Halide's last dimension)
    /// innermost in memory, the other axes C-ordered outside it.
    static Buffer allocate_interleaved(const char *entry, const Axes &shape, const DType &dtype);
    /// An owned C-contiguous copy of strided memory (any byte strides, even unaligned ones).
    static Buffer copy_of(const char *entry, const uint8_t *data, const Axes &shape,
                          const Axes &strides, const DType &dtype);
    /// allocate() in a new shared-memory segment (is_shared() from the start).
    static Buffer allocate_shared(const char *entry, const Axes &shape, const DType &dtype,
                                  const std::vector<int> &order);
    /// A view of a segment another process handed over (`fd`, taken), whose element at index 0
    /// of every axis lies `offset` bytes in: a view of this process's storage on it when there
    /// is one, else a new shared storage. The geometry must lie inside the segment.
    static Buffer from_shared(const char *entry, int fd, int64_t offset, const Axes &shape,
                              const Axes &strides, const DType &dtype, bool readonly);
    /// A view of someone else's memory; `data` is the element at index 0 of every axis.
    static Buffer wrap(const char *entry, uint8_t *data, Axes shape, Axes strides,
                       const DType &dtype,
                       std::shared_ptr<void> owner, bool readonly, bool external_writes);

    Buffer(Buffer &&) noexcept;
    Buffer &operator=(Buffer &&) = delete;
    ~Buffer();

    // --- geometry --------------------------------------------------------------------------
    const DType &dtype() const { return *dtype_; }
    int ndim() const { return static_cast<int>(shape_.size()); }
    const Axes &shape() const { return shape_; }
    const Axes &strides() const { return strides_; }  ///< bytes
    const Axes &mins() const { return mins_; }        ///< Halide coordinates
    int64_t size() const {
        int64_t n = 1;
        for (int64_t e : shape_) n *= e;
        return n;
    }
    int64_t nbytes() const { return size() * dtype_->itemsize; }
    uint8_t *data() const { return data_; }  ///< element at index 0 of every axis
    bool is_c_contiguous() const { return is_contiguous(shape_, strides_, dtype_->itemsize, Order::C); }
    bool is_f_contiguous() const { return is_contiguous(shape_, strides_, dtype_->itemsize, Order::F); }
    /// The axes from outermost to innermost in memory (hb::memory_order()).
    std::vector<int> memory_order() const { return hb::memory_order(strides_); }
    /// Whether these Halide coordinates (one per axis) lie inside [min, min + extent) on every axis.
    bool contains(const Axes &coords) const;
    /// Gives this view other mins (one per axis), in place: the elements stay. Takes the storage's
    /// lock to update the view's published halide_buffer_t, and refuses (BufferError) rather
    /// than wait when another thread holds it.
    void set_min(const Axes &mins);
    bool readonly() const { return storage_->readonly; }
    bool external_writes() const { return storage_->external_writes; }
    /// The host memory was allocated for this storage (by us, or a device's pool): no other
    /// storage's memory, and no view of it shows an element twice. Borrowed and shared memory is not.
    bool memory_of_its_own() const {
        return std::holds_alternative<host_memory::Owned>(storage_->host_memory) ||
               std::holds_alternative<host_memory::Pooled>(storage_->host_memory);
    }
    /// True when both are views of the same storage (and so share residency).
    bool shares_storage_with(const Buffer &other) const { return storage_ == other.storage_; }
    /// The view's halide_buffer_t would show the storage's whole root: the same elements at the
    /// same addresses, whatever its mins (residency.cpp).
    bool view_covers_root() const;
    /// Keeps the memory (and whoever owns it) alive for a holder that needs no view of it.
    std::shared_ptr<const void> keep_alive() const { return storage_; }
    /// For code that accounts for what keeps what alive (the bindings show Python's garbage
    /// collector the objects a buffer keeps): calls visit(owner) on each owner the storage
    /// holds (the host memory's owner, a wrapped device handle's owner, memory lent out),
    /// stopping at the first nonzero result, which it returns. Visits nothing unless those
    /// references are this view's alone: no other view, export or holder shares the storage.
    /// Nor while someone holds the storage's lock (a residency operation may be changing them).
    template <typename F>
    int visit_sole_owners(F &&visit) const {
        if (!storage_ || storage_.use_count() != 1) return 0;
        std::unique_lock<SmallLock> lock(storage_->mutex, std::try_to_lock);
        if (!lock.owns_lock()) return 0;
        const Storage &s = *storage_;
        if (auto *borrowed = std::get_if<host_memory::Borrowed>(&s.host_memory))
            if (int r = visit(borrowed->owner)) return r;
        if (auto *ours = std::get_if<device_memory::Ours>(&s.device_memory()))
            if (int r = visit(ours->owner)) return r;
        if (const DeviceSide *d = s.device_side_if_made())
            for (const std::shared_ptr<void> &lent : d->lent_memory)
                if (int r = visit(lent)) return r;
        return 0;
    }

    // --- views (share storage and residency) -----------------------------------------------
    Buffer view() const;  ///< same geometry, same storage; the starting point of every view
    Buffer cropped(int64_t axis, int64_t min, int64_t extent) const;
    Buffer sliced(int64_t axis, int64_t pos) const;
    Buffer transposed(const std::vector<int> &axes) const;
    Buffer with_mins(const Axes &mins) const;  ///< same elements, other coordinates
    Buffer translated(int64_t axis, int64_t delta) const;           ///< mins[axis] + delta
    Buffer translated(const Axes &deltas) const;    ///< every min moved, one delta per axis
    /// A new axis of extent 1 at `axis` (of the result; -ndim-1..ndim) whose min is `pos`, with the
    /// stride numpy.expand_dims gives it.
    Buffer embedded(int64_t axis, int64_t pos) const;
    Buffer add_dimension() const;  ///< a new outermost axis (Halide's new last dimension), min 0
    Buffer indexed(const Index &index) const;
    Buffer bits() const;  ///< same bytes as the unsigned integer of the same size

    /// A C-contiguous owned copy of the host elements (a new storage, host dirty). The caller
    /// makes the host copy current first (current_host_copy() does both).
    Buffer copy(const char *entry) const;

    /// An owned copy laid out densely in this view's memory order (NumPy's order 'K'), with
    /// its mins: what copy.deepcopy() and pickling of a view with gaps make. The caller makes
    /// the host copy current first (current_host_copy(), CopyLayout::same_order).
    Buffer copy_keeping_layout(const char *entry) const;
    /// Whether the elements fill [lowest address, lowest + nbytes) exactly, strides positive
    /// (any axis order): the bytes can travel as one run.
    bool is_dense() const;
    /// This dense view's bytes as a 1-d uint8 view of the same storage (see is_dense()).
    Buffer dense_bytes(const char *entry) const;

    // --- shared memory (buffer_shared.cpp) ---------------------------------------------------
    bool is_shared() const { return std::holds_alternative<host_memory::Shared>(storage_->host_memory); }
    /// Moves the storage into a shared-memory segment, once (a no-op when it is there); the
    /// host copy is made current first and the device copy released. Pages of its own are
    /// replaced in place, so every view, export and halide_buffer_t stays valid; a heap block
    /// moves only while nothing else can point into it (BufferError otherwise, as for borrowed
    /// memory and an hl.Buffer's).
    void share_memory(const char *entry);
    /// What another process needs to map this view: the segment's descriptor (owned by the
    /// storage) and the byte offset of the view's element at index 0 in it.
    struct SharedHandle {
        int fd;
        int64_t offset;
    };
    SharedHandle shared_handle(const char *entry) const;
    /// Notes a buffer-protocol export of the host memory (taken or released) and an ndarray
    /// view handed out, for share_memory()'s check.
    /// Called with the GIL held (the buffer protocol's calls), so no two run at once: a plain
    /// read and write, not a locked add, which would be a sixth of an export's cost.
    void note_host_export(int delta) const {
        storage_->host_exports.store(storage_->host_exports.load(std::memory_order_relaxed) + delta,
                                     std::memory_order_relaxed);
    }
    void note_ndarray_handed_out() const { storage_->ndarray_handed_out = true; }

    // --- residency (residency.cpp): each takes the storage's lock -----------------------------
    bool host_dirty();
    bool device_dirty();
    void set_host_dirty(bool value);
    void set_device_dirty(bool value);
    bool has_device_allocation();
    /// The device holding the device copy; null without one, or when a pipeline's runtime does.
    std::shared_ptr<Device> device();
    /// Makes the host copy current: a no-op unless the device copy is newer.
    void copy_to_host();
    /// Allocates on `on` if needed, then uploads if the host is newer.
    void copy_to_device(const DeviceChoice &on);
    /// Allocates on `on` if needed; the device copy starts empty, so the host counts as newer.
    void device_malloc(const DeviceChoice &on);
    /// Releases the device allocation, downloading first if the device copy is newer.
    void device_free();
    /// Blocks until every command queued on the buffer's device has finished.
    void device_sync();
    /// A pipeline call queued device work under `ticket` (Device::ticket_queued_work()) that may
    /// read or write this buffer's host memory after it returns (a device sharing the host's
    /// memory): host writes wait for it (Storage::await_queued_work()). Takes no lock.
    void note_queued_work(uint64_t ticket) const { storage_->note_queued_work(ticket); }
    /// Adopts `native` (a cl_mem or CUdeviceptr on `on`, the buffer's element `offset` bytes in) as the device copy, which
    /// becomes the current one. `owner` keeps whoever allocated it alive.
    void device_wrap_native(const std::shared_ptr<Device> &on, uint64_t native, uint64_t offset,
                            std::shared_ptr<void> owner);
    /// Lets go of a wrapped allocation (downloading first if it is newer); returns its owner.
    std::shared_ptr<void> device_detach_native();
    /// What a device consumer gets: the memory (with a reference it must release), the byte
    /// offset of this view's first element, the device.
    struct DeviceView {
        void *native;
        int64_t offset;
        std::shared_ptr<Device> device;
    };
    // The leases of consumers (leases.cpp): every export, pickle, copy and hand-over takes one
    // of these, so each rule is written once. Callers run them by unlocked_if_may_copy()'s rule (below).
    /// Whether a consumer doing `access` gets a write lease: for Access::write, and for
    /// Access::may_write over writable memory.
    bool lease_writes(Access access) const {
        return access == Access::write || (access == Access::may_write && !readonly());
    }
    /// The lease of a host consumer: begin_host_write(entry) when lease_writes(access), else
    /// begin_host_read() (whose download is copy_to_host()'s). Inline: on the small-object path
    /// (np.asarray(b), memoryview(b)) it must cost what the lease alone costs.
    HostLease lease_host(const char *entry, Access access) {
        if (!lease_writes(access)) {
            if (!residency_untouched()) begin_host_read();  // untouched: nothing to do, no call
            return HostLease{};
        }
        return HostLease{true, begin_host_write(entry)};
    }
    /// A copy of the current host data in a new storage: a host read lease, then copy() or
    /// copy_keeping_layout() (`layout`). The one "lease, then copy".
    Buffer current_host_copy(const char *entry, CopyLayout layout = CopyLayout::c_order);
    /// The lease of a device consumer on `on`: begin_device_use(), writing as `access` says.
    DeviceView lease_device(const char *entry, const DeviceChoice &on, Access access);
    /// False while the storage has never had a device copy: leases cannot move data (a hint
    /// read without the lock, so bindings keep the GIL for leases that cannot copy).
    bool may_hold_device_copy() const { return storage_->ever_on_device.load(std::memory_order_relaxed); }
    /// True while nothing can have changed the residency state since construction: never on a
    /// device, no halide_buffer_t out, host_dirty never cleared. Leases are then no-ops (read
    /// without the lock: exports are hot paths).
    bool residency_untouched() const {
        return storage_->published_views.load(std::memory_order_acquire) == 0 && !may_hold_device_copy() &&
               !storage_->host_flag_cleared.load(std::memory_order_relaxed);
    }
    /// Makes the buffer ready for a pipeline that reaches device memory through `interface`
    /// (null: a host-only pipeline): a device copy it cannot use comes home and is released
    /// (Halide refuses to switch interfaces); a host-only pipeline gets a current host copy,
    /// and an output the lease of a host writer.
    void prepare_for_pipeline(const char *entry, const halide_device_interface_t *interface, bool output);
    /// The same for a pipeline whose runtime uses `device`'s memory as it is (a CUDA pipeline in
    /// the primary context: the same pointers): a view covering its storage is placed there
    /// first (an input uploaded, an output allocated), so the pipeline reads and writes our
    /// device copy; other views as above.
    void prepare_for_pipeline(const char *entry, const halide_device_interface_t *interface, bool output,
                              const std::shared_ptr<Device> &device);
    /// This view is about to be overwritten whole on a device (a device pipeline's output): its
    /// lent halide_buffer_t (see lend()) stops asking for an upload of the old contents, when the view
    /// covers its storage (the rest of a storage matters) and no device copy is newer.
    void expect_overwrite(RawView &view);
    /// This view is about to be read by a device pipeline: if its lent halide_buffer_t shows no
    /// device copy, it asks for an upload (Halide's runtime uploads only host-dirty inputs, and
    /// the host copy is the current one then).
    void expect_upload(RawView &view);
    /// Where the current data is and whose the memory is, read in one residency operation.
    struct MemoryFacts {
        uint64_t flags;                        ///< the effective flags (host_dirty, device_dirty)
        bool device_allocation;                ///< there is a device copy
        /// Whose the device memory is, in words ("owned", "wrapped", "a pipeline runtime's");
        /// null without any.
        const char *device_memory;
        std::shared_ptr<Device> device;        ///< its device; null without one, or a pipeline runtime's
        bool host_shared;                      ///< the host memory is a shared-memory segment
        std::shared_ptr<void> host_owner;      ///< borrowed host memory: what keeps it alive; else null
    };
    MemoryFacts memory_facts();
    // --- data operations (buffer_data.cpp): the residency rules of a write ------------------
    /// Sets every element to `pattern` (itemsize bytes): on the device when the device copy is
    /// current and the device can (nothing moves; device dirty), else on a current host copy
    /// (host dirty).
    void fill(const char *entry, const uint8_t *pattern);
    /// Copies `src`'s elements at the coordinates both domains share (Halide's rule: mins
    /// matter) into this buffer, wherever each side's current copy is: device to device on one
    /// device, only those elements across the bus otherwise (counted), host to host else.
    void copy_from(const char *entry, const Buffer &src);

    /// Copies and bytes moved for this buffer's storage so far.
    const Transfers &transfers() const { return storage_->transfers(); }

    /// The halide_buffer_t describing this view, flags refreshed from the shared state.
    /// `shown_as`: the interface a pipeline's runtime knows our device copy by (the same
    /// pointers under its own table), for a view covering its storage; null: ours.
    halide_buffer_t *raw(const char *entry, const halide_device_interface_t *shown_as = nullptr);
    /// Describes this view in a fresh `buf` as raw() does (host, type, and the dimensions in
    /// Halide's order, written to `dims`, room for ndim()), with no flags and no device: the
    /// geometry alone, unpublished (what a direct pipeline call passes; raw() publishes it).
    void describe(halide_buffer_t &buf, halide_dimension_t *dims) const;
    /// A halide_buffer_t of this view for one pipeline call alone, published as raw() publishes
    /// (`shown_as` likewise): raw()'s own when no other call has it, else one made for the call.
    /// Every other operation on the storage leaves it alone (RawView::lent) until take_back()
    /// takes in what the call left in it (flags, device memory) and drops one made for the call.
    RawView *lend(const char *entry, const halide_device_interface_t *shown_as);
    void take_back(RawView *view);

    // --- halide_buffer_t's others own, describing a storage's memory (raw_views.cpp) -----------
    // Structs a bridge to their owner's runtime (interop/halide_bridge.cpp: an hl.Buffer's) makes
    // one residency state with the storage: published as views of it, taken in before every
    // operation and written back after it. The bridge knows the owner; these keep the rules.
    /// Binds `external`, which describes exactly this view of a storage wrap() just made over its
    /// memory (its coordinates aside) and lives as long as the storage (its owner is wrap()'s),
    /// as the storage's bound view for the storage's whole life: its device copy and flags become
    /// the storage's at once. This view and the storage's root take its coordinates (mins).
    void bind_struct(halide_buffer_t *external);
    /// The halide_buffer_t the storage is bound to (bind_struct()), after taking in what changed
    /// there; null when none, or no longer (its owner changed it in place).
    const halide_buffer_t *bound_struct();
    /// A reference to the storage that does not keep it alive: what a registry of bound structs
    /// keeps, so that a struct seen again gives a view of its storage (view_of_bound()).
    std::weak_ptr<Storage> storage_ref() const { return storage_; }
    /// The view `external` describes (this geometry and dtype, its host memory the element at index
    /// 0 of every axis) of `storage`, when `storage` is alive and still bound to `external`
    /// (bound_struct()); nothing otherwise. One struct, one storage: never a second state.
    static std::optional<Buffer> view_of_bound(std::shared_ptr<Storage> storage, const halide_buffer_t *external,
                                               const DType &dtype, const Axes &shape, const Axes &strides,
                                               const Axes &mins);
    /// Publishes `external` (a halide_buffer_t someone else made over exactly this view's memory
    /// and keeps alive) as a view of the storage: before every operation what its owner left
    /// there is taken in, after it the shared state is written back. The struct is shown the
    /// state right away: a device copy it can show, else host only over a current host copy.
    /// Valid until withdraw_struct().
    std::unique_ptr<RawView> publish_struct(halide_buffer_t *external);
    /// Whether `view` (publish_struct()'s) still describes its memory: its owner changed nothing
    /// in place.
    bool struct_published(RawView &view);
    /// Ends publish_struct() before the struct's owner lets go of it: what it shows is taken in; a
    /// pipeline runtime's device copy it shows (one its owner would free with it) is freed, its
    /// data coming home first; otherwise a newer device copy comes home (whatever still holds the
    /// struct reads current host data) and stays. The struct is left host only, host dirty,
    /// showing no device memory. The view goes even when that throws.
    void withdraw_struct(const char *entry, std::unique_ptr<RawView> view);

private:
    // The leases themselves (residency.cpp), reached through lease_host(), lease_device(),
    // current_host_copy() and prepare_for_pipeline(): Access says which, in one place.
    /// Lease for a reader of the host memory: the host copy becomes current.
    void begin_host_read();
    /// Lease for a writer of the host memory: current, then host dirty. The result can take the
    /// mark back if the writer never comes (see HostWriteMark).
    HostWriteMark begin_host_write(const char *entry);
    /// Lease for a device consumer: the device copy becomes current (as copy_to_device(on))
    /// and, for a writer of writable memory, device dirty.
    DeviceView begin_device_use(const char *entry, const DeviceChoice &on, bool write);

    Buffer() = default;
    /// A view of the same storage, dtype and first element with no axes yet: what a view that
    /// builds its geometry axis by axis starts from.
    Buffer unshaped_view() const;
    /// A new halide_buffer_t describing this view (raw()'s and lend()'s), registered with the storage.
    std::unique_ptr<RawView> new_raw_view() const;
    /// Publishes `view` for `shown_as` and the pipeline call running now (TargetDevice).
    void publish_for_call(RawView &view, const halide_device_interface_t *shown_as);
    /// A new buffer laid out as `layout` (dense_layout(), made once by the caller) in new host
    /// memory of its own: zero-filled, 128-byte aligned, in the storage's own allocation when
    /// small, pages of its own when large. Nothing more is asked of the layout rules.
    static Buffer allocate_laid_out(const char *entry, Layout layout, const DType &dtype);
    /// A new buffer laid out as `layout` (dense_layout()) over `host`, whose memory `memory` is
    /// (a device's pooled block, a shared segment's): the storage made, nothing allocated for the data.
    static Buffer over_new_storage(Layout layout, const DType &dtype, HostMemory memory, uint8_t *host);
    /// The first view of a new storage over `data`, whose root halide_buffer_t it describes. The
    /// geometry is taken, not copied (rvalue references: each value moves once, into the view).
    static Buffer adopt_storage(std::shared_ptr<Storage> storage, const DType &dtype, uint8_t *data,
                                Axes &&shape, Axes &&strides);
    /// `axis` as 0..ndim-1 (negative counts from the end), or IndexError naming `entry`; `verb`
    /// says what the call does to an axis ("crop").
    int check_axis(const char *entry, const char *verb, int64_t axis) const;
    /// `count` values given for one per axis, or ValueError: "<entry>(): 3 <what>s for a 2-d buffer; <fix>".
    void check_per_axis(const char *entry, const char *what, size_t count, const char *fix) const;
    Buffer embed(const char *entry, int64_t axis, int64_t pos) const;

    std::shared_ptr<Storage> storage_;
    const DType *dtype_ = nullptr;
    uint8_t *data_ = nullptr;
    Axes shape_, strides_, mins_;
    std::unique_ptr<RawView> raw_;
};

/// Runs `step`, a residency operation on `b` (a lease, a host copy, a sync, a binding of a foreign
/// struct), and returns what it returns: through the embedder's run_unlocked() (in Python, without
/// the GIL, so other threads go on during the copy) where `b` may hold a device copy, so the step
/// may move data or wait for a device; as it is where it cannot (never on a device: nothing to
/// copy), since a small buffer's export is a hot path and must cost the check alone. The one rule
/// of the core's exports (run_export()) and the binding's residency operations (the binding's
/// run_unlocked() lets the GIL go, so other Python threads go on during the copy).
template <typename F>
auto unlocked_if_may_copy(const Buffer &b, F &&step) -> decltype(step()) {
    using Result = decltype(step());
    if (!b.may_hold_device_copy()) return step();
    if constexpr (std::is_void_v<Result>) {
        embedder().run_unlocked([&] { step(); });
    } else {
        std::optional<Result> out;
        embedder().run_unlocked([&] { out.emplace(step()); });
        return std::move(*out);
    }
}

}  // namespace hb
