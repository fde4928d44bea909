// Tests of the CUDA back end of kernels::Device: every op against the CPU
// back end on the same seeded random inputs.
//
// Tolerances: bit-exact where both sides run the same integer or shared code
// (fp16 conversion, dropout masks, im2col, max pool, relu, argmax); 1e-6
// relative for single-rounding element-wise ops (the GPU may fuse a multiply
// and an add); 1e-5 relative for the optimizers (sqrt and division); 1e-4
// relative to the row scale for GEMM and reductions, whose summation order
// differs.
//
// Without a CUDA build or a GPU every test is skipped with the reason, except
// NoGpuTest, which checks that asking for CUDA then fails cleanly.
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

namespace relaxps {
namespace kernels {
namespace {


// Why CUDA tests cannot run here, or "" when they can.
std::string CudaSkipReason() {
  if (!BuiltWithCuda()) return "built without the CUDA back end (RELAXPS_WITH_CUDA=OFF or no nvcc)";
  if (CudaDeviceCount() == 0) return "no CUDA GPU visible (CudaDeviceCount() == 0)";
  return "";
}

TEST(NoGpuTest, NewDeviceCudaIsUnavailableWithoutGpu) {
  if (CudaSkipReason().empty()) GTEST_SKIP() << "a CUDA GPU is present";
  EXPECT_EQ(CudaDeviceCount(), 0);
  DeviceOptions options;
  options.type = DeviceType::kCuda;
  auto device = NewDevice(options);
  ASSERT_FALSE(device.ok());
  EXPECT_EQ(device.status().code(), StatusCode::kUnavailable) << device.status();
  EXPECT_EQ(device.status().message().rfind("no CUDA device", 0), 0u) << device.status();
  EXPECT_EQ(device.status().message().find('\n'), std::string::npos);
}

TEST(GpuFactoryTest, BadOrdinalIsUnavailable) {
  const std::string reason = CudaSkipReason();
  if (!reason.empty()) GTEST_SKIP() << reason;
  DeviceOptions options;
  options.type = DeviceType::kCuda;
  options.cuda_device = CudaDeviceCount();
  auto device = NewDevice(options);
  ASSERT_FALSE(device.ok());
  EXPECT_EQ(device.status().code(), StatusCode::kUnavailable) << device.status();
}

class CudaVsCpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string reason = CudaSkipReason();
    if (!reason.empty()) GTEST_SKIP() << reason;
    auto cpu = NewDevice(DeviceOptions{});
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    cpu_ = std::move(cpu).value();
    DeviceOptions options;
    options.type = DeviceType::kCuda;
    auto gpu = NewDevice(options);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    gpu_ = std::move(gpu).value();
  }

  // Device copies of host vectors; freed at the end of the test.
  template <typename T>
  T* Upload(const std::vector<T>& host) {
    buffers_.emplace_back(gpu_.get(), std::max<size_t>(1, host.size() * sizeof(T)));
    T* p = reinterpret_cast<T*>(buffers_.back().data());
    gpu_->CopyToDevice(p, host.data(), host.size() * sizeof(T));
    return p;
  }
  template <typename T>
  std::vector<T> Download(const T* p, size_t n) {
    std::vector<T> host(n);
    gpu_->Synchronize();
    gpu_->CopyToHost(host.data(), p, n * sizeof(T));
    return host;
  }

  void TearDown() override {
    buffers_.clear();  // Before gpu_.
  }

