// The C entry points of the CUDA back-end plugin (librelaxps_kernels_cuda.so).
//
// The CUDA back end is a shared module loaded with dlopen() the first time a
// process asks for CUDA, so processes that never use a GPU (servers on CPU,
// relaxps-ctl, CPU workers) neither load the CUDA runtime and cuBLAS (about
// 150 MB of resident memory) nor need them installed.
#ifndef RELAXPS_KERNELS_CUDA_CUDA_PLUGIN_H_
#define RELAXPS_KERNELS_CUDA_CUDA_PLUGIN_H_

#include <string>

#include "kernels/device.h"

extern "C" {
// Creates a CUDA device; on failure returns nullptr and sets *error to a
// one-line reason. The caller owns the result.
using RelaxpsNewCudaDeviceFn = relaxps::kernels::Device* (*)(
    const relaxps::kernels::DeviceOptions* options, std::string* error);
// Number of usable CUDA devices (0 without a driver or GPU).
using RelaxpsCudaDeviceCountFn = int (*)();
}

// Symbol names looked up with dlsym().
inline constexpr char kRelaxpsNewCudaDeviceSymbol[] = "RelaxpsNewCudaDevice";
inline constexpr char kRelaxpsCudaDeviceCountSymbol[] = "RelaxpsCudaDeviceCount";
// File name of the module, looked up in <exe dir>/RELAXPS_CUDA_PLUGIN_REL_DIR
// (the installed layout, <prefix>/<libdir>/relaxps), <exe dir>/../lib (the
// build tree), the executable's own directory, then the dynamic linker's
// search path. When it is found but does not load (NVIDIA's libraries
// missing), NewDevice's error names the missing library.
inline constexpr char kRelaxpsCudaPluginName[] = "librelaxps_kernels_cuda.so";

#endif  // RELAXPS_KERNELS_CUDA_CUDA_PLUGIN_H_
