// Tests of the CPU back end of kernels::Device: every op against a
// straightforward scalar reference (double precision where it matters) on
// fixed and seeded random inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "kernels/device.h"
#include "tests/kernels/kernel_test_util.h"
#include "kernels/internal/scalar_math.h"

namespace relaxps {
namespace kernels {
namespace {


float BitsToFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}
uint32_t FloatToBits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}

class CpuDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DeviceOptions options;
    options.type = DeviceType::kCpu;
    auto device = NewDevice(options);
    ASSERT_TRUE(device.ok()) << device.status();
    device_ = std::move(device).value();
  }
  std::unique_ptr<Device> device_;
};

TEST(DeviceFactoryTest, ParsesDeviceNames) {
  ASSERT_TRUE(ParseDeviceType("cpu").ok());
  EXPECT_EQ(*ParseDeviceType("cpu"), DeviceType::kCpu);
  ASSERT_TRUE(ParseDeviceType("cuda").ok());
  EXPECT_EQ(*ParseDeviceType("cuda"), DeviceType::kCuda);
  EXPECT_EQ(ParseDeviceType("tpu").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseDeviceType("").status().code(), StatusCode::kInvalidArgument);
}

TEST_F(CpuDeviceTest, NameAndType) {
  EXPECT_EQ(device_->Name(), "cpu");
  EXPECT_EQ(device_->type(), DeviceType::kCpu);
}

TEST_F(CpuDeviceTest, AllocIsAlignedAndCopiesRoundTrip) {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{1000}}) {
    void* p = device_->Alloc(bytes);
    ASSERT_NE(p, nullptr) << bytes;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << bytes;
    device_->Free(p);
  }
  device_->Free(nullptr);

  const std::vector<float> src = RandomVector(100, 1);
  DeviceBuffer<float> a(device_.get(), src.size());
  DeviceBuffer<float> b(device_.get(), src.size());
  device_->CopyToDevice(a.data(), src.data(), src.size() * sizeof(float));
  device_->CopyOnDevice(b.data(), a.data(), src.size() * sizeof(float));
  std::vector<float> back(src.size());
  device_->CopyToHost(back.data(), b.data(), back.size() * sizeof(float));
  device_->Synchronize();
  EXPECT_EQ(back, src);

  device_->Fill(b.data(), 37, 2.5f);
  EXPECT_TRUE(std::all_of(b.data(), b.data() + 37, [](float x) { return x == 2.5f; }));
  EXPECT_EQ(b.data()[37], src[37]);
}

TEST_F(CpuDeviceTest, AllocHostIsAlignedAndFreeableFromAnyThread) {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{1000}}) {
    void* p = device_->AllocHost(bytes);
    ASSERT_NE(p, nullptr) << bytes;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << bytes;
    std::memset(p, 0xab, bytes);
    device_->FreeHost(p);
  }
  device_->FreeHost(nullptr);
  // A buffer handed to the transport is released by its I/O thread.
  void* p = device_->AllocHost(4096);
  ASSERT_NE(p, nullptr);
  std::thread([&] { device_->FreeHost(p); }).join();
}

TEST_F(CpuDeviceTest, AsyncCopiesOrderedByEventsRoundTrip) {
  const std::vector<float> x = RandomVector(1000, 3);
  std::vector<float> expected = x;
  for (float& v : expected) v *= 8.0f;
  EXPECT_EQ(AsyncScaleRoundTrip(device_.get(), x, 3), expected);

  // Zero-byte copies are no-ops; a never-recorded event is complete.
  const std::unique_ptr<DeviceEvent> event = device_->NewEvent();
  EXPECT_EQ(event->device(), device_.get());
  device_->CopyToDeviceAsync(nullptr, nullptr, 0);
  device_->CopyToHostAsync(nullptr, nullptr, 0);
  device_->HostWaitEvent(event.get());
  device_->WaitEvent(Stream::kCompute, event.get());
  device_->RecordEvent(Stream::kCompute, event.get());
  device_->HostWaitEvent(event.get());
  device_->Synchronize();
}

TEST_F(CpuDeviceTest, EventOfAnotherDeviceIsAProgrammingError) {
  auto other = NewDevice(DeviceOptions{});
  ASSERT_TRUE(other.ok()) << other.status();
  const std::unique_ptr<DeviceEvent> event = (*other)->NewEvent();
  EXPECT_DEATH(device_->HostWaitEvent(event.get()), "event of another device");
}

