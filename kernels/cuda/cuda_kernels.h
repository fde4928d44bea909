// Internal: host-side launchers of the CUDA kernels (cuda_kernels.cu).
//
// Plain C++ declarations (only cuda_runtime_api types) so that the device
// class in cuda_device.cc is compiled by the host compiler and nvcc only sees
// the kernels. Every launcher enqueues work on `launch.stream` and returns
// without synchronizing; launch errors are reported by cudaGetLastError(),
// which the caller checks. Pointers are device pointers unless named host_*.
#ifndef RELAXPS_KERNELS_CUDA_CUDA_KERNELS_H_
#define RELAXPS_KERNELS_CUDA_CUDA_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace relaxps {
namespace kernels {
namespace cuda_impl {

struct Launch {
  cudaStream_t stream = nullptr;
  // Upper bound on blocks for grid-stride element-wise kernels (a few waves
  // of the device's SMs).
  int max_blocks = 1024;
};

void Fill(const Launch& launch, float* x, size_t n, float value);

// Optimizer updates; see kernels/device.h for the formulas. Adam takes the
// bias corrections folded in: step_size = lr / (1 - b1^t),
// inv_sqrt_bc2 = 1 / sqrt(1 - b2^t).
void SgdUpdate(const Launch& launch, float* w, const float* g, size_t n, float lr);
void MomentumUpdate(const Launch& launch, float* w, float* v, const float* g, size_t n, float lr,
                    float mu);
void AdamUpdate(const Launch& launch, float* w, float* m, float* v, const float* g, size_t n,
                float beta1, float beta2, float step_size, float inv_sqrt_bc2, float eps);
void AdagradUpdate(const Launch& launch, float* w, float* h, const float* g, size_t n, float lr,
                   float eps);

void Axpy(const Launch& launch, size_t n, float a, const float* x, float* y);
void Scale(const Launch& launch, size_t n, float a, float* x);
// Sets *flag to 1 if some element is NaN or +-Inf (the caller zeroes it).
void FlagNonFinite(const Launch& launch, const float* x, size_t n, int* flag);
void FloatToHalf(const Launch& launch, const float* in, uint16_t* out, size_t n);
void HalfToFloat(const Launch& launch, const uint16_t* in, float* out, size_t n);

void AddBias(const Launch& launch, float* y, const float* bias, int rows, int cols);
void BiasGrad(const Launch& launch, const float* dy, float* db, int rows, int cols);
void AddChannelBias(const Launch& launch, float* y, const float* bias, int channels, int spatial);
void ChannelBiasGradAccumulate(const Launch& launch, const float* dy, float* db, int channels,
                               int spatial);
void ReluForward(const Launch& launch, float* x, size_t n);
void ReluBackward(const Launch& launch, const float* y, float* dy, size_t n);
void Im2Col(const Launch& launch, const float* image, int channels, int height, int width, int k,
            int pad, float* columns);
void Col2Im(const Launch& launch, const float* columns, int channels, int height, int width, int k,
            int pad, float* image);
void MaxPoolForward(const Launch& launch, const float* x, int planes, int height, int width,
                    int pool, float* y, int32_t* argmax);
// Scatter-adds dy into dx at argmax; the caller zeroes dx.
void MaxPoolScatter(const Launch& launch, const float* dy, const int32_t* argmax, size_t n_out,
                    float* dx);
void DropoutForward(const Launch& launch, float* x, float* mask, size_t n, float p, float scale,
                    uint64_t seed);
void Multiply(const Launch& launch, float* x, const float* mask, size_t n);
// Per row: row_loss[r] = -log softmax(logits[r])[label], row_correct[r] =
// (argmax == label), dlogits = (softmax - onehot) * inv_batch. A label outside
// [0, classes) gives row_loss = NaN and no one-hot term.
void SoftmaxCrossEntropy(const Launch& launch, const float* logits, const int32_t* labels,
                         int batch, int classes, float inv_batch, float* dlogits, float* row_loss,
                         int32_t* row_correct);
void ArgmaxRows(const Launch& launch, const float* x, int rows, int cols, int32_t* out);

}  // namespace cuda_impl
}  // namespace kernels
}  // namespace relaxps

#endif  // RELAXPS_KERNELS_CUDA_CUDA_KERNELS_H_
