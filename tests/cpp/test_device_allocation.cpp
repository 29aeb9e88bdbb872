// test_device_allocation.cpp: who frees device memory (device/device_interface.h: an allocation's
// MemorySource, and the steps that change it) and the pool as an allocator over another
// (device/device_pool.h), on a device and a driver of the test's own that count what they are
// asked, so each rule is seen without a driver.
#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "device/device.h"
#include "device/device_interface.h"
#include "device/device_pool.h"
#include "harness.h"

namespace {

using namespace hb;

/// A driver of numbered allocations: what it made, what it was given back, and a failure to
/// return on its next allocations (as a driver out of memory does).
struct CountingDriver final : DeviceAllocator {
    uintptr_t next = 0x1000;
    std::vector<void *> made, released;
    int refuse = 0;  ///< allocations still to refuse
    int allocate(Device &, const AllocationRequest &request, DeviceAllocation &a) override {
        if (refuse > 0) {
            --refuse;
            return halide_error::device_malloc_failed;
        }
        a.native = reinterpret_cast<void *>(next);
        next += 0x1000;
        a.size = request.bytes;
        a.source = memory_source::Driver{};
        made.push_back(a.native);
        return 0;
    }
    int release(const Device &, void *native, uint64_t) override {
        released.push_back(native);
        return 0;
    }
};

/// A device of no backend: what the pool asks of one (its driver, synchronize()).
struct TestDevice final : Device {
    explicit TestDevice(DeviceAllocator &driver) : Device(driver) {}
    const char *kind() const override { return "test"; }
    std::string description() const override { return "a test device"; }
    const halide_device_interface_t *interface() const override { return nullptr; }
    void synchronize() const override {}
    DeviceAllocation *allocation(const halide_buffer_t &) const override { return nullptr; }
    uint64_t view_field(const halide_buffer_t &, int64_t, std::shared_ptr<void> &) const override { return 0; }
    void finish_wrap(halide_buffer_t &, uint64_t) const override {}
    Handout hand_out(const halide_buffer_t &, int64_t) const override { return Handout{nullptr, 0}; }
    std::shared_ptr<void> retire_lent(halide_buffer_t &) const override { return nullptr; }
};

/// An allocation as Engine::device_malloc makes one, through the device's allocator.
DeviceAllocation allocated(TestDevice &device, uint64_t bytes) {
    DeviceAllocation a{nullptr, nullptr, bytes, memory_source::Driver{}};
    CHECK_EQ(device.allocator().allocate(device, AllocationRequest{bytes, nullptr, 1}, a), 0);
    return a;
}

template <class Source>
bool is(const DeviceAllocation &a) {
    return std::holds_alternative<Source>(a.source);
}

// ---------------------------------------------------------------------------------------------
// The source's steps
// ---------------------------------------------------------------------------------------------

TEST_CASE(a_pooled_allocation_shared_out_goes_to_the_driver_not_back_to_the_pool) {
    DeviceAllocation a{nullptr, nullptr, 256, memory_source::Pooled{}};
    a.share_out();  // a consumer holds a reference of its own (an OpenCL handout)
    CHECK(is<memory_source::Driver>(a));
    CHECK(!a.lent());
}

TEST_CASE(a_lent_allocation_is_never_pooled_either) {
    DeviceAllocation a{nullptr, nullptr, 256, memory_source::Pooled{}};
    a.lend();  // a raw pointer handed out (CUDA)
    CHECK(is<memory_source::Driver>(a));
    CHECK(a.lent() && !a.retired());
    a.retire();
    CHECK(a.retired());
}

TEST_CASE(sharing_out_memory_not_from_the_pool_changes_its_source_not) {
    const uint8_t host[16] = {};
    DeviceAllocation over{nullptr, nullptr, 16, memory_source::OverHost{host}};
    over.share_out();
    CHECK(is<memory_source::OverHost>(over));
    CHECK(over.over_host() == host);
    DeviceAllocation wrapped{nullptr, nullptr, 16, memory_source::Borrowed{}};
    wrapped.lend();
    CHECK(is<memory_source::Borrowed>(wrapped) && wrapped.wrapped());
}

TEST_CASE(retained_wrapped_memory_is_still_someone_elses) {
    DeviceAllocation a{nullptr, nullptr, 16, memory_source::Borrowed{}};
    a.retain();  // OpenCL's finish_wrap: a reference of our own, released when it ends
    CHECK(is<memory_source::Retained>(a));
    CHECK(a.wrapped());
    CHECK(a.over_host() == nullptr);
    CHECK(!DeviceAllocation(nullptr, nullptr, 16, memory_source::Driver{}).wrapped());
}

// ---------------------------------------------------------------------------------------------
// The pool, an allocator over the driver's
// ---------------------------------------------------------------------------------------------

TEST_CASE(the_pool_serves_a_size_class_and_keeps_what_comes_back) {
    CountingDriver driver;
    auto device = std::make_shared<TestDevice>(driver);
    DeviceAllocation a = allocated(*device, 1000);
    CHECK(is<memory_source::Pooled>(a));
    CHECK_EQ(a.size, uint64_t(1024));  // its class
    CHECK_EQ(driver.made.size(), size_t(1));
    CHECK_EQ(device->pool().release(*device, a.native, a.size), 0);
    CHECK(driver.released.empty());  // kept
    DeviceAllocation b = allocated(*device, 1020);  // the same class: the same memory
    CHECK_EQ(b.native, a.native);
    CHECK_EQ(driver.made.size(), size_t(1));
    PoolStats stats = device->pool().stats();
    CHECK_EQ(stats.hits, uint64_t(1));
    CHECK_EQ(stats.misses, uint64_t(1));
}

TEST_CASE(a_limit_of_zero_swaps_the_pool_out_for_the_driver) {
    CountingDriver driver;
    auto device = std::make_shared<TestDevice>(driver);
    device->pool().set_limit(0);
    CHECK(&device->allocator() == &device->driver());
    DeviceAllocation a = allocated(*device, 1000);
    CHECK(is<memory_source::Driver>(a));
    CHECK_EQ(a.size, uint64_t(1000));  // no class: the driver's own
    device->pool().set_limit(DevicePool::kDefaultLimit);
    CHECK(&device->allocator() == &device->pool());
}

TEST_CASE(memory_back_beyond_the_limit_goes_to_the_driver) {
    CountingDriver driver;
    auto device = std::make_shared<TestDevice>(driver);
    device->pool().set_limit(2048);
    DeviceAllocation a = allocated(*device, 2048), b = allocated(*device, 256);
    CHECK_EQ(device->pool().release(*device, a.native, a.size), 0);  // at the limit: kept
    CHECK_EQ(device->pool().release(*device, b.native, b.size), 0);  // beyond it: released
    CHECK_EQ(driver.released.size(), size_t(1));
    CHECK_EQ(driver.released[0], b.native);
    CHECK_EQ(device->trim(), uint64_t(2048));
    CHECK_EQ(driver.released.size(), size_t(2));
}

TEST_CASE(a_refused_allocation_empties_the_pool_and_asks_once_more) {
    CountingDriver driver;
    auto device = std::make_shared<TestDevice>(driver);
    DeviceAllocation kept = allocated(*device, 4096);
    device->pool().release(*device, kept.native, kept.size);
    driver.refuse = 1;
    DeviceAllocation a = allocated(*device, 256);  // another class: refused, the pool let go, asked again
    CHECK(is<memory_source::Pooled>(a));
    CHECK_EQ(driver.released.size(), size_t(1));
    CHECK_EQ(device->pool().stats().bytes_held, uint64_t(0));
    driver.refuse = 1;  // with nothing kept, the refusal is the caller's
    DeviceAllocation b{nullptr, nullptr, 256, memory_source::Driver{}};
    CHECK_EQ(device->allocator().allocate(*device, AllocationRequest{256, nullptr, 1}, b),
             halide_error::device_malloc_failed);
}

}  // namespace
