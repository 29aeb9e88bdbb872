// aot_borrow.h: someone else's host memory described for one call of a host pipeline alone: the
// halide_buffer_t Halide takes, made from the memory's own description, with no Buffer and no
// storage behind it. A host pipeline reads and writes host memory and leaves nothing on a device,
// so such an argument needs no residency bookkeeping beyond the call: an output's results are in
// its memory when the call returns. The binding borrows NumPy arrays and CPU tensors this way
// (py_arguments.cpp); what a description cannot say (an empty array, a stride that is no whole
// number of elements) takes the general way, a Buffer, whose refusals name what is wrong.
#pragma once

#include <cstdint>

#include "abi/halide_abi.h"
#include "core/constants.h"
#include "core/dtype.h"
#include "core/overlap.h"

namespace hb {

/// A buffer argument given as borrowed host memory, for one call.
struct BorrowedArgument {
    bool given = false;  ///< this argument is borrowed (the rest is meaningless otherwise)
    int ndim = 0;
    int64_t itemsize = 0;
    halide_buffer_t buf{};              ///< what the pipeline takes: dimension 0 innermost
    halide_dimension_t dims[kMaxDims];  ///< buf.dim
    int64_t shape[kMaxDims];            ///< NumPy's axis order, for the overlap checks and sizing
    int64_t byte_strides[kMaxDims];     ///< the same, in bytes

    /// Its memory as the overlap tests read it.
    ByteView bytes() const { return ByteView{buf.host, shape, byte_strides, size_t(ndim), itemsize}; }
    /// Its element count.
    int64_t size() const;
};

/// Describes `ndim` axes of `dtype` elements at `data` (NumPy's axis order, byte strides, mins
/// 0) into `out` and marks it given; false, leaving it not given, where a description would not
/// do: a dtype Halide has no type for, an empty layout, an extent or a stride beyond Halide's
/// int32, a stride that is no whole number of elements, memory beyond the address space.
bool borrow_host_memory(BorrowedArgument &out, uint8_t *data, int ndim, const int64_t *shape,
                        const int64_t *byte_strides, const DType &dtype);

}  // namespace hb