// ---- Optimizer updates vs scalar references -------------------------------------

TEST_F(CpuDeviceTest, SgdUpdate) {
  const size_t n = 1003;  // Not a multiple of any vector width.
  std::vector<float> w = RandomVector(n, 2), g = RandomVector(n, 3);
  std::vector<double> ref(w.begin(), w.end());
  for (size_t i = 0; i < n; ++i) ref[i] -= 0.1 * g[i];
  device_->SgdUpdate(w.data(), g.data(), n, 0.1f);
  for (size_t i = 0; i < n; ++i) ASSERT_NEAR(w[i], ref[i], 1e-6) << i;
}

TEST_F(CpuDeviceTest, MomentumUpdate) {
  const size_t n = 517;
  std::vector<float> w = RandomVector(n, 4), v = RandomVector(n, 5), g = RandomVector(n, 6);
  std::vector<double> rw(w.begin(), w.end()), rv(v.begin(), v.end());
  for (size_t i = 0; i < n; ++i) {
    rv[i] = 0.9 * rv[i] + g[i];
    rw[i] -= 0.05 * rv[i];
  }
  device_->MomentumUpdate(w.data(), v.data(), g.data(), n, 0.05f, 0.9f);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_NEAR(v[i], rv[i], 1e-6) << i;
    ASSERT_NEAR(w[i], rw[i], 1e-6) << i;
  }
}

TEST_F(CpuDeviceTest, AdamUpdateMatchesTextbookFormula) {
  const size_t n = 301;
  std::vector<float> w = RandomVector(n, 7), m = RandomVector(n, 8, -0.1f, 0.1f),
                     v = RandomVector(n, 9, 0.0f, 0.01f), g = RandomVector(n, 10);
  AdamParams p;
  p.lr = 0.01f;
  p.step = 3;
  std::vector<double> rw(w.begin(), w.end()), rm(m.begin(), m.end()), rv(v.begin(), v.end());
  for (size_t i = 0; i < n; ++i) {
    rm[i] = p.beta1 * rm[i] + (1 - static_cast<double>(p.beta1)) * g[i];
    rv[i] = p.beta2 * rv[i] + (1 - static_cast<double>(p.beta2)) * g[i] * g[i];
    const double mhat = rm[i] / (1 - std::pow(static_cast<double>(p.beta1), 3));
    const double vhat = rv[i] / (1 - std::pow(static_cast<double>(p.beta2), 3));
    rw[i] -= p.lr * mhat / (std::sqrt(vhat) + p.eps);
  }
  device_->AdamUpdate(w.data(), m.data(), v.data(), g.data(), n, p);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_NEAR(m[i], rm[i], 1e-6) << i;
    ASSERT_NEAR(v[i], rv[i], 1e-7) << i;
    ASSERT_NEAR(w[i], rw[i], 1e-5) << i;
  }
}

TEST_F(CpuDeviceTest, AdagradUpdate) {
  const size_t n = 129;
  std::vector<float> w = RandomVector(n, 11), h = RandomVector(n, 12, 0.0f, 1.0f),
                     g = RandomVector(n, 13);
  std::vector<double> rw(w.begin(), w.end()), rh(h.begin(), h.end());
  for (size_t i = 0; i < n; ++i) {
    rh[i] += static_cast<double>(g[i]) * g[i];
    rw[i] -= 0.1 * g[i] / (std::sqrt(rh[i]) + 1e-8);
  }
  device_->AdagradUpdate(w.data(), h.data(), g.data(), n, 0.1f, 1e-8f);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_NEAR(h[i], rh[i], 1e-6) << i;
    ASSERT_NEAR(w[i], rw[i], 1e-6) << i;
  }
}

// ---- Vector ops ------------------------------------------------------------------

TEST_F(CpuDeviceTest, AxpyAndScale) {
  const size_t n = 77;
  std::vector<float> x = RandomVector(n, 14), y = RandomVector(n, 15);
  std::vector<float> ref = y;
  for (size_t i = 0; i < n; ++i) ref[i] += -2.0f * x[i];
  device_->Axpy(n, -2.0f, x.data(), y.data());
  for (size_t i = 0; i < n; ++i) ASSERT_FLOAT_EQ(y[i], ref[i]) << i;
  device_->Scale(n, 0.5f, y.data());
  for (size_t i = 0; i < n; ++i) ASSERT_FLOAT_EQ(y[i], ref[i] * 0.5f) << i;
}

