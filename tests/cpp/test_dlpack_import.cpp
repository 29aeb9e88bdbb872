// test_dlpack_import.cpp: the DLPack import path (interop/dlpack.h: check_import(),
// refuse_major(), adopt_import()) with tensors built by hand, as a producer would hand them
// over: the buffer's geometry and dtype, who owns the memory and when the producer's deleter
// runs, the read-only flag, and the refusal of malformed tensors.
#include <cstdint>
#include <cstring>
#include <limits>
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
using Shape = std::vector<int64_t>;

// ---------------------------------------------------------------------------------------------
// Adapter: the import path as the binding runs it (py_dlpack.cpp's from_capsule()), without
// Python: the version checked, the tensor checked, then adopted with an owner that runs the
// tensor's deleter when the last buffer over it dies.
// ---------------------------------------------------------------------------------------------

constexpr const char *kEntry = "from_dlpack";

// What an import may ask of the embedder (no CUDA device, steps run as they are): this program
// installs none, so the core's defaults answer.

template <typename Managed>
std::shared_ptr<void> owner_of(Managed *m) {
    return std::shared_ptr<void>(m, [](void *p) {
        auto *t = static_cast<Managed *>(p);
        if (t->deleter) t->deleter(t);
    });
}

/// from_dlpack() of a versioned tensor; `copy` as from_dlpack's copy= (-1 None, 0 False, 1 True).
Buffer import(DLManagedTensorVersioned *m, int copy = -1) {
    if (m->version.major != kDLPackMajor) hb::refuse_major(kEntry, m);
    hb::DLImport in = hb::check_import(kEntry, m->dl_tensor, m->flags, m->version);
    return hb::adopt_import(in, owner_of(m), copy, false);
}

/// from_dlpack() of a legacy tensor.
Buffer import(DLManagedTensor *m, int copy = -1) {
    hb::DLImport in = hb::check_import(kEntry, m->dl_tensor, 0, DLPackVersion{0, 0});
    return hb::adopt_import(in, owner_of(m), copy, false);
}

// ---------------------------------------------------------------------------------------------
// A producer
// ---------------------------------------------------------------------------------------------

/// A producer's tensor over memory it keeps, as a versioned and as a legacy managed tensor
/// (hand one of them over), counting its deleter's calls.
struct Producer {
    Shape shape, strides;
    int deleted = 0;
    DLManagedTensorVersioned versioned{};
    DLManagedTensor legacy{};

    /// Empty `strides`: NULL strides.
    Producer(void *data, DLDataType dtype, Shape shape_, Shape strides_, uint64_t byte_offset = 0)
        : shape(std::move(shape_)), strides(std::move(strides_)) {
        DLTensor t{};
        t.data = data;
        t.device = DLDevice{kDLCPU, 0};
        t.ndim = int32_t(shape.size());
        t.dtype = dtype;
        t.shape = shape.empty() ? nullptr : shape.data();
        t.strides = strides.empty() ? nullptr : strides.data();
        t.byte_offset = byte_offset;
        versioned.version = DLPackVersion{1, 3};
        versioned.manager_ctx = this;
        versioned.deleter = [](DLManagedTensorVersioned *self) {
            ++static_cast<Producer *>(self->manager_ctx)->deleted;
        };
        versioned.dl_tensor = t;
        legacy.manager_ctx = this;
        legacy.deleter = [](DLManagedTensor *self) { ++static_cast<Producer *>(self->manager_ctx)->deleted; };
        legacy.dl_tensor = t;
    }
    Producer(const Producer &) = delete;
    DLTensor &tensor() { return versioned.dl_tensor; }
};

constexpr DLDataType kInt16{kDLInt, 16, 1};
constexpr DLDataType kFloat32{kDLFloat, 32, 1};

template <typename T>
T element(const Buffer &b, const Shape &index) {
    int64_t offset = 0;
    for (size_t i = 0; i < index.size(); ++i) offset += index[i] * b.strides()[i];
    T value;
    std::memcpy(&value, b.data() + offset, sizeof value);
    return value;
}

Shape axes(const hb::Axes &a) { return Shape(a.begin(), a.end()); }

}  // namespace

