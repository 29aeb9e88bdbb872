// shared_segment.h: host memory other processes can map, one anonymous memory file per
// segment (Linux memfd). Nothing appears in a file system (nothing in /dev/shm to leak): the
// kernel frees the memory when the last descriptor and the last mapping of it are gone, in
// whichever process, killed or not. Its size is sealed, so no one can shrink it under a
// mapping (which would turn reads into SIGBUS).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace hb {

/// One segment mapped into this process (read and write), with the descriptor that lets it be
/// handed to another process. Unmapped and closed with the object.
class SharedSegment {
public:
    /// A new zero-filled segment of `bytes` (at least one page), mapped anywhere.
    static std::unique_ptr<SharedSegment> create(const char *entry, size_t bytes);
    /// A new segment holding the contents of `pages` (a page-aligned block of `bytes`, a
    /// multiple of the page size, that the caller owns), mapped at that same address in their
    /// place: every pointer into the block stays valid and now points into the segment.
    static std::unique_ptr<SharedSegment> replace(const char *entry, uint8_t *pages, size_t bytes);
    /// Maps a segment another process handed over; takes `fd` (closed on failure too). Refuses a
    /// descriptor that is not a sealed segment of ours.
    static std::unique_ptr<SharedSegment> open(const char *entry, int fd);
    /// The identity of the segment behind a descriptor (the same in every process), or 0 when
    /// it is none.
    static uint64_t identity_of(int fd);

    SharedSegment(const SharedSegment &) = delete;
    SharedSegment &operator=(const SharedSegment &) = delete;
    ~SharedSegment();

    int fd() const { return fd_; }
    uint8_t *base() const { return base_; }
    size_t size() const { return size_; }
    uint64_t identity() const { return identity_; }

private:
    SharedSegment(int fd, uint8_t *base, size_t size, uint64_t identity)
        : fd_(fd), base_(base), size_(size), identity_(identity) {}
    int fd_;
    uint8_t *base_;
    size_t size_;
    uint64_t identity_;
};

/// Pages of our own: a zero-filled private block of at least `bytes`, page-aligned, which
/// SharedSegment::replace() can later turn into a segment in place. Returns its length (a
/// multiple of the page size) in `mapped`; null when the system refused.
uint8_t *map_private_pages(size_t bytes, size_t &mapped);
void unmap_pages(uint8_t *pages, size_t mapped);

}  // namespace hb
