// test_dlpack_export.cpp: the plan of a DLPack export (interop/dlpack.h: plan_export()), the
// decision run_export() carries out for __dlpack__ and the exchange API: where the elements go
// (the host copy or the CUDA device copy), which capsule, a copy or a lease, the consumer's
// stream, and every refusal with the message Python users see. The plan reads where the data is as a DLPack device, so the CUDA
// cases need no driver; carrying a CUDA plan out (the device lease, the stream's wait) is
// tests/test_cuda_standin.py's.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/errors.h"
#include "harness.h"
#include "interop/dlpack.h"

namespace {

using hb::Buffer;
using hb::ExportPlan;
using hb::ExportRequest;
using hb::StreamArg;

constexpr const char *kEntry = "__dlpack__";
constexpr DLDevice kHost{kDLCPU, 0};
constexpr DLDevice kGpu0{kDLCUDA, 0};

Buffer host_buffer(const char *dtype = "float32") {
    return Buffer::allocate(kEntry, {2, 3}, *hb::dtype_by_name(dtype));
}

/// A read-only buffer over memory the test keeps (as from_host() of a read-only array).
Buffer readonly_buffer(std::vector<float> &memory) {
    return Buffer::wrap(kEntry, reinterpret_cast<uint8_t *>(memory.data()), {int64_t(memory.size())},
                        {int64_t(sizeof(float))}, *hb::dtype_by_name("float32"), nullptr, true, false);
}

/// stream= as the binding reads a plain int.
StreamArg number(int64_t value) {
    StreamArg s;
    s.kind = StreamArg::Kind::integer;
    s.negative = value < 0;
    s.magnitude = value < 0 ? uint64_t(0) - uint64_t(value) : uint64_t(value);
    return s;
}

/// stream= of another Python type, named by its repr.
StreamArg other(const char *repr) {
    StreamArg s;
    s.kind = StreamArg::Kind::other;
    s.text = repr;
    return s;
}

ExportRequest request(int copy = -1, StreamArg stream = {}) {
    ExportRequest r;
    r.copy = copy;
    r.stream = stream;
    return r;
}

ExportRequest versioned(int copy = -1, StreamArg stream = {}) {
    ExportRequest r = request(copy, stream);
    r.max_version = std::pair<int64_t, int64_t>{1, 0};
    return r;
}

ExportRequest on(int64_t type, int64_t id, ExportRequest r = {}) {
    r.dl_device = std::pair<int64_t, int64_t>{type, id};
    return r;
}

void check_host_plan(const ExportPlan &p, bool versioned_capsule, bool copy) {
    CHECK_EQ(int(p.at.device_type), int(kDLCPU));
    CHECK_EQ(p.at.device_id, 0);
    CHECK(!p.on_cuda());
    CHECK_EQ(p.versioned, versioned_capsule);
    CHECK_EQ(p.copy, copy);
    CHECK(!p.wait_stream);
}

}  // namespace

TEST_CASE(dlpack_export_plan_of_host_data_is_a_lease_or_a_copy_in_the_capsule_asked_for) {
    Buffer b = host_buffer();
    check_host_plan(hb::plan_export(b, kHost, request()), false, false);
    check_host_plan(hb::plan_export(b, kHost, request(0)), false, false);
    check_host_plan(hb::plan_export(b, kHost, request(1)), false, true);
    check_host_plan(hb::plan_export(b, kHost, versioned()), true, false);
    check_host_plan(hb::plan_export(b, kHost, versioned(1)), true, true);
    ExportRequest old = request();
    old.max_version = std::pair<int64_t, int64_t>{0, 9};  // below 1.0: a legacy capsule
    check_host_plan(hb::plan_export(b, kHost, old), false, false);
    // No CUDA device: the overload the binding calls says the data is on the host.
    check_host_plan(hb::plan_export(b, std::shared_ptr<hb::CudaDevice>(), versioned()), true, false);
}