  std::unique_ptr<Device> cpu_;
  std::unique_ptr<Device> gpu_;
  std::vector<DeviceBuffer<char>> buffers_;
};

void ExpectClose(const std::vector<float>& cpu, const std::vector<float>& gpu, double rel,
                 double abs_floor, const char* what) {
  ASSERT_EQ(cpu.size(), gpu.size()) << what;
  for (size_t i = 0; i < cpu.size(); ++i) {
    ASSERT_NEAR(gpu[i], cpu[i], rel * std::fabs(cpu[i]) + abs_floor) << what << "[" << i << "]";
  }
}

TEST_F(CudaVsCpuTest, NameAndMemory) {
  EXPECT_EQ(gpu_->Name(), "cuda:0");
  EXPECT_EQ(gpu_->type(), DeviceType::kCuda);
  const std::vector<float> x = RandomVector(1000, 1);
  float* d = Upload(x);
  float* e = Upload(std::vector<float>(1000, 0.0f));
  gpu_->CopyOnDevice(e, d, 1000 * sizeof(float));
  EXPECT_EQ(Download(e, 1000), x);
  gpu_->Fill(e, 999, -3.0f);
  const auto filled = Download(e, 1000);
  EXPECT_TRUE(std::all_of(filled.begin(), filled.end() - 1, [](float v) { return v == -3.0f; }));
  EXPECT_EQ(filled.back(), x.back());
  gpu_->Free(nullptr);
}

// Element-wise equality without printing millions of elements on failure.
void ExpectIdentical(const std::vector<float>& cpu, const std::vector<float>& gpu,
                     const char* what) {
  ASSERT_EQ(cpu.size(), gpu.size()) << what;
  const auto diff = std::mismatch(cpu.begin(), cpu.end(), gpu.begin());
  EXPECT_TRUE(diff.first == cpu.end())
      << what << ": first difference at " << (diff.first - cpu.begin()) << ": cpu "
      << *diff.first << ", gpu " << *diff.second;
}

TEST_F(CudaVsCpuTest, AllocHostIsUsableAndFreeableFromAnyThread) {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{4096}, size_t{64} << 20}) {
    void* p = gpu_->AllocHost(bytes);
    ASSERT_NE(p, nullptr) << bytes;
    std::memset(p, 0xab, bytes);
    gpu_->FreeHost(p);
  }
  gpu_->FreeHost(nullptr);
  // Page-locked memory takes part in the synchronous copies too.
  const std::vector<float> x = RandomVector(1000, 6);
  float* host = static_cast<float*>(gpu_->AllocHost(x.size() * sizeof(float)));
  ASSERT_NE(host, nullptr);
  std::copy(x.begin(), x.end(), host);
  float* d = Upload(std::vector<float>(x.size(), 0.0f));
  gpu_->CopyToDevice(d, host, x.size() * sizeof(float));
  std::fill(host, host + x.size(), 0.0f);
  gpu_->CopyToHost(host, d, x.size() * sizeof(float));
  EXPECT_EQ(std::vector<float>(host, host + x.size()), x);
  // A buffer handed to the transport is released by its I/O thread.
  std::thread([&] { gpu_->FreeHost(host); }).join();
}

// 64 MB per transfer and per Scale: long enough that a missing or misplaced
// wait would let a copy read or overwrite data the other stream has not
// finished with.
TEST_F(CudaVsCpuTest, AsyncCopiesOrderedByEventsRoundTrip) {
  const std::vector<float> x = RandomVector((size_t{1} << 24) + 5, 7);
  ExpectIdentical(AsyncScaleRoundTrip(cpu_.get(), x, 3), AsyncScaleRoundTrip(gpu_.get(), x, 3),
                  "x * 8");

  const std::unique_ptr<DeviceEvent> never = gpu_->NewEvent();
  EXPECT_EQ(never->device(), gpu_.get());
  gpu_->HostWaitEvent(never.get());  // Never recorded: complete.
  gpu_->WaitEvent(Stream::kCopy, never.get());
  gpu_->CopyToDeviceAsync(nullptr, nullptr, 0);
  gpu_->CopyToHostAsync(nullptr, nullptr, 0);
  gpu_->Synchronize();
}

