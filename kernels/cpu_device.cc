// CPU back end of kernels::Device.
//
// Element-wise work is written as simple loops over __restrict pointers so
// that the compiler vectorizes them (this file is built with -O3
// -fno-math-errno; see kernels/CMakeLists.txt). Each optimizer update is one
// fused pass over its arrays. GEMM goes to OpenBLAS. fp16 conversion is the
// host codec's (common/payload_codec.h: F16C when the CPU has it, an exact
// bit-twiddling fallback otherwise; both round to nearest even).
#include "kernels/internal/cpu_device.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "common/payload_codec.h"  // Host fp16 conversion.
#include "common/vector_clones.h"
#include "kernels/internal/scalar_math.h"


namespace relaxps {
namespace kernels {
namespace {

// ---- Fused loops ----------------------------------------------------------
// Each has an AVX2 copy (common/vector_clones.h): with SSE2 only, sqrt and
// division make Adam compute-bound on some CPUs.
//
// Each update rule is one body, instantiated twice: without a copy (Apply)
// and with one (ApplyAndCopy: the updated w also stored to w_copy in the same
// iteration, so the reply snapshot costs one more store per vector instead of
// a second pass over w). Both instantiations run the same floating-point
// operations in the same order, so their w and state are bit-identical.

template <bool kCopy>
inline __attribute__((always_inline)) void SgdBody(float* __restrict w, const float* __restrict g,
                                                   size_t n, float lr, float* __restrict w_copy) {
  for (size_t i = 0; i < n; ++i) {
    const float wi = w[i] - lr * g[i];
    w[i] = wi;
    if (kCopy) w_copy[i] = wi;
  }
}

template <bool kCopy>
inline __attribute__((always_inline)) void MomentumBody(float* __restrict w, float* __restrict v,
                                                        const float* __restrict g, size_t n,
                                                        float lr, float mu,
                                                        float* __restrict w_copy) {
  for (size_t i = 0; i < n; ++i) {
    const float vi = mu * v[i] + g[i];
    v[i] = vi;
    const float wi = w[i] - lr * vi;
    w[i] = wi;
    if (kCopy) w_copy[i] = wi;
  }
}

// Adam with the bias corrections folded into step_size = lr / (1 - b1^t) and
// inv_sqrt_bc2 = 1 / sqrt(1 - b2^t) (AdamScalars):
//   w -= step_size * m / (sqrt(v) * inv_sqrt_bc2 + eps)
// which equals lr * m_hat / (sqrt(v_hat) + eps).
struct AdamScalars {
  float b1, b2, step_size, inv_sqrt_bc2, eps;
};

AdamScalars AdamScalarsOf(const AdamParams& p) {
  CHECK_GE(p.step, 1) << "Adam step is 1-based";
  const double bc1 = 1.0 - std::pow(static_cast<double>(p.beta1), static_cast<double>(p.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(p.beta2), static_cast<double>(p.step));
  return {p.beta1, p.beta2, static_cast<float>(p.lr / bc1),
          static_cast<float>(1.0 / std::sqrt(bc2)), p.eps};
}

template <bool kCopy>
inline __attribute__((always_inline)) void AdamBody(float* __restrict w, float* __restrict m,
                                                    float* __restrict v,
                                                    const float* __restrict g, size_t n,
                                                    AdamScalars a, float* __restrict w_copy) {
  const float c1 = 1.0f - a.b1;
  const float c2 = 1.0f - a.b2;
  for (size_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float mi = a.b1 * m[i] + c1 * gi;
    const float vi = a.b2 * v[i] + c2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float wi = w[i] - a.step_size * mi / (std::sqrt(vi) * a.inv_sqrt_bc2 + a.eps);
    w[i] = wi;
    if (kCopy) w_copy[i] = wi;
  }
}

template <bool kCopy>
inline __attribute__((always_inline)) void AdagradBody(float* __restrict w, float* __restrict h,
                                                       const float* __restrict g, size_t n,
                                                       float lr, float eps,
                                                       float* __restrict w_copy) {
  for (size_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float hi = h[i] + gi * gi;
    h[i] = hi;
    const float wi = w[i] - lr * gi / (std::sqrt(hi) + eps);
    w[i] = wi;
    if (kCopy) w_copy[i] = wi;
  }
}

// The clones: restrict on their own parameters (see common/vector_clones.h).
// With a non-null w_copy the updated w is stored there too.
RELAXPS_VECTOR_CLONES
void SgdLoop(float* __restrict w, const float* __restrict g, size_t n, float lr,
             float* __restrict w_copy) {
  if (w_copy != nullptr) return SgdBody<true>(w, g, n, lr, w_copy);
  SgdBody<false>(w, g, n, lr, nullptr);
}

RELAXPS_VECTOR_CLONES
void MomentumLoop(float* __restrict w, float* __restrict v, const float* __restrict g, size_t n,
                  float lr, float mu, float* __restrict w_copy) {
  if (w_copy != nullptr) return MomentumBody<true>(w, v, g, n, lr, mu, w_copy);
  MomentumBody<false>(w, v, g, n, lr, mu, nullptr);
}

RELAXPS_VECTOR_CLONES
void AdamLoop(float* __restrict w, float* __restrict m, float* __restrict v,
              const float* __restrict g, size_t n, AdamScalars a, float* __restrict w_copy) {
  if (w_copy != nullptr) return AdamBody<true>(w, m, v, g, n, a, w_copy);
  AdamBody<false>(w, m, v, g, n, a, nullptr);
}

RELAXPS_VECTOR_CLONES
void AdagradLoop(float* __restrict w, float* __restrict h, const float* __restrict g, size_t n,
                 float lr, float eps, float* __restrict w_copy) {
  if (w_copy != nullptr) return AdagradBody<true>(w, h, g, n, lr, eps, w_copy);
  AdagradBody<false>(w, h, g, n, lr, eps, nullptr);
}

RELAXPS_VECTOR_CLONES
void AxpyLoop(size_t n, float a, const float* __restrict x, float* __restrict y) {
  for (size_t i = 0; i < n; ++i) y[i] += a * x[i];
}

RELAXPS_VECTOR_CLONES
void ScaleLoop(size_t n, float a, float* __restrict x) {
  for (size_t i = 0; i < n; ++i) x[i] *= a;
}

void MultiplyLoop(float* __restrict x, const float* __restrict mask, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] *= mask[i];
}

// ---- OpenBLAS threads --------------------------------------------------------

void ConfigureBlasThreads(int threads) {
  static std::once_flag once;
  static int configured = 0;
  bool first = false;
  std::call_once(once, [&] {
    first = true;
    configured = threads;
    if (threads > 0) openblas_set_num_threads(threads);
  });
  if (!first && threads != configured) {
    LOG(INFO) << "kernels: OpenBLAS threads already set to " << configured
              << "; ignoring cpu_threads=" << threads;
  }
}

// ---- The device ----------------------------------------------------------------

// 64-byte aligned host memory (never a zero-size request, which
// aligned_alloc need not support); released with std::free.
void* AlignedAlloc(size_t bytes) {
  // aligned_alloc requires a multiple of the alignment.
  const size_t rounded = std::max<size_t>(64, (bytes + 63) / 64 * 64);
  return std::aligned_alloc(64, rounded);
}

// Work completes inside each call, so an event carries no state.
class CpuEvent final : public DeviceEvent {
 public:
  explicit CpuEvent(const Device* device) : DeviceEvent(device) {}
};

class CpuDevice final : public Device {
 public:
  explicit CpuDevice(const DeviceOptions& options) { ConfigureBlasThreads(options.cpu_threads); }

