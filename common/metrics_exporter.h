// MetricsExporter: serves a metrics::Registry over HTTP for Prometheus
// (cpp-httplib): GET /metrics answers the text exposition format (version
// 0.0.4); any other path is 404. Requests are served by one background
// thread; a scrape runs the registry's collectors on that thread.
//
// Thread-safety: Start() and the destructor from one thread; port() from any.
#ifndef RELAXPS_COMMON_METRICS_EXPORTER_H_
#define RELAXPS_COMMON_METRICS_EXPORTER_H_

#include <memory>
#include <string>

#include "common/metrics.h"
#include "common/status.h"

namespace relaxps {
namespace metrics {

struct ExporterOptions {
  // Interface address to listen on, e.g. "127.0.0.1", "0.0.0.0" or "::1".
  std::string address = "127.0.0.1";
  // TCP port; 0 lets the OS choose (see port()).
  int port = 0;
};

class MetricsExporter {
 public:
  // Binds and starts serving `registry` (which must outlive the exporter).
  // Unavailable naming the address if it cannot be bound (port in use,
  // address not on this host).
  static StatusOr<std::unique_ptr<MetricsExporter>> Start(const ExporterOptions& options,
                                                           const Registry* registry);

  MetricsExporter(const MetricsExporter&) = delete;
  MetricsExporter& operator=(const MetricsExporter&) = delete;
  // Stops serving and joins the thread.
  virtual ~MetricsExporter() = default;

  // The bound port.
  virtual int port() const = 0;

 protected:
  MetricsExporter() = default;
};

// The host part of a ZeroMQ tcp endpoint, for binding the metrics port on
// the same interface: "tcp://10.0.0.2:5555" -> "10.0.0.2", "tcp://*:*" ->
// "0.0.0.0", "tcp://[::1]:*" -> "::1"; "127.0.0.1" for anything else
// (ipc://, inproc://).
std::string BindAddressOf(const std::string& zmq_endpoint);

}  // namespace metrics
}  // namespace relaxps

#endif  // RELAXPS_COMMON_METRICS_EXPORTER_H_
