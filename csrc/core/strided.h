// strided.h: element loops over strided host memory (copies and fills), shared by the buffer's
// construction and its data operations. Shapes in NumPy axis order, strides in bytes (any sign).
#pragma once

#include <cstdint>
#include <vector>

namespace hb {

/// Copies every element of `src` into `dst` (same shape). The two must not overlap in memory
/// unless they are the very same elements (see ranges_overlap()).
void copy_strided(uint8_t *dst, const std::vector<int64_t> &dst_strides, const uint8_t *src,
                  const std::vector<int64_t> &src_strides, const std::vector<int64_t> &shape, int64_t itemsize);
/// Sets every element of `dst` to `pattern` (itemsize bytes).
void fill_strided(uint8_t *dst, const std::vector<int64_t> &strides, const std::vector<int64_t> &shape,
                  const uint8_t *pattern, int64_t itemsize);
/// Whether the bytes the elements of two strided arrays occupy overlap.
bool ranges_overlap(const uint8_t *a, const std::vector<int64_t> &a_strides, const uint8_t *b,
                    const std::vector<int64_t> &b_strides, const std::vector<int64_t> &shape, int64_t itemsize);

}  // namespace hb