  std::string Name() const override { return "cpu"; }
  DeviceType type() const override { return DeviceType::kCpu; }

  void* Alloc(size_t bytes) override { return AlignedAlloc(bytes); }
  void Free(void* p) override { std::free(p); }
  // Host and device memory are the same; nothing to pin.
  void* AllocHost(size_t bytes) override { return AlignedAlloc(bytes); }
  void FreeHost(void* p) override { std::free(p); }
  void CopyToDeviceAsync(void* dst, const void* host_src, size_t bytes) override {
    CopyToDevice(dst, host_src, bytes);
  }
  void CopyToHostAsync(void* host_dst, const void* src, size_t bytes) override {
    CopyToHost(host_dst, src, bytes);
  }
  std::unique_ptr<DeviceEvent> NewEvent() override { return std::make_unique<CpuEvent>(this); }
  void RecordEvent(Stream stream, DeviceEvent* event) override { CheckOwn(event); }
  void WaitEvent(Stream stream, const DeviceEvent* event) override { CheckOwn(event); }
  void HostWaitEvent(const DeviceEvent* event) override { CheckOwn(event); }
  void CopyToDevice(void* dst, const void* host_src, size_t bytes) override {
    if (bytes > 0) std::memcpy(dst, host_src, bytes);
  }
  void CopyToHost(void* host_dst, const void* src, size_t bytes) override {
    if (bytes > 0) std::memcpy(host_dst, src, bytes);
  }
  void CopyOnDevice(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0 && dst != src) std::memmove(dst, src, bytes);
  }
  void Fill(float* x, size_t n, float value) override { std::fill(x, x + n, value); }
  void Synchronize() override {}

