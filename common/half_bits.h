// IEEE binary32 <-> binary16 conversion on raw bit patterns, exact and
// bit-identical to the x86 F16C instructions (round to nearest even).
//
// Shared by the host payload codec (common/payload_codec.h) and the CPU and
// CUDA kernels, so fp16 on the wire means the same everywhere. Compiles as
// host code and, under nvcc, as __host__ __device__ code. Pure functions.
#ifndef RELAXPS_COMMON_HALF_BITS_H_
#define RELAXPS_COMMON_HALF_BITS_H_

#include <cstdint>

#if defined(__CUDACC__)
#define RELAXPS_HD __host__ __device__ __forceinline__
#else
#define RELAXPS_HD inline
#endif

namespace relaxps {

// fp32 bits -> fp16 bits, round to nearest, ties to even. Handles signed
// zeros, subnormal results, overflow to infinity and NaN (quieted, upper
// payload bits kept: the same result as the x86 F16C instruction).
RELAXPS_HD uint16_t FloatBitsToHalfBits(uint32_t f) {
  const uint32_t sign = (f >> 16) & 0x8000u;
  const uint32_t abs = f & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // Inf or NaN.
    if (abs == 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u);
    return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  }
  if (abs >= 0x47800000u) {  // >= 2^16: beyond any rounding to 65504.
    return static_cast<uint16_t>(sign | 0x7c00u);
  }
  if (abs >= 0x38800000u) {  // >= 2^-14: normal half (or rounds up to inf).
    // Rebias the exponent (127 -> 15) and drop 13 mantissa bits; a carry out
    // of the mantissa correctly bumps the exponent (up to 0x7c00 = inf).
    uint32_t h = (abs - 0x38000000u) >> 13;
    const uint32_t rem = abs & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  // Subnormal half or zero: value = m * 2^(e-150) = q * 2^-24 with
  // q = m >> (126 - e).
  const uint32_t e = abs >> 23;
  if (e < 102) return static_cast<uint16_t>(sign);  // < 2^-25: rounds to zero.
  const uint32_t m = (abs & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - e;  // 14..24
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q;  // May carry to 0x400.
  return static_cast<uint16_t>(sign | q);
}

// fp16 bits -> fp32 bits (exact; a signaling NaN comes back quiet, payload
// kept, the same result as the x86 F16C instruction).
RELAXPS_HD uint32_t HalfBitsToFloatBits(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1fu) {
    if (mant == 0) return sign | 0x7f800000u;  // Infinity.
    return sign | 0x7fc00000u | (mant << 13);  // NaN, quieted (as F16C does).
  }
  if (exp != 0) return sign | ((exp + 112u) << 23) | (mant << 13);
  if (mant == 0) return sign;  // Signed zero.
  // Subnormal: normalize the mantissa.
  uint32_t e = 113;
  while ((mant & 0x400u) == 0) {
    mant <<= 1;
    --e;
  }
  return sign | (e << 23) | ((mant & 0x3ffu) << 13);
}

}  // namespace relaxps

#endif  // RELAXPS_COMMON_HALF_BITS_H_
