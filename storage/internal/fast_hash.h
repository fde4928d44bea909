// HashBytes: a fast 64-bit non-cryptographic hash (xxHash64-style rounds on
// four independent lanes, so it runs near memory bandwidth). Used to detect
// dense chunks that changed since the last Flush; not for adversarial input.
//
// Pure; safe to call from any thread.
#ifndef RELAXPS_STORAGE_INTERNAL_FAST_HASH_H_
#define RELAXPS_STORAGE_INTERNAL_FAST_HASH_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace relaxps {
namespace storage_internal {

inline uint64_t HashBytes(const void* data, size_t n) {
  constexpr uint64_t kP1 = 0x9E3779B185EBCA87ULL;
  constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4FULL;
  constexpr uint64_t kP3 = 0x165667B19E3779F9ULL;
  auto rotl = [](uint64_t x, int r) { return (x << r) | (x >> (64 - r)); };
  auto round = [&](uint64_t acc, uint64_t w) { return rotl(acc + w * kP2, 31) * kP1; };
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h[4] = {kP1 + kP2, kP2, 0, 0 - kP1};
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int lane = 0; lane < 4; ++lane) {
      uint64_t w;
      std::memcpy(&w, p + i + 8 * lane, 8);
      h[lane] = round(h[lane], w);
    }
  }
  uint64_t acc = rotl(h[0], 1) + rotl(h[1], 7) + rotl(h[2], 12) + rotl(h[3], 18) + n;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    acc = rotl(acc ^ round(0, w), 27) * kP1 + kP3;
  }
  for (; i < n; ++i) acc = rotl(acc ^ (p[i] * kP3), 11) * kP1;
  acc ^= acc >> 33;
  acc *= kP2;
  acc ^= acc >> 29;
  acc *= kP3;
  return acc ^ (acc >> 32);
}

}  // namespace storage_internal
}  // namespace relaxps

#endif  // RELAXPS_STORAGE_INTERNAL_FAST_HASH_H_
