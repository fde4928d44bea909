// relaxps-bench-optimizer: throughput of the fused optimizer updates of a
// kernels::Device, in GB/s of bytes touched, next to a plain axpy measured in
// the same run on the same device (the bandwidth yardstick). With
// --device=cuda it also reports a device-to-device memcpy.
//
// Bytes touched per element: axpy reads x, y and writes y (12 B); an update
// reads g and reads + writes w and each state slot (4 * (1 + 2 * (1 + slots))
// B: sgd 12, momentum 20, adagrad 20, adam 28).
//
// On a CPU device it also times the passes over the bytes that a dense
// PushPull of --passes_bytes makes besides moving them (see PushPullPasses):
// their CPU seconds per GB moved, added to the ZeroMQ echo's own, bound what
// any PushPull of that size can reach on a machine's cores.
//
// Prints one JSON object on stdout, e.g.
//   {"device":"cpu","n":16777216,"iters":10,"reps":5,"optimizer_update":[
//     {"name":"adam","gbps":9.1,"axpy_gbps":10.2,"ratio":0.89},...],
//    "pushpull_passes":{"bytes":16777216,"check_s":0.0016,...,"cpu_s_per_gb":0.29}}
#include <gflags/gflags.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernels/device.h"
#include "kernels/optimizer.h"
#include "common/flag_help.h"

DEFINE_int64(n, int64_t{1} << 24, "Floats per parameter array (default 16M = 64 MiB).");
DEFINE_int64(copy_n, int64_t{1} << 18,
             "Floats per array of the update-and-copy comparison (default 256K = 1 MiB, a "
             "PUSH_PULL part's size).");
DEFINE_int64(passes_bytes, int64_t{16} << 20,
             "Dense table size of the PushPull passes measurement (CPU devices; 0: skip).");
DEFINE_int32(iters, 10, "Updates per timed repetition.");
DEFINE_int32(reps, 5, "Timed repetitions; the best one is reported.");
DEFINE_string(device, "cpu", "Device to measure: cpu or cuda.");
DEFINE_int32(cuda_device, 0, "CUDA device ordinal (with --device=cuda).");

