// relaxps-bench-metrics: the per-request cost of a server's metrics hooks
// (server_internal::ServerMetrics: OnRequest + OnReply, i.e. two counter
// increments, a clock read and a histogram observation) next to a yardstick
// measured in the same run: one steady_clock read, the floor of any
// per-request timing. bench/metrics_overhead.sh relates it to the request
// latency. Prints one JSON document.
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <gflags/gflags.h>

#include "common/metrics.h"
#include "proto/relaxps.pb.h"
#include "server/internal/server_metrics.h"
#include "common/flag_help.h"

DEFINE_int64(iterations, 5000000, "Requests per measurement");
DEFINE_int32(reps, 5, "Repetitions; the fastest is reported");

namespace relaxps {
namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Best nanoseconds per iteration of `body` over FLAGS_reps repetitions.
template <typename Body>
double BestNsPerOp(Body body) {
  double best = 1e30;
  for (int r = 0; r < FLAGS_reps; ++r) {
    const int64_t start = NowNs();
    for (int64_t i = 0; i < FLAGS_iterations; ++i) body(i);
    best = std::min(best, static_cast<double>(NowNs() - start) / FLAGS_iterations);
  }
  return best;
}

int Main() {
  metrics::Registry registry;
  server_internal::ServerMetrics hooks(&registry);
  Request push;
  push.msg.header.set_type(wire::PUSH_PULL);
  // A scraper, as Prometheus would run next to the server.
  std::atomic<bool> stop{false};
  std::thread scraper([&] {
    while (!stop.load()) {
      registry.Expose();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  volatile int64_t sink = 0;
  const double clock_ns = BestNsPerOp([&](int64_t) { sink = sink + NowNs(); });
  const double hooks_ns = BestNsPerOp([&](int64_t) {
    push.received_ns = NowNs();
    hooks.OnRequest(push);
    hooks.OnReply(push);
  });
  metrics::Counter* c = registry.GetCounter("bench_total", "b");
  const double counter_ns = BestNsPerOp([&](int64_t) { c->Increment(); });
  metrics::Histogram* h = registry.GetHistogram("bench_seconds", "b", metrics::LatencyBuckets());
  const double observe_ns = BestNsPerOp([&](int64_t i) { h->Observe((i & 1023) * 1e-6); });
  stop.store(true);
  scraper.join();
  std::printf(
      "{\"bench\":\"metrics\",\"iterations\":%lld,\"results\":["
      "{\"name\":\"server_hooks_per_request_ns\",\"value\":%.2f,\"unit\":\"ns\","
      "\"yardstick\":\"steady_clock_now_ns\",\"yardstick_value\":%.2f,\"ratio\":%.3f,"
      "\"better\":\"lower\"},"
      "{\"name\":\"counter_increment_ns\",\"value\":%.2f,\"unit\":\"ns\",\"better\":\"lower\"},"
      "{\"name\":\"histogram_observe_ns\",\"value\":%.2f,\"unit\":\"ns\",\"better\":\"lower\"}]}\n",
      static_cast<long long>(FLAGS_iterations), hooks_ns, clock_ns, hooks_ns / clock_ns,
      counter_ns, observe_ns);
  return 0;
}

}  // namespace
}  // namespace relaxps

int main(int argc, char** argv) {
  relaxps::ParseFlagsWithHelp(&argc, &argv);
  return relaxps::Main();
}
