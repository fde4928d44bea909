// Deterministic, position-addressed parameter initialization.
//
// A table's initial values are a pure function of (seed, global key), so a
// table initializes identically however it is sharded, on whichever server,
// and a sparse row created on first touch gets the same values on every
// replica. Segments let a model give each layer its own distribution.
#ifndef RELAXPS_INITIALIZER_H_
#define RELAXPS_INITIALIZER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "relaxps/status.h"

namespace relaxps {

enum class InitKind { kZeros = 0, kConstant = 1, kUniform = 2, kNormal = 3 };

struct InitSegment {
  // Dense tables: keys [begin, end). Sparse tables: columns [begin, end) of
  // every row.
  uint64_t begin = 0;
  uint64_t end = 0;
  InitKind kind = InitKind::kZeros;
  // kConstant: value a. kUniform: U(a, b). kNormal: mean a, stddev b.
  float a = 0.0f;
  float b = 0.0f;
};

struct Initializer {
  uint64_t seed = 0;
  // Keys outside every segment are zero. Segments must not overlap.
  std::vector<InitSegment> segments;

  // Checks kinds, ranges and parameters against a table of `size` keys (or
  // row width for sparse tables).
  Status Validate(uint64_t size) const;

  // Writes the initial values of keys [begin, begin + n) into out.
  void Fill(uint64_t begin, size_t n, float* out) const;
  // Writes the initial values of a sparse row (width columns).
  void FillRow(uint64_t row_id, size_t width, float* out) const;
};

// Counter-based uniform in [0, 1) from (seed, index): splitmix64 finalizer.
double HashUniform(uint64_t seed, uint64_t index);

}  // namespace relaxps

#endif  // RELAXPS_INITIALIZER_H_