TEST_F(CpuDeviceTest, AllFiniteFindsEveryKindOfNonFiniteAnywhere) {
  const size_t n = 10000;  // Spans several internal blocks.
  std::vector<float> x = RandomVector(n, 16, -1e30f, 1e30f);
  EXPECT_TRUE(device_->AllFinite(x.data(), n));
  EXPECT_TRUE(device_->AllFinite(x.data(), 0));
  x[0] = std::numeric_limits<float>::max();
  x[1] = std::numeric_limits<float>::denorm_min();
  x[2] = -std::numeric_limits<float>::max();
  x[3] = -0.0f;
  EXPECT_TRUE(device_->AllFinite(x.data(), n));
  // NaNs with the smallest and the largest payload, either sign.
  auto nan_bits = [](uint32_t bits) {
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
  };
  for (float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
        -std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::quiet_NaN(),
        nan_bits(0x7f800001u), nan_bits(0xff800001u), nan_bits(0xffffffffu)}) {
    for (size_t pos : {size_t{0}, size_t{4095}, size_t{4096}, n - 1}) {
      std::vector<float> y = x;
      y[pos] = bad;
      EXPECT_FALSE(device_->AllFinite(y.data(), n)) << bad << " at " << pos;
      if (pos > 0) {
        EXPECT_TRUE(device_->AllFinite(y.data(), pos)) << bad << " before " << pos;
      }
    }
  }
}

// ---- fp16 --------------------------------------------------------------------------

// Reference float -> half: the nearest of all finite halves (ties to the even
// encoding), or inf beyond 65520, found by search rather than bit tricks.
class HalfReference {
 public:
  HalfReference() {
    for (uint32_t h = 0; h < 0x7c00; ++h) {  // Non-negative finite halves, ascending.
      const int exp = static_cast<int>(h >> 10);
      const double mant = h & 0x3ff;
      values_.push_back(exp == 0 ? std::ldexp(mant, -24)
                                 : std::ldexp(1.0 + mant / 1024.0, exp - 15));
    }
  }
  uint16_t Convert(float f) const {
    if (std::isnan(f)) return 0x7e00;
    const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
    const double a = std::fabs(static_cast<double>(f));
    if (a >= 65520.0) return sign | 0x7c00;
    const size_t hi = std::lower_bound(values_.begin(), values_.end(), a) - values_.begin();
    if (hi == 0) return sign;
    if (hi == values_.size()) return sign | static_cast<uint16_t>(hi - 1);
    const double dlo = a - values_[hi - 1], dhi = values_[hi] - a;
    size_t pick = dlo < dhi ? hi - 1 : (dhi < dlo ? hi : ((hi - 1) % 2 == 0 ? hi - 1 : hi));
    return sign | static_cast<uint16_t>(pick);
  }
  double Value(uint16_t h) const { return values_[h & 0x7fff]; }

 private:
  std::vector<double> values_;
};

TEST(HalfReferenceTest, KnownValues) {
  HalfReference ref;
  EXPECT_EQ(ref.Value(0x3c00), 1.0);
  EXPECT_EQ(ref.Value(0x7bff), 65504.0);
  EXPECT_EQ(ref.Value(0x0001), std::ldexp(1.0, -24));
  EXPECT_EQ(ref.Value(0x0400), std::ldexp(1.0, -14));
}

TEST_F(CpuDeviceTest, HalfToFloatIsExactForEveryHalf) {
  HalfReference ref;
  std::vector<uint16_t> all(65536);
  for (uint32_t h = 0; h < 65536; ++h) all[h] = static_cast<uint16_t>(h);
  std::vector<float> f(all.size());
  device_->HalfToFloat(all.data(), f.data(), all.size());
  for (uint32_t h = 0; h < 65536; ++h) {
    // Bit-identical to the portable code the CUDA back end runs, NaNs included
    // (this device may have used F16C).
    ASSERT_EQ(FloatToBits(f[h]), internal::HalfBitsToFloatBits(static_cast<uint16_t>(h)))
        << "half 0x" << std::hex << h;
    const uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (exp == 0x1f) {
      if (mant == 0) {
        EXPECT_TRUE(std::isinf(f[h]) && std::signbit(f[h]) == ((h & 0x8000) != 0)) << h;
      } else {
        EXPECT_TRUE(std::isnan(f[h])) << h;
      }
      continue;
    }
    const double expect = (h & 0x8000) ? -ref.Value(h) : ref.Value(h);
    ASSERT_EQ(static_cast<double>(f[h]), expect) << "half 0x" << std::hex << h;
    ASSERT_EQ(std::signbit(f[h]), (h & 0x8000) != 0) << h;
  }
}

