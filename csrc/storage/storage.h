// storage.h: a Storage, the memory and residency state a buffer shares with every view of it:
// whose the host memory is and whose the device memory is (one type per kind, each holding what
// only it needs; the device side made on first use), the root halide_buffer_t that is the
// residency state, and the rules that change it (residency.cpp; taking in and publishing the
// halide_buffer_t's handed to foreign code: raw_views.cpp). No Python in here.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <variant>
#include <vector>

#include "abi/halide_abi.h"
#include "core/small_lock.h"
#include "device/device.h"
#include "device/device_interface.h"
#include "storage/raw_view.h"
#include "storage/shared_segment.h"

namespace hb {

/// Whose a storage's host memory is: each kind holds what only it needs, and what it holds
/// goes with the storage (~Storage).
namespace host_memory {
/// Allocated here (128-byte aligned, zero-filled): `allocation` freed, or its `mapped_bytes` of
/// pages of its own unmapped; neither for a small block in the storage's own allocation.
struct Owned {
    void *allocation = nullptr;
    size_t mapped_bytes = 0;
};
/// Someone else's: `owner` keeps it alive until the storage dies.
struct Borrowed {
    std::shared_ptr<void> owner;
};
/// A shared-memory segment other processes may map: unmapped with the storage.
struct Shared {
    std::unique_ptr<SharedSegment> segment;
};
/// A host block of a zero-copy device's pool, with device memory over it (Device::host_block()):
/// `block` gives it back to the pool when the storage dies.
struct Pooled {
    std::shared_ptr<void> block;
};
}  // namespace host_memory
using HostMemory = std::variant<host_memory::Owned, host_memory::Borrowed, host_memory::Shared, host_memory::Pooled>;

/// Whose a storage's device allocation is: the one state Storage::release_device() frees by.
namespace device_memory {
/// No device allocation: the host copy is the only one.
struct None {};
/// An allocation of our backends on `device` (DeviceAllocation, through our interface), whose
/// source says whose the memory is and how it ends (Engine::end()): ours, freed (retired while
/// lent), or someone else's (device_wrap_native; DeviceAllocation::wrapped()), which `owner`
/// keeps alive and which is detached or freed, the owner handed back. Null `owner`: none to keep.
struct Ours {
    std::shared_ptr<Device> device;
    std::shared_ptr<void> owner;
};
/// Allocated by a pipeline's own Halide runtime; freed through the interface it set, with
/// `call_device`, the device of the call whose runtime made it (null: none known), or by the
/// runtime itself, or by a bound hl.Buffer.
struct Runtime {
    std::shared_ptr<Device> call_device;
};
}  // namespace device_memory
using DeviceMemory = std::variant<device_memory::None, device_memory::Ours, device_memory::Runtime>;

/// What a storage holds of devices, made on its first device operation (Storage::device_side()):
/// a storage that never meets a device carries none of it.
struct DeviceSide {
    DeviceMemory memory;
    /// Device memory consumers were handed without a reference of their own, freed since:
    /// released when the storage dies (see Device::retire_lent).
    std::vector<std::shared_ptr<void>> lent_memory;
    Transfers transfers;  ///< every copy of this storage's bytes
};

/// Why a storage's device allocation ends (Storage::release_device()).
enum class DeviceRelease : uint8_t {
    free,    ///< device_free(), a switch of device or interface: freed now, or retired while lent
    detach,  ///< device_detach_native(): wrapped memory handed back to its owner, not freed
    gone,    ///< the pipeline runtime that made it freed it through a view (let_go()): forgotten
    dying,   ///< the storage dies: freed, failures ignored, unless its hl.Buffer's struct shows it
};

/// The device an operation names: `device` is used when the buffer has no device copy yet;
/// when it has one elsewhere, the call is refused if `required`, else it uses that one.
struct DeviceChoice {
    std::shared_ptr<Device> device;
    bool required = false;
    /// An export for a consumer of `device`'s kind: a storage found on a device of another kind
    /// (another thread moved it since the caller looked) is refused before any lease is taken.
    bool same_kind = false;
};

/// Memory and residency state shared by a buffer and every view of it. `mutex` guards all of
/// it (and every view's published halide_buffer_t): one lock per storage.
///
/// Its fields are ordered so that the flags and counters lie packed together: every storage's size
/// is part of what a small buffer costs (docs/performance.md). The root's dimensions follow the
/// storage in its own allocation (Buffer's construction makes both at once).
struct Storage {
    HostMemory host_memory;           ///< whose the host memory (`root.host`) is
    bool readonly = false;            ///< the memory must not be written through us
    bool external_writes = false;     ///< borrowed writable memory its owner may write at any time
    std::atomic<bool> ever_on_device{false};     ///< read without the lock: may a lease copy?
    std::atomic<bool> host_flag_cleared{false};  ///< host_dirty was ever cleared (read without the lock)
    /// An ndarray view was ever handed out (its lifetime is NumPy's); see host_exports.
    std::atomic<bool> ndarray_handed_out{false};
    /// The lock and the GIL: a thread holding this lock never waits for the GIL (a contended
    /// lock is waited for with the GIL released: StorageOp), and never drops the last reference
    /// to something Python may own, which could run Python code that takes this or another
    /// storage's lock: StorageOp::defer() keeps it until the lock is let go. Two storages are
    /// locked in address order. One byte (core/small_lock.h), packed beside the flags.
    SmallLock mutex;
    std::atomic<int> published_views{0};  ///< how many raw_views, read without the lock
    /// Who may hold a pointer into the host memory that no view accounts for: live buffer-protocol
    /// exports, and ndarray_handed_out. share_memory() moves a heap block only when both are zero.
    std::atomic<int> host_exports{0};

