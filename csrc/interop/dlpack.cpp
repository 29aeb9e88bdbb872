// dlpack.cpp: what an export does (plan_export(): DLPack's rules for __dlpack__'s arguments and
// the exchange API's consumer) and the export carried out (run_export()), managed tensors of
// our buffers, and the checks every imported tensor passes.
#include "interop/dlpack.h"

#include <cstring>
#include <limits>
#include <optional>
#include <new>
#include <string>
#include <type_traits>

#include "core/errors.h"
#include "core/layout.h"
#include "core/text.h"
#include "device/embedder.h"
#include "interop/cuda_interop.h"

namespace hb {

// ---------------------------------------------------------------------------------------------
// Export
// ---------------------------------------------------------------------------------------------

namespace {

/// Everything a managed tensor of ours points to, in one allocation: the managed tensor, what
/// keeps the memory alive, and the shape and strides (in elements) right behind the struct.
struct ExportContext {
    std::shared_ptr<const void> memory;
    HostWriteMark lease;
    DLManagedTensorVersioned versioned{};
    DLManagedTensor legacy{};

    int64_t *dims() { return reinterpret_cast<int64_t *>(this + 1); }
    /// The managed tensor of that type (DLManagedTensorVersioned or DLManagedTensor).
    template <typename Managed>
    Managed &managed() {
        if constexpr (std::is_same_v<Managed, DLManagedTensor>) return legacy;
        else return versioned;
    }