// ---------------------------------------------------------------------------------------------
// What a buffer makes of a tensor
// ---------------------------------------------------------------------------------------------

TEST_CASE(dlpack_import_wraps_the_tensor_with_its_shape_strides_and_offset) {
    std::vector<int16_t> memory(48);
    for (size_t i = 0; i < memory.size(); ++i) memory[i] = int16_t(i);
    // The outer axis backwards from element 12 (byte_offset 24), the others forwards.
    Producer p(memory.data(), kInt16, {2, 3, 4}, {-12, 4, 1}, 24);
    Buffer b = import(&p.versioned);
    CHECK_EQ(b.dtype().name, std::string("int16"));
    CHECK_EQ(axes(b.shape()), (Shape{2, 3, 4}));
    CHECK_EQ(axes(b.strides()), (Shape{-24, 8, 2}));  // bytes
    CHECK_EQ(axes(b.mins()), (Shape{0, 0, 0}));
    CHECK_EQ(static_cast<void *>(b.data()), static_cast<void *>(memory.data() + 12));
    CHECK(!b.readonly());
    for (int64_t i = 0; i < 2; ++i) {
        for (int64_t j = 0; j < 3; ++j) {
            for (int64_t k = 0; k < 4; ++k) CHECK_EQ(element<int16_t>(b, {i, j, k}), 12 - 12 * i + 4 * j + k);
        }
    }
    // No copy: the buffer is the producer's memory.
    memory[12] = -5;
    CHECK_EQ(element<int16_t>(b, {0, 0, 0}), -5);
}

TEST_CASE(dlpack_import_of_null_strides_is_c_contiguous_before_1_2) {
    std::vector<float> memory(15, 1.5f);
    Producer p(memory.data(), kFloat32, {3, 5}, {});
    Buffer legacy = import(&p.legacy);
    CHECK_EQ(axes(legacy.strides()), (Shape{20, 4}));
    CHECK(legacy.is_c_contiguous());
    p.versioned.version = DLPackVersion{1, 1};
    Buffer versioned = import(&p.versioned);
    CHECK_EQ(axes(versioned.strides()), (Shape{20, 4}));
}

TEST_CASE(dlpack_import_gives_every_dtype_of_the_table_its_row) {
    uint8_t memory[64] = {};
    for (size_t i = 0; i < hb::dtype_count(); ++i) {
        const hb::DType &row = hb::dtype_table()[i];
        Producer p(memory, row.dlpack, {2}, {1});
        p.versioned.version = hb::dlpack_version_for(row);
        // Sub-byte rows are stored one per byte: the padded flag says so.
        p.versioned.flags = row.dlpack_padded ? DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED : 0;
        hb_test::within(row.name, [&] {
            Buffer b = import(&p.versioned);
            CHECK_EQ(&b.dtype(), &row);
            CHECK_EQ(axes(b.strides()), (Shape{row.itemsize}));
        });
    }
}

TEST_CASE(dlpack_import_unpacks_packed_values_only_when_asked_to_copy) {
    // uint4 packed two to a byte, value 0 in the low bits (a legacy tensor cannot say "padded").
    uint8_t packed[2] = {0x21, 0x43};
    const DLDataType uint4{kDLUInt, 4, 1};
    Producer refused(packed, uint4, {4}, {1});
    CHECK_THROWS(hb::BufferError, import(&refused.legacy), "the uint4 values are packed");
    CHECK_EQ(refused.deleted, 1);  // taken, then let go with the refusal
    Producer p(packed, uint4, {4}, {1});
    Buffer b = import(&p.legacy, 1);
    CHECK_EQ(p.deleted, 1);  // the copy needs the tensor no longer
    CHECK_EQ(b.dtype().name, std::string("uint4"));
    CHECK_EQ(axes(b.shape()), (Shape{4}));
    for (int64_t i = 0; i < 4; ++i) CHECK_EQ(element<uint8_t>(b, {i}), uint8_t(i + 1));
}

// ---------------------------------------------------------------------------------------------
// Ownership: the deleter, exactly once
// ---------------------------------------------------------------------------------------------

