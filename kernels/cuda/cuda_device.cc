// CUDA back end of kernels::Device: per device object, a compute stream with
// one cuBLAS handle and a copy stream for the asynchronous host transfers;
// element-wise and layer work goes to the kernels in cuda_kernels.cu, GEMM to
// cuBLAS. Events are cudaEvent_t created without timing.
//
// Errors: creation failures (no driver, no GPU, bad ordinal) are returned as
// Unavailable. Once a device exists, a failing CUDA call means a broken
// invariant or a dead GPU, which the void methods of Device cannot report, so
// they CHECK-fail with the CUDA error string. Alloc and AllocHost return
// nullptr on out-of-memory as the interface promises.
#include "kernels/cuda/cuda_device.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>  // Typed cudaMalloc overloads.

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_kernels.h"

#define RELAXPS_CUDA_CHECK(expr)                                                             \
  do {                                                                                       \
    const cudaError_t _relaxps_err = (expr);                                                 \
    CHECK(_relaxps_err == cudaSuccess) << #expr << ": " << cudaGetErrorString(_relaxps_err); \
  } while (0)

#define RELAXPS_CUBLAS_CHECK(expr)                              \
  do {                                                          \
    const cublasStatus_t _relaxps_st = (expr);                  \
    CHECK(_relaxps_st == CUBLAS_STATUS_SUCCESS)                 \
        << #expr << ": " << cublasGetStatusString(_relaxps_st); \
  } while (0)

namespace relaxps {
namespace kernels {
namespace {

// "no CUDA device: <what><CUDA error string>", clearing the error.
Status CudaUnavailable(const std::string& what, cudaError_t err) {
  cudaGetLastError();  // Do not leave the error for a later check.
  return UnavailableError("no CUDA device: " + what + cudaGetErrorString(err));
}

// A cudaEvent_t of the device on GPU `ordinal`.
class CudaEvent final : public DeviceEvent {
 public:
  CudaEvent(const Device* device, int ordinal, cudaEvent_t event)
      : DeviceEvent(device), ordinal_(ordinal), event_(event) {}
  // Best effort, like the device's destructor. Destroying an event whose
  // work is still queued is allowed; CUDA releases it once it completes.
  ~CudaEvent() override {
    cudaSetDevice(ordinal_);
    cudaEventDestroy(event_);
    cudaGetLastError();
  }
  cudaEvent_t event() const { return event_; }

 private:
  const int ordinal_;
  const cudaEvent_t event_;
};

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(int ordinal) : ordinal_(ordinal) {}

  // Creates the streams, the cuBLAS handle and the AllFinite flag on the
  // device made current by the caller. Returns Unavailable on failure; the
  // destructor then releases whatever was created.
  Status Init(int sm_count) {
    launch_.max_blocks = std::max(1, sm_count) * 8;  // 8 blocks of 256 threads per SM.
    cudaError_t err = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
    if (err != cudaSuccess) return CudaUnavailable("cudaStreamCreate: ", err);
    launch_.stream = stream_;
    err = cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking);
    if (err != cudaSuccess) return CudaUnavailable("cudaStreamCreate: ", err);
    const cublasStatus_t st = cublasCreate(&cublas_);
    if (st != CUBLAS_STATUS_SUCCESS) {
      cublas_ = nullptr;
      return UnavailableError(std::string("no CUDA device: cublasCreate: ") +
                              cublasGetStatusString(st));
    }
    cublasSetStream(cublas_, stream_);
    err = cudaMalloc(&flag_, sizeof(int));
    if (err != cudaSuccess) return CudaUnavailable("cudaMalloc: ", err);
    err = cudaMallocHost(&host_flag_, sizeof(int));
    if (err != cudaSuccess) return CudaUnavailable("cudaMallocHost: ", err);
    return Status::OK();
  }