// The PsParams pattern: while the compute stream works on buffer a, the copy
// stream uploads into buffer b once the computation that last read b is done,
// and later computation waits for the upload.
TEST_F(CudaVsCpuTest, UploadIntoTheOtherBufferWhileComputing) {
  const size_t n = (size_t{1} << 22) + 1;
  const std::vector<float> a0 = RandomVector(n, 8), b0 = RandomVector(n, 9);
  auto run = [&](Device* device) {
    const size_t bytes = n * sizeof(float);
    DeviceBuffer<float> a(device, n), b(device, n);
    float* host = static_cast<float*>(device->AllocHost(bytes));
    EXPECT_NE(host, nullptr);
    if (host == nullptr) return std::vector<float>();
    std::copy(a0.begin(), a0.end(), host);
    device->CopyToDevice(a.data(), host, bytes);
    device->Fill(b.data(), n, 1.0f);
    device->Axpy(n, 1.0f, b.data(), a.data());  // The last read of b: a = a0 + 1.
    const std::unique_ptr<DeviceEvent> released = device->NewEvent();
    const std::unique_ptr<DeviceEvent> uploaded = device->NewEvent();
    device->RecordEvent(Stream::kCompute, released.get());
    for (int i = 0; i < 10; ++i) {  // Keeps the compute stream busy; exact.
      device->Scale(n, 0.5f, a.data());
      device->Scale(n, 2.0f, a.data());
    }
    std::copy(b0.begin(), b0.end(), host);
    device->WaitEvent(Stream::kCopy, released.get());
    device->CopyToDeviceAsync(b.data(), host, bytes);
    device->RecordEvent(Stream::kCopy, uploaded.get());
    device->WaitEvent(Stream::kCompute, uploaded.get());
    device->Axpy(n, 2.0f, b.data(), a.data());  // a = a0 + 1 + 2 b0
    std::vector<float> out(n);
    device->CopyToHost(out.data(), a.data(), bytes);
    device->HostWaitEvent(uploaded.get());  // Before freeing the upload's source.
    device->FreeHost(host);
    return out;
  };
  ExpectIdentical(run(cpu_.get()), run(gpu_.get()), "a0 + 1 + 2 b0");
}

TEST_F(CudaVsCpuTest, OptimizerUpdates) {
  const size_t n = (1 << 20) + 3;
  const auto w0 = RandomVector(n, 2), g = RandomVector(n, 3), s0 = RandomVector(n, 4, 0.0f, 0.1f),
             s1 = RandomVector(n, 5, 0.0f, 0.01f);
  constexpr double kRel = 1e-5, kAbs = 1e-6;
  {
    auto w = w0;
    float* dw = Upload(w0);
    cpu_->SgdUpdate(w.data(), g.data(), n, 0.1f);
    gpu_->SgdUpdate(dw, Upload(g), n, 0.1f);
    ExpectClose(w, Download(dw, n), kRel, kAbs, "sgd w");
  }
  {
    auto w = w0, v = s0;
    float *dw = Upload(w0), *dv = Upload(s0);
    cpu_->MomentumUpdate(w.data(), v.data(), g.data(), n, 0.1f, 0.9f);
    gpu_->MomentumUpdate(dw, dv, Upload(g), n, 0.1f, 0.9f);
    ExpectClose(v, Download(dv, n), kRel, kAbs, "momentum v");
    ExpectClose(w, Download(dw, n), kRel, kAbs, "momentum w");
  }
  for (int64_t step : {1, 2, 1000}) {
    SCOPED_TRACE(step);
    AdamParams p;
    p.lr = 0.01f;
    p.step = step;
    auto w = w0, m = s0, v = s1;
    float *dw = Upload(w0), *dm = Upload(s0), *dv = Upload(s1);
    cpu_->AdamUpdate(w.data(), m.data(), v.data(), g.data(), n, p);
    gpu_->AdamUpdate(dw, dm, dv, Upload(g), n, p);
    ExpectClose(m, Download(dm, n), kRel, kAbs, "adam m");
    ExpectClose(v, Download(dv, n), kRel, kAbs, "adam v");
    ExpectClose(w, Download(dw, n), kRel, kAbs, "adam w");
  }
  {
    auto w = w0, h = s0;
    float *dw = Upload(w0), *dh = Upload(s0);
    cpu_->AdagradUpdate(w.data(), h.data(), g.data(), n, 0.1f, 1e-8f);
    gpu_->AdagradUpdate(dw, dh, Upload(g), n, 0.1f, 1e-8f);
    ExpectClose(h, Download(dh, n), kRel, kAbs, "adagrad h");
    ExpectClose(w, Download(dw, n), kRel, kAbs, "adagrad w");
  }
}

