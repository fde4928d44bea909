// kernels::Device: the numeric back end of relaxps.
//
// One interface, two implementations: CPU (auto-vectorized loops + OpenBLAS
// GEMM) and CUDA (custom kernels + cuBLAS). Servers use it for optimizer
// updates and gradient sums; workers use it for the model's layers.
//
// Pointers passed to a Device's methods live in that device's memory: host
// memory for the CPU device, device memory (from Alloc) for CUDA. Use
// CopyToDevice / CopyToHost to cross. All matrices are row-major.
//
// Work may be queued asynchronously on two in-order streams (see Stream):
// every method runs on the compute stream except the asynchronous copies,
// which run on a copy stream so that a transfer can overlap computation.
// Events order the two streams and let the host wait for a point in either.
// Synchronize() waits for both. Methods that return a value to the host
// (SoftmaxCrossEntropy, AllFinite, ArgmaxRows) and the synchronous copies
// wait for the compute stream implicitly. On the CPU device everything has
// completed when the call returns; events are no-ops there.
//
// Asynchronous copies need page-locked host memory (AllocHost) to be truly
// asynchronous on CUDA; the synchronous copies accept any host memory.
//
// Thread-safety: a Device is used by one thread at a time (one per trainer or
// per server shard thread). Create one per thread if needed. Exception:
// AllocHost and FreeHost may be called from any thread at any time (a pinned
// buffer handed to the transport is released by whichever thread drops its
// last reference).
#ifndef RELAXPS_KERNELS_DEVICE_H_
#define RELAXPS_KERNELS_DEVICE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace relaxps {
namespace kernels {

enum class DeviceType { kCpu, kCuda };

// Parses "cpu" / "cuda".
StatusOr<DeviceType> ParseDeviceType(const std::string& name);

struct DeviceOptions {
  DeviceType type = DeviceType::kCpu;
  // CUDA device ordinal. Ignored on CPU.
  int cuda_device = 0;
  // Threads the CPU back end (OpenBLAS) may use. 1 avoids oversubscription
  // when several processes share a small machine; 0 leaves OpenBLAS' default.
  int cpu_threads = 1;
};

// Hyper-parameters of Adam; `step` is the 1-based step count used for bias
// correction.
struct AdamParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  int64_t step = 1;
};

// The two in-order work queues of a device. kCompute runs every method of
// Device except the asynchronous copies, which run on kCopy. Work on one
// stream is not ordered with work on the other unless an event orders it.
enum class Stream { kCompute, kCopy };

class Device;

// A marker in a stream's work (a cudaEvent_t on CUDA), created by
// Device::NewEvent and used only with that device. Owned by the caller;
// destroy it before its device. A never-recorded event counts as complete.
class DeviceEvent {
 public:
  DeviceEvent(const DeviceEvent&) = delete;
  DeviceEvent& operator=(const DeviceEvent&) = delete;
  virtual ~DeviceEvent() = default;

  // The device that created the event.
  const Device* device() const { return device_; }

 protected:
  explicit DeviceEvent(const Device* device) : device_(device) {}

 private:
  const Device* const device_;
};

class Device {
 public:
  Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  virtual ~Device() = default;

  // "cpu" or "cuda:<ordinal>".
  virtual std::string Name() const = 0;
  virtual DeviceType type() const = 0;

