// shared_segment.cpp: memfd segments: create, seal, map, hand over.
#include "storage/shared_segment.h"

#include <cerrno>
#include <cstring>
#include <string>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/errors.h"

namespace hb {
namespace {

size_t page_size() {
    static const size_t page = size_t(sysconf(_SC_PAGESIZE));
    return page;
}

size_t round_to_pages(size_t bytes) {
    size_t page = page_size();
    return bytes == 0 ? page : (bytes + page - 1) / page * page;
}

/// The error for a system call that failed with `errno`: MemoryError when memory ran out,
/// BufferError naming the call otherwise.
[[noreturn]] void throw_os_error(const char *entry, const char *what, int error) {
    std::string message = std::string(entry) + "(): " + what + " failed: " + std::strerror(error);
    if (error == ENOMEM || error == ENOSPC)
        throw MemoryError(message + "; free memory, or share less (shared memory counts against the "
                          "system's shmem limit)");
    if (error == EMFILE || error == ENFILE)
        throw BufferError(message + "; every shared storage holds one file descriptor in each process "
                          "that maps it: raise the limit (ulimit -n) or share fewer, larger buffers");
    throw BufferError(message + "; shared memory needs Linux's memfd_create (kernel 3.17 or later)");
}

uint64_t identity_of_stat(const struct stat &st) {
    return (uint64_t(st.st_dev) << 40) ^ uint64_t(st.st_ino);
}

constexpr int kSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

/// A new memory file of `bytes`, its size sealed (no one may shrink or grow it).
int new_memory_file(const char *entry, size_t bytes) {
    int fd = memfd_create("halide_buffer", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) throw_os_error(entry, "memfd_create", errno);
    if (ftruncate(fd, off_t(bytes)) != 0 || fcntl(fd, F_ADD_SEALS, kSeals) != 0) {
        int error = errno;
        close(fd);
        throw_os_error(entry, "sizing the shared memory", error);
    }
    return fd;
}

uint64_t identity_or_fail(const char *entry, int fd) {
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int error = errno;
        close(fd);
        throw_os_error(entry, "fstat", error);
    }
    return identity_of_stat(st);
}

}  // namespace

std::unique_ptr<SharedSegment> SharedSegment::create(const char *entry, size_t bytes) {
    size_t size = round_to_pages(bytes);
    int fd = new_memory_file(entry, size);
    void *base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        int error = errno;
        close(fd);
        throw_os_error(entry, "mapping the shared memory", error);
    }
    uint64_t identity = identity_or_fail(entry, fd);
    return std::unique_ptr<SharedSegment>(new SharedSegment(fd, static_cast<uint8_t *>(base), size, identity));
}

std::unique_ptr<SharedSegment> SharedSegment::replace(const char *entry, uint8_t *pages, size_t bytes) {
    int fd = new_memory_file(entry, bytes);
    // The contents first, through the descriptor; then the segment takes the block's place in
    // one call (the old pages are released by it).
    for (size_t done = 0; done < bytes;) {
        ssize_t n = pwrite(fd, pages + done, bytes - done, off_t(done));
        if (n <= 0) {
            int error = n < 0 ? errno : EIO;
            if (error == EINTR) continue;
            close(fd);
            throw_os_error(entry, "copying into the shared memory", error);
        }
        done += size_t(n);
    }
    void *base = mmap(pages, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
    if (base == MAP_FAILED) {
        int error = errno;
        close(fd);
        throw_os_error(entry, "mapping the shared memory in place", error);
    }
    uint64_t identity = identity_or_fail(entry, fd);
    return std::unique_ptr<SharedSegment>(new SharedSegment(fd, pages, bytes, identity));
}

std::unique_ptr<SharedSegment> SharedSegment::open(const char *entry, int fd) {
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int error = errno;
        close(fd);
        throw_os_error(entry, "fstat of the received descriptor", error);
    }
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW) || st.st_size <= 0) {
        close(fd);
        throw BufferError(std::string(entry) + "(): the received descriptor is not a sealed shared-memory "
                          "segment of halide_buffer (its size could change under the mapping); send "
                          "buffers made shared with share_memory() or Buffer(..., shared=True)");
    }
    size_t size = size_t(st.st_size);
    void *base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        int error = errno;
        close(fd);
        throw_os_error(entry, "mapping the received shared memory", error);
    }
    return std::unique_ptr<SharedSegment>(
        new SharedSegment(fd, static_cast<uint8_t *>(base), size, identity_of_stat(st)));
}

uint64_t SharedSegment::identity_of(int fd) {
    struct stat st;
    return fstat(fd, &st) == 0 ? identity_of_stat(st) : 0;
}

SharedSegment::~SharedSegment() {
    munmap(base_, size_);
    close(fd_);
}

uint8_t *map_private_pages(size_t bytes, size_t &mapped) {
    mapped = round_to_pages(bytes);
    void *block = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return block == MAP_FAILED ? nullptr : static_cast<uint8_t *>(block);
}

void unmap_pages(uint8_t *pages, size_t mapped) { munmap(pages, mapped); }

}  // namespace hb
