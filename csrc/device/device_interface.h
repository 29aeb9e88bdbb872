// device_interface.h: the one mechanism every device operation goes through.
//
// A buffer's device copy is reached only through the halide_device_interface_t stored in its
// halide_buffer_t: ours (the backends here fill the impl half; the public half below is shared
// and implements Halide's flag rules) or the one a pipeline's own Halide runtime set. What our
// backends store in halide_buffer_t::device is theirs to choose (device_engine.h); transfers are
// counted where the bytes move; a failing backend call leaves the driver's code in this thread's DeviceFailure.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <variant>

#include "abi/halide_abi.h"

namespace hb {

class Device;

/// Halide's error codes (HalideRuntime.h, enum halide_error_code_t) that our tables return.
namespace halide_error {
constexpr int bad_type = -3;
constexpr int out_of_memory = -11;
constexpr int copy_to_host_failed = -14;
constexpr int copy_to_device_failed = -15;
constexpr int device_malloc_failed = -16;
constexpr int device_sync_failed = -17;
constexpr int no_device_interface = -19;
constexpr int gpu_device_error = -29;
constexpr int device_wrap_native_failed = -32;
constexpr int device_detach_native_failed = -33;
constexpr int host_is_null = -34;
constexpr int device_interface_no_device = -36;
constexpr int host_and_device_dirty = -37;
constexpr int buffer_is_null = -38;
constexpr int device_buffer_copy_failed = -39;
constexpr int device_crop_failed = -41;
constexpr int incompatible_device_interface = -42;
constexpr int bad_dimensions = -43;
}  // namespace halide_error

// ---------------------------------------------------------------------------------------------
// Transfer accounting
// ---------------------------------------------------------------------------------------------

/// Copies and bytes moved in each direction (one per storage, one for the process), and maps:
/// hand-overs of zero-copy memory (the device's memory is the host's), which move no byte.
struct Transfers {
    std::atomic<int64_t> to_device{0}, to_device_bytes{0}, to_host{0}, to_host_bytes{0};
    std::atomic<int64_t> maps_to_device{0}, maps_to_host{0};
};
/// Every transfer of the process, whoever's storage it was.
Transfers &process_transfers();
enum class Direction { to_device, to_host };
/// Counts one copy of `bytes` in `storage` (may be null) and in the process total.
void record_transfer(Transfers *storage, Direction direction, int64_t bytes);
/// Counts one map (no bytes moved) in `storage` (may be null) and in the process total.
void record_map(Transfers *storage, Direction direction);

// ---------------------------------------------------------------------------------------------
// Device handles of our backends
// ---------------------------------------------------------------------------------------------

/// Where a device allocation's memory came from, which says how it ends (Engine::end(), one
/// lambda each): each kind holds what only it needs. A new kind of memory (a pinned host pool,
/// an asynchronous free) is one more alternative here and one more lambda there.
namespace memory_source {
/// Made by the driver for us (Device::driver()), or from the pool and shared out since
/// (DeviceAllocation::share_out()): our reference, released to the driver.
struct Driver {};
/// From the device's pool (DevicePool), in a size class: given back to it, which keeps it or,
/// beyond its limit, releases it to the driver.
struct Pooled {};
/// Zero-copy: device memory over host memory a storage owns (its first byte `host`), so copies
/// between the two are maps. Released after the queue finished: the host memory's owner may
/// free it as soon as the release returns (the driver would only defer its own part).
struct OverHost {
    const uint8_t *host;
};
/// Zero-copy over a host block of the device's pool (Device::host_block()): another reference
/// on the block's memory, released at once (the pool waits for the queue before it frees a block).
struct OverPoolBlock {
    const uint8_t *host;
};
/// Someone else's (wrap_native: Halide's rule, the caller keeps it alive): nothing released.
struct Borrowed {};
/// Someone else's, with a reference of our own on it (OpenCL's finish_wrap): ours released.
struct Retained {};
}  // namespace memory_source
using MemorySource = std::variant<memory_source::Driver, memory_source::Pooled, memory_source::OverHost,
                                  memory_source::OverPoolBlock, memory_source::Borrowed, memory_source::Retained>;

/// How far a device allocation is in its life (the diagram below); each step is one method.
enum class AllocationStage : uint8_t {
    in_use,   ///< its buffer's: ended by its device_free or detach_native
    lent,     ///< lend(): a consumer holds a raw pointer into it, so it ends no earlier than its storage
    retired,  ///< retire(): lent, and its buffer let go; ended when its storage dies (Storage::lent_memory)
};

/// One device allocation, shared by the handles (OpenCL) or halide_buffer_t's (CUDA: through
/// their `padding` field) that point into it. Its life (docs/architecture.md, "Device memory"):
///
///     made by an allocator (Driver, Pooled, OverHost, OverPoolBlock) or wrapped (Borrowed)
///         │ retain(): Borrowed ▶ Retained;  share_out(): Pooled ▶ Driver (a consumer holds it)
///         │ lend(): a consumer holds a raw pointer into it, no reference of its own (CUDA)
///         ▼
///       lent ── retire(): its buffer lets go (device_free, detach) ──▶ retired
///         │                                                             │ its storage dies
///         ▼ Engine::end() at device_free / detach_native                ▼ Engine::end()
///       ended: as its source says, then the record deleted
struct DeviceAllocation {
    DeviceAllocation(std::shared_ptr<Device> on, void *memory, uint64_t bytes, MemorySource from)
        : device(std::move(on)), native(memory), size(bytes), source(from) {}