    /// The whole storage as Halide sees it (the first view's geometry). Its flags, device and
    /// device_interface are THE residency state; every device operation is a call through
    /// root.device_interface on it, so one transfer always moves the whole storage.
    /// root.host is the host memory (the element at index 0 of the first view; owned memory's
    /// aligned start); root.dim points after the storage, into its own allocation (null for no
    /// dimensions).
    halide_buffer_t root{};
    /// What the storage holds of devices, made on first use (the caller holds `mutex`).
    DeviceSide &device_side() {
        if (!device_side_) device_side_ = std::make_unique<DeviceSide>();
        return *device_side_;
    }
    /// The device side, if made.
    const DeviceSide *device_side_if_made() const { return device_side_.get(); }
    /// Whose the device allocation is (None without a device side).
    const DeviceMemory &device_memory() const;
    /// The device our or wrapped device memory lives on; null for none, or a runtime's.
    const std::shared_ptr<Device> &device() const;
    /// The device allocation is a pipeline runtime's.
    bool runtime_memory() const { return std::holds_alternative<device_memory::Runtime>(device_memory()); }
    /// Copies and bytes moved for this storage so far (none without a device side).
    const Transfers &transfers() const;
    /// Our or wrapped device memory is the same memory on `to` from now on (another stream of
    /// the device: Device::take_over()).
    void move_device(std::shared_ptr<Device> to);
    RawViews raw_views;                    ///< halide_buffer_t's handed to foreign code, still alive
    /// Adds a view's halide_buffer_t to raw_views, and removes it (counted in published_views).
    void add_raw_view(RawView *r);
    void remove_raw_view(RawView *r);
    /// The owner's own halide_buffer_t (an hl.Buffer's, see Buffer::bind_struct()), published for the
    /// storage's whole life; null for other storages.
    std::unique_ptr<RawView> bound;
    uint64_t generation = 0;               ///< counts residency operations (see HostWriteMark)
    /// The ticket of the device work a pipeline call queued on this storage's memory on a device
    /// sharing the host's memory (Device::ticket_queued_work()), which may still read or write it
    /// after the call returned; 0: none. Set by the call without the lock (note_queued_work()),
    /// cleared by the wait (await_queued_work()).
    std::atomic<uint64_t> queued_work{0};

private:
    std::unique_ptr<DeviceSide> device_side_;

public:

    Storage() = default;
    Storage(const Storage &) = delete;
    Storage &operator=(const Storage &) = delete;
    ~Storage();

    // The rules (residency.cpp; taking in and publishing views: raw_views.cpp); the caller holds `mutex`.
    uint64_t effective_flags() const;
    /// Takes in what foreign code wrote into published views: flags, device memory.
    void absorb_raw_views();
    void absorb(RawView &r);
    void let_go(RawView &r);     ///< foreign code freed what a view showed
    bool bring_home(RawView &r);  ///< a pipeline's allocation for part of the storage
    int copy_root_home();        ///< the interface's copy_to_host on the root; Halide's code
    void download(const char *entry);
    /// A pipeline call queued work on the storage's memory under `ticket`: kept unless a later
    /// ticket is.
    void note_queued_work(uint64_t ticket);
    /// Waits for the device work queued on the storage's memory (queued_work), where it may still
    /// run: on a device sharing the host's memory, that work reads and writes the host memory itself.
    void await_queued_work();
    /// The host copy made ready for a host writer: a newer device copy comes home, and device
    /// work still reading the memory finishes first (the rule of one memory, docs/devices.md).
    void prepare_host_write(const char *entry);
    void allocate_device(const char *entry, const DeviceChoice &on);  ///< device memory on `on`, if none yet
    void upload(const char *entry, const DeviceChoice &on);
    /// Frees the device allocation (device_free()): refused while a running pipeline call computes
    /// in it (refuse_lent()); a newer device copy comes home first.
    std::shared_ptr<void> free_device(const char *entry);
    /// The one place a device allocation ends, as its DeviceMemory says, for `how`: after it
    /// the storage has none and no view shows it. Returns a wrapped allocation's owner, for the
    /// caller to drop after the lock (StorageOp::defer()).
    std::shared_ptr<void> release_device(const char *entry, DeviceRelease how);
    void adopt_allocation();     ///< our new allocation: its copies move and count this storage
    /// The device every operation on the device copy runs with (TargetDevice): the one it lives
    /// on, or for a pipeline runtime's allocation the device of the call that made it, whose
    /// context that runtime's hooks must be given.
    Device *operation_device() const;
    void forget_view_handles();
    /// BufferError naming `entry` while a running pipeline call computes in the device copy (a
    /// lent view shows it): it must not be freed or moved under the call.
    void refuse_lent(const char *entry) const;
    /// Whether a pipeline runtime computing on `on` can be shown a part of the storage in our
    /// device memory as it is (it computes in place): the part's element at index 0 lies
    /// `offset` bytes past the root's, `forward` says no stride is negative, and the device can
    /// show a part starting there (Device::shows_part; in the allocation it holds of this
    /// storage, or a new one). Never for a storage bound to an hl.Buffer, nor for memory its
    /// owner may write at any time (external_writes: the whole storage would go up every call).
    bool part_in_place(const Device &on, int64_t offset, bool forward) const;
    /// BufferError naming `entry` for a bound storage: our device memory never goes into its
    /// owner's halide_buffer_t, whose device copy only Halide's runtime makes.
    void refuse_bound(const char *entry) const;
    /// Writes the shared state into a view's halide_buffer_t (may_copy: downloading first when
    /// the device copy is one the view cannot show).
    void publish(RawView &r, bool may_copy);
    void publish_all();
};

/// Drops a dying shared storage from the table from_shared() finds storages in.
void forget_shared_storage(uint64_t identity);

}  // namespace hb
