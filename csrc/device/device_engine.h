// device_engine.h: the one implementation of Halide's device impl table for our backends.
//
// Every backend keeps a storage's device memory the same way: it mirrors the host memory byte
// for byte over the span of the elements, one allocation per storage, so one offset locates
// any view and every transfer of a storage is one command over its span (gaps included on the
// way up; scattered from a staging copy on the way down). What differs between OpenCL and CUDA
// is how a halide_buffer_t names the memory and which driver calls move it. A backend says
// that in a struct of static functions, and Engine<Backend> does the rest, once: allocation,
// freeing, transfers and their accounting, crops and slices, wrapping, buffer_copy, the table.
//
// A backend (opencl_memory.cpp, cuda_memory.cpp; a third one is about 150 lines) provides:
//
//   using Device = OpenCLDevice;                  // its hb::Device class
//   static const halide_device_interface_t *interface();
//   static constexpr ComputeCapability compute_capability = nullptr;   // CUDA: its own
//   // How a halide_buffer_t names the memory:
//   static DeviceAllocation *allocation_of(const halide_buffer_t *buf);
//   static int64_t offset_of(const halide_buffer_t *buf);   // bytes from the allocation's
//                                                           // start to the element at host
//   static bool attach(halide_buffer_t *buf, DeviceAllocation *a, int64_t offset);   // a root
//   static bool attach_crop(const halide_buffer_t *src, int64_t bytes, halide_buffer_t *dst);
//   static bool is_root(const halide_buffer_t *buf);        // the allocation's owner
//   static void detach(halide_buffer_t *buf);  // device = 0, and any handle object it owns freed
//   // The driver: 0, or the driver's own failure code (error_name() names it).
//   static std::string error_name(int code);
//   static int release(const Device &d, void *native);      // failure: the memory is kept
//   static int read(const Device &d, void *native, int64_t at, uint8_t *host, uint64_t bytes);
//   static int write(const Device &d, void *native, int64_t at, const uint8_t *host, uint64_t bytes);
//   // Calls with checks of their own: 0, or a Halide error code with the failure recorded (record_failure()).
//   static int allocate(Device &d, uint64_t bytes, void **native);   // Engine::Driver's, nobody else's
//   static int sync(const Device &d);
//   // Zero-copy (kZeroCopy; Device::zero_copy() says where): device memory over host memory, made by
//   // the device's allocator (Device::allocator()), and maps (a blocking map and its unmap, no bytes
//   // moved) in place of reads and writes.
//   static constexpr bool kZeroCopy;
//   static int map(const Device &d, void *native, int64_t at, uint64_t bytes, Direction direction);
//   static int inspect(Device &d, uint64_t native, uint64_t *available);  // before wrap_native
//   // Names for messages and codes for refusals.
//   static constexpr const char *kRead, *kWrite, *kFree, *kMap;  // "clEnqueueReadBuffer", ...
//   static constexpr int kNoTarget, kNotRoot;              // the driver's codes for those
//   static std::string transfer_call(const CopyPlan &plan, Direction d);  // a region's commands
//
// All of it runs with the storage's lock held, or on memory no storage shares yet.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>
#include <variant>

#include "core/live_counts.h"
#include "device/device.h"
#include "device/device_copy.h"
#include "device/device_interface.h"

namespace hb {

/// One lambda per alternative of a std::visit.
template <class... Lambdas>
struct Overloaded : Lambdas... {
    using Lambdas::operator()...;
};
template <class... Lambdas>
Overloaded(Lambdas...) -> Overloaded<Lambdas...>;

template <class Backend>
struct Engine {
    using Device = typename Backend::Device;

    static Device *target() { return dynamic_cast<Device *>(TargetDevice::current()); }
    static const Device &device_of(const DeviceAllocation *a) { return static_cast<const Device &>(*a->device); }

    /// Records the driver's failure `code` with what failed and the fix; returns Halide's code.
    static int record_failure(int halide_code, int code, std::string what) {
        return hb::record_failure(halide_code, code, Backend::error_name(code), std::move(what));
    }

    /// What a copy through `buf` moves: the whole storage behind its allocation (whose one
    /// state the flags of every view describe), else what `buf` describes.
    static halide_buffer_t *copy_target(halide_buffer_t *buf) {
        const halide_buffer_t *whole = Backend::allocation_of(buf)->whole;
        return whole ? const_cast<halide_buffer_t *>(whole) : buf;
    }

