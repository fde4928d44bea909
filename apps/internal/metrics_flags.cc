#include "apps/internal/metrics_flags.h"

#include <cstdio>

#include <gflags/gflags.h>

#include "common/process_metrics.h"

DEFINE_int32(metrics_port, 0,
             "Serve Prometheus metrics on http://<metrics_bind>:<port>/metrics (0: off)");
DEFINE_string(metrics_bind, "",
              "Address the metrics port binds (default: the interface of --bind; 127.0.0.1 "
              "for the worker). A non-loopback address exposes counters, never the model");

namespace relaxps {

bool MetricsEnabled() { return FLAGS_metrics_port != 0; }

StatusOr<std::unique_ptr<metrics::MetricsExporter>> StartMetricsFromFlags(
    const char* binary, const std::string& zmq_bind, metrics::Registry* registry) {
  if (FLAGS_metrics_port == 0) return std::unique_ptr<metrics::MetricsExporter>();
  if (FLAGS_metrics_port < 0 || FLAGS_metrics_port > 65535) {
    return InvalidArgumentError("--metrics_port=" + std::to_string(FLAGS_metrics_port) +
                                " is not a TCP port (1..65535, or 0 for off)");
  }
  metrics::ExporterOptions options;
  options.address =
      FLAGS_metrics_bind.empty() ? metrics::BindAddressOf(zmq_bind) : FLAGS_metrics_bind;
  options.port = FLAGS_metrics_port;
  metrics::AddProcessCollector(registry);
  auto exporter = metrics::MetricsExporter::Start(options, registry);
  if (!exporter.ok()) return exporter.status().WithPrefix("--metrics_port");
  const bool v6 = options.address.find(':') != std::string::npos;
  std::printf("%s metrics on http://%s%s%s:%d/metrics\n", binary, v6 ? "[" : "",
              options.address.c_str(), v6 ? "]" : "", (*exporter)->port());
  std::fflush(stdout);
  return exporter;
}

}  // namespace relaxps
