// Internal: factory of the CUDA back end of kernels::Device. Declared in
// plain C++ (no CUDA headers) so that kernels/device.cc can call it; only
// linked when the build has RELAXPS_HAVE_CUDA. Not installed.
#ifndef RELAXPS_KERNELS_CUDA_CUDA_DEVICE_H_
#define RELAXPS_KERNELS_CUDA_CUDA_DEVICE_H_

#include <memory>

#include "common/status.h"
#include "kernels/device.h"

namespace relaxps {
namespace kernels {

// Creates a device on GPU options.cuda_device with its own stream and cuBLAS
// handle. Returns Unavailable with a one-line reason when there is no usable
// GPU (no driver, no device, ordinal out of range, context creation failed).
StatusOr<std::unique_ptr<Device>> NewCudaDevice(const DeviceOptions& options);

// Number of GPUs the CUDA runtime reports; 0 when the driver is missing or
// the runtime reports an error.
int CudaRuntimeDeviceCount();

}  // namespace kernels
}  // namespace relaxps

#endif  // RELAXPS_KERNELS_CUDA_CUDA_DEVICE_H_
