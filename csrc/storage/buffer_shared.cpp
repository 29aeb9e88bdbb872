// buffer_shared.cpp: buffers in shared memory (share_memory(), Buffer(..., shared=True)) and
// buffers over segments other processes handed over. The segment is the storage's host memory;
// every process keeps its own residency state over it (its own device copies).
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include <unistd.h>

#include "core/errors.h"
#include "core/text.h"
#include "storage/buffer.h"
#include "storage/storage_op.h"

namespace hb {
namespace {

/// This process's shared storages by segment identity, so a segment that comes back (a
/// worker's result) arrives as a view of the storage already over it: one residency state.
struct SharedTable {
    std::mutex mutex;
    std::unordered_map<uint64_t, std::weak_ptr<Storage>> storages;
};

SharedTable &shared_table() {
    static SharedTable *table = new SharedTable;  // outlives every storage, even at exit
    return *table;
}

void remember(const std::shared_ptr<Storage> &storage) {
    SharedTable &t = shared_table();
    std::lock_guard<std::mutex> lock(t.mutex);
    t.storages[std::get<host_memory::Shared>(storage->host_memory).segment->identity()] = storage;
}

std::shared_ptr<Storage> find_shared(uint64_t identity) {
    if (!identity) return nullptr;
    SharedTable &t = shared_table();
    std::lock_guard<std::mutex> lock(t.mutex);
    auto it = t.storages.find(identity);
    return it == t.storages.end() ? nullptr : it->second.lock();
}

/// Makes a new storage over `segment` a shared one: other processes may write it at any time,
/// so its host copy counts as newer unless the device holds newer data.
void make_shared_storage(Storage &s, std::unique_ptr<SharedSegment> segment) {
    s.host_memory = host_memory::Shared{std::move(segment)};
    s.external_writes = !s.readonly;
}

/// The bytes of an owned storage from its host pointer: its first view, dense.
size_t storage_bytes(const Storage &s) {
    size_t n = (size_t(s.root.type.bits) + 7) / 8;
    for (int i = 0; i < s.root.dimensions; ++i) n *= size_t(s.root.dim[i].extent);
    return n;
}

}  // namespace

void forget_shared_storage(uint64_t identity) {
    SharedTable &t = shared_table();
    std::lock_guard<std::mutex> lock(t.mutex);
    auto it = t.storages.find(identity);
    if (it != t.storages.end() && it->second.expired()) t.storages.erase(it);
}

Buffer Buffer::allocate_shared(const char *entry, const Axes &shape, const DType &dtype,
                               const std::vector<int> &order) {
    Layout layout = dense_layout(entry, shape, dtype.itemsize, &order);
    std::unique_ptr<SharedSegment> segment = SharedSegment::create(entry, size_t(layout.bytes));
    uint8_t *host = segment->base();
    Buffer b = over_new_storage(std::move(layout), dtype, host_memory::Borrowed{}, host);
    make_shared_storage(*b.storage_, std::move(segment));
    remember(b.storage_);
    return b;
}

Buffer Buffer::from_shared(const char *entry, int fd, int64_t offset, const Axes &shape,
                           const Axes &strides, const DType &dtype, bool readonly) {
    std::shared_ptr<Storage> known = find_shared(SharedSegment::identity_of(fd));
    std::unique_ptr<SharedSegment> opened;
    if (known) close(fd);
    else opened = SharedSegment::open(entry, fd);
    const SharedSegment &segment = known ? *std::get<host_memory::Shared>(known->host_memory).segment : *opened;
    // The geometry arrived from another process: it must lie inside the segment.
    int64_t count = checked_count(entry, shape, dtype.itemsize);
    int64_t lo = 0, hi = 0;
    bool inside = strides.size() == shape.size() && offset >= 0 && offset <= int64_t(segment.size());
    if (inside && count > 0)
        inside = byte_reach(shape, strides, dtype.itemsize, lo, hi) && lo >= -offset &&
                 hi <= int64_t(segment.size()) - offset;
    if (!inside)
        throw ValueError(std::string(entry) + "(): the received shape " + tuple_text(shape) + ", strides " +
                         tuple_text(strides) + " and offset " + std::to_string(offset) +
                         " reach outside the shared segment of " + std::to_string(segment.size()) +
                         " bytes; the message was damaged: send the buffer again");
    // wrap() checks and normalizes the strides; its storage becomes the shared one.
    Buffer b = wrap(entry, segment.base() + offset, shape, strides, dtype, nullptr, readonly, false);
    if (known) {
        b.storage_ = std::move(known);  // a view of the storage already over the segment
        return b;
    }
    make_shared_storage(*b.storage_, std::move(opened));
    remember(b.storage_);
    return b;
}

void Buffer::share_memory(const char *entry) {
    StorageOp op(*storage_);
    Storage &s = *storage_;
    if (std::holds_alternative<host_memory::Shared>(s.host_memory)) return;
    s.refuse_bound(entry);
    if (std::holds_alternative<host_memory::Borrowed>(s.host_memory))
        throw BufferError(std::string(entry) + "(): the buffer borrows its memory (from_host, DLPack), "
                          "whose owner would stop seeing the buffer's writes if it moved; share a copy, "
                          "b.copy().share_memory(), or allocate shared memory: Buffer(shape, dtype, shared=True)");
    // A heap block (or a pool's host block) moves: nothing else may point into it. Pages of its
    // own are replaced in place.
    auto *owned = std::get_if<host_memory::Owned>(&s.host_memory);
    bool in_place = owned && owned->mapped_bytes;
    if (!in_place && (storage_.use_count() > 1 || s.host_exports > 0 || s.ndarray_handed_out))
        throw BufferError(std::string(entry) + "(): other views or exports (NumPy arrays, memoryviews, "
                          "DLPack) may point into this buffer's memory, which would stop seeing its writes "
                          "if it moved; call share_memory() before making views, share a copy "
                          "(b.copy().share_memory()), or allocate shared memory: Buffer(shape, dtype, "
                          "shared=True)");
    // Device copies are per process from here on: the host copy comes home, the device copy goes
    // (a zero-copy one, over the memory that moves, with it).
    op.defer(s.free_device(entry));
    std::unique_ptr<SharedSegment> segment;
    if (in_place) {
        segment = SharedSegment::replace(entry, static_cast<uint8_t *>(owned->allocation), owned->mapped_bytes);
    } else {
        size_t bytes = storage_bytes(s);
        segment = SharedSegment::create(entry, bytes);
        uint8_t *old = s.root.host;
        std::memcpy(segment->base(), old, bytes);
        s.root.host = segment->base();
        data_ = s.root.host + (data_ - old);
        for (RawView *r : s.raw_views) r->buf.host = s.root.host + (r->buf.host - old);
        if (owned) std::free(owned->allocation);  // null for a small block in the storage's own allocation
    }
    make_shared_storage(s, std::move(segment));  // the old host memory's record ends here (a pooled block goes back)
    remember(storage_);
}

Buffer::SharedHandle Buffer::shared_handle(const char *entry) const {
    StorageOp op(*storage_, false);
    auto *shared = std::get_if<host_memory::Shared>(&storage_->host_memory);
    if (!shared)
        throw BufferError(std::string(entry) + "(): the buffer is not in shared memory; call "
                          "b.share_memory() first");
    return SharedHandle{shared->segment->fd(), int64_t(data_ - shared->segment->base())};
}

}  // namespace hb
