// Scalar helpers shared by the CPU and CUDA back ends, so that both produce
// bit-identical results where the contract demands it: IEEE fp32 <-> fp16
// conversion and the counter-based dropout generator.
//
// Internal header: not installed. Compiles as host code and, under nvcc, as
// __host__ __device__ code. Functions operate on raw bit patterns so that no
// bit-cast helper is needed on either side.
#ifndef RELAXPS_KERNELS_INTERNAL_SCALAR_MATH_H_
#define RELAXPS_KERNELS_INTERNAL_SCALAR_MATH_H_

#include <cstdint>

#include "common/half_bits.h"  // RELAXPS_HD, the fp16 bit conversions.

namespace relaxps {
namespace kernels {
namespace internal {

// fp32 <-> fp16 bit conversions live in common/half_bits.h (the client's
// host codec uses them too); the back ends call them by these names.
using ::relaxps::FloatBitsToHalfBits;
using ::relaxps::HalfBitsToFloatBits;

// Counter-based generator for dropout: a uniform in [0, 1) with 24 random
// bits from (seed, index), via the SplitMix64 finalizer. Stateless, so any
// element can be computed independently on any back end.
RELAXPS_HD float DropoutUniform(uint64_t seed, uint64_t index) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + index * 0xd1b54a32d192ed03ull + 0x632be59bd9b4e019ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<float>(static_cast<uint32_t>(z >> 40)) * (1.0f / 16777216.0f);
}

// The dropout mask value of element `index`: 0 with probability p, else
// `scale` (= 1 / (1 - p), computed once by the caller so that both back ends
// use the same float).
RELAXPS_HD float DropoutMask(uint64_t seed, uint64_t index, float p, float scale) {
  return DropoutUniform(seed, index) >= p ? scale : 0.0f;
}

}  // namespace internal
}  // namespace kernels
}  // namespace relaxps

#endif  // RELAXPS_KERNELS_INTERNAL_SCALAR_MATH_H_
