// buffer.h: the Buffer core. A Buffer is a view (dtype, shape, strides, mins) onto a Storage,
// which owns or borrows the host memory and holds the one residency state shared by the
// buffer and all its views. No Python in here: the bindings wrap it.
//
// Axis order is NumPy's (axis 0 outermost); strides are in bytes. The halide_buffer_t that
// raw() publishes lists the same axes reversed (dim 0 innermost), strides in elements.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "dtype.h"
#include "halide_abi.h"

namespace hb {

/// Who frees a Storage's host memory.
enum class HostOwnership : uint8_t {
    owned,     ///< allocated here (128-byte aligned, zero-filled); freed with the Storage
    borrowed,  ///< someone else's; `owner` keeps it alive until the Storage dies
};

struct RawView;

/// Memory and residency state shared by a buffer and every view of it.
struct Storage {
    uint8_t *host = nullptr;          ///< start of the host memory (aligned for owned storage)
    void *allocation = nullptr;       ///< what to free (owned storage only)
    HostOwnership ownership = HostOwnership::owned;
    std::shared_ptr<void> owner;      ///< borrowed storage: releasing it releases the exporter
    bool readonly = false;            ///< the memory must not be written through us
    bool external_writes = false;     ///< borrowed writable memory its owner may write at any time
    uint64_t flags = halide_buffer_flag_host_dirty;  ///< halide_buffer_flags of every view
    std::vector<RawView *> raw_views;  ///< halide_buffer_t's handed to foreign code, still alive

    Storage() = default;
    Storage(const Storage &) = delete;
    Storage &operator=(const Storage &) = delete;
    ~Storage();

    /// Halide's flags as a reader must see them: borrowed memory its owner may write is a
    /// standing lease, so its host copy counts as dirty unless the device holds newer data.
    uint64_t effective_flags() const;
    /// Takes back flags that foreign code (a pipeline) wrote into any published
    /// halide_buffer_t of this storage, so every view sees them.
    void absorb_raw_flags();
};

/// Byte strides of a C-contiguous array of this shape.
std::vector<int64_t> c_strides(const std::vector<int64_t> &shape, int itemsize);

/// One axis of an index expression, already normalised to positions by the caller.
struct AxisIndex {
    bool keep;       ///< false: an integer index (the axis disappears); true: a slice
    int64_t start;   ///< first position taken
    int64_t step;    ///< slices only: distance between taken positions (may be negative)
    int64_t length;  ///< slices only: number of positions taken
};

/// Counters of live objects, so tests can prove every one is released exactly once.
struct LiveCounts {
    int64_t storages = 0;
    int64_t exports = 0;  ///< buffer-protocol exports not yet released
};
LiveCounts &live_counts();

class Buffer {
public:
    /// Owned, zero-filled, 128-byte aligned, C-contiguous storage.
    static Buffer allocate(const char *entry, const std::vector<int64_t> &shape, const DType &dtype);
    /// An owned C-contiguous copy of strided memory (any byte strides, even unaligned ones).
    static Buffer copy_of(const char *entry, const uint8_t *data, const std::vector<int64_t> &shape,
                          const std::vector<int64_t> &strides, const DType &dtype);
    /// A view of someone else's memory; `data` is the element at index 0 of every axis.
    static Buffer wrap(const char *entry, uint8_t *data, const std::vector<int64_t> &shape,
                       const std::vector<int64_t> &strides, const DType &dtype,
                       std::shared_ptr<void> owner, bool readonly, bool external_writes);

    Buffer(Buffer &&) noexcept;
    Buffer &operator=(Buffer &&) = delete;
    ~Buffer();

    // --- geometry --------------------------------------------------------------------------
    const DType &dtype() const { return *dtype_; }
    int ndim() const { return static_cast<int>(shape_.size()); }
    const std::vector<int64_t> &shape() const { return shape_; }
    const std::vector<int64_t> &strides() const { return strides_; }  ///< bytes
    const std::vector<int64_t> &mins() const { return mins_; }        ///< Halide coordinates
    int64_t size() const;
    int64_t nbytes() const { return size() * dtype_->itemsize; }
    uint8_t *data() const { return data_; }  ///< element at index 0 of every axis
    bool is_c_contiguous() const;
    bool is_f_contiguous() const;
    bool readonly() const { return storage_->readonly; }
    bool external_writes() const { return storage_->external_writes; }
    /// True when both are views of the same storage (and so share residency).
    bool shares_storage_with(const Buffer &other) const { return storage_ == other.storage_; }

    // --- views (share storage and residency) -----------------------------------------------
    Buffer view() const;  ///< same geometry, same storage; the starting point of every view
    Buffer cropped(int axis, int64_t min, int64_t extent) const;
    Buffer sliced(int axis, int64_t pos) const;
    Buffer transposed(const std::vector<int> &axes) const;
    Buffer indexed(const std::vector<AxisIndex> &index) const;
    Buffer bits() const;  ///< same bytes as the unsigned integer of the same size

    /// A C-contiguous owned copy of the elements (a new storage, host dirty).
    Buffer copy(const char *entry) const;

    // --- residency -------------------------------------------------------------------------
    bool host_dirty();
    bool device_dirty();
    void set_host_dirty(bool value);
    void set_device_dirty(bool value);
    bool has_device_allocation() const { return false; }
    /// Makes the host copy current: a no-op unless the device copy is newer.
    void copy_to_host();
    /// Lease for a reader of the host memory: the host copy becomes current.
    void begin_host_read();
    /// Lease for a writer of the host memory: current, then host dirty.
    void begin_host_write(const char *entry);

    /// The halide_buffer_t describing this view, flags refreshed from the shared state.
    halide_buffer_t *raw(const char *entry);

private:
    Buffer() = default;
    int check_axis(const char *entry, int axis) const;

    std::shared_ptr<Storage> storage_;
    const DType *dtype_ = nullptr;
    uint8_t *data_ = nullptr;
    std::vector<int64_t> shape_, strides_, mins_;
    std::unique_ptr<RawView> raw_;
};

}  // namespace hb
