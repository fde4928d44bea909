#include "common/payload_codec.h"

#include <algorithm>
#include <cstring>

#include "common/half_bits.h"
#include "common/vector_clones.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define RELAXPS_HAVE_F16C_PATH 1
#endif

namespace relaxps {
namespace {

void FloatToHalfPortable(const float* __restrict in, uint16_t* __restrict out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &in[i], sizeof(bits));
    out[i] = FloatBitsToHalfBits(bits);
  }
}

void HalfToFloatPortable(const uint16_t* __restrict in, float* __restrict out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t bits = HalfBitsToFloatBits(in[i]);
    std::memcpy(&out[i], &bits, sizeof(bits));
  }
}

#if defined(RELAXPS_HAVE_F16C_PATH)
__attribute__((target("avx,f16c"))) void FloatToHalfF16c(const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(in + i);
    const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  FloatToHalfPortable(in + i, out + i, n - i);
}

__attribute__((target("avx,f16c"))) void HalfToFloatF16c(const uint16_t* in, float* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  HalfToFloatPortable(in + i, out + i, n - i);
}

bool CpuHasF16c() {
  // clang has no "f16c" for __builtin_cpu_supports: read CPUID leaf 1.
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __builtin_cpu_supports("avx") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) &&
           (ecx & bit_F16C) != 0;
  }();
  return has;
}
#endif

// Bytes per element of `encoding`, 0 if unknown.
size_t ElementBytes(wire::Encoding encoding) {
  switch (encoding) {
    case wire::ENC_FP32: return sizeof(float);
    case wire::ENC_FP16: return sizeof(uint16_t);
    default: return 0;
  }
}

Status CheckSize(const Frame& frame, size_t n, wire::Encoding encoding) {
  const size_t elem = ElementBytes(encoding);
  if (elem == 0) return InvalidArgumentError("unknown payload encoding " + std::to_string(encoding));
  // n * elem can overflow for a hostile n: compare by division.
  if (frame.size() % elem != 0 || frame.size() / elem != n) {
    return InvalidArgumentError("payload of " + std::to_string(frame.size()) + " bytes, expected " +
                                std::to_string(n) + " values of " + std::to_string(elem) +
                                " bytes");
  }
  return Status::OK();
}

}  // namespace

void FloatToHalf(const float* in, uint16_t* out, size_t n) {
#if defined(RELAXPS_HAVE_F16C_PATH)
  if (CpuHasF16c()) return FloatToHalfF16c(in, out, n);
#endif
  FloatToHalfPortable(in, out, n);
}

void HalfToFloat(const uint16_t* in, float* out, size_t n) {
#if defined(RELAXPS_HAVE_F16C_PATH)
  if (CpuHasF16c()) return HalfToFloatF16c(in, out, n);
#endif
  HalfToFloatPortable(in, out, n);
}

StatusOr<const float*> DecodeFloats(const Frame& frame, size_t n, wire::Encoding encoding,
                                    std::vector<float>* scratch) {
  RETURN_IF_ERROR(CheckSize(frame, n, encoding));
  if (encoding == wire::ENC_FP32 &&
      reinterpret_cast<uintptr_t>(frame.data()) % alignof(float) == 0) {
    return frame.as<float>();
  }
  scratch->resize(n);
  RETURN_IF_ERROR(DecodeFloatsInto(frame, encoding, scratch->data(), n));
  return static_cast<const float*>(scratch->data());
}

namespace {

// True when none of x[0, n) is NaN or +-Inf (all exponent bits set). With
// the sign cleared such a value is >= 0x7f800000, so adding 0x00800000 carries
// into bit 31 exactly for those: an OR of the sums without early exit is three
// vector operations per vector (and, add, or) and vectorizes on SSE2 too;
// the AVX2 copy does 32 floats in 15 instructions (docs/benchmarks.md).
RELAXPS_VECTOR_CLONES
bool BlockFinite(const float* __restrict x, size_t n) {
  uint32_t bad = 0;
#pragma GCC unroll 4
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &x[i], sizeof(bits));
    bad |= (bits & 0x7fffffffu) + 0x00800000u;
  }
  return (bad & 0x80000000u) == 0;
}

}  // namespace

bool AllFinite(const float* x, size_t n) {
  constexpr size_t kBlock = 4096;  // Early exit granularity.
  for (size_t i = 0; i < n; i += kBlock) {
    if (!BlockFinite(x + i, std::min(kBlock, n - i))) return false;
  }
  return true;
}

Status DecodeFloatsInto(const Frame& frame, wire::Encoding encoding, float* out, size_t n) {
  RETURN_IF_ERROR(CheckSize(frame, n, encoding));
  if (encoding == wire::ENC_FP16) {
    if (reinterpret_cast<uintptr_t>(frame.data()) % alignof(uint16_t) == 0) {
      HalfToFloat(frame.as<uint16_t>(), out, n);
    } else {
      std::vector<uint16_t> half(n);
      std::memcpy(half.data(), frame.data(), n * sizeof(uint16_t));
      HalfToFloat(half.data(), out, n);
    }
  } else {
    std::memcpy(out, frame.data(), n * sizeof(float));
  }
  return Status::OK();
}

Frame EncodeFloats(const FloatBuffer& values, wire::Encoding encoding) {
  if (encoding != wire::ENC_FP16) return Frame::Share(values);
  Buffer<uint16_t> half = Buffer<uint16_t>::Uninitialized(values.size());
  FloatToHalf(values.data(), half.data(), values.size());
  return Frame::Share(half);
}

}  // namespace relaxps