  // Best effort: a destructor must not abort, so errors are ignored here.
  ~CudaDevice() override {
    cudaSetDevice(ordinal_);
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    if (copy_stream_ != nullptr) cudaStreamSynchronize(copy_stream_);
    FreeScratch();
    cudaFree(flag_);
    cudaFreeHost(host_flag_);
    if (cublas_ != nullptr) cublasDestroy(cublas_);
    if (copy_stream_ != nullptr) cudaStreamDestroy(copy_stream_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    cudaGetLastError();
  }

  std::string Name() const override { return "cuda:" + std::to_string(ordinal_); }
  DeviceType type() const override { return DeviceType::kCuda; }

  // ---- Memory ------------------------------------------------------------------
  void* Alloc(size_t bytes) override {
    Activate();
    void* p = nullptr;
    if (cudaMalloc(&p, bytes == 0 ? 1 : bytes) != cudaSuccess) {
      cudaGetLastError();  // Clear the (non-sticky) error so later checks pass.
      return nullptr;
    }
    return p;
  }
  void Free(void* p) override {
    if (p == nullptr) return;
    Activate();
    RELAXPS_CUDA_CHECK(cudaFree(p));
  }
  // Both host copies return only when the host buffer may be reused / read.
  void CopyToDevice(void* dst, const void* host_src, size_t bytes) override {
    if (bytes == 0) return;
    Activate();
    RELAXPS_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_));
    RELAXPS_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void CopyToHost(void* host_dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    Activate();
    RELAXPS_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    RELAXPS_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void CopyOnDevice(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0 || dst == src) return;
    Activate();
    RELAXPS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
  }
  void Fill(float* x, size_t n, float value) override {
    Activate();
    cuda_impl::Fill(launch_, x, n, value);
    CheckLaunch();
  }
  void Synchronize() override {
    Activate();
    RELAXPS_CUDA_CHECK(cudaStreamSynchronize(stream_));
    RELAXPS_CUDA_CHECK(cudaStreamSynchronize(copy_stream_));
  }

