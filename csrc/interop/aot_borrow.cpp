// aot_borrow.cpp: borrowed host memory as a pipeline's halide_buffer_t (aot_borrow.h).
#include "interop/aot_borrow.h"

#include "core/layout.h"

namespace hb {

int64_t BorrowedArgument::size() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= shape[i];
    return n;
}

bool borrow_host_memory(BorrowedArgument &out, uint8_t *data, int ndim, const int64_t *shape,
                        const int64_t *byte_strides, const DType &dtype) {
    out.given = false;
    if (!dtype.has_halide_type() || ndim < 0 || ndim > kMaxDims || !data) return false;
    int64_t itemsize = dtype.itemsize, lo, hi;
    for (int i = 0; i < ndim; ++i) {
        if (shape[i] < 1 || shape[i] > kInt32Max) return false;
    }
    if (!byte_reach(shape, byte_strides, size_t(ndim), itemsize, lo, hi) || !within_address_space(data, lo, hi))
        return false;
    for (int i = 0; i < ndim; ++i) {
        int64_t elements;
        if (!element_stride(shape[i], byte_strides[i], itemsize, elements)) return false;
        // An axis of one element never steps: described stepping one element whatever its stride,
        // so Halide's default constraint (dimension 0 steps one element) holds for a last axis of
        // one element too (a transposed column: torch calls it contiguous).
        if (shape[i] == 1) elements = 1;
        out.shape[i] = shape[i];
        out.byte_strides[i] = elements * itemsize;
        // NumPy axis i is Halide dimension ndim - 1 - i.
        out.dims[ndim - 1 - i] = halide_dimension_t{0, int32_t(shape[i]), int32_t(elements), 0};
    }
    out.ndim = ndim;
    out.itemsize = itemsize;
    out.buf = halide_buffer_t{};
    out.buf.host = data;
    out.buf.type = dtype.halide;
    out.buf.dimensions = ndim;
    out.buf.dim = ndim ? out.dims : nullptr;
    out.buf.flags = kHostDirty;  // host memory, nothing on a device: as a host pipeline leaves it
    out.given = true;
    return true;
}

}  // namespace hb