TEST_CASE(dlpack_export_plan_takes_dl_device_none_the_data_s_own_or_the_host) {
    Buffer b = host_buffer();
    check_host_plan(hb::plan_export(b, kHost, on(kDLCPU, 0)), false, false);
    CHECK_THROWS(hb::BufferError, hb::plan_export(b, kHost, on(kDLCUDA, 0)),
                 "__dlpack__(): dl_device (2, 0) is not where the data is (1, 0); ask for dl_device=None, "
                 "(1, 0) or the device of __dlpack_device__()");
    CHECK_THROWS(hb::BufferError, hb::plan_export(b, kHost, on(kDLCPU, 3)),
                 "dl_device (1, 3) is not where the data is (1, 0)");
    // A pair beyond DLPack's 32-bit fields is compared and named as given.
    CHECK_THROWS(hb::BufferError, hb::plan_export(b, kHost, on(int64_t(1) << 40, 0)),
                 "dl_device (1099511627776, 0) is not where the data is (1, 0)");
    // Data on a CUDA device: its own device, or the host copy.
    ExportPlan device = hb::plan_export(b, kGpu0, on(kDLCUDA, 0));
    CHECK(device.on_cuda());
    CHECK_EQ(device.at.device_id, 0);
    check_host_plan(hb::plan_export(b, kGpu0, on(kDLCPU, 0)), false, false);
    check_host_plan(hb::plan_export(b, kGpu0, on(kDLCPU, 0, request(1))), false, true);
    CHECK_THROWS(hb::BufferError, hb::plan_export(b, kGpu0, on(kDLCUDA, 1)),
                 "__dlpack__(): dl_device (2, 1) is not where the data is (2, 0)");
    ExportPlan second = hb::plan_export(b, DLDevice{kDLCUDA, 1}, on(kDLCUDA, 1));
    CHECK(second.on_cuda());
    CHECK_EQ(second.at.device_id, 1);
}

TEST_CASE(dlpack_export_plan_refuses_legacy_capsules_for_what_only_a_versioned_one_says) {
    // Padded sub-byte dtypes need DLPack 1.1's flag, on every device and even for a copy.
    Buffer padded = host_buffer("float4_e2m1fn");
    CHECK_THROWS(hb::BufferError, hb::plan_export(padded, kHost, request()),
                 "__dlpack__(): float4_e2m1fn is stored one element per byte, which only a versioned capsule "
                 "can say (the padded flag of DLPack 1.1); call __dlpack__(max_version=(1, 1))");
    CHECK_THROWS(hb::BufferError, hb::plan_export(padded, kHost, request(1)), "stored one element per byte");
    CHECK_THROWS(hb::BufferError, hb::plan_export(padded, kGpu0, request()), "stored one element per byte");
    check_host_plan(hb::plan_export(padded, kHost, versioned()), true, false);
    // Read-only memory: a versioned capsule carries the flag; a legacy one only a copy, writable.
    std::vector<float> memory(4, 1.0f);
    Buffer readonly = readonly_buffer(memory);
    CHECK_THROWS(hb::BufferError, hb::plan_export(readonly, kHost, request()),
                 "__dlpack__(): the buffer is read-only, which a legacy capsule cannot say; call "
                 "__dlpack__(max_version=(1, 0)), or copy=True");
    CHECK_THROWS(hb::BufferError, hb::plan_export(readonly, kHost, request(0)), "the buffer is read-only");
    CHECK_THROWS(hb::BufferError, hb::plan_export(readonly, kGpu0, request()), "the buffer is read-only");
    check_host_plan(hb::plan_export(readonly, kHost, request(1)), false, true);
    check_host_plan(hb::plan_export(readonly, kHost, versioned()), true, false);
    // The capsule's refusals come before the stream's (a bad stream on top of them is not named).
    CHECK_THROWS(hb::BufferError, hb::plan_export(padded, kGpu0, request(-1, other("'1'"))),
                 "stored one element per byte");
}

TEST_CASE(dlpack_export_plan_of_host_data_takes_no_stream) {
    Buffer b = host_buffer();
    CHECK_THROWS(hb::BufferError, hb::plan_export(b, kHost, versioned(-1, number(1))),
                 "__dlpack__(): stream must be None for data on the CPU, not 1; pass stream=None (host data "
                 "has no stream to order)");
    CHECK_THROWS(hb::BufferError, hb::plan_export(b, kHost, versioned(-1, number(-1))), "on the CPU, not -1");
    CHECK_THROWS(hb::BufferError, hb::plan_export(b, kHost, versioned(-1, number(0))), "on the CPU, not 0");
    // Any Python object, named by its repr: no TypeError, the data has no stream whatever it is.
    CHECK_THROWS(hb::BufferError, hb::plan_export(b, kHost, versioned(-1, other("'s'"))), "on the CPU, not 's'");
    // The host copy of data on a device is host data too.
    CHECK_THROWS(hb::BufferError, hb::plan_export(b, kGpu0, on(kDLCPU, 0, versioned(-1, number(5)))),
                 "on the CPU, not 5");
}

