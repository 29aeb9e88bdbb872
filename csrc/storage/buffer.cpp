// buffer.cpp: construction, views and copies (the geometry rules are core/layout's, the residency
// rules residency.cpp's).
#include "storage/buffer.h"

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <new>
#include <numeric>
#include <string>

#include <sys/mman.h>
#include <unistd.h>

#include "core/aligned_slots.h"
#include "core/errors.h"
#include "core/live_counts.h"
#include "core/strided.h"
#include "core/text.h"

namespace hb {

namespace {

constexpr size_t kLargeBlock = size_t(4) << 20;  // NumPy's huge-page threshold
/// Host blocks up to this size live in the storage's own allocation (see TailAllocator).
constexpr size_t kSmallBlock = 256;

/// "1 coordinate", "3 coordinates": a count and its noun, for messages.
std::string counted(size_t n, const char *noun) {
    return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

/// 0, 1, ..., n - 1: C order.
std::vector<int> identity(size_t n) {
    std::vector<int> axes(n);
    std::iota(axes.begin(), axes.end(), 0);
    return axes;
}

/// MemoryError for an allocation the system refused, with what was asked for.
MemoryError out_of_memory(const char *entry, const Axes &shape, const DType &dtype, size_t bytes) {
    return MemoryError(std::string(entry) + "(): out of host memory for " + std::to_string(bytes) + " bytes (" +
                       size_text(bytes) + ": shape " + tuple_text(shape) + ", " + dtype.name +
                       "); free host memory or ask for fewer elements");
}

/// Asks the kernel for transparent huge pages on a large block, as NumPy does: where THP is
/// "madvise" only, 4 KiB pages make every bulk copy through the block (a device upload, a
/// download) about a quarter slower. Advice only: any failure leaves the block as it is.
void advise_huge_pages(void *block, size_t bytes) {
    if (bytes < kLargeBlock) return;
    long page = sysconf(_SC_PAGESIZE);
    auto start = (reinterpret_cast<uintptr_t>(block) + uintptr_t(page) - 1) & ~uintptr_t(page - 1);
    auto end = (reinterpret_cast<uintptr_t>(block) + bytes) & ~uintptr_t(page - 1);
    if (end > start) madvise(reinterpret_cast<void *>(start), end - start, MADV_HUGEPAGE);
}

}  // namespace

LiveCounts &live_counts() {
    static LiveCounts counts;
    return counts;
}

// ---------------------------------------------------------------------------------------------
// Construction
// ---------------------------------------------------------------------------------------------

Buffer::Buffer(Buffer &&) noexcept = default;

Buffer Buffer::allocate(const char *entry, Axes shape, const DType &dtype) {
    return allocate_laid_out(entry, dense_layout(entry, std::move(shape), dtype.itemsize), dtype);
}

Buffer Buffer::allocate(const char *entry, Axes shape, const DType &dtype, const std::vector<int> &order) {
    return allocate_laid_out(entry, dense_layout(entry, std::move(shape), dtype.itemsize, &order), dtype);
}

Buffer Buffer::allocate_on(const char *entry, Device *device, Axes shape, const DType &dtype) {
    Layout layout = dense_layout(entry, std::move(shape), dtype.itemsize);
    uint8_t *host = nullptr;
    std::shared_ptr<void> block =
        device && layout.count > 0 ? device->host_block(uint64_t(layout.bytes), &host) : nullptr;
    if (!block) return allocate_laid_out(entry, std::move(layout), dtype);
    return over_new_storage(std::move(layout), dtype, host_memory::Pooled{std::move(block)}, host);
}

namespace {

/// What a storage's allocation holds besides the storage (TailAllocator): the root's
/// dimensions, and for a small owned buffer its host block.
struct Tail {
    size_t dims;               ///< the root's dimensions
    bool block;                ///< a host block of `bytes` goes with them
    size_t bytes;              ///< the host block's size
    halide_dimension_t *dims_at = nullptr;  ///< set by the allocation: zeroed
    uint8_t *block_at = nullptr;            ///< set by the allocation: 128-byte aligned, zero-filled
};

/// `p` rounded up to the host alignment.
uint8_t *aligned(uint8_t *p) {
    return reinterpret_cast<uint8_t *>((reinterpret_cast<uintptr_t>(p) + kHostAlignment - 1) & ~uintptr_t(kHostAlignment - 1));
}

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

/// The Tail of the storage being made on this thread (new_storage()): allocate_shared's
/// allocator is copied into the control block, so it carries no state of its own (8 bytes less
/// per storage), and reads what to allocate from here.
thread_local Tail *tail_being_made = nullptr;

/// Where an allocation's block starts and what it came from, written just before the control
/// block (deallocate() finds it there).
struct BlockPrefix {
    uint32_t offset;  ///< from the block's start to the control block
    uint32_t slot;    ///< the slot's size (take_slot()), or 0: malloc's
};

/// allocate_shared's allocator for a storage that carries its Tail in the same block, so that
/// making a buffer allocates once, not two or three times. A small host block comes first, in a
/// 128-byte aligned slot of its own size class (aligned_slots.h), the storage and its dimensions
/// after it: no slack, no malloc header. Otherwise the block is malloc's, the storage first and
/// the host block, if any, at the first aligned address after the dimensions. The storage's part
/// is left to its constructor: zeroing it too would write it twice.
template <typename T>
struct TailAllocator {
    using value_type = T;
    TailAllocator() = default;
    template <typename U>
    TailAllocator(const TailAllocator<U> &) {}  // NOLINT: rebinding
    T *allocate(size_t n) {
        static_assert(alignof(T) <= sizeof(BlockPrefix), "after the prefix, T is aligned");
        Tail &tail = *tail_being_made;
        size_t head = sizeof(BlockPrefix) + n * sizeof(T);
        size_t dims_end = head + tail.dims * sizeof(halide_dimension_t);
        size_t data = round_up(tail.bytes, alignof(std::max_align_t));
        // The slot a small host block and its storage fill; 0 (malloc's) when none holds them.
        size_t slot = tail.block ? round_up(data + dims_end, kSlotAlignment) : 0;
        if (slot > kLargestSlot) slot = 0;
        uint8_t *block = nullptr, *prefix = nullptr;
        if (slot) {
            block = static_cast<uint8_t *>(take_slot(slot));
            if (!block) throw std::bad_alloc();
            tail.block_at = block;
            prefix = block + data;
        } else {
            size_t slack = tail.block ? kHostAlignment - alignof(std::max_align_t) + dims_end % alignof(std::max_align_t) : 0;
            block = static_cast<uint8_t *>(std::malloc(dims_end + slack + tail.bytes));
            if (!block) throw std::bad_alloc();
            if (tail.block) tail.block_at = aligned(block + dims_end);
            prefix = block;
        }
        if (tail.block) std::memset(tail.block_at, 0, tail.bytes);
        *reinterpret_cast<BlockPrefix *>(prefix) = BlockPrefix{uint32_t(prefix - block + sizeof(BlockPrefix)), uint32_t(slot)};
        tail.dims_at = new (prefix + head) halide_dimension_t[tail.dims]();
        return reinterpret_cast<T *>(prefix + sizeof(BlockPrefix));
    }
    void deallocate(T *p, size_t) {
        auto *at = reinterpret_cast<uint8_t *>(p);
        const auto &prefix = *reinterpret_cast<const BlockPrefix *>(at - sizeof(BlockPrefix));
        uint8_t *block = at - prefix.offset;
        if (prefix.slot) give_slot(block, prefix.slot);
        else std::free(block);
    }
    template <typename U>
    bool operator==(const TailAllocator<U> &) const { return true; }
    template <typename U>
    bool operator!=(const TailAllocator<U> &) const { return false; }
};

/// The root's dimensions for a view of `ndim` axes of `dtype`: one more, over the item's bytes,
/// when Halide has no type of its size (see adopt_storage()).
size_t root_dims(size_t ndim, const DType &dtype) { return ndim + (dtype.has_halide_type() ? 0 : 1); }

/// A new storage, counted live, with its root dimensions (root.dim, root.dimensions) and, for
/// `tail.block`, its small host block in its own allocation.
std::shared_ptr<Storage> new_storage(Tail &tail) {
    struct Making {
        explicit Making(Tail &tail) { tail_being_made = &tail; }
        ~Making() { tail_being_made = nullptr; }
    } making(tail);
    auto storage = std::allocate_shared<Storage>(TailAllocator<Storage>());
    ++live_counts().storages;
    storage->root.dimensions = int(tail.dims);
    storage->root.dim = tail.dims ? tail.dims_at : nullptr;
    return storage;
}

}  // namespace

Buffer Buffer::allocate_laid_out(const char *entry, Layout layout, const DType &dtype) {
    size_t bytes = size_t(layout.bytes);
    Tail tail{root_dims(layout.shape.size(), dtype), bytes <= kSmallBlock, bytes <= kSmallBlock ? bytes : 0};
    std::shared_ptr<Storage> storage;
    try {
        storage = new_storage(tail);
    } catch (const std::bad_alloc &) {
        throw out_of_memory(entry, layout.shape, dtype, bytes);
    }
    uint8_t *host = tail.block_at;  // one block: the storage, then its host memory (no `allocation`)
    if (bytes >= kLargeBlock) {
        // Large blocks are pages of their own, straight from the kernel (zero pages, touched only
        // when used): they start on a page, so bulk copies between them and device memory
        // (page-aligned on PoCL) avoid memcpy's slow path for sources and destinations 4 KiB
        // apart modulo a few cache lines (measured: 256 MiB uploads about 20% slower at page
        // offset 0x80), and share_memory() can put a segment in their place.
        size_t mapped = 0;
        host = map_private_pages(bytes, mapped);
        if (!host) throw out_of_memory(entry, layout.shape, dtype, bytes);
        advise_huge_pages(host, mapped);
        storage->host_memory = host_memory::Owned{host, mapped};
    } else if (!tail.block) {
        void *allocation = std::calloc(bytes + kHostAlignment, 1);
        if (!allocation) throw out_of_memory(entry, layout.shape, dtype, bytes);
        storage->host_memory = host_memory::Owned{allocation, 0};
        host = aligned(static_cast<uint8_t *>(allocation));
    }
    return adopt_storage(std::move(storage), dtype, host, std::move(layout.shape), std::move(layout.strides));
}

Buffer Buffer::over_new_storage(Layout layout, const DType &dtype, HostMemory memory, uint8_t *host) {
    Tail tail{root_dims(layout.shape.size(), dtype), false, 0};
    std::shared_ptr<Storage> storage = new_storage(tail);
    storage->host_memory = std::move(memory);
    return adopt_storage(std::move(storage), dtype, host, std::move(layout.shape), std::move(layout.strides));
}

Buffer Buffer::allocate_like(const char *entry, const Buffer &other, const DType &dtype) {
    Buffer b = allocate(entry, other.shape_, dtype, other.memory_order());
    // The storage is this first view's geometry, mins included (NumPy axis i is the root's
    // dimension counted from the end), so the new buffer covers its storage.
    halide_buffer_t &root = b.storage_->root;
    for (size_t i = 0; i < other.mins_.size(); ++i) root.dim[size_t(root.dimensions) - 1 - i].min = int32_t(other.mins_[i]);
    b.mins_ = other.mins_;
    return b;
}

Buffer Buffer::allocate_interleaved(const char *entry, const Axes &shape, const DType &dtype) {
    if (shape.empty())
        throw ValueError(std::string(entry) + "(): a 0-d shape has no channel axis; pass the channels first, "
                         "as in (channels, height, width)");
    std::vector<int> order = identity(shape.size());
    std::rotate(order.begin(), order.begin() + 1, order.end());  // 1, 2, ..., ndim - 1, 0
    return allocate(entry, shape, dtype, order);
}

Buffer Buffer::copy_of(const char *entry, const uint8_t *data, const Axes &shape,
                       const Axes &strides, const DType &dtype) {
    Layout layout = dense_layout(entry, shape, dtype.itemsize);
    // Any byte strides will do: the copy reads them as they are and stores C-contiguous.
    check_memory(entry, data, shape, strides, layout.count, dtype.itemsize);
    Buffer out = allocate_laid_out(entry, std::move(layout), dtype);
    if (out.size() > 0)
        copy_strided(out.data_, out.strides_, data, strides, shape, dtype.itemsize);
    return out;
}

Buffer Buffer::wrap(const char *entry, uint8_t *data, Axes shape, Axes strides,
                    const DType &dtype, std::shared_ptr<void> owner, bool readonly, bool external_writes) {
    check_memory(entry, data, shape, strides, checked_count(entry, shape, dtype.itemsize), dtype.itemsize);
    normalize_strides(entry, shape, strides, dtype.itemsize, "pass copy=True for a contiguous copy");
    Tail tail{root_dims(shape.size(), dtype), false, 0};
    std::shared_ptr<Storage> storage = new_storage(tail);
    storage->host_memory = host_memory::Borrowed{std::move(owner)};
    storage->readonly = readonly;
    storage->external_writes = external_writes && !readonly;
    return adopt_storage(std::move(storage), dtype, data, std::move(shape), std::move(strides));
}

Buffer Buffer::adopt_storage(std::shared_ptr<Storage> storage, const DType &dtype, uint8_t *data,
                             Axes &&shape, Axes &&strides) {
    // The storage's root halide_buffer_t: this first view's geometry, in bytes when Halide has
    // no type of this size (complex128): one extra innermost dimension over the item's bytes.
    Storage &s = *storage;
    bool bytes = !dtype.has_halide_type();
    int unit = bytes ? 1 : dtype.itemsize;
    halide_dimension_t *dims = s.root.dim;  // root_dims() of them, made with the storage
    if (bytes) *dims++ = halide_dimension_t{0, dtype.itemsize, 1, 0};
    for (size_t i = shape.size(); i-- > 0;)
        *dims++ = halide_dimension_t{0, int32_t(shape[i]), int32_t(strides[i] / unit), 0};
    s.root.host = data;
    s.root.type = bytes ? halide_type_t{halide_type_uint, 8, 1} : dtype.halide;
    s.root.flags = kHostDirty;

    Buffer b;
    b.storage_ = std::move(storage);
    b.dtype_ = &dtype;
    b.data_ = data;
    b.mins_.assign(shape.size(), 0);
    b.shape_ = std::move(shape);
    b.strides_ = std::move(strides);
    return b;
}

// ---------------------------------------------------------------------------------------------
// Geometry
// ---------------------------------------------------------------------------------------------

bool Buffer::contains(const Axes &coords) const {
    check_per_axis("contains", "coordinate", coords.size(), "pass one per axis, as in b.contains(*b.mins)");
    for (size_t i = 0; i < coords.size(); ++i)
        if (coords[i] < mins_[i] || coords[i] >= mins_[i] + shape_[i]) return false;
    return true;
}

void Buffer::set_min(const Axes &mins) {
    check_per_axis("set_min", "min", mins.size(), "pass one per axis, as in b.set_min(*b.mins)");
    check_mins("set_min", shape_, mins);
    // The storage's lock guards the published halide_buffer_t, and whoever holds it may be
    // reading this view's geometry (publishing it for a pipeline): refused, never raced.
    std::unique_lock<SmallLock> lock(storage_->mutex, std::try_to_lock);
    if (!lock.owns_lock())
        throw BufferError("set_min(): another thread is using this buffer's storage (a residency operation, "
                          "or a pipeline being handed a view of it); call set_min() when it is done, or use "
                          "b.translated() for a view with other mins");
    mins_ = mins;
    if (!raw_) return;
    int n = ndim();
    for (int i = 0; i < n; ++i) raw_->dims[size_t(n - 1 - i)].min = int32_t(mins_[size_t(i)]);
}

void Buffer::check_per_axis(const char *entry, const char *what, size_t count, const char *fix) const {
    if (count != shape_.size())
        throw ValueError(std::string(entry) + "(): " + counted(count, what) + " for a " + str(ndim()) +
                         "-d buffer; " + fix);
}

int Buffer::check_axis(const char *entry, const char *verb, int64_t axis) const {
    int n = ndim();
    if (n == 0)
        throw IndexError(std::string(entry) + "(): a 0-d buffer has no axes to " + verb +
                         "; read its one element with b.numpy()[()]");
    if (axis < -n || axis >= n)
        throw IndexError(std::string(entry) + "(): axis " + str(axis) + " is out of range for " +
                         str(n) + " axes; use -" + str(n) + " <= axis < " + str(n));
    return int(axis < 0 ? axis + n : axis);
}

// ---------------------------------------------------------------------------------------------
// Views
// ---------------------------------------------------------------------------------------------

Buffer Buffer::unshaped_view() const {
    Buffer b;
    b.storage_ = storage_;
    b.dtype_ = dtype_;
    b.data_ = data_;
    return b;
}

Buffer Buffer::view() const {
    Buffer b = unshaped_view();
    b.shape_ = shape_;
    b.strides_ = strides_;
    b.mins_ = mins_;
    return b;
}

Buffer Buffer::cropped(int64_t axis_arg, int64_t min, int64_t extent) const {
    int axis = check_axis("cropped", "crop", axis_arg);
    int64_t lo = mins_[axis], hi = mins_[axis] + shape_[axis];
    if (extent < 0)
        throw ValueError("cropped(): negative extent " + str(extent) + "; extent must be >= 0");
    if (min < lo || min > hi || extent > hi - min)
        throw IndexError("cropped(): [" + str(min) + ", " + str(min) + " + " + str(extent) +
                         ") is outside axis " + str(axis) + "'s coordinates [" + str(lo) + ", " +
                         str(hi) + "); crop within the mins and extents shown by b.mins and b.shape");
    Buffer b = view();
    b.data_ += (min - lo) * strides_[axis];
    b.mins_[axis] = min;
    b.shape_[axis] = extent;
    normalize_strides("cropped", b.shape_, b.strides_, dtype_->itemsize, "");  // an empty crop
    return b;
}

Buffer Buffer::sliced(int64_t axis_arg, int64_t pos) const {
    int axis = check_axis("sliced", "slice", axis_arg);
    int64_t lo = mins_[axis], hi = mins_[axis] + shape_[axis];
    if (pos < lo || pos >= hi)
        throw IndexError("sliced(): coordinate " + str(pos) + " is outside axis " + str(axis) +
                         "'s coordinates [" + str(lo) + ", " + str(hi) +
                         "); slice at a coordinate shown by b.mins and b.shape");
    Buffer b = view();
    b.data_ += (pos - lo) * strides_[axis];
    b.shape_.erase(b.shape_.begin() + axis);
    b.strides_.erase(b.strides_.begin() + axis);
    b.mins_.erase(b.mins_.begin() + axis);
    normalize_strides("sliced", b.shape_, b.strides_, dtype_->itemsize, "");  // an empty one
    return b;
}

Buffer Buffer::transposed(const std::vector<int> &axes) const {
    int n = ndim();
    if (n == 0 && !axes.empty())
        throw ValueError("transposed(): a 0-d buffer has no axes to transpose; call b.transposed() "
                         "without axes, which returns the buffer as it is");
    std::vector<int> order = permutation("transposed", "axes", axes, n, "pass each axis exactly once");
    Buffer b = view();
    for (int i = 0; i < n; ++i) {
        int a = order[size_t(i)];
        b.shape_[size_t(i)] = shape_[size_t(a)];
        b.strides_[size_t(i)] = strides_[size_t(a)];
        b.mins_[size_t(i)] = mins_[size_t(a)];
    }
    normalize_strides("transposed", b.shape_, b.strides_, dtype_->itemsize, "");  // an empty one
    return b;
}

Buffer Buffer::with_mins(const Axes &mins) const {
    Buffer b = view();
    b.mins_ = mins;
    return b;
}

Buffer Buffer::translated(int64_t axis_arg, int64_t delta) const {
    int axis = check_axis("translated", "translate", axis_arg);
    Axes deltas(shape_.size(), 0);
    deltas[size_t(axis)] = delta;
    return translated(deltas);
}

Buffer Buffer::translated(const Axes &deltas) const {
    check_per_axis("translated", "delta", deltas.size(),
                   "pass translated(axis, delta), or a sequence of one delta per axis");
    Buffer b = view();
    for (size_t i = 0; i < deltas.size(); ++i) {
        int64_t min;
        if (__builtin_add_overflow(mins_[i], deltas[i], &min) || !coordinates_fit(min, shape_[i]))
            throw ValueError("translated(): moving axis " + str(int64_t(i)) + " (coordinates [" + str(mins_[i]) +
                             ", " + str(mins_[i] + shape_[i]) + ")) by " + str(deltas[i]) + " leaves " +
                             kInt32Coordinates + "; use a smaller delta");
        b.mins_[i] = min;
    }
    return b;
}

Buffer Buffer::embedded(int64_t axis, int64_t pos) const { return embed("embedded", axis, pos); }

Buffer Buffer::add_dimension() const { return embed("add_dimension", 0, 0); }

Buffer Buffer::embed(const char *entry, int64_t axis_arg, int64_t pos) const {
    int n = ndim();
    if (n >= kMaxDims)
        throw ValueError(std::string(entry) + "(): the buffer has " + str(n) + " axes, the most supported; " +
                         "slice or reshape it first");
    if (axis_arg < -n - 1 || axis_arg > n)
        throw IndexError(std::string(entry) + "(): axis " + str(axis_arg) + " is out of range for the new axis of a " +
                         str(n) + "-d buffer; use -" + str(n + 1) + " <= axis <= " + str(n) +
                         " (numpy.expand_dims' numbering)");
    if (!coordinates_fit(pos, 1))
        throw ValueError(std::string(entry) + "(): pos " + str(pos) + " is outside " + kInt32Coordinates +
                         "; pass a pos inside them");
    size_t axis = size_t(axis_arg < 0 ? axis_arg + n + 1 : axis_arg);
    // numpy.expand_dims' stride: the next axis's stride times its extent, the itemsize for a new
    // last axis, so a C-contiguous buffer stays C-contiguous even to a checker that looks at
    // axes of extent 1. One that overflows is never used: normalize_strides() replaces it.
    int64_t stride = dtype_->itemsize;
    if (axis < size_t(n) &&
        __builtin_mul_overflow(strides_[axis], shape_[axis] > 0 ? shape_[axis] : 1, &stride))
        stride = dtype_->itemsize;
    Buffer b = view();
    b.shape_.insert(b.shape_.begin() + std::ptrdiff_t(axis), 1);
    b.strides_.insert(b.strides_.begin() + std::ptrdiff_t(axis), stride);
    b.mins_.insert(b.mins_.begin() + std::ptrdiff_t(axis), pos);
    normalize_strides(entry, b.shape_, b.strides_, dtype_->itemsize, "slice the buffer first");
    return b;
}

Buffer Buffer::indexed(const Index &index) const {
    if (index.size != shape_.size())
        throw IndexError("__getitem__(): " + str(int64_t(index.size)) + " indices for " +
                         str(ndim()) + " axes; use at most one index per axis and one '...'");
    Buffer b = unshaped_view();
    b.shape_.reserve(index.size);
    b.strides_.reserve(index.size);
    b.mins_.reserve(index.size);
    for (size_t i = 0; i < index.size; ++i) {
        const AxisIndex &ix = index.axes[i];
        if (!ix.keep) {
            if (ix.start < 0 || ix.start >= shape_[i])
                throw IndexError("__getitem__(): index " + str(ix.start) + " is out of range for axis " +
                                 str(int64_t(i)) + " with extent " + str(shape_[i]));
            b.data_ += ix.start * strides_[i];
            continue;
        }
        if (ix.length > 0) b.data_ += ix.start * strides_[i];
        int64_t stride;
        if (__builtin_mul_overflow(strides_[i], ix.step, &stride)) {
            if (ix.length > 1)
                throw ValueError("__getitem__(): step " + str(ix.step) + " makes the stride of axis " +
                                 str(int64_t(i)) + " overflow; use a smaller step");
            stride = dtype_->itemsize;  // at most one element: the stride is never used
        }
        b.shape_.push_back(ix.length);
        b.strides_.push_back(stride);
        // A unit-step slice keeps Halide coordinates; a strided one starts a new grid at 0.
        b.mins_.push_back(ix.step == 1 ? mins_[i] + ix.start : 0);
    }
    normalize_strides("__getitem__", b.shape_, b.strides_, dtype_->itemsize, "use a smaller step");
    return b;
}

Buffer Buffer::bits() const {
    const DType *u = dtype_bits_of(*dtype_);
    if (!u)
        throw TypeError(std::string("bits(): ") + dtype_->name + " has no unsigned integer of " +
                        str(dtype_->itemsize) + " bytes; use b.numpy().view(numpy.uint64)");
    Buffer b = view();
    b.dtype_ = u;
    return b;
}

Buffer Buffer::copy(const char *entry) const {
    return copy_of(entry, data_, shape_, strides_, *dtype_);
}

Buffer Buffer::copy_keeping_layout(const char *entry) const {
    Buffer out = allocate_like(entry, *this, *dtype_);
    if (out.size() > 0) copy_strided(out.data_, out.strides_, data_, strides_, shape_, dtype_->itemsize);
    return out;
}

bool Buffer::is_dense() const {
    if (size() == 0) return true;
    if (!is_forward(shape_, strides_)) return false;  // one run, but not in element order
    return hb::is_dense(shape_, strides_, dtype_->itemsize);
}

Buffer Buffer::dense_bytes(const char *entry) const {
    if (!is_dense())
        throw BufferError(std::string(entry) + "(): the view has gaps or negative strides; make a dense copy "
                          "first (copy.deepcopy(b))");
    Buffer b = view();
    b.dtype_ = dtype_by_name("uint8");
    b.shape_ = {nbytes()};
    b.strides_ = {1};
    b.mins_ = {0};
    return b;
}

}  // namespace hb