TEST_F(CpuDeviceTest, HalfRoundTripIsIdentityForEveryNonNanHalf) {
  std::vector<uint16_t> all(65536), back(65536);
  for (uint32_t h = 0; h < 65536; ++h) all[h] = static_cast<uint16_t>(h);
  std::vector<float> f(all.size());
  device_->HalfToFloat(all.data(), f.data(), all.size());
  device_->FloatToHalf(f.data(), back.data(), f.size());
  for (uint32_t h = 0; h < 65536; ++h) {
    const bool nan = ((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff) != 0;
    if (nan) {
      EXPECT_EQ(back[h] & 0x7c00, 0x7c00) << h;
      EXPECT_NE(back[h] & 0x3ff, 0) << h;
    } else {
      ASSERT_EQ(back[h], h) << "half 0x" << std::hex << h;
    }
  }
}

TEST_F(CpuDeviceTest, FloatToHalfRoundsToNearestEvenAtEdges) {
  struct Case {
    float in;
    uint16_t out;
  };
  const float inf = std::numeric_limits<float>::infinity();
  const Case cases[] = {
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
      {1.0f, 0x3c00},
      {-2.0f, 0xc000},
      {65504.0f, 0x7bff},    // Largest half.
      {65519.996f, 0x7bff},  // Just below the overflow tie.
      {65520.0f, 0x7c00},    // Tie: rounds to even = inf.
      {1e10f, 0x7c00},
      {-1e10f, 0xfc00},
      {inf, 0x7c00},
      {-inf, 0xfc00},
      {std::ldexp(1.0f, -14), 0x0400},  // Smallest normal.
      {std::ldexp(1.0f, -24), 0x0001},  // Smallest subnormal.
      {std::ldexp(1.0f, -25), 0x0000},  // Tie between 0 and 1 ulp: even = 0.
      {std::nextafter(std::ldexp(1.0f, -25), 1.0f), 0x0001},
      {3 * std::ldexp(1.0f, -25), 0x0002},  // Tie between 1 and 2: even = 2.
      {5 * std::ldexp(1.0f, -25), 0x0002},  // Tie between 2 and 3: even = 2.
      {std::ldexp(1023.0f, -24), 0x03ff},   // Largest subnormal.
      {std::ldexp(1023.5f, -24), 0x0400},   // Tie rounds up into the normals.
      {std::ldexp(1.0f, -26), 0x0000},
      {std::numeric_limits<float>::denorm_min(), 0x0000},
      {-std::numeric_limits<float>::denorm_min(), 0x8000},
      {1.0f + std::ldexp(1.0f, -11), 0x3c00},      // Tie: even mantissa 0.
      {1.0f + 3 * std::ldexp(1.0f, -11), 0x3c02},  // Tie: even mantissa 2.
      {1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20), 0x3c01},
  };
  std::vector<float> in;
  for (const Case& c : cases) in.push_back(c.in);
  // More than 8 cases, so both the 8-wide path and the scalar tail run.
  std::vector<uint16_t> out(in.size());
  device_->FloatToHalf(in.data(), out.data(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(out[i], cases[i].out) << "input " << cases[i].in << " (case " << i << ")";
    // The portable path shared with CUDA must agree.
    EXPECT_EQ(internal::FloatBitsToHalfBits(FloatToBits(in[i])), cases[i].out) << i;
  }
  const float nans[] = {std::numeric_limits<float>::quiet_NaN(),
                        std::numeric_limits<float>::signaling_NaN(), BitsToFloat(0x7f800001u),
                        BitsToFloat(0xffc00000u)};
  std::vector<uint16_t> nan_out(4);
  device_->FloatToHalf(nans, nan_out.data(), 4);
  for (uint16_t h : nan_out) {
    EXPECT_EQ(h & 0x7c00, 0x7c00);
    EXPECT_NE(h & 0x3ff, 0) << "NaN must not become infinity";
  }
}

TEST_F(CpuDeviceTest, FloatToHalfMatchesReferenceOnRandomBitPatterns) {
  HalfReference ref;
  std::mt19937 rng(17);
  std::vector<float> in;
  // Random bit patterns (all magnitudes) plus values concentrated in the
  // half range, where rounding matters.
  for (int i = 0; i < 200000; ++i) {
    in.push_back(BitsToFloat(static_cast<uint32_t>(rng())));
  }
  // NaNs with payloads in every position, signaling and quiet.
  for (uint32_t bit = 0; bit < 23; ++bit) {
    in.push_back(BitsToFloat(0x7f800000u | (1u << bit)));
    in.push_back(BitsToFloat(0xff800000u | (1u << bit) | 1u));
  }
  std::uniform_real_distribution<float> exp_dist(-26.0f, 16.5f);
  for (int i = 0; i < 200000; ++i) {
    const float f = std::exp2(exp_dist(rng));
    in.push_back(i % 2 ? f : -f);
  }
  std::vector<uint16_t> out(in.size());
  device_->FloatToHalf(in.data(), out.data(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    // Bit-identical to the portable code the CUDA back end runs.
    ASSERT_EQ(internal::FloatBitsToHalfBits(FloatToBits(in[i])), out[i])
        << "bits 0x" << std::hex << FloatToBits(in[i]);
    if (std::isnan(in[i])) continue;  // Payloads are checked above only.
    ASSERT_EQ(out[i], ref.Convert(in[i]))
        << "input " << in[i] << " bits 0x" << std::hex << FloatToBits(in[i]);
  }
}

// ---- GEMM --------------------------------------------------------------------------

void ReferenceGemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
                   const float* b, int ldb, float beta, std::vector<double>* c, int ldc) {
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double sum = 0;
      for (int p = 0; p < k; ++p) {
        const double av = ta ? a[p * lda + i] : a[i * lda + p];
        const double bv = tb ? b[j * ldb + p] : b[p * ldb + j];
        sum += av * bv;
      }
      (*c)[i * ldc + j] = alpha * sum + beta * (*c)[i * ldc + j];
    }
  }
}