    std::shared_ptr<Device> device;   ///< where it lives
    void *native = nullptr;           ///< cl_mem, or the CUdeviceptr of its lowest byte
    uint64_t size = 0;                ///< bytes of `native`
    MemorySource source;              ///< where the memory came from: how it ends
    Transfers *transfers = nullptr;   ///< counters of the storage it backs (null: none of ours)
    /// The storage's root halide_buffer_t: copies through any handle move all of it, since one
    /// state covers the storage (null: copy what the buffer describes).
    const halide_buffer_t *whole = nullptr;

    /// Zero-copy: the host memory that is this allocation's memory (its first byte), so copies
    /// between the two are maps; null for memory of its own, copied.
    const uint8_t *over_host() const {
        if (auto *over = std::get_if<memory_source::OverHost>(&source)) return over->host;
        if (auto *block = std::get_if<memory_source::OverPoolBlock>(&source)) return block->host;
        return nullptr;
    }
    /// Someone else's memory (wrap_native), whether or not we hold a reference of our own.
    bool wrapped() const {
        return std::holds_alternative<memory_source::Borrowed>(source) ||
               std::holds_alternative<memory_source::Retained>(source);
    }
    bool lent() const { return stage_ != AllocationStage::in_use; }  ///< lent, retired or not
    bool retired() const { return stage_ == AllocationStage::retired; }
    /// We took a reference of our own on borrowed memory: ours to release from now on.
    void retain() { source = memory_source::Retained{}; }
    /// A consumer holds the memory beyond our end (a reference of its own, or a raw pointer while
    /// lent): it goes to the driver when it ends, never back to the pool, which would hand it
    /// to the next user under the consumer's feet.
    void share_out() {
        if (std::holds_alternative<memory_source::Pooled>(source)) source = memory_source::Driver{};
    }
    /// A consumer was handed a raw pointer into it: it ends no earlier than its storage.
    void lend() {
        share_out();
        if (stage_ == AllocationStage::in_use) stage_ = AllocationStage::lent;
    }
    /// Detached from its buffer, waiting for its storage to die (Storage::lent_memory): no
    /// buffer's device_free may end it, and no buffer shows it, so nothing copies through it.
    void retire() {
        stage_ = AllocationStage::retired;
        whole = nullptr;
    }

private:
    AllocationStage stage_ = AllocationStage::in_use;
};

/// What Engine::device_malloc asks of a DeviceAllocator: `bytes` (never 0), and the host memory
/// the device memory would mirror (its first byte, null for none) with the buffer's element
/// size, for an allocator that can put device memory over host memory.
struct AllocationRequest {
    uint64_t bytes = 0;
    const uint8_t *host = nullptr;
    int itemsize = 0;
};

/// The bytes a buffer's elements occupy, relative to the element at `host`: [lo, hi). `dense`
/// when every byte in between belongs to an element (no gaps, any axis order).
struct ByteSpan {
    int64_t lo = 0, hi = 0;
    bool dense = true;
    int64_t size() const { return hi - lo; }
};
ByteSpan byte_span(const halide_buffer_t *buf);
/// Copies the elements of `buf` out of a staging copy of its span (`staging` is where the
/// element at buf->host lies in it); bytes between elements stay untouched.
void scatter_elements(const halide_buffer_t *buf, const uint8_t *staging);
/// Bytes from src's element at host to dst's, for a crop (dst's mins) or a slice (dim, pos).
int64_t crop_offset(const halide_buffer_t *src, const halide_buffer_t *dst);
int64_t slice_offset(const halide_buffer_t *src, int dim, int pos);
/// Halide's device_and_host_malloc / _free for a backend: host memory for the span (malloc),
/// then `device_malloc`; the other way round.
int host_and_device_malloc(void *uc, halide_buffer_t *buf, int (*device_malloc)(void *, halide_buffer_t *));
int host_and_device_free(void *uc, halide_buffer_t *buf, int (*device_free)(void *, halide_buffer_t *));
/// Impl-table entries our backends share: no module to count (the tables are static), nothing
/// to release per context (devices own theirs).
void no_module();
int no_device_release(void *user_context);

/// Where a buffer using one of our interfaces has its elements in its storage's device memory.
struct DevicePlace {
    const halide_buffer_t *root = nullptr;  ///< holds the allocation: the storage's root, else the buffer
    int64_t offset = 0;                     ///< bytes from root's element at host to the buffer's
    const Device *device = nullptr;         ///< the allocation's device
};
/// How a backend finds it (its impl table knows where it keeps the allocation).
using PlaceOf = DevicePlace (*)(const halide_buffer_t *buf);
/// Halide's impl-table buffer_copy for our backend of interface `ours` (buffer_copy.cpp): copies the elements both
/// buffers cover (the overlap of their domains, at the same coordinates) from src's current copy
/// to dst's device memory (dst_interface set: ours) or host memory (null), through the Device
/// data primitives: device to device without the host where the memories are shared. Its
/// storage's one state must stay true: a dst whose device copy is not current gets the elements
/// in its host copy, which then goes up whole; a dst of ours copied to on the host whose device
/// copy is the newer one comes home first. -42 (incompatible) when src's current copy is
/// another runtime's device memory: Halide's runtime brings it to the host first.
int backend_buffer_copy(const halide_device_interface_t *ours, PlaceOf place_of, void *user_context,
                        halide_buffer_t *src, const halide_device_interface_t *dst_interface, halide_buffer_t *dst);
/// "64 B", "3 KiB", "256 MiB": sizes in messages, rounded down.
std::string size_text(uint64_t bytes);
/// Records a driver's failure for the caller (code, its name, what failed and the fix) and
/// returns Halide's code.
int record_failure(int halide_code, int code, std::string name, std::string what);
/// Bytes per element of a halide_buffer_t's type.
inline int64_t element_bytes(const halide_buffer_t *buf) {
    return (int64_t(buf->type.bits) + 7) / 8 * (buf->type.lanes ? buf->type.lanes : 1);
}

// ---------------------------------------------------------------------------------------------
// Failures and the target device
// ---------------------------------------------------------------------------------------------

/// Why this thread's last backend call failed, beyond the Halide error code it returned.
struct DeviceFailure {
    int code = 0;      ///< driver's code (0: none recorded)
    std::string name;  ///< driver's name for it, e.g. "CL_INVALID_BUFFER_SIZE"
    std::string what;  ///< the failing call and the fix, e.g. "clCreateBuffer of 3 GiB ...; ..."
};
DeviceFailure &last_failure();

/// The device our backends' device_malloc allocates on while this object lives (this thread).
/// Halide's impl table passes no device; without one, device_malloc fails.
class TargetDevice {
public:
    explicit TargetDevice(Device *device);
    ~TargetDevice();
    static Device *current();

private:
    Device *previous_;
};

// ---------------------------------------------------------------------------------------------
// Public tables
// ---------------------------------------------------------------------------------------------

/// The table's compute_capability entry (CUDA's; null: a device without one, reporting 0.0).
using ComputeCapability = int (*)(void *user_context, int *major, int *minor);
/// A public halide_device_interface_t forwarding to `impl` with Halide's flag rules (what the
/// runtime's halide_copy_to_host etc. do), so a Halide runtime and we use one table.
halide_device_interface_t make_public_interface(const halide_device_interface_impl_t *impl,
                                                ComputeCapability compute_capability = nullptr);

}  // namespace hb
