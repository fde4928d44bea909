// Internal: factory of the CPU back end of kernels::Device. Not installed;
// users call kernels::NewDevice().
#ifndef RELAXPS_KERNELS_INTERNAL_CPU_DEVICE_H_
#define RELAXPS_KERNELS_INTERNAL_CPU_DEVICE_H_

#include <memory>

#include "kernels/device.h"

namespace relaxps {
namespace kernels {

// Creates the CPU device. Cannot fail. options.cpu_threads > 0 sets the
// OpenBLAS thread count the first time a CPU device is created in this
// process (it is a process-wide setting; later values are ignored with a log
// line).
std::unique_ptr<Device> NewCpuDevice(const DeviceOptions& options);

// The CPU device's optimizer updates (Device::SgdUpdate, ...) fused with the
// copy of the updated parameters: w[0, n) is also stored to w_copy[0, n) in
// the same pass, as each element is written. w, the state and w_copy are
// bit-identical to the update followed by a memcpy. Host memory only; w_copy
// must not overlap the other arrays. Used by the built-in optimizers'
// ApplyAndCopy on a CPU device (kernels/optimizer.cc).
void CpuSgdUpdateAndCopy(float* w, const float* g, size_t n, float lr, float* w_copy);
void CpuMomentumUpdateAndCopy(float* w, float* v, const float* g, size_t n, float lr, float mu,
                              float* w_copy);
void CpuAdamUpdateAndCopy(float* w, float* m, float* v, const float* g, size_t n,
                          const AdamParams& p, float* w_copy);
void CpuAdagradUpdateAndCopy(float* w, float* h, const float* g, size_t n, float lr, float eps,
                             float* w_copy);

}  // namespace kernels
}  // namespace relaxps

#endif  // RELAXPS_KERNELS_INTERNAL_CPU_DEVICE_H_