TEST_F(CpuDeviceTest, GemmAllTransposeCombinationsWithPaddedStrides) {
  const int m = 13, n = 7, k = 19;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      SCOPED_TRACE(testing::Message() << "trans_a=" << ta << " trans_b=" << tb);
      // Stored shapes (rows x cols) with 3 columns of padding each.
      const int a_rows = ta ? k : m, a_cols = ta ? m : k;
      const int b_rows = tb ? n : k, b_cols = tb ? k : n;
      const int lda = a_cols + 3, ldb = b_cols + 3, ldc = n + 3;
      const std::vector<float> a = RandomVector(a_rows * lda, 18);
      const std::vector<float> b = RandomVector(b_rows * ldb, 19);
      std::vector<float> c = RandomVector(m * ldc, 20);
      std::vector<double> ref(c.begin(), c.end());
      ReferenceGemm(ta, tb, m, n, k, 0.7f, a.data(), lda, b.data(), ldb, -0.3f, &ref, ldc);
      device_->Gemm(ta, tb, m, n, k, 0.7f, a.data(), lda, b.data(), ldb, -0.3f, c.data(), ldc);
      for (int i = 0; i < m * ldc; ++i) ASSERT_NEAR(c[i], ref[i], 1e-4) << i;
    }
  }
}

TEST_F(CpuDeviceTest, GemmWithZeroInnerDimensionScalesC) {
  std::vector<float> c = {1, 2, 3, 4};
  device_->Gemm(false, false, 2, 2, 0, 1.0f, nullptr, 1, nullptr, 2, 0.5f, c.data(), 2);
  EXPECT_EQ(c, (std::vector<float>{0.5f, 1, 1.5f, 2}));
  device_->Gemm(false, false, 2, 2, 0, 1.0f, nullptr, 1, nullptr, 2, 0.0f, c.data(), 2);
  EXPECT_EQ(c, (std::vector<float>{0, 0, 0, 0}));
}

// ---- Layers --------------------------------------------------------------------------

