// constants.h: the numbers every layer agrees on: the residency flags as the rules test them, and
// the limits of a buffer's geometry, the alignment of the host memory we allocate.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

#include "abi/halide_abi.h"

namespace hb {

/// halide_buffer_t::flags bits, as uint64_t masks (the field's type): the host copy holds data
/// the device copy lacks, and the other way round.
constexpr uint64_t kHostDirty = halide_buffer_flag_host_dirty;
constexpr uint64_t kDeviceDirty = halide_buffer_flag_device_dirty;

/// Where the host memory of every buffer we allocate starts: a multiple of these bytes (Halide's
/// Runtime::Buffer default, and enough for the widest OpenCL vector of any element type, which a
/// zero-copy device needs to use the memory in place).
constexpr size_t kHostAlignment = 128;

/// The most axes a buffer has (NumPy's limit); DLPack imports, buffer-protocol exporters and a
/// pipeline's buffer arguments are held to it too.
constexpr int kMaxDims = 64;

/// Halide's coordinates (min, min + extent - 1), extents and element strides are int32s.
constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
constexpr int64_t kInt32Min = std::numeric_limits<int32_t>::min();

}  // namespace hb
