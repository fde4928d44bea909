#include "common/initializer.h"

#include <algorithm>
#include <cmath>

namespace relaxps {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

float SampleAt(const InitSegment& s, uint64_t seed, uint64_t key) {
  switch (s.kind) {
    case InitKind::kZeros:
      return 0.0f;
    case InitKind::kConstant:
      return s.a;
    case InitKind::kUniform:
      return static_cast<float>(s.a + (s.b - s.a) * HashUniform(seed, key));
    case InitKind::kNormal: {
      // Box-Muller on two independent counter-based uniforms.
      double u1 = HashUniform(seed, 2 * key + 1);
      double u2 = HashUniform(seed ^ 0x5bd1e995ULL, 2 * key);
      u1 = std::max(u1, 1e-300);
      double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
      return static_cast<float>(s.a + s.b * z);
    }
  }
  return 0.0f;
}

}  // namespace

double HashUniform(uint64_t seed, uint64_t index) {
  uint64_t h = SplitMix64(SplitMix64(seed) ^ index);
  return static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);
}

Status Initializer::Validate(uint64_t size) const {
  std::vector<InitSegment> sorted = segments;
  std::sort(sorted.begin(), sorted.end(),
            [](const InitSegment& x, const InitSegment& y) { return x.begin < y.begin; });
  uint64_t prev_end = 0;
  for (const InitSegment& s : sorted) {
    if (s.begin >= s.end || s.end > size) {
      return InvalidArgumentError("init segment [" + std::to_string(s.begin) + ", " +
                                  std::to_string(s.end) + ") is empty or exceeds size " +
                                  std::to_string(size));
    }
    if (s.begin < prev_end) return InvalidArgumentError("init segments overlap");
    if (static_cast<int>(s.kind) < 0 || static_cast<int>(s.kind) > 3) {
      return InvalidArgumentError("unknown init kind");
    }
    if (!std::isfinite(s.a) || !std::isfinite(s.b)) {
      return InvalidArgumentError("init parameters must be finite");
    }
    if (s.kind == InitKind::kUniform && s.b < s.a) {
      return InvalidArgumentError("uniform init needs a <= b");
    }
    if (s.kind == InitKind::kNormal && s.b < 0) {
      return InvalidArgumentError("normal init needs stddev >= 0");
    }
    prev_end = s.end;
  }
  return Status::OK();
}

void Initializer::Fill(uint64_t begin, size_t n, float* out) const {
  std::fill(out, out + n, 0.0f);
  const uint64_t end = begin + n;
  for (const InitSegment& s : segments) {
    const uint64_t lo = std::max(begin, s.begin);
    const uint64_t hi = std::min(end, s.end);
    for (uint64_t k = lo; k < hi; ++k) out[k - begin] = SampleAt(s, seed, k);
  }
}

void Initializer::FillRow(uint64_t row_id, size_t width, float* out) const {
  std::fill(out, out + width, 0.0f);
  for (const InitSegment& s : segments) {
    const uint64_t hi = std::min<uint64_t>(width, s.end);
    for (uint64_t c = s.begin; c < hi; ++c) {
      out[c] = SampleAt(s, seed, row_id * width + c);
    }
  }
}

}  // namespace relaxps