TEST_F(CpuDeviceTest, BiasOps) {
  const int rows = 5, cols = 11;
  std::vector<float> y = RandomVector(rows * cols, 21), bias = RandomVector(cols, 22);
  std::vector<float> ref = y;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) ref[r * cols + c] += bias[c];
  device_->AddBias(y.data(), bias.data(), rows, cols);
  for (int i = 0; i < rows * cols; ++i) ASSERT_FLOAT_EQ(y[i], ref[i]);

  std::vector<float> db(cols, 123.0f);  // Overwritten.
  device_->BiasGrad(y.data(), db.data(), rows, cols);
  for (int c = 0; c < cols; ++c) {
    double sum = 0;
    for (int r = 0; r < rows; ++r) sum += y[r * cols + c];
    ASSERT_NEAR(db[c], sum, 1e-5) << c;
  }

  const int channels = 3, spatial = 10;
  std::vector<float> img = RandomVector(channels * spatial, 23), cb = RandomVector(channels, 24);
  std::vector<float> img_ref = img;
  for (int c = 0; c < channels; ++c)
    for (int s = 0; s < spatial; ++s) img_ref[c * spatial + s] += cb[c];
  device_->AddChannelBias(img.data(), cb.data(), channels, spatial);
  for (int i = 0; i < channels * spatial; ++i) ASSERT_FLOAT_EQ(img[i], img_ref[i]);

  std::vector<float> cdb = {1.0f, 2.0f, 3.0f};  // Accumulated into.
  device_->ChannelBiasGradAccumulate(img.data(), cdb.data(), channels, spatial);
  for (int c = 0; c < channels; ++c) {
    double sum = c + 1.0;
    for (int s = 0; s < spatial; ++s) sum += img[c * spatial + s];
    ASSERT_NEAR(cdb[c], sum, 1e-5) << c;
  }
}

TEST_F(CpuDeviceTest, Relu) {
  std::vector<float> x = {-2.0f, -0.0f, 0.0f, 0.5f, 3.0f, -1e-30f};
  device_->ReluForward(x.data(), x.size());
  EXPECT_EQ(x, (std::vector<float>{0, 0, 0, 0.5f, 3.0f, 0}));
  std::vector<float> dy = {1, 2, 3, 4, 5, 6};
  device_->ReluBackward(x.data(), dy.data(), dy.size());
  EXPECT_EQ(dy, (std::vector<float>{0, 0, 0, 4, 5, 0}));
}

// Reference im2col straight from the definition.
std::vector<float> ReferenceIm2Col(const std::vector<float>& img, int channels, int h, int w, int k,
                                   int pad) {
  const int oh = h + 2 * pad - k + 1, ow = w + 2 * pad - k + 1;
  std::vector<float> cols(static_cast<size_t>(channels) * k * k * oh * ow);
  for (int c = 0; c < channels; ++c)
    for (int ky = 0; ky < k; ++ky)
      for (int kx = 0; kx < k; ++kx)
        for (int oy = 0; oy < oh; ++oy)
          for (int ox = 0; ox < ow; ++ox) {
            const int iy = oy + ky - pad, ix = ox + kx - pad;
            const float v =
                (iy >= 0 && iy < h && ix >= 0 && ix < w) ? img[(c * h + iy) * w + ix] : 0;
            cols[(((c * k + ky) * k + kx) * oh + oy) * ow + ox] = v;
          }
  return cols;
}

struct ConvShape {
  int channels, height, width, k, pad;
};

TEST_F(CpuDeviceTest, Im2ColMatchesReferenceAndCol2ImIsItsAdjoint) {
  for (const ConvShape s :
       {ConvShape{1, 5, 5, 3, 1}, ConvShape{3, 7, 6, 5, 2}, ConvShape{2, 4, 9, 3, 0},
        ConvShape{2, 3, 3, 5, 2}, ConvShape{1, 2, 2, 5, 2}}) {
    SCOPED_TRACE(testing::Message() << "c=" << s.channels << " h=" << s.height << " w=" << s.width
                                    << " k=" << s.k << " pad=" << s.pad);
    const std::vector<float> img = RandomVector(s.channels * s.height * s.width, 25);
    const std::vector<float> ref = ReferenceIm2Col(img, s.channels, s.height, s.width, s.k, s.pad);
    std::vector<float> cols(ref.size(), 99.0f);
    device_->Im2Col(img.data(), s.channels, s.height, s.width, s.k, s.pad, cols.data());
    ASSERT_EQ(cols, ref);

    // <Im2Col(x), y> == <x, Col2Im(y)> for random x, y.
    const std::vector<float> y = RandomVector(ref.size(), 26);
    std::vector<float> back(img.size(), 0.0f);
    device_->Col2Im(y.data(), s.channels, s.height, s.width, s.k, s.pad, back.data());
    double lhs = 0, rhs = 0;
    for (size_t i = 0; i < cols.size(); ++i) lhs += static_cast<double>(cols[i]) * y[i];
    for (size_t i = 0; i < img.size(); ++i) rhs += static_cast<double>(img[i]) * back[i];
    EXPECT_NEAR(lhs, rhs, 1e-4 * (1 + std::fabs(lhs)));

    // Col2Im accumulates: a second call doubles the result.
    std::vector<float> twice = back;
    device_->Col2Im(y.data(), s.channels, s.height, s.width, s.k, s.pad, twice.data());
    for (size_t i = 0; i < img.size(); ++i) ASSERT_NEAR(twice[i], 2 * back[i], 1e-5);
  }
}