  void SgdUpdate(float* w, const float* g, size_t n, float lr) override {
    SgdLoop(w, g, n, lr, nullptr);
  }
  void MomentumUpdate(float* w, float* v, const float* g, size_t n, float lr, float mu) override {
    MomentumLoop(w, v, g, n, lr, mu, nullptr);
  }
  void AdamUpdate(float* w, float* m, float* v, const float* g, size_t n,
                  const AdamParams& p) override {
    AdamLoop(w, m, v, g, n, AdamScalarsOf(p), nullptr);
  }
  void AdagradUpdate(float* w, float* h, const float* g, size_t n, float lr, float eps) override {
    AdagradLoop(w, h, g, n, lr, eps, nullptr);
  }

  void Axpy(size_t n, float a, const float* x, float* y) override { AxpyLoop(n, a, x, y); }
  void Scale(size_t n, float a, float* x) override { ScaleLoop(n, a, x); }
  bool AllFinite(const float* x, size_t n) override { return relaxps::AllFinite(x, n); }
  void FloatToHalf(const float* in, uint16_t* out, size_t n) override {
    relaxps::FloatToHalf(in, out, n);
  }
  void HalfToFloat(const uint16_t* in, float* out, size_t n) override {
    relaxps::HalfToFloat(in, out, n);
  }

  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
            const float* b, int ldb, float beta, float* c, int ldc) override {
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {  // C = beta * C; OpenBLAS rejects some ld values for k == 0.
      for (int r = 0; r < m; ++r) {
        float* row = c + static_cast<size_t>(r) * ldc;
        if (beta == 0.0f) {
          std::fill(row, row + n, 0.0f);
        } else {
          ScaleLoop(n, beta, row);
        }
      }
      return;
    }
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }

  void AddBias(float* y, const float* bias, int rows, int cols) override {
    for (int r = 0; r < rows; ++r) {
      AxpyLoop(cols, 1.0f, bias, y + static_cast<size_t>(r) * cols);
    }
  }
  void BiasGrad(const float* dy, float* db, int rows, int cols) override {
    std::fill(db, db + cols, 0.0f);
    for (int r = 0; r < rows; ++r) {
      AxpyLoop(cols, 1.0f, dy + static_cast<size_t>(r) * cols, db);
    }
  }
  void AddChannelBias(float* y, const float* bias, int channels, int spatial) override {
    for (int c = 0; c < channels; ++c) {
      float* __restrict row = y + static_cast<size_t>(c) * spatial;
      const float b = bias[c];
      for (int s = 0; s < spatial; ++s) row[s] += b;
    }
  }
  void ChannelBiasGradAccumulate(const float* dy, float* db, int channels, int spatial) override {
    for (int c = 0; c < channels; ++c) {
      const float* row = dy + static_cast<size_t>(c) * spatial;
      double sum = 0.0;
      for (int s = 0; s < spatial; ++s) sum += row[s];
      db[c] += static_cast<float>(sum);
    }
  }
  void ReluForward(float* x, size_t n) override {
    float* __restrict p = x;
    for (size_t i = 0; i < n; ++i) p[i] = p[i] > 0.0f ? p[i] : 0.0f;
  }
  void ReluBackward(const float* y, float* dy, size_t n) override {
    const float* __restrict yr = y;
    float* __restrict d = dy;
    for (size_t i = 0; i < n; ++i) d[i] = yr[i] > 0.0f ? d[i] : 0.0f;
  }