  // ---- Memory -------------------------------------------------------------
  // Allocates `bytes` of device memory (64-byte aligned on CPU). Returns
  // nullptr on failure. Free(nullptr) is a no-op.
  virtual void* Alloc(size_t bytes) = 0;
  virtual void Free(void* p) = 0;
  // Copies between host memory (any) and this device's memory, ordered after
  // the work queued on the compute stream. Both return only when the host
  // buffer may be reused (CopyToDevice) or read (CopyToHost).
  virtual void CopyToDevice(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void CopyToHost(void* host_dst, const void* src, size_t bytes) = 0;
  // Copies within this device's memory.
  virtual void CopyOnDevice(void* dst, const void* src, size_t bytes) = 0;
  virtual void Fill(float* x, size_t n, float value) = 0;
  // Waits for all queued work on both streams.
  virtual void Synchronize() = 0;

  // ---- Page-locked host memory and asynchronous copies ---------------------
  // Allocates `bytes` of host memory that the device can copy to and from
  // asynchronously: page-locked (cudaMallocHost) on CUDA, ordinary 64-byte
  // aligned memory on CPU. Returns nullptr on failure; page-locked memory is
  // a limited system resource, so callers fall back to ordinary memory.
  // FreeHost(nullptr) is a no-op. Callable from any thread; the device must
  // outlive the memory.
  virtual void* AllocHost(size_t bytes) = 0;
  virtual void FreeHost(void* p) = 0;

  // Queue a copy on the copy stream and return at once (CPU: copy and
  // return). Not ordered with the compute stream: make the copy stream wait
  // for the compute work that produces or last reads the device buffer, and
  // make later readers wait for an event recorded after the copy. Until that
  // event has completed, the host buffer must be neither freed nor written,
  // and after CopyToHostAsync not read either. The host buffer should come
  // from AllocHost; with other memory the copy is still correct but may
  // block the caller until the transfer has finished.
  virtual void CopyToDeviceAsync(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void CopyToHostAsync(void* host_dst, const void* src, size_t bytes) = 0;

  // A new, never-recorded event of this device.
  virtual std::unique_ptr<DeviceEvent> NewEvent() = 0;
  // Marks the end of the work queued on `stream` so far; recording again
  // moves the mark. REQUIRES: event->device() == this (also for the two
  // methods below).
  virtual void RecordEvent(Stream stream, DeviceEvent* event) = 0;
  // Work queued on `stream` after this call starts only once the work marked
  // by `event` has completed. Does not block the host.
  virtual void WaitEvent(Stream stream, const DeviceEvent* event) = 0;
  // Blocks the host until the work marked by `event` has completed.
  virtual void HostWaitEvent(const DeviceEvent* event) = 0;

  // ---- Optimizer updates (element-wise over n parameters) -----------------
  // w -= lr * g
  virtual void SgdUpdate(float* w, const float* g, size_t n, float lr) = 0;
  // v = mu * v + g; w -= lr * v
  virtual void MomentumUpdate(float* w, float* v, const float* g, size_t n, float lr,
                              float mu) = 0;
  // m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
  // w -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
  virtual void AdamUpdate(float* w, float* m, float* v, const float* g, size_t n,
                          const AdamParams& p) = 0;
  // h += g^2; w -= lr * g / (sqrt(h) + eps)
  virtual void AdagradUpdate(float* w, float* h, const float* g, size_t n, float lr,
                             float eps) = 0;

  // ---- Vector ops ----------------------------------------------------------
  // y += a * x
  virtual void Axpy(size_t n, float a, const float* x, float* y) = 0;
  // x *= a
  virtual void Scale(size_t n, float a, float* x) = 0;
  // True if no element of x is NaN or +-Inf.
  virtual bool AllFinite(const float* x, size_t n) = 0;
  // IEEE fp32 <-> fp16 (binary16), round to nearest even.
  virtual void FloatToHalf(const float* in, uint16_t* out, size_t n) = 0;
  virtual void HalfToFloat(const uint16_t* in, float* out, size_t n) = 0;

  // ---- Dense linear algebra -------------------------------------------------
  // C = alpha * op(A) * op(B) + beta * C, row-major; op(A) is m x k, op(B) is
  // k x n; lda/ldb/ldc are the row strides of A, B, C as stored.
  virtual void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                    const float* a, int lda, const float* b, int ldb, float beta, float* c,
                    int ldc) = 0;

  // ---- Layers (used by the trainer) ----------------------------------------
  // y[r][c] += bias[c] for a rows x cols matrix.
  virtual void AddBias(float* y, const float* bias, int rows, int cols) = 0;
  // db[c] = sum_r dy[r][c]  (overwrites db).
  virtual void BiasGrad(const float* dy, float* db, int rows, int cols) = 0;
  // Per-channel bias for NCHW-like layout: y[c][s] += bias[c], s < spatial.
  virtual void AddChannelBias(float* y, const float* bias, int channels, int spatial) = 0;
  // db[c] += sum_s dy[c][s]  (accumulates into db).
  virtual void ChannelBiasGradAccumulate(const float* dy, float* db, int channels,
                                         int spatial) = 0;
  // x = max(x, 0) in place.
  virtual void ReluForward(float* x, size_t n) = 0;
  // dy[i] = y[i] > 0 ? dy[i] : 0, where y is the ReLU output.
  virtual void ReluBackward(const float* y, float* dy, size_t n) = 0;
  // One image (channels x height x width) -> columns matrix of shape
  // (channels*k*k) x (out_h*out_w), stride 1, zero padding `pad`.
  virtual void Im2Col(const float* image, int channels, int height, int width, int k,
                      int pad, float* columns) = 0;
  // Inverse scatter-add of Im2Col: accumulates columns into image (caller zeroes it).
  virtual void Col2Im(const float* columns, int channels, int height, int width, int k,
                      int pad, float* image) = 0;
  // Max pool with window = stride = `pool` over planes (count planes of
  // height x width). Writes y (planes x height/pool x width/pool) and, for
  // each output, the flat input index of the max within its plane group
  // (argmax indexes into x).
  virtual void MaxPoolForward(const float* x, int planes, int height, int width, int pool,
                              float* y, int32_t* argmax) = 0;
  // dx (n_in elements, overwritten with zeros first) gets dy scattered to argmax.
  virtual void MaxPoolBackward(const float* dy, const int32_t* argmax, size_t n_out,
                               float* dx, size_t n_in) = 0;
  // Inverted dropout: mask[i] = (u_i >= p) / (1 - p) for u_i uniform from a
  // counter-based generator of (seed, i); x *= mask. Deterministic for a seed.
  virtual void DropoutForward(float* x, float* mask, size_t n, float p, uint64_t seed) = 0;
  // x *= mask (element-wise); used for dropout's backward.
  virtual void Multiply(float* x, const float* mask, size_t n) = 0;
  // Softmax cross-entropy over a batch x classes logits matrix with int32
  // labels. Writes dlogits = (softmax - onehot) / batch and returns the mean
  // loss. If `correct` is non-null, stores the number of rows whose argmax
  // equals the label.
  virtual float SoftmaxCrossEntropy(const float* logits, const int32_t* labels, int batch,
                                    int classes, float* dlogits, int* correct) = 0;
  // Writes argmax per row into out (host memory).
  virtual void ArgmaxRows(const float* x, int rows, int cols, int32_t* host_out) = 0;
};

// Creates a device. Returns InvalidArgument for an unknown type and
// Unavailable with a one-line reason when CUDA was requested but this build
// has no CUDA support or the machine has no usable GPU.
StatusOr<std::unique_ptr<Device>> NewDevice(const DeviceOptions& options);

// True when this build was compiled with the CUDA back end.
bool BuiltWithCuda();

// Number of usable CUDA devices (0 without CUDA support or GPU).
int CudaDeviceCount();

// RAII buffer of `n` elements of T in a device's memory.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Device* device, size_t n) : device_(device), n_(n) {
    if (n > 0) {
      data_ = static_cast<T*>(device->Alloc(n * sizeof(T)));
      CHECK(data_ != nullptr) << "device allocation of " << n * sizeof(T) << " bytes failed";
    }
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      Reset();
      device_ = o.device_;
      data_ = o.data_;
      n_ = o.n_;
      o.data_ = nullptr;
      o.n_ = 0;
    }
    return *this;
  }
  ~DeviceBuffer() { Reset(); }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return n_; }

 private:
  void Reset() {
    if (data_ != nullptr) device_->Free(data_);
    data_ = nullptr;
    n_ = 0;
  }
  Device* device_ = nullptr;
  T* data_ = nullptr;
  size_t n_ = 0;
};

}  // namespace kernels
}  // namespace relaxps

#endif  // RELAXPS_KERNELS_DEVICE_H_
