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

}  // namespace kernels
}  // namespace relaxps

#endif  // RELAXPS_KERNELS_INTERNAL_CPU_DEVICE_H_
