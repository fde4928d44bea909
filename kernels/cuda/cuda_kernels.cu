// CUDA kernels of the CUDA Device back end and their launchers.
//
// Element-wise kernels use grid-stride loops with a capped grid (a few waves
// per SM) and 64-bit indices. Reductions over rows use one warp per row.
// fp16 conversion and the dropout generator come from
// kernels/internal/scalar_math.h, shared with the CPU back end, so both give
// bit-identical halves and masks. Argmax ties resolve to the lowest index, as
// on the CPU.
#include "kernels/cuda/cuda_kernels.h"

#include <climits>
#include <cmath>

#include "kernels/internal/scalar_math.h"

namespace relaxps {
namespace kernels {
namespace cuda_impl {
namespace {

constexpr int kThreads = 256;
constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;

int BlocksFor(const Launch& launch, size_t n) {
  const size_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < static_cast<size_t>(launch.max_blocks) ? blocks
                                                                          : launch.max_blocks);
}

__device__ __forceinline__ size_t GlobalIndex() {
  return static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ size_t GlobalStride() {
  return static_cast<size_t>(gridDim.x) * blockDim.x;
}

// ---- Element-wise ------------------------------------------------------------

__global__ void FillKernel(float* __restrict__ x, size_t n, float value) {
  for (size_t i = GlobalIndex(); i < n; i += GlobalStride()) x[i] = value;
}

__global__ void SgdKernel(float* __restrict__ w, const float* __restrict__ g, size_t n, float lr) {
  for (size_t i = GlobalIndex(); i < n; i += GlobalStride()) w[i] -= lr * g[i];
}

__global__ void MomentumKernel(float* __restrict__ w, float* __restrict__ v,
                               const float* __restrict__ g, size_t n, float lr, float mu) {
  for (size_t i = GlobalIndex(); i < n; i += GlobalStride()) {
    const float vi = mu * v[i] + g[i];
    v[i] = vi;
    w[i] -= lr * vi;
  }
}

__global__ void AdamKernel(float* __restrict__ w, float* __restrict__ m, float* __restrict__ v,
                           const float* __restrict__ g, size_t n, float b1, float b2,
                           float step_size, float inv_sqrt_bc2, float eps) {
  const float c1 = 1.0f - b1;
  const float c2 = 1.0f - b2;
  for (size_t i = GlobalIndex(); i < n; i += GlobalStride()) {
    const float gi = g[i];
    const float mi = b1 * m[i] + c1 * gi;
    const float vi = b2 * v[i] + c2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    w[i] -= step_size * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
  }
}

__global__ void AdagradKernel(float* __restrict__ w, float* __restrict__ h,
                              const float* __restrict__ g, size_t n, float lr, float eps) {
  for (size_t i = GlobalIndex(); i < n; i += GlobalStride()) {
    const float gi = g[i];
    const float hi = h[i] + gi * gi;
    h[i] = hi;
    w[i] -= lr * gi / (sqrtf(hi) + eps);
  }
}

__global__ void AxpyKernel(size_t n, float a, const float* __restrict__ x, float* __restrict__ y) {
  for (size_t i = GlobalIndex(); i < n; i += GlobalStride()) y[i] += a * x[i];
}

__global__ void ScaleKernel(size_t n, float a, float* __restrict__ x) {
  for (size_t i = GlobalIndex(); i < n; i += GlobalStride()) x[i] *= a;
}

__global__ void FlagNonFiniteKernel(const float* __restrict__ x, size_t n, int* flag) {
  bool bad = false;
  for (size_t i = GlobalIndex(); i < n; i += GlobalStride()) bad |= !isfinite(x[i]);
  if (bad) *flag = 1;  // Benign race: every writer stores the same value.
}

__global__ void FloatToHalfKernel(const float* __restrict__ in, uint16_t* __restrict__ out,
                                  size_t n) {
  for (size_t i = GlobalIndex(); i < n; i += GlobalStride()) {
    out[i] = internal::FloatBitsToHalfBits(__float_as_uint(in[i]));
  }
}

__global__ void HalfToFloatKernel(const uint16_t* __restrict__ in, float* __restrict__ out,
                                  size_t n) {
  for (size_t i = GlobalIndex(); i < n; i += GlobalStride()) {
    out[i] = __uint_as_float(internal::HalfBitsToFloatBits(in[i]));
  }
}

__global__ void AddBiasKernel(float* __restrict__ y, const float* __restrict__ bias, size_t n,
                              int cols) {
  for (size_t i = GlobalIndex(); i < n; i += GlobalStride()) y[i] += bias[i % cols];
}

__global__ void AddChannelBiasKernel(float* __restrict__ y, const float* __restrict__ bias,
                                     size_t n, int spatial) {
  for (size_t i = GlobalIndex(); i < n; i += GlobalStride()) y[i] += bias[i / spatial];
}

__global__ void ReluForwardKernel(float* __restrict__ x, size_t n) {
  for (size_t i = GlobalIndex(); i < n; i += GlobalStride()) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

__global__ void ReluBackwardKernel(const float* __restrict__ y, float* __restrict__ dy, size_t n) {
  for (size_t i = GlobalIndex(); i < n; i += GlobalStride()) {
    if (!(y[i] > 0.0f)) dy[i] = 0.0f;
  }
}

__global__ void DropoutKernel(float* __restrict__ x, float* __restrict__ mask, size_t n, float p,
                              float scale, uint64_t seed) {
  for (size_t i = GlobalIndex(); i < n; i += GlobalStride()) {
    const float m = internal::DropoutMask(seed, i, p, scale);
    mask[i] = m;
    x[i] *= m;
  }
}

__global__ void MultiplyKernel(float* __restrict__ x, const float* __restrict__ mask, size_t n) {
  for (size_t i = GlobalIndex(); i < n; i += GlobalStride()) x[i] *= mask[i];
}

__global__ void MaxPoolScatterKernel(const float* __restrict__ dy,
                                     const int32_t* __restrict__ argmax, size_t n_out,
                                     float* __restrict__ dx) {
  for (size_t i = GlobalIndex(); i < n_out; i += GlobalStride()) atomicAdd(dx + argmax[i], dy[i]);
}

// ---- Layers --------------------------------------------------------------------

// One thread per column: db[c] = sum over rows (coalesced across threads).
__global__ void BiasGradKernel(const float* __restrict__ dy, float* __restrict__ db, int rows,
                               int cols) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float sum = 0.0f;
  for (int r = 0; r < rows; ++r) sum += dy[static_cast<size_t>(r) * cols + c];
  db[c] = sum;
}

// One block per channel, shared-memory tree reduction.
__global__ void ChannelBiasGradKernel(const float* __restrict__ dy, float* __restrict__ db,
                                      int spatial) {
  __shared__ float partial[kThreads];
  const float* row = dy + static_cast<size_t>(blockIdx.x) * spatial;
  float sum = 0.0f;
  for (int s = threadIdx.x; s < spatial; s += blockDim.x) sum += row[s];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int width = blockDim.x / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) partial[threadIdx.x] += partial[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) db[blockIdx.x] += partial[0];
}

__global__ void Im2ColKernel(const float* __restrict__ image, int channels, int height, int width,
                             int k, int pad, int out_h, int out_w, float* __restrict__ columns,
                             size_t total) {
  for (size_t i = GlobalIndex(); i < total; i += GlobalStride()) {
    const int ox = static_cast<int>(i % out_w);
    size_t t = i / out_w;
    const int oy = static_cast<int>(t % out_h);
    t /= out_h;
    const int kx = static_cast<int>(t % k);
    t /= k;
    const int ky = static_cast<int>(t % k);
    const int c = static_cast<int>(t / k);
    const int iy = oy + ky - pad;
    const int ix = ox + kx - pad;
    columns[i] = (iy >= 0 && iy < height && ix >= 0 && ix < width)
                     ? image[(static_cast<size_t>(c) * height + iy) * width + ix]
                     : 0.0f;
  }
}

// One thread per image pixel gathers every column entry that reads it, so no
// atomics are needed and the result is deterministic.
__global__ void Col2ImKernel(const float* __restrict__ columns, int channels, int height, int width,
                             int k, int pad, int out_h, int out_w, float* __restrict__ image,
                             size_t total) {
  const size_t out_hw = static_cast<size_t>(out_h) * out_w;
  for (size_t i = GlobalIndex(); i < total; i += GlobalStride()) {
    const int ix = static_cast<int>(i % width);
    const size_t t = i / width;
    const int iy = static_cast<int>(t % height);
    const int c = static_cast<int>(t / height);
    float sum = 0.0f;
    for (int ky = 0; ky < k; ++ky) {
      const int oy = iy + pad - ky;
      if (oy < 0 || oy >= out_h) continue;
      for (int kx = 0; kx < k; ++kx) {
        const int ox = ix + pad - kx;
        if (ox < 0 || ox >= out_w) continue;
        const size_t row = (static_cast<size_t>(c) * k + ky) * k + kx;
        sum += columns[row * out_hw + static_cast<size_t>(oy) * out_w + ox];
      }
    }
    image[i] += sum;
  }
}

__global__ void MaxPoolForwardKernel(const float* __restrict__ x, int height, int width, int pool,
                                     int out_h, int out_w, float* __restrict__ y,
                                     int32_t* __restrict__ argmax, size_t total) {
  for (size_t i = GlobalIndex(); i < total; i += GlobalStride()) {
    const int ox = static_cast<int>(i % out_w);
    const size_t t = i / out_w;
    const int oy = static_cast<int>(t % out_h);
    const size_t plane = t / out_h;
    const size_t plane_base = plane * height * width;
    size_t best_idx = plane_base + static_cast<size_t>(oy * pool) * width + ox * pool;
    float best = x[best_idx];
    for (int dy = 0; dy < pool; ++dy) {
      const size_t row = plane_base + static_cast<size_t>(oy * pool + dy) * width + ox * pool;
      for (int dx = 0; dx < pool; ++dx) {
        const float v = x[row + dx];
        if (v > best) {
          best = v;
          best_idx = row + dx;
        }
      }
    }
    y[i] = best;
    argmax[i] = static_cast<int32_t>(best_idx);
  }
}

// Warp-wide (max, argmax) with ties to the lower index; every lane gets the
// result. Lanes that saw no element carry (-inf, INT_MAX).
__device__ __forceinline__ void WarpArgmax(float* value, int* index) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const float v = __shfl_xor_sync(kFullMask, *value, offset);
    const int j = __shfl_xor_sync(kFullMask, *index, offset);
    if (v > *value || (v == *value && j < *index)) {
      *value = v;
      *index = j;
    }
  }
}

__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

// Each lane scans columns lane, lane+32, ... keeping its first maximum.
__device__ __forceinline__ void RowArgmax(const float* x, int cols, int lane, float* max,
                                          int* arg) {
  *max = -INFINITY;
  *arg = INT_MAX;
  for (int c = lane; c < cols; c += kWarp) {
    if (*arg == INT_MAX || x[c] > *max) {
      *max = x[c];
      *arg = c;
    }
  }
  WarpArgmax(max, arg);
}

__global__ void SoftmaxCrossEntropyKernel(const float* __restrict__ logits,
                                          const int32_t* __restrict__ labels, int batch,
                                          int classes, float inv_batch, float* __restrict__ dlogits,
                                          float* __restrict__ row_loss,
                                          int32_t* __restrict__ row_correct) {
  const int row = (blockIdx.x * blockDim.x + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= batch) return;  // Uniform per warp.
  const float* x = logits + static_cast<size_t>(row) * classes;
  float* d = dlogits + static_cast<size_t>(row) * classes;
  float max;
  int arg;
  RowArgmax(x, classes, lane, &max, &arg);
  float sum = 0.0f;
  for (int c = lane; c < classes; c += kWarp) {
    const float e = expf(x[c] - max);
    d[c] = e;
    sum += e;
  }
  sum = WarpSum(sum);
  const float inv_sum = 1.0f / sum;
  const int label = labels[row];
  const bool valid = label >= 0 && label < classes;
  for (int c = lane; c < classes; c += kWarp) {
    float v = d[c] * inv_sum * inv_batch;
    if (c == label) v -= inv_batch;
    d[c] = v;
  }
  if (lane == 0) {
    row_loss[row] = valid ? logf(sum) - (x[label] - max) : NAN;
    row_correct[row] = valid && arg == label;
  }
}

__global__ void ArgmaxRowsKernel(const float* __restrict__ x, int rows, int cols,
                                 int32_t* __restrict__ out) {
  const int row = (blockIdx.x * blockDim.x + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  float max;
  int arg;
  RowArgmax(x + static_cast<size_t>(row) * cols, cols, lane, &max, &arg);
  if (lane == 0) out[row] = arg;
}

int WarpRowBlocks(int rows) {
  constexpr int kRowsPerBlock = kThreads / kWarp;
  return (rows + kRowsPerBlock - 1) / kRowsPerBlock;
}

}  // namespace

// ---- Launchers -------------------------------------------------------------------
// n == 0 launches nothing (a zero-block grid is a launch error).

#define RELAXPS_LAUNCH_ELEMENTWISE(kernel, n, ...)                               \
  do {                                                                           \
    if ((n) == 0) return;                                                        \
    kernel<<<BlocksFor(launch, (n)), kThreads, 0, launch.stream>>>(__VA_ARGS__); \
  } while (0)

void Fill(const Launch& launch, float* x, size_t n, float value) {
  RELAXPS_LAUNCH_ELEMENTWISE(FillKernel, n, x, n, value);
}
void SgdUpdate(const Launch& launch, float* w, const float* g, size_t n, float lr) {
  RELAXPS_LAUNCH_ELEMENTWISE(SgdKernel, n, w, g, n, lr);
}
void MomentumUpdate(const Launch& launch, float* w, float* v, const float* g, size_t n, float lr,
                    float mu) {
  RELAXPS_LAUNCH_ELEMENTWISE(MomentumKernel, n, w, v, g, n, lr, mu);
}
void AdamUpdate(const Launch& launch, float* w, float* m, float* v, const float* g, size_t n,
                float beta1, float beta2, float step_size, float inv_sqrt_bc2, float eps) {
  RELAXPS_LAUNCH_ELEMENTWISE(AdamKernel, n, w, m, v, g, n, beta1, beta2, step_size, inv_sqrt_bc2,
                             eps);
}
void AdagradUpdate(const Launch& launch, float* w, float* h, const float* g, size_t n, float lr,
                   float eps) {
  RELAXPS_LAUNCH_ELEMENTWISE(AdagradKernel, n, w, h, g, n, lr, eps);
}
void Axpy(const Launch& launch, size_t n, float a, const float* x, float* y) {
  RELAXPS_LAUNCH_ELEMENTWISE(AxpyKernel, n, n, a, x, y);
}
void Scale(const Launch& launch, size_t n, float a, float* x) {
  RELAXPS_LAUNCH_ELEMENTWISE(ScaleKernel, n, n, a, x);
}
void FlagNonFinite(const Launch& launch, const float* x, size_t n, int* flag) {
  RELAXPS_LAUNCH_ELEMENTWISE(FlagNonFiniteKernel, n, x, n, flag);
}
void FloatToHalf(const Launch& launch, const float* in, uint16_t* out, size_t n) {
  RELAXPS_LAUNCH_ELEMENTWISE(FloatToHalfKernel, n, in, out, n);
}
void HalfToFloat(const Launch& launch, const uint16_t* in, float* out, size_t n) {
  RELAXPS_LAUNCH_ELEMENTWISE(HalfToFloatKernel, n, in, out, n);
}
void AddBias(const Launch& launch, float* y, const float* bias, int rows, int cols) {
  const size_t n = static_cast<size_t>(rows) * cols;
  RELAXPS_LAUNCH_ELEMENTWISE(AddBiasKernel, n, y, bias, n, cols);
}
void BiasGrad(const Launch& launch, const float* dy, float* db, int rows, int cols) {
  if (cols <= 0) return;
  BiasGradKernel<<<(cols + kThreads - 1) / kThreads, kThreads, 0, launch.stream>>>(dy, db, rows,
                                                                                   cols);
}
void AddChannelBias(const Launch& launch, float* y, const float* bias, int channels, int spatial) {
  const size_t n = static_cast<size_t>(channels) * spatial;
  RELAXPS_LAUNCH_ELEMENTWISE(AddChannelBiasKernel, n, y, bias, n, spatial);
}
void ChannelBiasGradAccumulate(const Launch& launch, const float* dy, float* db, int channels,
                               int spatial) {
  if (channels <= 0 || spatial <= 0) return;
  ChannelBiasGradKernel<<<channels, kThreads, 0, launch.stream>>>(dy, db, spatial);
}
void ReluForward(const Launch& launch, float* x, size_t n) {
  RELAXPS_LAUNCH_ELEMENTWISE(ReluForwardKernel, n, x, n);
}
void ReluBackward(const Launch& launch, const float* y, float* dy, size_t n) {
  RELAXPS_LAUNCH_ELEMENTWISE(ReluBackwardKernel, n, y, dy, n);
}
void Im2Col(const Launch& launch, const float* image, int channels, int height, int width, int k,
            int pad, float* columns) {
  const int out_h = height + 2 * pad - k + 1;
  const int out_w = width + 2 * pad - k + 1;
  if (out_h <= 0 || out_w <= 0 || channels <= 0) return;
  const size_t total = static_cast<size_t>(channels) * k * k * out_h * out_w;
  RELAXPS_LAUNCH_ELEMENTWISE(Im2ColKernel, total, image, channels, height, width, k, pad, out_h,
                             out_w, columns, total);
}
void Col2Im(const Launch& launch, const float* columns, int channels, int height, int width, int k,
            int pad, float* image) {
  const int out_h = height + 2 * pad - k + 1;
  const int out_w = width + 2 * pad - k + 1;
  if (out_h <= 0 || out_w <= 0 || channels <= 0) return;
  const size_t total = static_cast<size_t>(channels) * height * width;
  RELAXPS_LAUNCH_ELEMENTWISE(Col2ImKernel, total, columns, channels, height, width, k, pad, out_h,
                             out_w, image, total);
}
void MaxPoolForward(const Launch& launch, const float* x, int planes, int height, int width,
                    int pool, float* y, int32_t* argmax) {
  const int out_h = height / pool;
  const int out_w = width / pool;
  if (planes <= 0 || out_h <= 0 || out_w <= 0) return;
  const size_t total = static_cast<size_t>(planes) * out_h * out_w;
  RELAXPS_LAUNCH_ELEMENTWISE(MaxPoolForwardKernel, total, x, height, width, pool, out_h, out_w, y,
                             argmax, total);
}
void MaxPoolScatter(const Launch& launch, const float* dy, const int32_t* argmax, size_t n_out,
                    float* dx) {
  RELAXPS_LAUNCH_ELEMENTWISE(MaxPoolScatterKernel, n_out, dy, argmax, n_out, dx);
}
void DropoutForward(const Launch& launch, float* x, float* mask, size_t n, float p, float scale,
                    uint64_t seed) {
  RELAXPS_LAUNCH_ELEMENTWISE(DropoutKernel, n, x, mask, n, p, scale, seed);
}
void Multiply(const Launch& launch, float* x, const float* mask, size_t n) {
  RELAXPS_LAUNCH_ELEMENTWISE(MultiplyKernel, n, x, mask, n);
}
void SoftmaxCrossEntropy(const Launch& launch, const float* logits, const int32_t* labels,
                         int batch, int classes, float inv_batch, float* dlogits, float* row_loss,
                         int32_t* row_correct) {
  if (batch <= 0 || classes <= 0) return;
  SoftmaxCrossEntropyKernel<<<WarpRowBlocks(batch), kThreads, 0, launch.stream>>>(
      logits, labels, batch, classes, inv_batch, dlogits, row_loss, row_correct);
}
void ArgmaxRows(const Launch& launch, const float* x, int rows, int cols, int32_t* out) {
  if (rows <= 0 || cols <= 0) return;
  ArgmaxRowsKernel<<<WarpRowBlocks(rows), kThreads, 0, launch.stream>>>(x, rows, cols, out);
}

#undef RELAXPS_LAUNCH_ELEMENTWISE

}  // namespace cuda_impl
}  // namespace kernels
}  // namespace relaxps
