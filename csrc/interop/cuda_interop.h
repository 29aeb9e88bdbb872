// cuda_interop.h: buffers and other people's CUDA memory: where a buffer's CUDA copy is, the
// lease of a consumer of it, and buffers over memory a framework allocated (the CUDA array
// interface and DLPack imports).
#pragma once

#include <memory>
#include <vector>

#include "backends/device_cuda.h"
#include "storage/buffer.h"

namespace hb {

/// The CUDA device holding the buffer's device copy, or null (no device copy, or another kind).
/// Exports lease it afterwards with DeviceChoice::same_kind: another thread may move the
/// storage in between (the embedder's after_device_lookup() runs there, for tests to force it).
std::shared_ptr<CudaDevice> cuda_device_of(Buffer &b);

/// The embedder's CUDA device of `ordinal` (Embedder::cuda_device(): the package's default
/// device of it, in Python), which the data or stream named by `entry` is on. BufferError
/// naming `entry` where the machine has no such device, or the embedder offers none of CUDA's kind.
std::shared_ptr<CudaDevice> embedder_cuda_device(int ordinal, const char *entry);

/// What a consumer of a buffer's CUDA device copy is handed (lease_cuda()).
struct CudaLease {
    uint8_t *first;                      ///< the view's element at index 0, in device memory
    std::shared_ptr<CudaDevice> device;  ///< the device the lease ended on
};

/// The lease of a consumer of the CUDA device copy (the CUDA array interface, DLPack's exports
/// on CUDA), on `device` (cuda_device_of(b), looked up before): the device copy made current
/// and, as the consumer may write, device dirty unless the memory is read-only. BufferError
/// naming `entry` when the buffer left `device` meanwhile (another thread moved it). It may
/// copy: the bindings run it without the GIL.
CudaLease lease_cuda(Buffer &b, const char *entry, const std::shared_ptr<CudaDevice> &device);

/// The rule of someone else's CUDA memory as a buffer's device copy, whichever way it comes
/// (cuda.wrap, a DLPack import): memory its owner marks read-only is refused, as uploads write
/// a device copy. BufferError "<entry>(): <what> is read-only, and a buffer's device copy is
/// written by uploads; <fix>" for read-only memory.
void check_wrappable_cuda(const char *entry, const char *what, bool readonly, const char *fix);

/// A buffer whose current copy is CUDA memory at `data` (the element at index 0 of every axis,
/// on `device`; `strides` in bytes), kept alive by `owner`: no copy now; the host copy, laid
/// out like the device memory, is filled on the first host read. Our stream first waits for
/// `producer` (a stream the producer's work is queued on; null: none to wait for).
Buffer wrap_cuda(const char *entry, const std::shared_ptr<CudaDevice> &device, uint64_t data,
                 const std::vector<int64_t> &shape, const std::vector<int64_t> &strides, const DType &dtype,
                 std::shared_ptr<void> owner, cu::CUstream producer);

}  // namespace hb
