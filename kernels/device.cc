// The kernels facade: parses device names and dispatches NewDevice to the
// CPU back end or, when this build has one, the CUDA back end.
#include "kernels/device.h"

#include <dlfcn.h>
#include <unistd.h>

#include <vector>

#include "kernels/cuda/cuda_plugin.h"
#include "kernels/internal/cpu_device.h"

namespace relaxps {
namespace kernels {
namespace {

// The CUDA back end, loaded on first use (see kernels/cuda/cuda_plugin.h).
struct CudaPlugin {
  RelaxpsNewCudaDeviceFn new_device = nullptr;
  RelaxpsCudaDeviceCountFn device_count = nullptr;
  std::string error;  // Why it could not be loaded.
};

[[maybe_unused]] const CudaPlugin& LoadCudaPlugin() {
  static const CudaPlugin* const plugin = [] {
    auto* p = new CudaPlugin();
    std::vector<std::string> candidates;
    char exe[4096];
    const ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (len > 0) {
      std::string dir(exe, static_cast<size_t>(len));
      dir = dir.substr(0, dir.rfind('/'));
      candidates.push_back(dir + "/../lib/" + kRelaxpsCudaPluginName);
      candidates.push_back(dir + "/" + kRelaxpsCudaPluginName);
    }
    candidates.push_back(kRelaxpsCudaPluginName);
    void* handle = nullptr;
    for (const std::string& path : candidates) {
      handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle != nullptr) break;
      p->error = dlerror();
    }
    if (handle == nullptr) {
      p->error = "cannot load the CUDA back end " + std::string(kRelaxpsCudaPluginName) + ": " +
                 p->error;
      return p;
    }
    p->new_device =
        reinterpret_cast<RelaxpsNewCudaDeviceFn>(dlsym(handle, kRelaxpsNewCudaDeviceSymbol));
    p->device_count =
        reinterpret_cast<RelaxpsCudaDeviceCountFn>(dlsym(handle, kRelaxpsCudaDeviceCountSymbol));
    if (p->new_device == nullptr || p->device_count == nullptr) {
      p->new_device = nullptr;
      p->device_count = nullptr;
      p->error = std::string(kRelaxpsCudaPluginName) + " lacks its entry points";
    }
    return p;
  }();
  return *plugin;
}

[[maybe_unused]] StatusOr<std::unique_ptr<Device>> NewCudaDeviceFromPlugin(const DeviceOptions& options) {
  const CudaPlugin& plugin = LoadCudaPlugin();
  if (plugin.new_device == nullptr) return UnavailableError("no CUDA device: " + plugin.error);
  std::string error;
  Device* device = plugin.new_device(&options, &error);
  if (device == nullptr) return UnavailableError(error);  // Already "no CUDA device: ...".
  return std::unique_ptr<Device>(device);
}

}  // namespace

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
      return NewCudaDeviceFromPlugin(options);
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
  const CudaPlugin& plugin = LoadCudaPlugin();
  return plugin.device_count != nullptr ? plugin.device_count() : 0;
#else
  return 0;
#endif
}

}  // namespace kernels
}  // namespace relaxps
