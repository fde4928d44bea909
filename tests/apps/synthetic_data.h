// A small synthetic stand-in for Fashion-MNIST shared by the trainer module's
// tests. Header-only.
#ifndef RELAXPS_TESTS_APPS_SYNTHETIC_DATA_H_
#define RELAXPS_TESTS_APPS_SYNTHETIC_DATA_H_

#include <cstddef>
#include <cstdint>

#include "apps/trainer/mnist.h"

namespace relaxps {
namespace trainer {
namespace test_data {

// 10 classes of 28x28 images: class c lights up rows [2c, 2c + 3), plus noise.
inline Dataset MakeDataset(size_t n, uint64_t seed) {
  Dataset d;
  d.rows = 28;
  d.cols = 28;
  SplitMix64 rng(seed);
  d.images.resize(n * 784);
  d.labels.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const int label = static_cast<int>(rng.Below(10));
    d.labels[i] = label;
    for (int p = 0; p < 784; ++p) {
      const int row = p / 28;
      const float noise = static_cast<float>(rng.Below(1000)) / 1000.0f;
      d.images[i * 784 + p] =
          0.4f * noise + (row >= 2 * label && row < 2 * label + 3 ? 0.6f : 0.0f);
    }
  }
  return d;
}

}  // namespace test_data
}  // namespace trainer
}  // namespace relaxps

#endif  // RELAXPS_TESTS_APPS_SYNTHETIC_DATA_H_