TEST_F(CudaVsCpuTest, VectorOps) {
  const size_t n = 100003;
  const auto x = RandomVector(n, 6), y0 = RandomVector(n, 7);
  auto y = y0;
  float* dy = Upload(y0);
  cpu_->Axpy(n, 0.37f, x.data(), y.data());
  gpu_->Axpy(n, 0.37f, Upload(x), dy);
  ExpectClose(y, Download(dy, n), 1e-6, 1e-7, "axpy");
  cpu_->Scale(n, -1.5f, y.data());
  gpu_->Scale(n, -1.5f, dy);
  ExpectClose(y, Download(dy, n), 1e-6, 1e-7, "scale");

  float* dx = Upload(x);
  EXPECT_TRUE(gpu_->AllFinite(dx, n));
  EXPECT_TRUE(gpu_->AllFinite(dx, 0));
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    for (size_t pos : {size_t{0}, n / 2, n - 1}) {
      auto z = x;
      z[pos] = bad;
      EXPECT_EQ(gpu_->AllFinite(Upload(z), n), cpu_->AllFinite(z.data(), n));
      EXPECT_FALSE(gpu_->AllFinite(Upload(z), n)) << bad << " at " << pos;
    }
  }
}

TEST_F(CudaVsCpuTest, HalfConversionIsBitIdentical) {
  std::vector<uint16_t> all(65536);
  for (uint32_t h = 0; h < 65536; ++h) all[h] = static_cast<uint16_t>(h);
  std::vector<float> cpu_f(all.size());
  cpu_->HalfToFloat(all.data(), cpu_f.data(), all.size());
  float* df = Upload(std::vector<float>(all.size()));
  gpu_->HalfToFloat(Upload(all), df, all.size());
  const auto gpu_f = Download(df, all.size());
  EXPECT_EQ(std::memcmp(cpu_f.data(), gpu_f.data(), all.size() * sizeof(float)), 0);

  // Random bit patterns (incl. NaN, inf, subnormals) and half-range values.
  std::mt19937 rng(8);
  std::vector<float> in(1 << 20);
  for (size_t i = 0; i < in.size(); ++i) {
    uint32_t bits = static_cast<uint32_t>(rng());
    if (i % 2) bits = (bits & 0x80ffffffu) | ((100u + bits % 50u) << 23);  // |x| in [2^-27, 2^23).
    std::memcpy(&in[i], &bits, sizeof(bits));
  }
  std::vector<uint16_t> cpu_h(in.size());
  cpu_->FloatToHalf(in.data(), cpu_h.data(), in.size());
  uint16_t* dh = Upload(std::vector<uint16_t>(in.size()));
  gpu_->FloatToHalf(Upload(in), dh, in.size());
  const auto gpu_h = Download(dh, in.size());
  for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(gpu_h[i], cpu_h[i]) << "input " << in[i];
}

TEST_F(CudaVsCpuTest, GemmAllTransposeCombinations) {
  const int m = 67, n = 45, k = 129;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      SCOPED_TRACE(testing::Message() << "trans_a=" << ta << " trans_b=" << tb);
      const int a_rows = ta ? k : m, a_cols = ta ? m : k;
      const int b_rows = tb ? n : k, b_cols = tb ? k : n;
      const int lda = a_cols + 2, ldb = b_cols + 1, ldc = n + 5;
      const auto a = RandomVector(a_rows * lda, 9), b = RandomVector(b_rows * ldb, 10);
      auto c = RandomVector(m * ldc, 11);
      float* dc = Upload(c);
      cpu_->Gemm(ta, tb, m, n, k, 1.3f, a.data(), lda, b.data(), ldb, 0.5f, c.data(), ldc);
      gpu_->Gemm(ta, tb, m, n, k, 1.3f, Upload(a), lda, Upload(b), ldb, 0.5f, dc, ldc);
      // Entries are sums of k products of magnitude <= 1: scale ~ sqrt(k).
      ExpectClose(c, Download(dc, c.size()), 1e-4, 1e-4 * std::sqrt(k), "gemm");
    }
  }
}

