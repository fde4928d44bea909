// Helpers shared by the kernels tests.
#ifndef RELAXPS_TESTS_KERNELS_KERNEL_TEST_UTIL_H_
#define RELAXPS_TESTS_KERNELS_KERNEL_TEST_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace relaxps {
namespace kernels {

// n floats uniform in [lo, hi), deterministic for a seed.
inline std::vector<float> RandomVector(size_t n, uint32_t seed, float lo = -1.0f,
                                       float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

}  // namespace kernels
}  // namespace relaxps

#endif  // RELAXPS_TESTS_KERNELS_KERNEL_TEST_UTIL_H_