TEST_CASE(dlpack_import_runs_the_deleter_once_when_the_last_view_dies) {
    std::vector<int16_t> memory(12);
    for (DLPackVersion version : {DLPackVersion{1, 0}, DLPackVersion{0, 0}}) {
        Producer p(memory.data(), kInt16, {3, 4}, {4, 1});
        std::optional<Buffer> b;
        if (version.major) b.emplace(import(&p.versioned));
        else b.emplace(import(&p.legacy));
        std::optional<Buffer> view(b->cropped(1, 1, 2));
        CHECK_EQ(p.deleted, 0);
        b.reset();
        CHECK_EQ(p.deleted, 0);  // the view keeps the tensor
        view.reset();
        CHECK_EQ(p.deleted, 1);
    }
}

TEST_CASE(dlpack_import_with_copy_releases_the_tensor_at_once) {
    std::vector<int16_t> memory{1, 2, 3, 4, 5, 6};
    Producer p(memory.data(), kInt16, {2, 3}, {1, 2});  // Fortran order
    Buffer b = import(&p.versioned, 1);
    CHECK_EQ(p.deleted, 1);
    CHECK(b.is_c_contiguous());
    CHECK(b.data() < reinterpret_cast<uint8_t *>(memory.data()) ||
          b.data() >= reinterpret_cast<uint8_t *>(memory.data() + memory.size()));
    memory.assign(6, 0);
    CHECK_EQ(element<int16_t>(b, {1, 2}), 6);
    // A tensor the producer copied for us already is wrapped, not copied again.
    Producer copied(memory.data(), kInt16, {6}, {1});
    copied.versioned.flags = DLPACK_FLAG_BITMASK_IS_COPIED;
    Buffer wrapped = import(&copied.versioned, 1);
    CHECK_EQ(copied.deleted, 0);
    CHECK_EQ(static_cast<void *>(wrapped.data()), static_cast<void *>(memory.data()));
}

TEST_CASE(dlpack_import_honours_the_read_only_flag) {
    std::vector<int16_t> memory(6);
    Producer p(memory.data(), kInt16, {6}, {1});
    p.versioned.flags = DLPACK_FLAG_BITMASK_READ_ONLY;
    Buffer b = import(&p.versioned);
    CHECK(b.readonly());
    CHECK_THROWS(hb::ReadOnlyError, b.lease_host("numpy", hb::Access::write),
                 "numpy(): the buffer wraps read-only memory");
    CHECK(!b.lease_host("numpy", hb::Access::may_write).writable);  // a reader's lease, no write
    CHECK(!import(&p.legacy).readonly());  // a legacy tensor cannot say so: writable
}

// ---------------------------------------------------------------------------------------------
// Refusals
// ---------------------------------------------------------------------------------------------