TEST_F(CpuDeviceTest, MaxPoolForwardAndBackward) {
  const int planes = 3, h = 5, w = 6, pool = 2;  // Odd height: last row is dropped.
  const int oh = h / pool, ow = w / pool;
  std::vector<float> x = RandomVector(planes * h * w, 27);
  x[0] = x[1] = 5.0f;  // Tie: the first index wins.
  std::vector<float> y(planes * oh * ow);
  std::vector<int32_t> arg(y.size());
  device_->MaxPoolForward(x.data(), planes, h, w, pool, y.data(), arg.data());
  for (int p = 0; p < planes; ++p)
    for (int oy = 0; oy < oh; ++oy)
      for (int ox = 0; ox < ow; ++ox) {
        float best = -std::numeric_limits<float>::infinity();
        int best_i = -1;
        for (int dy = 0; dy < pool; ++dy)
          for (int dx = 0; dx < pool; ++dx) {
            const int i = (p * h + oy * pool + dy) * w + ox * pool + dx;
            if (x[i] > best) {
              best = x[i];
              best_i = i;
            }
          }
        const int o = (p * oh + oy) * ow + ox;
        ASSERT_EQ(y[o], best) << o;
        ASSERT_EQ(arg[o], best_i) << o;
      }
  EXPECT_EQ(arg[0], 0);

  const std::vector<float> dy = RandomVector(y.size(), 28);
  std::vector<float> dx(x.size(), 7.0f);  // Overwritten.
  device_->MaxPoolBackward(dy.data(), arg.data(), dy.size(), dx.data(), dx.size());
  std::vector<float> ref(x.size(), 0.0f);
  for (size_t o = 0; o < dy.size(); ++o) ref[arg[o]] += dy[o];
  EXPECT_EQ(dx, ref);
}

TEST_F(CpuDeviceTest, DropoutIsDeterministicUnbiasedAndScaled) {
  const size_t n = 100000;
  const float p = 0.3f;
  const std::vector<float> x0 = RandomVector(n, 29);
  std::vector<float> x = x0, mask(n);
  device_->DropoutForward(x.data(), mask.data(), n, p, /*seed=*/42);
  const float scale = 1.0f / (1.0f - p);
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    ASSERT_TRUE(mask[i] == 0.0f || mask[i] == scale) << mask[i];
    ASSERT_EQ(x[i], x0[i] * mask[i]);
    kept += mask[i] != 0.0f;
    // Defined by the shared counter-based generator (the CUDA back end uses it too).
    ASSERT_EQ(mask[i], internal::DropoutUniform(42, i) >= p ? scale : 0.0f);
  }
  EXPECT_NEAR(static_cast<double>(kept) / n, 1 - p, 0.01);

  std::vector<float> x2 = x0, mask2(n);
  device_->DropoutForward(x2.data(), mask2.data(), n, p, 42);
  EXPECT_EQ(mask2, mask);
  device_->DropoutForward(x2.data(), mask2.data(), n, p, 43);
  EXPECT_NE(mask2, mask);

  // Backward: dy *= mask.
  std::vector<float> dy = RandomVector(n, 30), dy_ref = dy;
  for (size_t i = 0; i < n; ++i) dy_ref[i] *= mask[i];
  device_->Multiply(dy.data(), mask.data(), n);
  EXPECT_EQ(dy, dy_ref);

  std::vector<float> z(10, 1.0f), zm(10);
  device_->DropoutForward(z.data(), zm.data(), 10, 0.0f, 1);
  EXPECT_EQ(z, std::vector<float>(10, 1.0f));
}

