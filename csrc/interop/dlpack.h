// dlpack.h: DLPack exchange without Python: what an export does (its plan) and the one function
// that carries it out, managed tensors of our buffers and the lease an export takes (export),
// the checked description of someone else's tensor and what becomes of it (import). The
// capsule path (__dlpack__, from_dlpack: py_dlpack.cpp) and the C exchange API
// (py_dlpack_exchange.cpp) both decide and export here; the bindings only convert Python
// objects.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "abi/dlpack_abi.h"
#include "backends/device_cuda.h"
#include "core/axes.h"
#include "storage/buffer.h"

namespace hb {

class CudaDevice;

// ---------------------------------------------------------------------------------------------
// Export
// ---------------------------------------------------------------------------------------------

/// The DLPack device of a buffer's exports: (kDLCUDA, ordinal) for a buffer with a CUDA device
/// copy (exported from the device), else (kDLCPU, 0) (the host copy, current once leased).
DLDevice dlpack_device_of(Buffer &b);

/// Where an export's elements are: the host copy (the default), or device memory at `data`
/// (the view's first element).
struct Placement {
    DLDevice device{kDLCPU, 0};
    void *data = nullptr;
    HostWriteMark lease;  ///< the writable lease of a host export, withdrawn if never taken up
    std::shared_ptr<CudaDevice> cuda;  ///< a CUDA export: the device its lease ended on
};

/// __dlpack__'s stream= as the binding read it: None, an integer (sign and magnitude: DLPack's
/// stream numbers and handles reach 2**64 - 1), or anything else.
struct StreamArg {
    enum class Kind : uint8_t { none, integer, other };
    Kind kind = Kind::none;
    bool negative = false;   ///< an integer below zero
    bool fits = true;        ///< an integer whose magnitude fits in 64 bits
    uint64_t magnitude = 0;  ///< an integer's absolute value, when it fits
    /// How messages name it (its repr): required for `other`, for an integer that does not fit
    /// and for an int subclass; empty for a plain int that fits (written out when needed).
    std::string text;
};

/// Who takes an export: a capsule's consumer (__dlpack__), or the consumer of DLPack 1.3's C
/// exchange API (managed_tensor_from_py_object_no_sync), which has no capsule and asks nothing.
enum class ExportVia : uint8_t { capsule, exchange };

/// What a consumer asked of an export: for __dlpack__, its Python arguments converted by the
/// binding (which raises the TypeErrors of arguments of the wrong Python type); the exchange API
/// has none. plan_export() decides the rest.
struct ExportRequest {
    ExportVia via = ExportVia::capsule;
    std::optional<std::pair<int64_t, int64_t>> dl_device;    ///< (device type, id); nullopt: None
    std::optional<std::pair<int64_t, int64_t>> max_version;  ///< (major, minor); nullopt: None
    int copy = -1;                                           ///< copy=: -1 None, 0 False, 1 True
    StreamArg stream;                                        ///< stream=
};

/// What an export does (the decision of PyTorch's maybeCopyTensor, as a plan): where the
/// consumer gets the elements, in which managed tensor, a copy or a lease, and how the consumer
/// is ordered after our stream. run_export() carries it out.
struct ExportPlan {
    DLDevice at{kDLCPU, 0};  ///< (kDLCPU, 0): the host copy; (kDLCUDA, ordinal): the CUDA device copy
    bool versioned = false;  ///< a versioned managed tensor, else a legacy one
    bool copy = false;       ///< a host copy of our own, flagged as copied; else the export's lease
    /// A CUDA export: the consumer's stream, which is to wait for ours; nullopt: no
    /// synchronisation (the consumer's stream -1), and always for host data.
    std::optional<uintptr_t> wait_stream;
    /// A CUDA export whose consumer cannot be made to wait (the exchange API's "no sync": the
    /// consumer knows its stream only as the current one): our stream's work is finished before
    /// the tensor is handed over.
    bool finish_stream = false;
    /// A writable host lease's mark goes with the tensor, withdrawn if the tensor is deleted
    /// unused (delete_unused(): a capsule that died unconsumed); else the mark stays (the
    /// exchange API hands the tensor over at once).
    bool withdrawable = true;

