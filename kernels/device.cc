// The kernels facade: parses device names and dispatches NewDevice to the
// CPU back end or, when this build has one, the CUDA back end.
#include "kernels/device.h"

#include "kernels/internal/cpu_device.h"

#if defined(RELAXPS_HAVE_CUDA)
#include "kernels/cuda/cuda_device.h"
#endif

namespace relaxps {
namespace kernels {

StatusOr<DeviceType> ParseDeviceType(const std::string& name) {
  if (name == "cpu") return DeviceType::kCpu;
  if (name == "cuda") return DeviceType::kCuda;
  return InvalidArgumentError("unknown device '" + name + "' (expected cpu or cuda)");
}

StatusOr<std::unique_ptr<Device>> NewDevice(const DeviceOptions& options) {
  switch (options.type) {
    case DeviceType::kCpu:
      return NewCpuDevice(options);
    case DeviceType::kCuda:
#if defined(RELAXPS_HAVE_CUDA)
      return NewCudaDevice(options);
#else
      return UnavailableError(
          "no CUDA device: this build has no CUDA back end (configured with "
          "RELAXPS_WITH_CUDA=OFF or without nvcc)");
#endif
  }
  return InvalidArgumentError("unknown device type " +
                              std::to_string(static_cast<int>(options.type)));
}

bool BuiltWithCuda() {
#if defined(RELAXPS_HAVE_CUDA)
  return true;
#else
  return false;
#endif
}

int CudaDeviceCount() {
#if defined(RELAXPS_HAVE_CUDA)
  return CudaRuntimeDeviceCount();
#else
  return 0;
#endif
}

}  // namespace kernels
}  // namespace relaxps