  // ---- Page-locked host memory, asynchronous copies, events ------------------------
  // May run on any thread (see Device): touches no member but the constant
  // ordinal_, and the CUDA runtime is thread-safe.
  void* AllocHost(size_t bytes) override {
    Activate();
    void* p = nullptr;
    if (cudaMallocHost(&p, bytes == 0 ? 1 : bytes) != cudaSuccess) {
      cudaGetLastError();  // Clear the (non-sticky) error so later checks pass.
      return nullptr;
    }
    return p;
  }
  void FreeHost(void* p) override {
    if (p == nullptr) return;
    Activate();
    RELAXPS_CUDA_CHECK(cudaFreeHost(p));
  }
  void CopyToDeviceAsync(void* dst, const void* host_src, size_t bytes) override {
    if (bytes == 0) return;
    Activate();
    RELAXPS_CUDA_CHECK(
        cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, copy_stream_));
  }
  void CopyToHostAsync(void* host_dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    Activate();
    RELAXPS_CUDA_CHECK(
        cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, copy_stream_));
  }
  std::unique_ptr<DeviceEvent> NewEvent() override {
    Activate();
    cudaEvent_t event = nullptr;
    RELAXPS_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    return std::make_unique<CudaEvent>(this, ordinal_, event);
  }
  void RecordEvent(Stream stream, DeviceEvent* event) override {
    Activate();
    RELAXPS_CUDA_CHECK(cudaEventRecord(EventOf(event), StreamOf(stream)));
  }
  void WaitEvent(Stream stream, const DeviceEvent* event) override {
    Activate();
    RELAXPS_CUDA_CHECK(cudaStreamWaitEvent(StreamOf(stream), EventOf(event), 0));
  }
  void HostWaitEvent(const DeviceEvent* event) override {
    Activate();
    RELAXPS_CUDA_CHECK(cudaEventSynchronize(EventOf(event)));
  }

  // ---- Optimizers ----------------------------------------------------------------
  void SgdUpdate(float* w, const float* g, size_t n, float lr) override {
    Activate();
    cuda_impl::SgdUpdate(launch_, w, g, n, lr);
    CheckLaunch();
  }
  void MomentumUpdate(float* w, float* v, const float* g, size_t n, float lr, float mu) override {
    Activate();
    cuda_impl::MomentumUpdate(launch_, w, v, g, n, lr, mu);
    CheckLaunch();
  }
  void AdamUpdate(float* w, float* m, float* v, const float* g, size_t n,
                  const AdamParams& p) override {
    CHECK_GE(p.step, 1) << "Adam step is 1-based";
    // Same folding as the CPU back end.
    const double bc1 = 1.0 - std::pow(static_cast<double>(p.beta1), static_cast<double>(p.step));
    const double bc2 = 1.0 - std::pow(static_cast<double>(p.beta2), static_cast<double>(p.step));
    Activate();
    cuda_impl::AdamUpdate(launch_, w, m, v, g, n, p.beta1, p.beta2, static_cast<float>(p.lr / bc1),
                          static_cast<float>(1.0 / std::sqrt(bc2)), p.eps);
    CheckLaunch();
  }
  void AdagradUpdate(float* w, float* h, const float* g, size_t n, float lr, float eps) override {
    Activate();
    cuda_impl::AdagradUpdate(launch_, w, h, g, n, lr, eps);
    CheckLaunch();
  }

  // ---- Vector ops ------------------------------------------------------------------
  void Axpy(size_t n, float a, const float* x, float* y) override {
    Activate();
    cuda_impl::Axpy(launch_, n, a, x, y);
    CheckLaunch();
  }
  void Scale(size_t n, float a, float* x) override {
    Activate();
    cuda_impl::Scale(launch_, n, a, x);
    CheckLaunch();
  }
  bool AllFinite(const float* x, size_t n) override {
    if (n == 0) return true;
    Activate();
    RELAXPS_CUDA_CHECK(cudaMemsetAsync(flag_, 0, sizeof(int), stream_));
    cuda_impl::FlagNonFinite(launch_, x, n, flag_);
    CheckLaunch();
    RELAXPS_CUDA_CHECK(
        cudaMemcpyAsync(host_flag_, flag_, sizeof(int), cudaMemcpyDeviceToHost, stream_));
    RELAXPS_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return *host_flag_ == 0;
  }
  void FloatToHalf(const float* in, uint16_t* out, size_t n) override {
    Activate();
    cuda_impl::FloatToHalf(launch_, in, out, n);
    CheckLaunch();
  }
  void HalfToFloat(const uint16_t* in, float* out, size_t n) override {
    Activate();
    cuda_impl::HalfToFloat(launch_, in, out, n);
    CheckLaunch();
  }

  // ---- GEMM ------------------------------------------------------------------------
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the
  // operands and the m/n roles; the leading dimensions stay as stored.
  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
            const float* b, int ldb, float beta, float* c, int ldc) override {
    if (m <= 0 || n <= 0) return;
    Activate();
    RELAXPS_CUBLAS_CHECK(cublasSgemm(cublas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                     trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, ldb,
                                     a, lda, &beta, c, ldc));
  }

  // ---- Layers ----------------------------------------------------------------------
  void AddBias(float* y, const float* bias, int rows, int cols) override {
    Activate();
    cuda_impl::AddBias(launch_, y, bias, rows, cols);
    CheckLaunch();
  }
  void BiasGrad(const float* dy, float* db, int rows, int cols) override {
    Activate();
    cuda_impl::BiasGrad(launch_, dy, db, rows, cols);
    CheckLaunch();
  }
  void AddChannelBias(float* y, const float* bias, int channels, int spatial) override {
    Activate();
    cuda_impl::AddChannelBias(launch_, y, bias, channels, spatial);
    CheckLaunch();
  }
  void ChannelBiasGradAccumulate(const float* dy, float* db, int channels, int spatial) override {
    Activate();
    cuda_impl::ChannelBiasGradAccumulate(launch_, dy, db, channels, spatial);
    CheckLaunch();
  }
  void ReluForward(float* x, size_t n) override {
    Activate();
    cuda_impl::ReluForward(launch_, x, n);
    CheckLaunch();
  }
  void ReluBackward(const float* y, float* dy, size_t n) override {
    Activate();
    cuda_impl::ReluBackward(launch_, y, dy, n);
    CheckLaunch();
  }
  void Im2Col(const float* image, int channels, int height, int width, int k, int pad,
              float* columns) override {
    Activate();
    cuda_impl::Im2Col(launch_, image, channels, height, width, k, pad, columns);
    CheckLaunch();
  }
  void Col2Im(const float* columns, int channels, int height, int width, int k, int pad,
              float* image) override {
    Activate();
    cuda_impl::Col2Im(launch_, columns, channels, height, width, k, pad, image);
    CheckLaunch();
  }
  void MaxPoolForward(const float* x, int planes, int height, int width, int pool, float* y,
                      int32_t* argmax) override {
    CHECK_GT(pool, 0);
    Activate();
    cuda_impl::MaxPoolForward(launch_, x, planes, height, width, pool, y, argmax);
    CheckLaunch();
  }
  void MaxPoolBackward(const float* dy, const int32_t* argmax, size_t n_out, float* dx,
                       size_t n_in) override {
    Activate();
    if (n_in > 0) RELAXPS_CUDA_CHECK(cudaMemsetAsync(dx, 0, n_in * sizeof(float), stream_));
    cuda_impl::MaxPoolScatter(launch_, dy, argmax, n_out, dx);
    CheckLaunch();
  }
  void DropoutForward(float* x, float* mask, size_t n, float p, uint64_t seed) override {
    // The same float scale as the CPU back end, so masks are bit-identical.
    const float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
    Activate();
    cuda_impl::DropoutForward(launch_, x, mask, n, p, scale, seed);
    CheckLaunch();
  }
  void Multiply(float* x, const float* mask, size_t n) override {
    Activate();
    cuda_impl::Multiply(launch_, x, mask, n);
    CheckLaunch();
  }
  float SoftmaxCrossEntropy(const float* logits, const int32_t* labels, int batch, int classes,
                            float* dlogits, int* correct) override;
  void ArgmaxRows(const float* x, int rows, int cols, int32_t* host_out) override {
    if (rows <= 0) return;
    Activate();
    EnsureScratch(rows);
    cuda_impl::ArgmaxRows(launch_, x, rows, cols, scratch_correct_);
    CheckLaunch();
    RELAXPS_CUDA_CHECK(cudaMemcpyAsync(host_out, scratch_correct_, rows * sizeof(int32_t),
                                       cudaMemcpyDeviceToHost, stream_));
    RELAXPS_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

 private:
  // Makes this device current for the calling thread (cheap; the device may
  // be used by a thread other than its creator).
  void Activate() const { RELAXPS_CUDA_CHECK(cudaSetDevice(ordinal_)); }
  static void CheckLaunch() { RELAXPS_CUDA_CHECK(cudaGetLastError()); }
  cudaStream_t StreamOf(Stream stream) const {
    return stream == Stream::kCopy ? copy_stream_ : stream_;
  }
  // The CUDA event behind `event`. CHECK-fails for another device's event
  // (a programming error).
  cudaEvent_t EventOf(const DeviceEvent* event) const {
    CHECK(event != nullptr && event->device() == this) << "event of another device";
    return static_cast<const CudaEvent*>(event)->event();
  }

  // Grows the per-row scratch buffers to hold `rows` entries.
  void EnsureScratch(int rows) {
    if (rows <= scratch_rows_) return;
    RELAXPS_CUDA_CHECK(cudaStreamSynchronize(stream_));
    FreeScratch();
    RELAXPS_CUDA_CHECK(cudaMalloc(&scratch_loss_, rows * sizeof(float)));
    RELAXPS_CUDA_CHECK(cudaMalloc(&scratch_correct_, rows * sizeof(int32_t)));
    scratch_rows_ = rows;
  }
  void FreeScratch() {
    cudaFree(scratch_loss_);
    cudaFree(scratch_correct_);
    scratch_loss_ = nullptr;
    scratch_correct_ = nullptr;
    scratch_rows_ = 0;
  }

  // Constant after Init().
  const int ordinal_;
  cudaStream_t stream_ = nullptr;       // Compute: every method but the async copies.
  cudaStream_t copy_stream_ = nullptr;  // CopyToDeviceAsync / CopyToHostAsync.
  cublasHandle_t cublas_ = nullptr;
  cuda_impl::Launch launch_;
  int* flag_ = nullptr;       // Device; AllFinite's result.
  int* host_flag_ = nullptr;  // Pinned host copy of flag_.
  // Used by one thread at a time (the Device contract), no lock.
  float* scratch_loss_ = nullptr;       // Device, scratch_rows_ entries.
  int32_t* scratch_correct_ = nullptr;  // Device, scratch_rows_ entries.
  int scratch_rows_ = 0;
};