  void Im2Col(const float* image, int channels, int height, int width, int k, int pad,
              float* columns) override;
  void Col2Im(const float* columns, int channels, int height, int width, int k, int pad,
              float* image) override;
  void MaxPoolForward(const float* x, int planes, int height, int width, int pool, float* y,
                      int32_t* argmax) override;
  void MaxPoolBackward(const float* dy, const int32_t* argmax, size_t n_out, float* dx,
                       size_t n_in) override {
    std::fill(dx, dx + n_in, 0.0f);
    for (size_t i = 0; i < n_out; ++i) {
      DCHECK_GE(argmax[i], 0);
      DCHECK_LT(static_cast<size_t>(argmax[i]), n_in);
      dx[argmax[i]] += dy[i];
    }
  }
  void DropoutForward(float* x, float* mask, size_t n, float p, uint64_t seed) override {
    const float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
    for (size_t i = 0; i < n; ++i) {
      const float m = internal::DropoutMask(seed, i, p, scale);
      mask[i] = m;
      x[i] *= m;
    }
  }
  void Multiply(float* x, const float* mask, size_t n) override { MultiplyLoop(x, mask, n); }
  float SoftmaxCrossEntropy(const float* logits, const int32_t* labels, int batch, int classes,
                            float* dlogits, int* correct) override;
  void ArgmaxRows(const float* x, int rows, int cols, int32_t* host_out) override {
    for (int r = 0; r < rows; ++r) {
      const float* row = x + static_cast<size_t>(r) * cols;
      host_out[r] = static_cast<int32_t>(std::max_element(row, row + cols) - row);
    }
  }