    /// Forgets the memory: the fields, and the device copy's flag with them.
    static void clear_device(halide_buffer_t *buf) {
        Backend::detach(buf);
        buf->device_interface = nullptr;
        buf->flags &= ~uint64_t(halide_buffer_flag_device_dirty);
    }

    /// The backend's allocator from its driver (Device::driver()): memory of exactly the bytes
    /// asked for, each a reference of ours counted live until the driver has it back.
    struct Driver final : DeviceAllocator {
        int allocate(hb::Device &device, const AllocationRequest &request, DeviceAllocation &a) override {
            a.size = request.bytes;
            a.source = memory_source::Driver{};
            int rc = Backend::allocate(static_cast<Device &>(device), request.bytes, &a.native);
            if (rc == 0) ++live_counts().device_allocations;
            return rc;
        }
        int release(const hb::Device &device, void *native, uint64_t /*size*/) override {
            int rc = Backend::release(static_cast<const Device &>(device), native);
            if (rc == 0) --live_counts().device_allocations;
            return rc;
        }
    };
    /// The one Driver of the backend, never destroyed: a device Python lets go of during the
    /// interpreter's end still releases its pool through it.
    static DeviceAllocator &driver() {
        static auto *one = new Driver;
        return *one;
    }

    /// Ends an allocation as its source says, and deletes its record; false, with the driver's
    /// code in `rc`, when the driver refused: everything is kept then.
    static bool end(DeviceAllocation *a, int *rc = nullptr) {
        const Device &device = device_of(a);
        auto to_driver = [&] { return device.driver().release(device, a->native, a->size); };
        int code = std::visit(
            Overloaded{
                [&](const memory_source::Driver &) { return to_driver(); },
                [&](const memory_source::Pooled &) { return device.pool().release(device, a->native, a->size); },
                [&](const memory_source::OverHost &) {
                    // The host memory's owner may free it as soon as this returns: the commands
                    // still queued on it finish first (the driver would only defer its own part).
                    Backend::sync(device);
                    return to_driver();
                },
                [&](const memory_source::OverPoolBlock &) { return to_driver(); },  // the pool waits
                [&](const memory_source::Borrowed &) { return 0; },  // the caller keeps it alive
                [&](const memory_source::Retained &) { return to_driver(); },
            },
            a->source);
        if (rc) *rc = code;
        if (code != 0) return false;
        delete a;
        return true;
    }

    /// Before root's allocation is freed: a lent one is retired instead (Device::retire_lent).
    static std::shared_ptr<void> retire_lent(halide_buffer_t &root) {
        DeviceAllocation *a = Backend::allocation_of(&root);
        if (!a->lent()) return nullptr;
        clear_device(&root);
        a->retire();
        // Nobody is left to tell of a failure: a driver that cannot free it has lost it already.
        return std::shared_ptr<void>(a, [](void *p) {
            auto *retired = static_cast<DeviceAllocation *>(p);
            if (!end(retired)) delete retired;
        });
    }

    // --- the impl table ------------------------------------------------------------------------

    static int device_malloc(void *, halide_buffer_t *buf) {
        if (buf->device) return 0;  // already allocated: nothing to do (Halide's impls agree)
        Device *device = target();
        if (!device)
            return record_failure(halide_error::device_malloc_failed, Backend::kNoTarget,
                                  "device_malloc without a target device; allocate through halide_buffer");
        ByteSpan span = byte_span(buf);
        uint64_t bytes = span.size() > 0 ? uint64_t(span.size()) : 1;  // no driver takes size 0
        // The allocator sets where the memory comes from (the pool, the driver, host memory on a
        // zero-copy device): the source that ends it.
        auto *a = new (std::nothrow)
            DeviceAllocation{device->shared_from_this(), nullptr, bytes, memory_source::Driver{}};
        if (!a) return halide_error::out_of_memory;
        const uint8_t *host = buf->host && span.size() > 0 ? buf->host + span.lo : nullptr;
        AllocationRequest request{bytes, host, (buf->type.bits + 7) / 8};
        if (int rc = device->allocator().allocate(*device, request, *a)) {
            delete a;
            return rc;
        }
        if (!Backend::attach(buf, a, -span.lo)) {
            end(a);
            return halide_error::out_of_memory;
        }
        buf->device_interface = Backend::interface();
        return 0;
    }