TEST_F(CudaVsCpuTest, BiasAndReluOps) {
  const int rows = 33, cols = 300;
  const auto y0 = RandomVector(rows * cols, 12), bias = RandomVector(cols, 13);
  auto y = y0;
  float* dy = Upload(y0);
  float* dbias = Upload(bias);
  cpu_->AddBias(y.data(), bias.data(), rows, cols);
  gpu_->AddBias(dy, dbias, rows, cols);
  ExpectClose(y, Download(dy, y.size()), 1e-6, 1e-7, "add_bias");

  std::vector<float> db(cols);
  float* ddb = Upload(std::vector<float>(cols, 5.0f));
  cpu_->BiasGrad(y.data(), db.data(), rows, cols);
  gpu_->BiasGrad(dy, ddb, rows, cols);
  ExpectClose(db, Download(ddb, cols), 1e-4, 1e-5, "bias_grad");

  const int channels = 16, spatial = 28 * 28;
  const auto img0 = RandomVector(channels * spatial, 14), cb = RandomVector(channels, 15);
  auto img = img0;
  float* dimg = Upload(img0);
  cpu_->AddChannelBias(img.data(), cb.data(), channels, spatial);
  gpu_->AddChannelBias(dimg, Upload(cb), channels, spatial);
  ExpectClose(img, Download(dimg, img.size()), 1e-6, 1e-7, "add_channel_bias");
  auto cdb = RandomVector(channels, 16);
  float* dcdb = Upload(cdb);
  cpu_->ChannelBiasGradAccumulate(img.data(), cdb.data(), channels, spatial);
  gpu_->ChannelBiasGradAccumulate(dimg, dcdb, channels, spatial);
  ExpectClose(cdb, Download(dcdb, channels), 1e-4, 1e-4, "channel_bias_grad");

  cpu_->ReluForward(img.data(), img.size());
  gpu_->ReluForward(dimg, img.size());
  const auto relu_gpu = Download(dimg, img.size());
  ExpectClose(img, relu_gpu, 0, 0, "relu_forward");  // Exact.
  auto dout = RandomVector(img.size(), 17);
  float* ddout = Upload(dout);
  cpu_->ReluBackward(img.data(), dout.data(), dout.size());
  gpu_->ReluBackward(dimg, ddout, dout.size());
  ExpectClose(dout, Download(ddout, dout.size()), 0, 0, "relu_backward");
}

TEST_F(CudaVsCpuTest, Im2ColCol2Im) {
  struct Shape {
    int c, h, w, k, pad;
  };
  for (const Shape s : {Shape{1, 28, 28, 5, 2}, Shape{16, 14, 14, 5, 2}, Shape{3, 9, 7, 3, 0},
                        Shape{2, 3, 3, 5, 2}}) {
    SCOPED_TRACE(testing::Message() << s.c << "x" << s.h << "x" << s.w << " k=" << s.k);
    const int oh = s.h + 2 * s.pad - s.k + 1, ow = s.w + 2 * s.pad - s.k + 1;
    const size_t ncols = static_cast<size_t>(s.c) * s.k * s.k * oh * ow;
    const auto img = RandomVector(s.c * s.h * s.w, 18);
    std::vector<float> cols(ncols);
    float* dcols = Upload(std::vector<float>(ncols, 7.0f));
    cpu_->Im2Col(img.data(), s.c, s.h, s.w, s.k, s.pad, cols.data());
    gpu_->Im2Col(Upload(img), s.c, s.h, s.w, s.k, s.pad, dcols);
    ExpectClose(cols, Download(dcols, ncols), 0, 0, "im2col");  // Pure copies: exact.

    const auto y = RandomVector(ncols, 19);
    auto back = RandomVector(img.size(), 20);  // Col2Im accumulates into it.
    float* dback = Upload(back);
    cpu_->Col2Im(y.data(), s.c, s.h, s.w, s.k, s.pad, back.data());
    gpu_->Col2Im(Upload(y), s.c, s.h, s.w, s.k, s.pad, dback);
    ExpectClose(back, Download(dback, back.size()), 1e-5, 5e-5, "col2im");
  }
}