double ReferenceCeLoss(const std::vector<float>& logits, const std::vector<int32_t>& labels,
                       int batch, int classes) {
  double total = 0;
  for (int r = 0; r < batch; ++r) {
    double max = -1e300;
    for (int c = 0; c < classes; ++c) max = std::max<double>(max, logits[r * classes + c]);
    double sum = 0;
    for (int c = 0; c < classes; ++c) sum += std::exp(logits[r * classes + c] - max);
    total += std::log(sum) + max - logits[r * classes + labels[r]];
  }
  return total / batch;
}

TEST_F(CpuDeviceTest, SoftmaxCrossEntropyLossGradientAndAccuracy) {
  const int batch = 6, classes = 5;
  std::vector<float> logits = RandomVector(batch * classes, 31, -3.0f, 3.0f);
  const std::vector<int32_t> labels = {0, 4, 2, 2, 1, 3};
  std::vector<float> d(logits.size());
  int correct = -1;
  const float loss = device_->SoftmaxCrossEntropy(logits.data(), labels.data(), batch, classes,
                                                  d.data(), &correct);
  EXPECT_NEAR(loss, ReferenceCeLoss(logits, labels, batch, classes), 1e-5);

  int ref_correct = 0;
  for (int r = 0; r < batch; ++r) {
    const auto row = logits.begin() + r * classes;
    ref_correct += (std::max_element(row, row + classes) - row) == labels[r];
  }
  EXPECT_EQ(correct, ref_correct);

  // Gradient vs central finite differences of the mean loss.
  const double h = 1e-3;
  for (size_t i = 0; i < logits.size(); ++i) {
    std::vector<float> plus = logits, minus = logits;
    plus[i] += static_cast<float>(h);
    minus[i] -= static_cast<float>(h);
    const double numeric = (ReferenceCeLoss(plus, labels, batch, classes) -
                            ReferenceCeLoss(minus, labels, batch, classes)) /
                           (static_cast<double>(plus[i]) - minus[i]);
    ASSERT_NEAR(d[i], numeric, 1e-4) << i;
  }
  // Each gradient row sums to zero.
  for (int r = 0; r < batch; ++r) {
    double sum = 0;
    for (int c = 0; c < classes; ++c) sum += d[r * classes + c];
    EXPECT_NEAR(sum, 0.0, 1e-6);
  }
  // `correct` is optional.
  device_->SoftmaxCrossEntropy(logits.data(), labels.data(), batch, classes, d.data(), nullptr);
}

TEST_F(CpuDeviceTest, SoftmaxCrossEntropyIsStableForHugeLogits) {
  const std::vector<float> logits = {1000.0f, -1000.0f, 0.0f, 80.0f, 89.0f, 88.0f};
  const std::vector<int32_t> labels = {0, 2};
  std::vector<float> d(6);
  int correct = 0;
  const float loss =
      device_->SoftmaxCrossEntropy(logits.data(), labels.data(), 2, 3, d.data(), &correct);
  ASSERT_TRUE(std::isfinite(loss));
  // Row 0: loss ~0; row 1: log(e^-9 + 1 + e^-1) + 1.
  const double row1 = std::log(std::exp(-9.0) + 1 + std::exp(-1.0)) + 1;
  EXPECT_NEAR(loss, row1 / 2, 1e-5);
  EXPECT_EQ(correct, 1);
  for (float v : d) ASSERT_TRUE(std::isfinite(v));
  EXPECT_NEAR(d[0], 0.0, 1e-7);
}

TEST_F(CpuDeviceTest, ArgmaxRowsTakesFirstMaximum) {
  const std::vector<float> x = {1, 3, 3, 0, -1, -2, -3, -1, 7, 7, 7, 7};
  std::vector<int32_t> out(3);
  device_->ArgmaxRows(x.data(), 3, 4, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{1, 0, 0}));
}

TEST(NewDeviceTest, CudaWithoutGpuIsUnavailable) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a CUDA GPU is present; covered by device_cuda_test";
  DeviceOptions options;
  options.type = DeviceType::kCuda;
  auto device = NewDevice(options);
  ASSERT_FALSE(device.ok());
  EXPECT_EQ(device.status().code(), StatusCode::kUnavailable) << device.status();
  EXPECT_NE(device.status().message().find("no CUDA device"), std::string::npos) << device.status();
  EXPECT_EQ(device.status().message().find('\n'), std::string::npos) << "one line expected";
}

}  // namespace
}  // namespace kernels
}  // namespace relaxps