 private:
  // An event of another device is a programming error.
  void CheckOwn(const DeviceEvent* event) const {
    CHECK(event != nullptr && event->device() == this) << "event of another device";
  }
};

// Columns row (c, ky, kx) holds, for each output pixel (oy, ox), the input
// pixel (oy + ky - pad, ox + kx - pad) of channel c, or 0 in the padding.
void CpuDevice::Im2Col(const float* image, int channels, int height, int width, int k, int pad,
                       float* columns) {
  const int out_h = height + 2 * pad - k + 1;
  const int out_w = width + 2 * pad - k + 1;
  if (out_h <= 0 || out_w <= 0) return;
  float* dst = columns;
  for (int c = 0; c < channels; ++c) {
    const float* plane = image + static_cast<size_t>(c) * height * width;
    for (int ky = 0; ky < k; ++ky) {
      for (int kx = 0; kx < k; ++kx) {
        // Output columns whose input x lies inside the image.
        const int ox_lo = std::max(0, pad - kx);
        const int ox_hi = std::min(out_w, width + pad - kx);
        for (int oy = 0; oy < out_h; ++oy, dst += out_w) {
          const int iy = oy + ky - pad;
          if (iy < 0 || iy >= height || ox_lo >= ox_hi) {
            std::fill(dst, dst + out_w, 0.0f);
            continue;
          }
          const float* src = plane + static_cast<size_t>(iy) * width + (kx - pad);
          std::fill(dst, dst + ox_lo, 0.0f);
          std::memcpy(dst + ox_lo, src + ox_lo, sizeof(float) * (ox_hi - ox_lo));
          std::fill(dst + ox_hi, dst + out_w, 0.0f);
        }
      }
    }
  }
}

void CpuDevice::Col2Im(const float* columns, int channels, int height, int width, int k, int pad,
                       float* image) {
  const int out_h = height + 2 * pad - k + 1;
  const int out_w = width + 2 * pad - k + 1;
  if (out_h <= 0 || out_w <= 0) return;
  const float* src = columns;
  for (int c = 0; c < channels; ++c) {
    float* plane = image + static_cast<size_t>(c) * height * width;
    for (int ky = 0; ky < k; ++ky) {
      for (int kx = 0; kx < k; ++kx) {
        const int ox_lo = std::max(0, pad - kx);
        const int ox_hi = std::min(out_w, width + pad - kx);
        for (int oy = 0; oy < out_h; ++oy, src += out_w) {
          const int iy = oy + ky - pad;
          if (iy < 0 || iy >= height || ox_lo >= ox_hi) continue;
          float* dst = plane + static_cast<size_t>(iy) * width + (kx - pad);
          AxpyLoop(ox_hi - ox_lo, 1.0f, src + ox_lo, dst + ox_lo);
        }
      }
    }
  }
}

void CpuDevice::MaxPoolForward(const float* x, int planes, int height, int width, int pool,
                               float* y, int32_t* argmax) {
  CHECK_GT(pool, 0);
  const int out_h = height / pool;
  const int out_w = width / pool;
  for (int p = 0; p < planes; ++p) {
    const size_t plane_base = static_cast<size_t>(p) * height * width;
    for (int oy = 0; oy < out_h; ++oy) {
      for (int ox = 0; ox < out_w; ++ox) {
        // First maximum in row-major window order (the CUDA kernel matches).
        size_t best_idx = plane_base + static_cast<size_t>(oy * pool) * width + ox * pool;
        float best = x[best_idx];
        for (int dy = 0; dy < pool; ++dy) {
          const size_t row = plane_base + static_cast<size_t>(oy * pool + dy) * width + ox * pool;
          for (int dx = 0; dx < pool; ++dx) {
            if (x[row + dx] > best) {
              best = x[row + dx];
              best_idx = row + dx;
            }
          }
        }
        const size_t out = (static_cast<size_t>(p) * out_h + oy) * out_w + ox;
        y[out] = best;
        argmax[out] = static_cast<int32_t>(best_idx);
      }
    }
  }
}

float CpuDevice::SoftmaxCrossEntropy(const float* logits, const int32_t* labels, int batch,
                                     int classes, float* dlogits, int* correct) {
  CHECK_GT(classes, 0);
  if (batch <= 0) {
    if (correct != nullptr) *correct = 0;
    return 0.0f;
  }
  const float inv_batch = 1.0f / static_cast<float>(batch);
  double total_loss = 0.0;
  int num_correct = 0;
  for (int r = 0; r < batch; ++r) {
    const float* x = logits + static_cast<size_t>(r) * classes;
    float* d = dlogits + static_cast<size_t>(r) * classes;
    const int label = labels[r];
    CHECK(label >= 0 && label < classes) << "label " << label << " out of [0, " << classes << ")";
    int arg = 0;
    float max = x[0];
    for (int c = 1; c < classes; ++c) {
      if (x[c] > max) {
        max = x[c];
        arg = c;
      }
    }
    float sum = 0.0f;
    for (int c = 0; c < classes; ++c) {
      d[c] = std::exp(x[c] - max);
      sum += d[c];
    }
    const float inv_sum = 1.0f / sum;
    for (int c = 0; c < classes; ++c) d[c] = d[c] * inv_sum * inv_batch;
    d[label] -= inv_batch;
    // -log softmax[label] = log(sum) - (x[label] - max), both terms >= 0-ish
    // and finite because the largest exponent is exp(0) = 1.
    total_loss += static_cast<double>(std::log(sum)) - static_cast<double>(x[label] - max);
    num_correct += (arg == label);
  }
  if (correct != nullptr) *correct = num_correct;
  return static_cast<float>(total_loss / batch);
}

}  // namespace

std::unique_ptr<Device> NewCpuDevice(const DeviceOptions& options) {
  return std::make_unique<CpuDevice>(options);
}

void CpuSgdUpdateAndCopy(float* w, const float* g, size_t n, float lr, float* w_copy) {
  SgdLoop(w, g, n, lr, w_copy);
}

void CpuMomentumUpdateAndCopy(float* w, float* v, const float* g, size_t n, float lr, float mu,
                              float* w_copy) {
  MomentumLoop(w, v, g, n, lr, mu, w_copy);
}

void CpuAdamUpdateAndCopy(float* w, float* m, float* v, const float* g, size_t n,
                          const AdamParams& p, float* w_copy) {
  AdamLoop(w, m, v, g, n, AdamScalarsOf(p), w_copy);
}

void CpuAdagradUpdateAndCopy(float* w, float* h, const float* g, size_t n, float lr, float eps,
                             float* w_copy) {
  AdagradLoop(w, h, g, n, lr, eps, w_copy);
}

}  // namespace kernels
}  // namespace relaxps