TEST_F(CudaVsCpuTest, MaxPool) {
  const int planes = 64 * 8, h = 14, w = 15, pool = 2;
  const int oh = h / pool, ow = w / pool;
  auto x = RandomVector(planes * h * w, 21);
  for (size_t i = 0; i < x.size(); i += 97) x[i + 1] = x[i];  // Some ties.
  const size_t n_out = static_cast<size_t>(planes) * oh * ow;
  std::vector<float> y(n_out);
  std::vector<int32_t> arg(n_out);
  float* dx = Upload(x);
  float* dy = Upload(std::vector<float>(n_out));
  int32_t* darg = Upload(std::vector<int32_t>(n_out));
  cpu_->MaxPoolForward(x.data(), planes, h, w, pool, y.data(), arg.data());
  gpu_->MaxPoolForward(dx, planes, h, w, pool, dy, darg);
  EXPECT_EQ(Download(dy, n_out), y);
  EXPECT_EQ(Download(darg, n_out), arg);

  const auto grad = RandomVector(n_out, 22);
  std::vector<float> dxin(x.size());
  float* ddxin = Upload(RandomVector(x.size(), 23));  // Must be overwritten.
  cpu_->MaxPoolBackward(grad.data(), arg.data(), n_out, dxin.data(), dxin.size());
  gpu_->MaxPoolBackward(Upload(grad), darg, n_out, ddxin, dxin.size());
  EXPECT_EQ(Download(ddxin, dxin.size()), dxin);  // One write per input: exact.
}

TEST_F(CudaVsCpuTest, DropoutMasksAreIdentical) {
  const size_t n = (1 << 20) + 11;
  for (float p : {0.0f, 0.25f, 0.5f, 0.9f}) {
    SCOPED_TRACE(p);
    const auto x0 = RandomVector(n, 24);
    auto x = x0;
    std::vector<float> mask(n);
    float* dx = Upload(x0);
    float* dmask = Upload(std::vector<float>(n));
    cpu_->DropoutForward(x.data(), mask.data(), n, p, 1234567);
    gpu_->DropoutForward(dx, dmask, n, p, 1234567);
    EXPECT_EQ(Download(dmask, n), mask);
    EXPECT_EQ(Download(dx, n), x);

    auto d = RandomVector(n, 25);
    float* dd = Upload(d);
    cpu_->Multiply(d.data(), mask.data(), n);
    gpu_->Multiply(dd, dmask, n);
    EXPECT_EQ(Download(dd, n), d);
  }
}

TEST_F(CudaVsCpuTest, SoftmaxCrossEntropyAndArgmax) {
  for (int classes : {10, 100, 1000}) {
    SCOPED_TRACE(classes);
    const int batch = 129;
    auto logits = RandomVector(batch * classes, 26, -8.0f, 8.0f);
    logits[3] = 1000.0f;  // Stability.
    logits[classes + 1] = -1000.0f;
    std::vector<int32_t> labels(batch);
    std::mt19937 rng(27);
    for (auto& l : labels) l = static_cast<int32_t>(rng() % classes);
    labels[0] = 3;
    std::vector<float> d(logits.size());
    int cpu_correct = -1, gpu_correct = -2;
    const float cpu_loss = cpu_->SoftmaxCrossEntropy(logits.data(), labels.data(), batch, classes,
                                                     d.data(), &cpu_correct);
    float* dlogits = Upload(logits);
    float* dd = Upload(std::vector<float>(d.size()));
    const float gpu_loss =
        gpu_->SoftmaxCrossEntropy(dlogits, Upload(labels), batch, classes, dd, &gpu_correct);
    EXPECT_NEAR(gpu_loss, cpu_loss, 1e-5 * std::fabs(cpu_loss) + 1e-6);
    EXPECT_EQ(gpu_correct, cpu_correct);
    ExpectClose(d, Download(dd, d.size()), 1e-4, 1e-7, "dlogits");

    std::vector<int32_t> cpu_arg(batch), gpu_arg(batch);
    cpu_->ArgmaxRows(logits.data(), batch, classes, cpu_arg.data());
    gpu_->ArgmaxRows(dlogits, batch, classes, gpu_arg.data());
    EXPECT_EQ(gpu_arg, cpu_arg);
  }
}

}  // namespace
}  // namespace kernels
}  // namespace relaxps