    static ExportContext *make(const Buffer &b, const Placement &at) {
        size_t n = size_t(b.ndim());
        void *block = ::operator new(sizeof(ExportContext) + 2 * n * sizeof(int64_t));
        auto *c = new (block) ExportContext{b.keep_alive(), at.lease};
        int64_t *shape = c->dims(), *strides = shape + n;
        int shift = __builtin_ctz(unsigned(b.dtype().itemsize));  // itemsizes are powers of two
        for (size_t i = 0; i < n; ++i) {
            shape[i] = b.shape()[i];
            strides[i] = b.strides()[i] >> shift;  // whole elements: exact, negative ones too
        }
        return c;
    }
    static void destroy(ExportContext *c) {
        c->~ExportContext();
        ::operator delete(c);
    }
};
static_assert(alignof(ExportContext) >= alignof(int64_t), "dims() follow the struct");

/// Fills a DLTensor describing `b` where `at` says, with the context's shape and strides.
void describe(ExportContext &c, const Buffer &b, const Placement &at, DLTensor &t) {
    // DLPack asks for NULL data when there are no elements; the first element otherwise.
    void *first = at.device.device_type == kDLCPU ? b.data() : at.data;
    t.data = b.size() ? first : nullptr;
    t.device = at.device;
    t.ndim = b.ndim();
    t.dtype = b.dtype().dlpack;
    t.shape = b.ndim() ? c.dims() : nullptr;
    t.strides = b.ndim() ? c.dims() + b.ndim() : nullptr;
    t.byte_offset = 0;
}

/// A managed tensor of type Managed over `view` (one template for both, as PyTorch's
/// ATenDLMTensor<T>); a versioned one also gets its version and flags.
template <typename Managed>
Managed *export_managed(const Buffer &view, bool copied, const Placement &at) {
    ExportContext *c = ExportContext::make(view, at);
    Managed &m = c->managed<Managed>();
    m.manager_ctx = c;
    m.deleter = [](Managed *self) { ExportContext::destroy(static_cast<ExportContext *>(self->manager_ctx)); };
    if constexpr (std::is_same_v<Managed, DLManagedTensorVersioned>) {
        const DType &t = view.dtype();
        m.version = dlpack_version_for(t);
        m.flags = (view.readonly() ? DLPACK_FLAG_BITMASK_READ_ONLY : 0) |
                  (copied ? DLPACK_FLAG_BITMASK_IS_COPIED : 0) |
                  (t.dlpack_padded ? DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED : 0);
    }
    describe(*c, view, at, m.dl_tensor);
    return &m;
}

/// delete_unused() of either managed tensor type.
template <typename Managed>
void delete_unused_managed(Managed *m) {
    static_cast<ExportContext *>(m->manager_ctx)->lease.withdraw();
    m->deleter(m);
}

}  // namespace

DLDevice dlpack_device_of(Buffer &b) {
    if (!b.may_hold_device_copy()) return DLDevice{kDLCPU, 0};  // the common case, without a call
    if (std::shared_ptr<CudaDevice> d = cuda_device_of(b)) return DLDevice{kDLCUDA, d->ordinal()};
    return DLDevice{kDLCPU, 0};
}

namespace {

constexpr const char *kExport = "__dlpack__";

/// How messages name a stream= argument: its repr as the binding gave it, else the integer.
std::string stream_text(const StreamArg &s) {
    if (!s.text.empty() || s.kind != StreamArg::Kind::integer) return s.text;
    return (s.negative ? "-" : "") + std::to_string(s.magnitude);
}

/// The consumer's stream of a CUDA export (DLPack's rule): None is the legacy default stream
/// (1), -1 asks for no synchronisation, 0 is ambiguous and refused, and so is any other
/// negative number or one beyond 64 bits.
std::optional<uintptr_t> consumer_stream(const StreamArg &s) {
    using Kind = StreamArg::Kind;
    if (s.kind == Kind::none) return uintptr_t(1);
    if (s.kind == Kind::other)
        throw TypeError(std::string(kExport) + "(): stream must be an int or None, not " + stream_text(s) +
                        "; pass the consumer's stream handle, or None");
    if (s.negative && s.fits && s.magnitude == 1) return std::nullopt;
    if (!s.negative && s.fits && s.magnitude == 0)
        throw BufferError(std::string(kExport) + "(): stream=0 is ambiguous and disallowed by DLPack; pass 1 "
                          "for the legacy default stream, 2 for the per-thread one, or the stream's handle");
    if (s.negative || !s.fits)
        throw BufferError(std::string(kExport) + "(): stream " + stream_text(s) +
                          " is no stream; pass None, -1 (no synchronisation) or a stream number");
    return uintptr_t(s.magnitude);
}

}  // namespace

ExportPlan plan_export(const Buffer &b, DLDevice here, const ExportRequest &r) {
    ExportPlan plan;
    plan.at = here;
    if (r.via == ExportVia::exchange) {
        // The consumer's "no sync" leaves ordering to it, who knows its stream only as the
        // current one: our stream's work is finished first. With no capsule, a mark stays.
        plan.versioned = true;
        plan.finish_stream = plan.on_cuda();
        plan.withdrawable = false;
        return plan;
    }
    if (r.dl_device) {
        auto [type, id] = *r.dl_device;
        if (type == kDLCPU && id == 0) {  // any buffer's host copy can be handed out
            plan.at = DLDevice{kDLCPU, 0};
        } else if (type != here.device_type || id != here.device_id) {
            throw BufferError(std::string(kExport) + "(): dl_device (" + str(type) + ", " + str(id) +
                              ") is not where the data is (" + str(here.device_type) + ", " +
                              str(here.device_id) + "); ask for dl_device=None, (1, 0) or the device of "
                              "__dlpack_device__()");
        }
    }
    plan.versioned = r.max_version && r.max_version->first >= 1;
    const DType &t = b.dtype();
    if (!plan.versioned && t.dlpack_padded)
        throw BufferError(std::string(kExport) + "(): " + t.name + " is stored one element per byte, "
                          "which only a versioned capsule can say (the padded flag of DLPack 1.1); "
                          "call __dlpack__(max_version=(1, 1))");
    if (!plan.versioned && b.readonly() && r.copy != 1)
        throw BufferError(std::string(kExport) + "(): the buffer is read-only, which a legacy capsule "
                          "cannot say; call __dlpack__(max_version=(1, 0)), or copy=True");
    if (plan.on_cuda()) {
        plan.wait_stream = consumer_stream(r.stream);
        if (r.copy == 1)
            throw BufferError(std::string(kExport) + "(): copy=True of data on a CUDA device is not supported; "
                              "ask for a host copy with dl_device=(1, 0), copy=True");
        return plan;
    }
    // Streams order work on a GPU; host data has none to order.
    if (r.stream.kind != StreamArg::Kind::none)
        throw BufferError(std::string(kExport) + "(): stream must be None for data on the CPU, not " +
                          stream_text(r.stream) + "; pass stream=None (host data has no stream to order)");
    plan.copy = r.copy == 1;
    return plan;
}

namespace {

/// The lease of an export for a consumer that may write, and where it places the elements: on
/// the CUDA device copy when `cuda` is given (cuda_device_of(b), looked up before;
/// lease_cuda()), else on the host copy, a writable lease unless the memory is read-only
/// (Buffer::lease_host(), its mark kept in the placement). It may copy.
Placement lease_export(Buffer &b, const std::shared_ptr<CudaDevice> &cuda) {
    Placement at;
    if (cuda) {
        CudaLease lease = lease_cuda(b, kExport, cuda);
        at.device = DLDevice{kDLCUDA, lease.device->ordinal()};
        at.data = lease.first;
        at.cuda = std::move(lease.device);
        return at;
    }
    at.lease = b.lease_host(kExport, Access::may_write).mark;
    return at;
}

/// The managed tensor a plan asks for over `view`, placed `at`.
Exported managed_tensor(const Buffer &view, bool versioned, bool copied, const Placement &at) {
    Exported out;
    if (versioned) out.versioned = export_versioned(view, copied, at);
    else out.legacy = export_legacy(view, at);
    return out;
}

}  // namespace

Exported run_export(Buffer &b, const ExportRequest &r) {
    std::shared_ptr<CudaDevice> gpu = cuda_device_of(b);  // looked up once: the plan and the lease use it
    ExportPlan plan = plan_export(b, gpu, r);
    if (plan.copy)
        return managed_tensor(unlocked_if_may_copy(b, [&] { return b.current_host_copy(kExport); }),
                              plan.versioned, true, Placement{});
    Placement at = unlocked_if_may_copy(b, [&] {
        Placement p = lease_export(b, plan.on_cuda() ? gpu : nullptr);
        if (plan.wait_stream) p.cuda->order_before(stream_of_number(*plan.wait_stream));
        if (plan.finish_stream) p.cuda->synchronize();
        return p;
    });
    if (!plan.withdrawable) at.lease = HostWriteMark();
    return managed_tensor(b, plan.versioned, false, at);
}

DLPackVersion dlpack_version_for(const DType &t) {
    bool newer = t.dlpack.code >= kDLFloat8_e3m4 || t.dlpack_padded;
    return DLPackVersion{1, newer ? 1u : 0u};
}

DLManagedTensorVersioned *export_versioned(const Buffer &view, bool copied, const Placement &at) {
    return export_managed<DLManagedTensorVersioned>(view, copied, at);
}

DLManagedTensor *export_legacy(const Buffer &view, const Placement &at) {
    return export_managed<DLManagedTensor>(view, false, at);
}

void delete_unused(DLManagedTensorVersioned *m) { delete_unused_managed(m); }

void delete_unused(DLManagedTensor *m) { delete_unused_managed(m); }

// ---------------------------------------------------------------------------------------------
// Import
// ---------------------------------------------------------------------------------------------

namespace {

std::string dtype_text(const DLDataType &d) {
    return "(code " + str(d.code) + ", bits " + str(d.bits) + ", lanes " + str(d.lanes) + ")";
}

/// Devices whose memory the host reads directly.
bool host_readable(const DLDevice &d) {
    return d.device_type == kDLCPU || d.device_type == kDLCUDAHost || d.device_type == kDLROCMHost;
}

}  // namespace

/// The row and packing of a DLPack element type. Sub-byte types are packed unless the padded
/// flag says one per byte (legacy tensors cannot say so: theirs are packed, as JAX's float4 is);
/// PyTorch packs two float4 into one element of lanes 2.
const DType &element_type(const char *entry, const DLDataType &d, bool padded, int &packed_lanes) {
    const DType *t = dtype_by_dlpack(d.code, d.bits);
    packed_lanes = 0;
    if (t && !t->dlpack_padded && d.lanes == 1) return *t;  // whole bytes per element
    if (t && t->dlpack_padded && padded && d.lanes == 1) return *t;  // one per byte, as we store them
    // Packed: lanes values per element, which must fill whole bytes when there are several.
    if (t && t->dlpack_padded && !padded && (d.lanes == 1 || (d.lanes > 1 && d.bits * d.lanes % 8 == 0))) {
        packed_lanes = d.lanes;
        return *t;
    }
    throw BufferError(std::string(entry) + "(): no dtype of the table has the DLPack type " + dtype_text(d) +
                      "; convert the tensor to one of: " + dtype_names());
}

/// The tensor's header: a device we can reach, a CPU device id of 0, an ndim a buffer has, a
/// shape when there are axes, strides when the version requires them.
void check_header(const char *entry, const DLTensor &t, DLPackVersion version) {
    auto where = [entry] { return std::string(entry) + "(): "; };  // made only for a message
    // CUDA memory is wrapped through the CUDA backend; other devices' memory is out of reach.
    if (!host_readable(t.device) && t.device.device_type != kDLCUDA)
        throw BufferError(where() + "the tensor is on DLPack device (" + str(t.device.device_type) + ", " +
                          str(t.device.device_id) + "), which neither the host nor a backend of "
                          "halide_buffer can read; copy it to the CPU first (e.g. tensor.cpu())");
    if (t.device.device_type == kDLCPU && t.device.device_id != 0)
        throw BufferError(where() + "a CPU tensor with device id " + str(t.device.device_id) + " (DLPack's CPU "
                          "device is (1, 0)); the producer sent a malformed tensor");
    if (t.ndim < 0 || t.ndim > kMaxDims)
        throw BufferError(where() + "ndim " + str(t.ndim) + " is outside 0.." + str(kMaxDims) +
                          "; the producer sent a malformed tensor");
    if (t.ndim > 0 && !t.shape)
        throw BufferError(where() + "the tensor has " + str(t.ndim) + " axes but no shape; the "
                          "producer sent a malformed tensor");
    bool versioned = version.major != 0;
    if (t.ndim > 0 && !t.strides && versioned && (version.major > 1 || version.minor >= 2))
        throw BufferError(where() + "NULL strides in a DLPack " + str(version.major) + "." + str(version.minor) +
                          " tensor (allowed only before 1.2); the producer sent a malformed tensor");
}

namespace {

/// The element count of a shape: no negative extent, at most 2**63 elements.
int64_t element_count(const char *entry, const Axes &shape) {
    int64_t count = 1;
    for (int64_t n : shape) {
        if (n < 0) throw BufferError(std::string(entry) + "(): negative extent " + str(n) + " in the shape; the producer "
                                     "sent a malformed tensor");
        if (__builtin_mul_overflow(count, n, &count))
            throw BufferError(std::string(entry) + "(): the shape has more than 2**63 elements; the producer sent a "
                              "malformed tensor");
    }
    return count;
}

/// The tensor's strides in elements: its own, or C-contiguous ones when it has none.
Axes element_strides(const DLTensor &t, const Axes &shape) {
    if (t.strides) return Axes(t.strides, t.strides + t.ndim);
    return c_strides(shape, 1);  // 0 past an overflow: only an empty shape overflows
}

/// The bits every element reaches from the first: [lo, hi), each element `unit` bits wide.
/// A stride no step takes (an axis of extent 1 or 0, or any axis of an empty tensor) is never
/// multiplied by an index, but byte strides are computed from every stride: one whose bits do
/// not fit in 64 bits becomes 0 in `in`, so that every later stride computation is in range.
void bit_reach(const char *entry, DLImport &in, int64_t count, int64_t unit, int64_t &lo, int64_t &hi) {
    for (size_t i = 0; i < in.shape.size(); ++i) {
        int64_t bits;
        bool steps = count > 0 && in.shape[i] > 1;
        if (!steps && __builtin_mul_overflow(in.strides[i], unit, &bits)) in.strides[i] = 0;
    }
    lo = hi = 0;
    if (count == 0) return;
    // In elements, then in bits: the bits' sums are the elements' times `unit`.
    if (!byte_reach(in.shape, in.strides, 1, lo, hi) || __builtin_mul_overflow(lo, unit, &lo) ||
        __builtin_mul_overflow(hi, unit, &hi))
        throw BufferError(std::string(entry) + "(): the strides reach beyond the address space; the producer sent a "
                          "malformed tensor");
}

/// The address of the tensor's first element (data plus byte_offset), checked so that every
/// element's bits, from the first element's, stay in the address space: the lowest and the
/// highest, without overflow (packed elements may be more or less than a byte).
uint8_t *first_element(const char *entry, const DLTensor &t, DLImport &in, int64_t count) {
    const DType &dtype = *in.dtype;
    int64_t unit = in.packed_lanes ? int64_t(dtype.dlpack.bits) * in.packed_lanes : int64_t(dtype.itemsize) * 8;
    int64_t lo, hi;
    bit_reach(entry, in, count, unit, lo, hi);
    uintptr_t below = (uintptr_t(0) - uintptr_t(lo) + 7) / 8, above = (uintptr_t(hi) + 7) / 8;  // whole bytes
    uintptr_t base = reinterpret_cast<uintptr_t>(t.data), first;
    if (__builtin_add_overflow(base, uintptr_t(t.byte_offset), &first) || first < below ||
        first > std::numeric_limits<uintptr_t>::max() - above)
        throw BufferError(std::string(entry) + "(): data, byte_offset and strides reach beyond the address space; the "
                          "producer sent a malformed tensor");
    return reinterpret_cast<uint8_t *>(first);
}

}  // namespace

DLImport check_import(const char *entry, const DLTensor &t, uint64_t flags, DLPackVersion version) {
    check_header(entry, t, version);
    DLImport in;
    in.dtype = &element_type(entry, t.dtype, flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED, in.packed_lanes);
    in.readonly = flags & DLPACK_FLAG_BITMASK_READ_ONLY;
    in.copied = flags & DLPACK_FLAG_BITMASK_IS_COPIED;
    in.shape = Axes(t.shape, t.shape + t.ndim);
    int64_t count = element_count(entry, in.shape);
    in.strides = element_strides(t, in.shape);
    if (count > 0 && !t.data)
        throw BufferError(std::string(entry) + "(): NULL data for a tensor of " + str(count) + " elements; the producer "
                          "sent a malformed tensor");
    in.data = first_element(entry, t, in, count);
    in.device = host_readable(t.device) ? DLDevice{kDLCPU, 0} : t.device;
    return in;
}

void refuse_major(const char *entry, DLManagedTensorVersioned *m) {
    DLPackVersion v = m->version;
    if (m->deleter) m->deleter(m);
    throw BufferError(std::string(entry) + "(): the tensor follows DLPack " + str(v.major) + "." + str(v.minor) +
                      ", whose layout this version (1.x) cannot read; export it as DLPack 1.x");
}

Buffer wrap_import(const char *entry, const DLImport &in, std::shared_ptr<void> owner, bool external_writes) {
    return Buffer::wrap(entry, in.data, in.shape, byte_strides(in.strides, in.dtype->itemsize), *in.dtype,
                        std::move(owner), in.readonly, external_writes && !in.copied);
}

namespace {

/// The i-th `bits`-wide value of packed data (little bit-endian: value i starts at bit i * bits).
uint8_t packed_value(const uint8_t *data, int64_t i, int bits) {
    int64_t bit = i * bits;
    int64_t byte = bit >= 0 ? bit / 8 : -((-bit + 7) / 8);  // floor: negative strides count back
    int shift = int(bit - byte * 8);
    unsigned window = data[byte];
    if (shift + bits > 8) window |= unsigned(data[byte + 1]) << 8;
    return uint8_t((window >> shift) & ((1u << bits) - 1));
}

/// Copies every packed element into one-per-byte `out` (C order), lanes innermost.
void unpack(uint8_t *&out, const uint8_t *data, int64_t first, const DLImport &in, size_t axis) {
    int lanes = in.packed_lanes, bits = in.dtype->dlpack.bits;
    if (axis == in.shape.size()) {
        for (int j = 0; j < lanes; ++j) *out++ = packed_value(data, first * lanes + j, bits);
        return;
    }
    for (int64_t k = 0; k < in.shape[axis]; ++k) unpack(out, data, first + k * in.strides[axis], in, axis + 1);
}

}  // namespace

Buffer copy_import(const char *entry, const DLImport &in) {
    if (!in.packed_lanes) {
        return Buffer::copy_of(entry, in.data, in.shape, byte_strides(in.strides, in.dtype->itemsize), *in.dtype);
    }
    std::vector<int64_t> shape = in.shape;
    if (in.packed_lanes > 1) shape.push_back(in.packed_lanes);
    Buffer out = Buffer::allocate(entry, shape, *in.dtype);
    uint8_t *cursor = out.data();
    if (out.size() > 0) unpack(cursor, in.data, 0, in, 0);
    return out;
}

namespace {

constexpr const char *kImport = "from_dlpack";

/// A CUDA tensor: wrapped as the device copy of a new buffer (the host copy follows on the
/// first host read), or, for copy=1, downloaded into a host copy of our own.
Buffer adopt_cuda(const DLImport &in, std::shared_ptr<void> owner, int copy, bool producer_copied) {
    if (in.packed_lanes)
        throw BufferError(std::string(kImport) + "(): packed " + in.dtype->name + " values on a CUDA device "
                          "cannot be wrapped; unpack them there first, or copy the tensor to the CPU");
    // copy=True asks for the values alone (a copy the producer made for us, or one made here at once).
    if (copy != 1)
        check_wrappable_cuda(kImport, "the CUDA tensor", in.readonly, "pass copy=True for a copy of its values");
    std::shared_ptr<CudaDevice> device = embedder_cuda_device(in.device.device_id, kImport);
    std::vector<int64_t> bytes = byte_strides(in.strides, in.dtype->itemsize);
    bool copy_now = copy == 1 && !in.copied && !producer_copied;
    std::optional<Buffer> out;
    embedder().run_unlocked([&] {
        // The wrapped memory's owner is the tensor's: device_detach_native() hands back its
        // producer object (none for a raw capsule), and the tensor is deleted when it is let go.
        Buffer wrapped = wrap_cuda(kImport, device, reinterpret_cast<uint64_t>(in.data), in.shape, bytes,
                                   *in.dtype, std::move(owner), nullptr);
        if (!copy_now) out.emplace(std::move(wrapped));
        else out.emplace(wrapped.current_host_copy(kImport));  // the wrapped tensor is let go with `wrapped`
    });
    return std::move(*out);
}

}  // namespace

Buffer adopt_import(const DLImport &in, std::shared_ptr<void> owner, int copy, bool producer_copied) {
    if (in.device.device_type == kDLCUDA) return adopt_cuda(in, std::move(owner), copy, producer_copied);
    if (in.packed_lanes && copy != 1)
        throw BufferError(std::string(kImport) + "(): the " + in.dtype->name + " values are packed (" +
                          str(in.dtype->dlpack.bits) + " bits each, several to a byte), which no "
                          "NumPy dtype can view; pass copy=True to unpack them one per byte");
    if (copy == 1 && !in.copied && !producer_copied) {
        Buffer out = copy_import(kImport, in);
        owner.reset();  // the copy needs the producer no longer
        return out;
    }
    if (in.packed_lanes) return copy_import(kImport, in);
    return wrap_import(kImport, in, std::move(owner), true);
}

}  // namespace hb