namespace relaxps {
namespace {

using kernels::Device;
using kernels::DeviceBuffer;

// Seconds for FLAGS_iters calls of `body`, after the device is idle.
double TimeCalls(Device* device, const std::function<void()>& body) {
  device->Synchronize();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < FLAGS_iters; ++i) body();
  device->Synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Best (shortest) seconds per call of each body over FLAGS_reps repetitions,
// after one warm-up call each. The bodies alternate repetition by repetition
// so that both see the same machine state (other load, clocks, caches).
std::vector<double> BestSecondsPerCall(Device* device,
                                       const std::vector<std::function<void()>>& bodies) {
  for (const auto& body : bodies) body();
  std::vector<double> best(bodies.size(), 1e30);
  for (int rep = 0; rep < FLAGS_reps; ++rep) {
    for (size_t b = 0; b < bodies.size(); ++b) {
      best[b] = std::min(best[b], TimeCalls(device, bodies[b]) / FLAGS_iters);
    }
  }
  return best;
}

double Gbps(double bytes, double seconds) { return bytes / seconds / 1e9; }

double MemcpyGbps(Device* device, size_t n) {
  DeviceBuffer<float> src(device, n), dst(device, n);
  device->Fill(src.data(), n, 1.0f);
  const double s = BestSecondsPerCall(
      device, {[&] { device->CopyOnDevice(dst.data(), src.data(), n * sizeof(float)); }})[0];
  return Gbps(8.0 * n, s);  // Read + write.
}

struct Row {
  std::string name;
  double gbps;
  double axpy_gbps;
  // Host devices: a PUSH_PULL's update and reply snapshot of --copy_n floats
  // done apart (Apply, then memcpy) over done together (ApplyAndCopy).
  double copy_speedup = 0;
};

// Seconds of Apply followed by a memcpy of the parameters, and of
// ApplyAndCopy, on n floats in host memory.
std::vector<double> ApplyThenCopySeconds(Device* device, const kernels::Optimizer& opt, size_t n) {
  std::vector<float> w(n, 1.0f), g(n, 0.01f), copy(n);
  std::vector<std::vector<float>> state(opt.num_state_slots(), std::vector<float>(n, 0.0f));
  std::vector<float*> state_ptrs;
  for (auto& s : state) state_ptrs.push_back(s.data());
  int64_t step = 0;
  return BestSecondsPerCall(
      device,
      {[&] {
         opt.Apply(device, w.data(), state_ptrs.data(), g.data(), n, ++step, 1.0f);
         std::memcpy(copy.data(), w.data(), n * sizeof(float));
       },
       [&] {
         opt.ApplyAndCopy(device, w.data(), state_ptrs.data(), g.data(), n, ++step, 1.0f,
                          copy.data());
       }});
}

StatusOr<Row> MeasureOptimizer(Device* device, const std::string& name, size_t n) {
  OptimizerOptions options;
  options.name = name;
  options.lr = 1e-3f;
  ASSIGN_OR_RETURN(std::unique_ptr<kernels::Optimizer> opt, kernels::NewOptimizer(options));
  DeviceBuffer<float> w(device, n), g(device, n);
  device->Fill(w.data(), n, 1.0f);
  device->Fill(g.data(), n, 0.01f);
  std::vector<DeviceBuffer<float>> state;
  std::vector<float*> state_ptrs;
  for (int s = 0; s < opt->num_state_slots(); ++s) {
    state.emplace_back(device, n);
    device->Fill(state.back().data(), n, opt->state_init(s));
  }
  for (auto& s : state) state_ptrs.push_back(s.data());
  // The yardstick: y += a * x over arrays of the same length.
  DeviceBuffer<float> x(device, n), y(device, n);
  device->Fill(x.data(), n, 1e-3f);
  device->Fill(y.data(), n, 1.0f);

  int64_t step = 0;
  const std::vector<double> seconds = BestSecondsPerCall(
      device, {[&] { opt->Apply(device, w.data(), state_ptrs.data(), g.data(), n, ++step, 1.0f); },
               [&] { device->Axpy(n, 1e-3f, x.data(), y.data()); }});
  if (!device->AllFinite(w.data(), n)) {
    return InternalError(name + " produced non-finite parameters");
  }
  const double bytes = 4.0 * n * (1 + 2 * (1 + opt->num_state_slots()));
  Row row;
  row.name = name;
  row.gbps = Gbps(bytes, seconds[0]);
  row.axpy_gbps = Gbps(12.0 * n, seconds[1]);
  if (device->type() == kernels::DeviceType::kCpu) {
    const std::vector<double> apart_together =
        ApplyThenCopySeconds(device, *opt, static_cast<size_t>(FLAGS_copy_n));
    row.copy_speedup = apart_together[0] / apart_together[1];
  }
  return row;
}

// The passes a dense PushPull of n floats makes over its bytes besides
// moving them, each timed alone on n floats: the finiteness check (twice: the
// client checks a split push whole before its first part goes, at 16 MiB
// every push is split, and the server checks what it receives), the server's
// update with its reply snapshot (sgd ApplyAndCopy) and the client's copy of
// the reply into `out`. ZeroMQ's and the kernel's work is not in it: the echo
// yardstick measures that.
struct PushPullPasses {
  double check_s = 0;
  double apply_and_copy_s = 0;
  double copy_s = 0;
  double Seconds() const { return 2 * check_s + apply_and_copy_s + copy_s; }
};

StatusOr<PushPullPasses> MeasurePushPullPasses(Device* device, size_t n) {
  OptimizerOptions options;
  options.name = "sgd";
  options.lr = 1e-3f;
  ASSIGN_OR_RETURN(std::unique_ptr<kernels::Optimizer> opt, kernels::NewOptimizer(options));
  std::vector<float> g(n, 0.01f), w(n, 1.0f), reply(n), out(n);
  int64_t step = 0;
  bool finite = true;
  const std::vector<double> s = BestSecondsPerCall(
      device, {[&] { finite = device->AllFinite(g.data(), n) && finite; },
               [&] {
                 opt->ApplyAndCopy(device, w.data(), nullptr, g.data(), n, ++step, 1.0f,
                                   reply.data());
               },
               [&] { std::memcpy(out.data(), reply.data(), n * sizeof(float)); }});
  if (!finite) return InternalError("AllFinite rejected a finite gradient");
  PushPullPasses p;
  p.check_s = s[0];
  p.apply_and_copy_s = s[1];
  p.copy_s = s[2];
  return p;
}

int Main() {
  if (FLAGS_n <= 0 || FLAGS_iters <= 0 || FLAGS_reps <= 0 || FLAGS_passes_bytes < 0) {
    std::fprintf(stderr, "--n, --iters and --reps must be positive, --passes_bytes >= 0\n");
    return 2;
  }
  auto type = kernels::ParseDeviceType(FLAGS_device);
  if (!type.ok()) {
    std::fprintf(stderr, "%s\n", type.status().ToString().c_str());
    return 2;
  }
  kernels::DeviceOptions options;
  options.type = *type;
  options.cuda_device = FLAGS_cuda_device;
  auto device_or = kernels::NewDevice(options);
  if (!device_or.ok()) {
    std::fprintf(stderr, "%s\n", device_or.status().ToString().c_str());
    return 1;
  }
  Device* device = device_or->get();
  const size_t n = static_cast<size_t>(FLAGS_n);

  std::string json = "{\"device\":\"" + device->Name() + "\",\"n\":" + std::to_string(n) +
                     ",\"iters\":" + std::to_string(FLAGS_iters) +
                     ",\"reps\":" + std::to_string(FLAGS_reps) + ",\"optimizer_update\":[";
  bool first = true;
  for (const char* name : {"sgd", "momentum", "adam", "adagrad"}) {
    auto row = MeasureOptimizer(device, name, n);
    if (!row.ok()) {
      std::fprintf(stderr, "%s: %s\n", name, row.status().ToString().c_str());
      return 1;
    }
    char buf[256];
    std::snprintf(buf, sizeof(buf),
                  "%s{\"name\":\"%s\",\"gbps\":%.2f,\"axpy_gbps\":%.2f,\"ratio\":%.3f,"
                  "\"apply_and_copy_speedup\":%.3f}",
                  first ? "" : ",", row->name.c_str(), row->gbps, row->axpy_gbps,
                  row->gbps / row->axpy_gbps, row->copy_speedup);
    json += buf;
    first = false;
  }
  json += "]";
  const size_t passes_n = static_cast<size_t>(FLAGS_passes_bytes) / sizeof(float);
  if (device->type() == kernels::DeviceType::kCpu && passes_n > 0) {
    auto passes = MeasurePushPullPasses(device, passes_n);
    if (!passes.ok()) {
      std::fprintf(stderr, "pushpull passes: %s\n", passes.status().ToString().c_str());
      return 1;
    }
    const double bytes = static_cast<double>(passes_n * sizeof(float));
    char buf[256];
    std::snprintf(buf, sizeof(buf),
                  ",\"pushpull_passes\":{\"bytes\":%.0f,\"check_s\":%.6f,"
                  "\"apply_and_copy_s\":%.6f,\"copy_s\":%.6f,\"cpu_s_per_gb\":%.4f}",
                  bytes, passes->check_s, passes->apply_and_copy_s, passes->copy_s,
                  passes->Seconds() / (2 * bytes / 1e9));  // A PushPull moves its bytes twice.
    json += buf;
  }
  if (device->type() == kernels::DeviceType::kCuda) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), ",\"memcpy_d2d_gbps\":%.2f", MemcpyGbps(device, n));
    json += buf;
  }
  json += "}";
  std::printf("%s\n", json.c_str());
  return 0;
}

}  // namespace
}  // namespace relaxps

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "Measures optimizer-update throughput (GB/s) against axpy; prints one JSON object.");
  relaxps::ParseFlagsWithHelp(&argc, &argv);
  return relaxps::Main();
}