float CudaDevice::SoftmaxCrossEntropy(const float* logits, const int32_t* labels, int batch,
                                      int classes, float* dlogits, int* correct) {
  CHECK_GT(classes, 0);
  if (batch <= 0) {
    if (correct != nullptr) *correct = 0;
    return 0.0f;
  }
  Activate();
  EnsureScratch(batch);
  cuda_impl::SoftmaxCrossEntropy(launch_, logits, labels, batch, classes,
                                 1.0f / static_cast<float>(batch), dlogits, scratch_loss_,
                                 scratch_correct_);
  CheckLaunch();
  // Batches are small (tens to thousands of rows): finish the reduction on
  // the host in double, like the CPU back end.
  std::vector<float> loss(batch);
  std::vector<int32_t> hits(batch);
  RELAXPS_CUDA_CHECK(cudaMemcpyAsync(loss.data(), scratch_loss_, batch * sizeof(float),
                                     cudaMemcpyDeviceToHost, stream_));
  RELAXPS_CUDA_CHECK(cudaMemcpyAsync(hits.data(), scratch_correct_, batch * sizeof(int32_t),
                                     cudaMemcpyDeviceToHost, stream_));
  RELAXPS_CUDA_CHECK(cudaStreamSynchronize(stream_));
  double total = 0.0;
  int num_correct = 0;
  for (int r = 0; r < batch; ++r) {
    total += loss[r];
    num_correct += hits[r];
  }
  if (correct != nullptr) *correct = num_correct;
  return static_cast<float>(total / batch);
}

}  // namespace

int CudaRuntimeDeviceCount() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

StatusOr<std::unique_ptr<Device>> NewCudaDevice(const DeviceOptions& options) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) return CudaUnavailable("", err);
  if (count == 0) return UnavailableError("no CUDA device: the CUDA runtime reports 0 GPUs");
  if (options.cuda_device < 0 || options.cuda_device >= count) {
    return UnavailableError("no CUDA device: ordinal " + std::to_string(options.cuda_device) +
                            " requested, " + std::to_string(count) + " present");
  }
  err = cudaSetDevice(options.cuda_device);
  if (err != cudaSuccess) return CudaUnavailable("cudaSetDevice: ", err);
  int sm_count = 0;
  err = cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, options.cuda_device);
  if (err != cudaSuccess) return CudaUnavailable("cudaDeviceGetAttribute: ", err);
  auto device = std::make_unique<CudaDevice>(options.cuda_device);
  RETURN_IF_ERROR(device->Init(sm_count));
  return std::unique_ptr<Device>(std::move(device));
}

}  // namespace kernels
}  // namespace relaxps
