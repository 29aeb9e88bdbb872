// raw_view.h: a halide_buffer_t handed to foreign code (Buffer::raw(), Buffer::lend()): the
// struct, what was last published into it, and what it is bound to (raw_views.cpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "abi/halide_abi.h"
#include "device/device.h"

namespace hb {

/// A view's halide_buffer_t handed to foreign code (see Buffer::raw(); raw_views.cpp).
struct RawView {
    halide_buffer_t buf{};
    std::vector<halide_dimension_t> dims;
    uint64_t published = 0;         ///< flags as last written into buf
    uint64_t published_device = 0;  ///< device as last written into buf
    std::shared_ptr<void> handle;  ///< the backend's handle object for buf.device, if it needs one
    const halide_device_interface_t *shown_as = nullptr;  ///< see Buffer::raw()
    /// The device of the pipeline call it was last handed to (TargetDevice then; null outside
    /// one): a runtime's allocation in it is copied home and freed with that device.
    std::shared_ptr<Device> call_device;
    /// A halide_buffer_t someone else owns describing the same memory (an hl.Buffer's, see
    /// Buffer::bind_struct() and publish_struct()): its device, device_interface, flags and padding are taken into `buf`
    /// before each absorb (pull) and written back after each publish (push). Cleared for good
    /// when it stops describing the memory `buf` does (its owner changed its geometry in place).
    halide_buffer_t *external = nullptr;
    /// Lent to a running pipeline call (Buffer::lend()): every other operation on the storage
    /// leaves it alone (its runtime may be reading and writing it with no lock held) until the
    /// call gives it back. Set under the storage's lock; cleared without it by the calling
    /// thread when the call left nothing to take in (Buffer::take_back()).
    std::atomic<bool> lent{false};
    RawView *next = nullptr;  ///< the storage's next published view (RawViews)
    void pull();
    void push() const;
};

/// The RawViews of one storage still alive, in the order they were published, linked through
/// RawView::next: one pointer in every storage, where most never publish a view (a vector would
/// be three). Changed only through Storage::add_raw_view() and remove_raw_view().
class RawViews {
public:
    class iterator {
    public:
        explicit iterator(RawView *at) : at_(at) {}
        RawView *operator*() const { return at_; }
        iterator &operator++() {
            at_ = at_->next;
            return *this;
        }
        bool operator!=(const iterator &other) const { return at_ != other.at_; }

    private:
        RawView *at_;
    };
    iterator begin() const { return iterator(head_); }
    iterator end() const { return iterator(nullptr); }
    bool empty() const { return !head_; }
    void push_back(RawView *r) {
        RawView **at = &head_;
        while (*at) at = &(*at)->next;
        *at = r;
    }
    /// Unlinks `r`, which must be one of them.
    void erase(RawView *r) {
        RawView **at = &head_;
        while (*at != r) at = &(*at)->next;
        *at = r->next;
        r->next = nullptr;
    }

private:
    RawView *head_ = nullptr;
};

}  // namespace hb
