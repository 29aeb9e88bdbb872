// narrow_float.h: a double as the bits of a 16-bit float format (IEEE binary16, bfloat16),
// rounded once, to the nearest value, ties to even: what NumPy's float16 and ml_dtypes'
// bfloat16 make of a Python float (rounding through float32 first would round twice, and differ
// where the first rounding lands on a tie).
#pragma once

#include <cstdint>
#include <cstring>

namespace hb {

/// The bits of `x` in a float format of `exponent_bits` and `mantissa_bits` (sign bit first,
/// 16 bits in all): subnormals kept, beyond the largest finite value infinity, NaN a quiet NaN.
inline uint16_t narrow_float_bits(double x, int exponent_bits, int mantissa_bits) {
    uint64_t u;
    std::memcpy(&u, &x, sizeof u);
    const uint16_t sign = uint16_t((u >> 63) << (exponent_bits + mantissa_bits));
    const uint16_t infinity = uint16_t(((1u << exponent_bits) - 1) << mantissa_bits);
    const int64_t biased = int64_t((u >> 52) & 0x7ff);
    const uint64_t fraction = u & ((uint64_t(1) << 52) - 1);
    if (biased == 0x7ff) return uint16_t(sign | infinity | (fraction ? 1u << (mantissa_bits - 1) : 0u));
    if (biased == 0) return sign;  // zero, or a double subnormal: far below half the smallest subnormal
    const int bias = (1 << (exponent_bits - 1)) - 1;
    const int64_t exponent = biased - 1023;          // x = significand * 2^(exponent - 52)
    const uint64_t significand = fraction | (uint64_t(1) << 52);
    const bool normal = exponent >= 1 - bias;
    // The bits of the significand the format drops: more below its smallest normal exponent.
    const int64_t dropped = 52 - mantissa_bits + (normal ? 0 : 1 - bias - exponent);
    if (dropped > 53) return sign;  // below half the smallest subnormal
    uint64_t kept = significand >> dropped;
    const uint64_t rest = significand & ((uint64_t(1) << dropped) - 1), half = uint64_t(1) << (dropped - 1);
    if (rest > half || (rest == half && (kept & 1))) ++kept;  // a carry moves into the exponent
    // A subnormal's bits are its significand (one that rounded up to the smallest normal is
    // that one's bits); a normal's the exponent field plus the significand without its top bit.
    const uint64_t bits = normal ? (uint64_t(exponent + bias) << mantissa_bits) + kept - (uint64_t(1) << mantissa_bits)
                                 : kept;
    return uint16_t(sign | (bits >= infinity ? infinity : bits));
}

}  // namespace hb