    static int device_free(void *, halide_buffer_t *buf) {
        if (!buf->device) return 0;
        if (Backend::is_root(buf)) {
            int rc = 0;
            if (!end(Backend::allocation_of(buf), &rc))
                return record_failure(halide_error::gpu_device_error, rc,
                                      std::string(Backend::kFree) + "; the device copy is kept, call device_free() again");
        }
        // A crop's or a view's handle is only forgotten: the allocation belongs to its root.
        clear_device(buf);
        return 0;
    }

    static int device_sync(void *, halide_buffer_t *buf) {
        if (!buf->device) return 0;
        return Backend::sync(device_of(Backend::allocation_of(buf)));
    }

    /// The failure of a read (to_host) or write of `bytes` by `call`: recorded with the fix,
    /// Halide's code returned.
    static int transfer_failed(Direction direction, int code, const std::string &call, int64_t bytes) {
        std::string what = call + " of " + size_text(uint64_t(bytes));
        return direction == Direction::to_host
                   ? record_failure(halide_error::copy_to_host_failed, code, what + "; the device copy is kept, retry or device_free()")
                   : record_failure(halide_error::copy_to_device_failed, code,
                                    what + "; the host copy is kept, free device memory and retry");
    }

    /// A read or write between a region and host memory (Device::read and write), one plan of
    /// rectangle commands at a time through `run(plan, host)` (the driver's code), counted in
    /// the region's allocation; Backend::transfer_call(plan, direction) names the commands.
    template <class Run>
    static int transfer(const DeviceRegion &region, const HostRegion &host, Direction direction, Run &&run) {
        int64_t bytes = region_bytes(region.shape, region.itemsize);
        int rc = host_transfer(region, host, direction, [&](const CopyPlan &plan, uint8_t *at) {
            int code = run(plan, at);
            return code == 0 ? 0 : transfer_failed(direction, code, Backend::transfer_call(plan, direction), bytes);
        });
        if (rc == 0 && bytes > 0) record_transfer(Backend::allocation_of(region.root)->transfers, direction, bytes);
        return rc;
    }

    /// What copy_to_host or copy_to_device through `view` moves: the span of the whole storage.
    struct SpanCopy {
        halide_buffer_t *buf;
        DeviceAllocation *a;
        ByteSpan span;
        explicit SpanCopy(halide_buffer_t *view)
            : buf(copy_target(view)), a(Backend::allocation_of(buf)), span(byte_span(buf)) {}
        uint8_t *host() const { return buf->host + span.lo; }
        int64_t at() const { return Backend::offset_of(buf) + span.lo; }  ///< its first byte on the device
        /// A finished copy of the span: counted, or its failure recorded.
        int done(int rc, Direction direction, const char *call) const {
            if (rc != 0) return transfer_failed(direction, rc, call, span.size());
            record_transfer(a->transfers, direction, span.size());
            return 0;
        }
        /// The device memory is this very host memory (zero-copy): a map stands for the copy.
        bool zero_copy() const { return a->over_host() && a->over_host() + at() == host(); }
        int map(Direction direction) const {
            int code = 0;
            if constexpr (Backend::kZeroCopy) code = Backend::map(device_of(a), a->native, at(), uint64_t(span.size()), direction);
            if (code != 0) return transfer_failed(direction, code, Backend::kMap, span.size());
            record_map(a->transfers, direction);
            return 0;
        }
    };

    static int copy_to_host(void *, halide_buffer_t *view) {
        SpanCopy c(view);
        if (!c.buf->host) return halide_error::host_is_null;
        if (c.span.size() == 0) return 0;
        if (c.zero_copy()) return c.map(Direction::to_host);
        uint64_t bytes = uint64_t(c.span.size());
        auto *staging = c.span.dense ? c.host() : static_cast<uint8_t *>(std::malloc(size_t(bytes)));
        if (!staging) return halide_error::out_of_memory;
        int rc = Backend::read(device_of(c.a), c.a->native, c.at(), staging, bytes);
        if (!c.span.dense) {
            if (rc == 0) scatter_elements(c.buf, staging - c.span.lo);
            std::free(staging);
        }
        return c.done(rc, Direction::to_host, Backend::kRead);
    }

