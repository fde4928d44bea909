// Exports the CUDA back end through the plugin's C entry points.
#include "kernels/cuda/cuda_plugin.h"

#include "kernels/cuda/cuda_device.h"

extern "C" {

__attribute__((visibility("default"))) relaxps::kernels::Device* RelaxpsNewCudaDevice(
    const relaxps::kernels::DeviceOptions* options, std::string* error) {
  auto device = relaxps::kernels::NewCudaDevice(*options);
  if (!device.ok()) {
    *error = device.status().message();
    return nullptr;
  }
  return device->release();
}

__attribute__((visibility("default"))) int RelaxpsCudaDeviceCount() {
  return relaxps::kernels::CudaRuntimeDeviceCount();
}

}  // extern "C"
