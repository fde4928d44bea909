// Helpers shared by the kernels tests.
#ifndef RELAXPS_TESTS_KERNELS_KERNEL_TEST_UTIL_H_
#define RELAXPS_TESTS_KERNELS_KERNEL_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "kernels/device.h"

namespace relaxps {
namespace kernels {

// n floats uniform in [lo, hi), deterministic for a seed.
inline std::vector<float> RandomVector(size_t n, uint32_t seed, float lo = -1.0f,
                                       float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// `rounds` times: x (in a buffer from AllocHost) goes to the device with
// CopyToDeviceAsync, is doubled by Scale on the compute stream and comes back
// into the same host buffer with CopyToHostAsync, each step ordered after the
// previous one by an event only. Returns the host buffer's final contents
// (x * 2^rounds when the events order the streams).
inline std::vector<float> AsyncScaleRoundTrip(Device* device, const std::vector<float>& x,
                                              int rounds) {
  const size_t bytes = x.size() * sizeof(float);
  float* host = static_cast<float*>(device->AllocHost(bytes));
  EXPECT_NE(host, nullptr);
  if (host == nullptr) return {};
  std::copy(x.begin(), x.end(), host);
  DeviceBuffer<float> d(device, x.size());
  const std::unique_ptr<DeviceEvent> uploaded = device->NewEvent();
  const std::unique_ptr<DeviceEvent> scaled = device->NewEvent();
  const std::unique_ptr<DeviceEvent> downloaded = device->NewEvent();
  for (int r = 0; r < rounds; ++r) {
    device->CopyToDeviceAsync(d.data(), host, bytes);
    device->RecordEvent(Stream::kCopy, uploaded.get());
    device->WaitEvent(Stream::kCompute, uploaded.get());
    device->Scale(x.size(), 2.0f, d.data());
    device->RecordEvent(Stream::kCompute, scaled.get());
    device->WaitEvent(Stream::kCopy, scaled.get());
    device->CopyToHostAsync(host, d.data(), bytes);
    device->RecordEvent(Stream::kCopy, downloaded.get());
    device->HostWaitEvent(downloaded.get());
  }
  std::vector<float> out(host, host + x.size());
  device->FreeHost(host);
  return out;
}

}  // namespace kernels
}  // namespace relaxps

#endif  // RELAXPS_TESTS_KERNELS_KERNEL_TEST_UTIL_H_