TEST_CASE(dlpack_export_plan_of_cuda_data_follows_dlpack_s_stream_rule) {
    Buffer b = host_buffer();
    auto wait = [&](StreamArg s) { return hb::plan_export(b, kGpu0, versioned(-1, s)).wait_stream; };
    CHECK_EQ(wait(StreamArg{}).value_or(0), uintptr_t(1));  // None: the legacy default stream
    CHECK(!wait(number(-1)));                               // no synchronisation
    CHECK_EQ(wait(number(1)).value_or(0), uintptr_t(1));
    CHECK_EQ(wait(number(2)).value_or(0), uintptr_t(2));    // the per-thread default stream
    CHECK_EQ(wait(number(0x7f0012345600)).value_or(0), uintptr_t(0x7f0012345600));  // a handle
    StreamArg high;  // a handle in the upper half of the address space
    high.kind = StreamArg::Kind::integer;
    high.magnitude = (uint64_t(1) << 63) + 16;
    CHECK_EQ(wait(high).value_or(0), uintptr_t((uint64_t(1) << 63) + 16));
    ExportPlan p = hb::plan_export(b, kGpu0, request(0, number(7)));
    CHECK(p.on_cuda());
    CHECK(!p.versioned);
    CHECK(!p.copy);
    CHECK_EQ(p.wait_stream.value_or(0), uintptr_t(7));

    CHECK_THROWS(hb::BufferError, wait(number(0)),
                 "__dlpack__(): stream=0 is ambiguous and disallowed by DLPack; pass 1 for the legacy default "
                 "stream, 2 for the per-thread one, or the stream's handle");
    CHECK_THROWS(hb::BufferError, wait(number(-2)),
                 "__dlpack__(): stream -2 is no stream; pass None, -1 (no synchronisation) or a stream number");
    StreamArg huge;  // beyond 64 bits either way: the binding names it
    huge.kind = StreamArg::Kind::integer;
    huge.fits = false;
    huge.text = "18446744073709551616";
    CHECK_THROWS(hb::BufferError, wait(huge), "__dlpack__(): stream 18446744073709551616 is no stream");
    huge.negative = true;
    huge.text = "-18446744073709551616";
    CHECK_THROWS(hb::BufferError, wait(huge), "stream -18446744073709551616 is no stream");
    CHECK_THROWS(hb::TypeError, wait(other("'1'")),
                 "__dlpack__(): stream must be an int or None, not '1'; pass the consumer's stream handle, or None");
    // An int subclass is named as the binding read it (its repr).
    StreamArg named = number(-3);
    named.text = "<Stream.bad: -3>";
    CHECK_THROWS(hb::BufferError, wait(named), "stream <Stream.bad: -3> is no stream");
}

TEST_CASE(dlpack_export_plan_of_cuda_data_refuses_copy_true_after_the_stream) {
    Buffer b = host_buffer();
    CHECK_THROWS(hb::BufferError, hb::plan_export(b, kGpu0, versioned(1)),
                 "__dlpack__(): copy=True of data on a CUDA device is not supported; ask for a host copy with "
                 "dl_device=(1, 0), copy=True");
    CHECK_THROWS(hb::BufferError, hb::plan_export(b, kGpu0, versioned(1, number(0))), "stream=0 is ambiguous");
    CHECK_THROWS(hb::TypeError, hb::plan_export(b, kGpu0, versioned(1, other("'1'"))), "stream must be an int");
    // A read-only buffer's legacy capsule with copy=True gets past the capsule's rule, not the device's.
    std::vector<float> memory(4, 1.0f);
    Buffer readonly = readonly_buffer(memory);
    CHECK_THROWS(hb::BufferError, hb::plan_export(readonly, kGpu0, request(1)), "copy=True of data on a CUDA device");
    ExportPlan lease = hb::plan_export(readonly, kGpu0, versioned(0));
    CHECK(lease.on_cuda());
    CHECK(!lease.copy);
}

TEST_CASE(dlpack_export_plan_of_the_exchange_api_is_the_data_where_it_is_in_a_versioned_tensor) {
    // The exchange API's consumer asks nothing: what a legacy capsule could not say (read-only,
    // padded) goes in the versioned tensor's flags; a CUDA export finishes our stream's work (its
    // consumer has no stream to wait on); a host lease's mark stays (no capsule to die unused).
    ExportRequest exchange;
    exchange.via = hb::ExportVia::exchange;
    std::vector<float> memory(4, 1.0f);
    for (const Buffer &b : {host_buffer(), host_buffer("float4_e2m1fn"), readonly_buffer(memory)}) {
        ExportPlan host = hb::plan_export(b, kHost, exchange);
        check_host_plan(host, true, false);
        CHECK(!host.finish_stream);
        CHECK(!host.withdrawable);
        ExportPlan device = hb::plan_export(b, DLDevice{kDLCUDA, 1}, exchange);
        CHECK(device.on_cuda());
        CHECK_EQ(device.at.device_id, 1);
        CHECK(device.versioned);
        CHECK(!device.copy);
        CHECK(!device.wait_stream);
        CHECK(device.finish_stream);
        CHECK(!device.withdrawable);
    }
    // __dlpack__'s own plans hand a writable lease's mark to the capsule.
    CHECK(hb::plan_export(host_buffer(), kHost, versioned()).withdrawable);
}