    bool on_cuda() const { return at.device_type == kDLCUDA; }
};

/// DLPack's export rules for a buffer whose data is `here` (dlpack_device_of()). For
/// __dlpack__: dl_device None or `here`, or (1, 0) for the host copy of any buffer; a legacy
/// capsule (max_version None or below 1.0) for neither a padded dtype (the flag of DLPack 1.1)
/// nor a read-only buffer not copied; on a CUDA device, copy=True refused and the consumer's
/// stream read by DLPack's rule (None: the legacy default stream, 1; -1: no synchronisation; 0
/// and other negative numbers refused); for host data, no stream. Throws BufferError naming
/// __dlpack__, or TypeError for a CUDA export's stream that is no integer. For the exchange
/// API, nothing is left to decide and nothing is refused: the data where it is, in a versioned
/// tensor (its flags say read-only and padded), no copy, our stream's work finished.
ExportPlan plan_export(const Buffer &b, DLDevice here, const ExportRequest &r);
/// The same for a buffer whose device copy is on `gpu` (cuda_device_of(b), looked up once: the
/// lease of a CUDA export goes to it), or on no CUDA device (null).
inline ExportPlan plan_export(const Buffer &b, const std::shared_ptr<CudaDevice> &gpu, const ExportRequest &r) {
    return plan_export(b, gpu ? DLDevice{kDLCUDA, gpu->ordinal()} : DLDevice{kDLCPU, 0}, r);
}

/// What an export hands out: one managed tensor, versioned or legacy (the other null), which
/// the binding wraps in a capsule (the capsule path) or hands over as it is (the exchange API).
struct Exported {
    DLManagedTensorVersioned *versioned = nullptr;
    DLManagedTensor *legacy = nullptr;
};

/// An export, carried out the one way for both consumers: the buffer's CUDA device looked up
/// once (cuda_device_of()), plan_export(), then the plan: a host copy of our own
/// (Buffer::current_host_copy()), or the lease of a consumer that may write and where it places
/// the elements (on the CUDA device copy: lease_cuda(); else the host copy, a writable lease
/// unless the memory is read-only: Buffer::lease_host()), each run unlocked where it may copy
/// (always on a CUDA device); a CUDA export's consumer ordered after our stream; then the
/// managed tensor. Errors name __dlpack__.
Exported run_export(Buffer &b, const ExportRequest &r);

/// The lowest version that describes tensors of a dtype: 1.0, or 1.1 for the codes DLPack 1.1
/// added (float8/6/4) and for sub-byte types (the padded flag).
DLPackVersion dlpack_version_for(const DType &t);

/// A managed tensor over `view` (keeping its memory alive); `copied` sets
/// DLPACK_FLAG_BITMASK_IS_COPIED. One allocation; its deleter frees it, from any thread.
DLManagedTensorVersioned *export_versioned(const Buffer &view, bool copied, const Placement &at = {});
/// The same as an unversioned tensor (no flags: the caller refused what needs them).
DLManagedTensor *export_legacy(const Buffer &view, const Placement &at = {});
/// Deletes a managed tensor of ours that no consumer took (its capsule died unused): the
/// writable lease it came with leaves no mark (HostWriteMark::withdraw).
void delete_unused(DLManagedTensorVersioned *m);
void delete_unused(DLManagedTensor *m);

// ---------------------------------------------------------------------------------------------
// Import
// ---------------------------------------------------------------------------------------------

/// Someone else's tensor, checked: what a Buffer needs to wrap it, or to copy it.
struct DLImport {
    const DType *dtype = nullptr;
    uint8_t *data = nullptr;            ///< element at index 0 of every axis
    Axes shape;
    Axes strides;                       ///< elements (bytes = elements * itemsize unless packed)
    bool readonly = false;
    bool copied = false;                ///< the producer made it for us alone
    int packed_lanes = 0;               ///< > 0: sub-byte values packed, this many per element
    DLDevice device{kDLCPU, 0};         ///< the host's (or pinned host memory), or kDLCUDA
};

/// Checks a tensor from a producer (`flags` and `version` are the versioned tensor's; legacy
/// ones pass 0 and {0, 0}). Throws BufferError/ValueError naming `entry` for anything a
/// buffer cannot describe safely.
DLImport check_import(const char *entry, const DLTensor &t, uint64_t flags, DLPackVersion version);
/// check_import()'s first two rules, for a reader that describes the tensor itself (a pipeline
/// call's borrowed argument): the header (a device within reach, an ndim a buffer has, a shape
/// for its axes, strides where the version requires them; BufferError naming `entry`), and the
/// row of its element type, `packed_lanes` > 0 for packed sub-byte values.
void check_header(const char *entry, const DLTensor &t, DLPackVersion version);
const DType &element_type(const char *entry, const DLDataType &d, bool padded, int &packed_lanes);

/// DLPack's rule for a versioned tensor of another major version: another layout, of which only
/// the deleter may be touched. Deletes the tensor, then throws BufferError naming `entry`.
[[noreturn]] void refuse_major(const char *entry, DLManagedTensorVersioned *m);

/// A buffer over the tensor's memory (not packed), kept alive by `owner`.
Buffer wrap_import(const char *entry, const DLImport &in, std::shared_ptr<void> owner, bool external_writes);
/// An owned copy; packed sub-byte values are unpacked one per byte (lanes become a last axis).
Buffer copy_import(const char *entry, const DLImport &in);

/// What an import makes of a checked tensor, kept alive by `owner` (which the tensor's deleter
/// runs with): host memory is wrapped, or copied when `copy` (from_dlpack's copy=: -1 None,
/// 0 False, 1 True) is 1 unless the producer copied it for us already (its flag, or
/// `producer_copied`: it was asked to copy), and when the values are packed (unpacked one per
/// byte; refused unless copy is 1), releasing `owner`. CUDA memory becomes the device copy of a
/// new buffer on the embedder's cuda_device() (the host copy follows on the first host read), downloaded
/// at once into a host copy of our own for copy=1. Errors name from_dlpack.
Buffer adopt_import(const DLImport &in, std::shared_ptr<void> owner, int copy, bool producer_copied);

}  // namespace hb
