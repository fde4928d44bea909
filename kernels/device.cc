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

#if defined(RELAXPS_HAVE_CUDA)
// Where the module is looked for, in this order: the installed layout
// (<prefix>/bin/X -> <prefix>/<libdir>/relaxps/, RELAXPS_CUDA_PLUGIN_REL_DIR
// relative to the executable's folder), the build tree (build/bin/X ->
// build/lib/), the executable's own folder.
std::vector<std::string> CudaPluginCandidates() {
  std::vector<std::string> candidates;
  char exe[4096];
  const ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (len > 0) {
    std::string dir(exe, static_cast<size_t>(len));
    dir = dir.substr(0, dir.rfind('/'));
    candidates.push_back(dir + "/" RELAXPS_CUDA_PLUGIN_REL_DIR "/" + kRelaxpsCudaPluginName);
    candidates.push_back(dir + "/../lib/" + kRelaxpsCudaPluginName);
    candidates.push_back(dir + "/" + kRelaxpsCudaPluginName);
  }
  return candidates;
}

const CudaPlugin& LoadCudaPlugin() {
  static const CudaPlugin* const plugin = [] {
    auto* p = new CudaPlugin();
    // A module that is there but does not load is missing its CUDA
    // libraries (NVIDIA's, in no Debian package: relaxps-cuda cannot depend
    // on them); one that is nowhere is not installed. Say which.
    const std::vector<std::string> candidates = CudaPluginCandidates();
    const std::string missing_libraries =
        ". It needs NVIDIA's CUDA runtime and cuBLAS libraries (no Debian package provides "
        "them, so the relaxps-cuda package cannot depend on them): install them and make them "
        "visible to the dynamic linker (ldconfig or LD_LIBRARY_PATH), or run with --device=cpu";
    void* handle = nullptr;
    std::string looked;
    for (const std::string& path : candidates) {
      looked += path + ", ";
      if (access(path.c_str(), F_OK) != 0) continue;
      handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle == nullptr) {
        const char* why = dlerror();
        p->error = "the CUDA back end " + path + " is installed but cannot be loaded: " +
                   (why != nullptr ? why : "unknown dlopen error") + missing_libraries;
        return p;
      }
      break;
    }
    if (handle == nullptr) {  // Last, the dynamic linker's search path.
      handle = dlopen(kRelaxpsCudaPluginName, RTLD_NOW | RTLD_LOCAL);
      if (handle == nullptr) {
        const char* why = dlerror();
        const std::string reason = why != nullptr ? why : "unknown dlopen error";
        if (reason.rfind(kRelaxpsCudaPluginName, 0) == 0) {  // The module itself is not found.
          p->error = "the CUDA back end " + std::string(kRelaxpsCudaPluginName) +
                     " is not installed (looked for " + looked +
                     "and in the dynamic linker's path): install the relaxps-cuda package, "
                     "or run with --device=cpu";
        } else {
          p->error = "the CUDA back end " + std::string(kRelaxpsCudaPluginName) +
                     " cannot be loaded: " + reason + missing_libraries;
        }
        return p;
      }
    }
    p->new_device =
        reinterpret_cast<RelaxpsNewCudaDeviceFn>(dlsym(handle, kRelaxpsNewCudaDeviceSymbol));
    p->device_count =
        reinterpret_cast<RelaxpsCudaDeviceCountFn>(dlsym(handle, kRelaxpsCudaDeviceCountSymbol));
    if (p->new_device == nullptr || p->device_count == nullptr) {
      p->new_device = nullptr;
      p->device_count = nullptr;
      p->error = std::string(kRelaxpsCudaPluginName) +
                 " lacks its entry points (a module of another relaxps version?)";
    }
    return p;
  }();
  return *plugin;
}

StatusOr<std::unique_ptr<Device>> NewCudaDeviceFromPlugin(const DeviceOptions& options) {
  const CudaPlugin& plugin = LoadCudaPlugin();
  if (plugin.new_device == nullptr) return UnavailableError("no CUDA device: " + plugin.error);
  std::string error;
  Device* device = plugin.new_device(&options, &error);
  if (device == nullptr) return UnavailableError(error);  // Already "no CUDA device: ...".
  return std::unique_ptr<Device>(device);
}
#endif  // RELAXPS_HAVE_CUDA

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
