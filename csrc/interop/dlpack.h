// dlpack.h: DLPack exchange without Python: managed tensors of our buffers (export), and the
// checked description of someone else's tensor (import). The Python side (capsules, the
// __dlpack__ protocol, is py_dlpack.cpp; the C exchange API, py_dlpack_exchange.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "abi/dlpack_abi.h"
#include "storage/buffer.h"

namespace hb {

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
    HostWriteLease lease;  ///< the writable lease of a host export, withdrawn if never taken up
};

/// The lowest version that describes tensors of a dtype: 1.0, or 1.1 for the codes DLPack 1.1
/// added (float8/6/4) and for sub-byte types (the padded flag).
DLPackVersion dlpack_version_for(const DType &t);

/// A managed tensor over `view` (keeping its memory alive); `copied` sets
/// DLPACK_FLAG_BITMASK_IS_COPIED. One allocation; its deleter frees it, from any thread.
DLManagedTensorVersioned *export_versioned(const Buffer &view, bool copied, const Placement &at = {});
/// The same as an unversioned tensor (no flags: the caller refused what needs them).
DLManagedTensor *export_legacy(const Buffer &view, const Placement &at = {});
/// Deletes a managed tensor of ours that no consumer took (its capsule died unused): the
/// writable lease it came with leaves no mark (HostWriteLease::withdraw).
void delete_unused(DLManagedTensorVersioned *m);
void delete_unused(DLManagedTensor *m);

// ---------------------------------------------------------------------------------------------
// Import
// ---------------------------------------------------------------------------------------------

/// Someone else's tensor, checked: what a Buffer needs to wrap it, or to copy it.
struct DLImport {
    const DType *dtype = nullptr;
    uint8_t *data = nullptr;            ///< element at index 0 of every axis
    std::vector<int64_t> shape;
    std::vector<int64_t> strides;       ///< elements (bytes = elements * itemsize unless packed)
    bool readonly = false;
    bool copied = false;                ///< the producer made it for us alone
    int packed_lanes = 0;               ///< > 0: sub-byte values packed, this many per element
    DLDevice device{kDLCPU, 0};         ///< the host's (or pinned host memory), or kDLCUDA
};

/// Checks a tensor from a producer (`flags` and `version` are the versioned tensor's; legacy
/// ones pass 0 and {0, 0}). Throws BufferError/ValueError naming `entry` for anything a
/// buffer cannot describe safely.
DLImport check_import(const char *entry, const DLTensor &t, uint64_t flags, DLPackVersion version);

/// A buffer over the tensor's memory (not packed), kept alive by `owner`.
Buffer wrap_import(const char *entry, const DLImport &in, std::shared_ptr<void> owner, bool external_writes);
/// An owned copy; packed sub-byte values are unpacked one per byte (lanes become a last axis).
Buffer copy_import(const char *entry, const DLImport &in);

}  // namespace hb