    static int copy_to_device(void *, halide_buffer_t *view) {
        SpanCopy c(view);
        if (!c.buf->host) return halide_error::host_is_null;
        if (c.span.size() == 0) return 0;
        if (c.zero_copy()) return c.map(Direction::to_device);
        // The whole span goes up, gaps included: they are host bytes of the same storage (current,
        // as the host is: one state covers the storage) or bytes no element of ours reads.
        int rc = Backend::write(device_of(c.a), c.a->native, c.at(), c.host(), uint64_t(c.span.size()));
        return c.done(rc, Direction::to_device, Backend::kWrite);
    }

    static int device_and_host_malloc(void *uc, halide_buffer_t *buf) {
        return host_and_device_malloc(uc, buf, device_malloc);
    }
    static int device_and_host_free(void *uc, halide_buffer_t *buf) {
        return host_and_device_free(uc, buf, device_free);
    }

    static int new_crop(const halide_buffer_t *src, int64_t bytes, halide_buffer_t *dst) {
        if (!Backend::attach_crop(src, bytes, dst)) return halide_error::device_crop_failed;
        dst->device_interface = src->device_interface;
        return 0;
    }
    static int device_crop(void *, const halide_buffer_t *src, halide_buffer_t *dst) {
        return new_crop(src, crop_offset(src, dst), dst);
    }
    static int device_slice(void *, const halide_buffer_t *src, int dim, int pos, halide_buffer_t *dst) {
        return new_crop(src, slice_offset(src, dim, pos), dst);
    }
    static int device_release_crop(void *, halide_buffer_t *buf) {
        Backend::detach(buf);
        buf->device_interface = nullptr;
        return 0;
    }

    static int wrap_native(void *, halide_buffer_t *buf, uint64_t native) {
        Device *device = target();
        if (!device)
            return record_failure(halide_error::device_wrap_native_failed, Backend::kNoTarget,
                                  "wrap_native without a target device; wrap through halide_buffer");
        // The bytes from `native` to the end of its memory; whether that is enough is the caller's
        // business (Halide's rule): ours checks it.
        uint64_t available = 0;
        if (int rc = Backend::inspect(*device, native, &available)) return rc;
        // Halide's rule: the caller keeps the memory alive; we release nothing.
        auto *a = new (std::nothrow) DeviceAllocation{device->shared_from_this(), reinterpret_cast<void *>(native),
                                                      available, memory_source::Borrowed{}};
        if (!a || !Backend::attach(buf, a, -byte_span(buf).lo)) {
            delete a;
            return halide_error::out_of_memory;
        }
        return 0;
    }

    static int detach_native(void *, halide_buffer_t *buf) {
        if (!buf->device) return 0;
        if (!Backend::is_root(buf))
            return record_failure(halide_error::device_detach_native_failed, Backend::kNotRoot,
                                  "detach_native on a crop; detach the buffer that wrapped the memory");
        end(Backend::allocation_of(buf));  // our own reference, if finish_wrap took one
        clear_device(buf);
        return 0;
    }

    static DevicePlace place_of(const halide_buffer_t *buf) {
        const DeviceAllocation *a = Backend::allocation_of(buf);
        const halide_buffer_t *root = a->whole ? a->whole : buf;
        return {root, Backend::offset_of(buf) - Backend::offset_of(root), a->device.get()};
    }

    static int buffer_copy(void *uc, halide_buffer_t *src, const halide_device_interface_t *dst_interface,
                           halide_buffer_t *dst) {
        return backend_buffer_copy(Backend::interface(), place_of, uc, src, dst_interface, dst);
    }

    static constexpr halide_device_interface_impl_t impl = {
        no_module,   no_module,         device_malloc,  device_free,
        device_sync, no_device_release, copy_to_host,   copy_to_device,
        device_and_host_malloc,         device_and_host_free, buffer_copy,
        device_crop, device_slice,      device_release_crop,  wrap_native,
        detach_native,
    };

    /// The backend's public table: Halide's flag rules in front of `impl`.
    static const halide_device_interface_t *table() {
        static const halide_device_interface_t t = make_public_interface(&impl, Backend::compute_capability);
        return &t;
    }
};

}  // namespace hb
