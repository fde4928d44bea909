// --metrics_port and --metrics_bind, shared by relaxps-coordinator,
// relaxps-server and relaxps-worker: the Prometheus endpoint of a binary
// (common/metrics_exporter.h).
#ifndef RELAXPS_APPS_INTERNAL_METRICS_FLAGS_H_
#define RELAXPS_APPS_INTERNAL_METRICS_FLAGS_H_

#include <memory>
#include <string>

#include "common/metrics.h"
#include "common/metrics_exporter.h"
#include "common/status.h"

namespace relaxps {

// True when --metrics_port is set (not 0).
bool MetricsEnabled();

// Starts serving `registry` on --metrics_port, bound on --metrics_bind or,
// when that is empty, on the interface of `zmq_bind` (the binary's --bind;
// 127.0.0.1 for a binary that binds nothing), with the process_* metrics
// (common/process_metrics.h) added to it. nullptr when --metrics_port is
// 0. Prints "<binary> metrics on http://ADDR:PORT/metrics". Errors:
// InvalidArgument for a bad port, Unavailable when it cannot be bound.
StatusOr<std::unique_ptr<metrics::MetricsExporter>> StartMetricsFromFlags(
    const char* binary, const std::string& zmq_bind, metrics::Registry* registry);

}  // namespace relaxps

#endif  // RELAXPS_APPS_INTERNAL_METRICS_FLAGS_H_