TEST_CASE(dlpack_import_refuses_malformed_tensors_and_leaves_them_to_their_owner) {
    std::vector<int16_t> memory(16);
    struct Malformed {
        const char *what;
        void (*spoil)(Producer &);
        const char *message;
    };
    const Malformed cases[] = {
        {"negative ndim", [](Producer &p) { p.tensor().ndim = -1; }, "ndim -1 is outside 0..64"},
        {"too many axes", [](Producer &p) { p.tensor().ndim = 65; }, "ndim 65 is outside 0..64"},
        {"no shape", [](Producer &p) { p.tensor().shape = nullptr; }, "the tensor has 2 axes but no shape"},
        {"negative extent", [](Producer &p) { p.shape[0] = -3; }, "negative extent -3 in the shape"},
        {"null data", [](Producer &p) { p.tensor().data = nullptr; }, "NULL data for a tensor of 8 elements"},
        {"unknown dtype", [](Producer &p) { p.tensor().dtype = DLDataType{kDLFloat, 24, 1}; },
         "no dtype of the table has the DLPack type (code 2, bits 24, lanes 1)"},
        {"opaque handles", [](Producer &p) { p.tensor().dtype = DLDataType{kDLOpaqueHandle, 64, 1}; },
         "no dtype of the table has the DLPack type (code 3, bits 64, lanes 1)"},
        {"vector lanes", [](Producer &p) { p.tensor().dtype = DLDataType{kDLInt, 16, 4}; },
         "no dtype of the table has the DLPack type (code 0, bits 16, lanes 4)"},
        {"byte_offset past the address space",
         [](Producer &p) { p.tensor().byte_offset = std::numeric_limits<uint64_t>::max() - 8; },
         "data, byte_offset and strides reach beyond the address space"},
        {"strides past the address space", [](Producer &p) { p.strides[0] = std::numeric_limits<int64_t>::max() / 2; },
         "the strides reach beyond the address space"},
        {"null strides in 1.2", [](Producer &p) { p.tensor().strides = nullptr; },
         "NULL strides in a DLPack 1.3 tensor (allowed only before 1.2)"},
        {"CPU device id", [](Producer &p) { p.tensor().device.device_id = 1; }, "a CPU tensor with device id 1"},
        {"unreachable device", [](Producer &p) { p.tensor().device = DLDevice{kDLVulkan, 0}; },
         "the tensor is on DLPack device (7, 0), which neither the host nor a backend of halide_buffer can read"},
    };
    for (const Malformed &m : cases) {
        hb_test::within(m.what, [&] {
            Producer p(memory.data(), kInt16, {2, 4}, {4, 1});
            m.spoil(p);
            CHECK_THROWS(hb::BufferError, import(&p.versioned), std::string(kEntry) + "(): " + m.message);
            CHECK_EQ(p.deleted, 0);  // a refused tensor stays its capsule's, which deletes it
        });
    }
    // No element: NULL data is what DLPack asks for.
    Producer empty(nullptr, kInt16, {0, 4}, {4, 1});
    CHECK_EQ(import(&empty.versioned).size(), 0);
}

TEST_CASE(dlpack_import_takes_a_tensor_ending_at_the_top_of_the_address_space_and_no_further) {
    // Nothing is read: the check is of addresses alone. 8 int16 elements end 16 bytes above the first.
    constexpr uint64_t kTop = std::numeric_limits<uintptr_t>::max();
    void *data = reinterpret_cast<void *>(uintptr_t(16));
    Producer last(data, kInt16, {2, 4}, {4, 1}, kTop - 16 - 16);  // its bytes end at the top address
    CHECK_EQ(import(&last.versioned).size(), 8);
    Producer past(data, kInt16, {2, 4}, {4, 1}, kTop - 16 - 15);
    CHECK_THROWS(hb::BufferError, import(&past.versioned),
                 std::string(kEntry) + "(): data, byte_offset and strides reach beyond the address space");
}

TEST_CASE(dlpack_import_refuses_another_major_version_deleting_the_tensor_once) {
    std::vector<int16_t> memory(4);
    Producer p(memory.data(), kInt16, {4}, {1});
    p.versioned.version = DLPackVersion{2, 0};
    CHECK_THROWS(hb::BufferError, import(&p.versioned), "from_dlpack(): the tensor follows DLPack 2.0");
    CHECK_EQ(p.deleted, 1);  // only the deleter may be touched: called, once
}

TEST_CASE(dlpack_import_of_cuda_memory_refuses_what_a_device_copy_cannot_be) {
    // Decided before any CUDA device is asked for.
    std::vector<uint8_t> memory(8);
    Producer read_only(memory.data(), DLDataType{kDLUInt, 8, 1}, {8}, {1});
    read_only.tensor().device = DLDevice{kDLCUDA, 0};
    read_only.versioned.flags = DLPACK_FLAG_BITMASK_READ_ONLY;
    CHECK_THROWS(hb::BufferError, import(&read_only.versioned), "the CUDA tensor is read-only");
    Producer packed(memory.data(), DLDataType{kDLUInt, 4, 1}, {8}, {1});
    packed.tensor().device = DLDevice{kDLCUDA, 0};
    CHECK_THROWS(hb::BufferError, import(&packed.versioned, 1), "packed uint4 values on a CUDA device");
    CHECK_EQ(read_only.deleted + packed.deleted, 2);  // adopted, then released with the refusal
}
