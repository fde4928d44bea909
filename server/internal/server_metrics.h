// ServerMetrics: the Prometheus metrics of one relaxps-server
// (common/metrics.h).
//
// Hot-path counters are updated from the server's loop thread through the
// On*() hooks: requests and their latency by message type, rejections by
// reason, pulls that waited at the consistency gate. Everything the server
// already counts (wire::ServerStats: bytes, updates, duplicates, forwarded,
// dropped replies) and its shards' clocks are read at scrape time by a
// collector that runs on the loop thread (RpcServer::Post) and waits for it
// at most kCollectTimeoutMs; a scrape while the loop is stuck reports only
// the hot-path metrics.
//
// Every series whose label values are known is registered at construction
// with value zero (requests and latency of each message type a server
// handles, rejections of each status code, gate waits, restores), so that
// a dashboard tells zero from missing.
//
// With a null registry (metrics off) every hook is a no-op.
//
// Thread-safety: the On*() hooks on the loop thread only.
#ifndef RELAXPS_SERVER_INTERNAL_SERVER_METRICS_H_
#define RELAXPS_SERVER_INTERNAL_SERVER_METRICS_H_

#include <functional>
#include <vector>

#include "common/metrics.h"
#include "common/rpc_server.h"
#include "common/status.h"

namespace relaxps {
namespace server_internal {

class ServerMetrics {
 public:
  // Registers the series (see above) in `registry` (may be null: off).
  explicit ServerMetrics(metrics::Registry* registry);

  bool enabled() const { return registry_ != nullptr; }
  // A request arrived (counted by type).
  void OnRequest(const Request& req);
  // A reply to `req` is being sent: its latency since it arrived, by type.
  void OnReply(const Request& req);
  // `req` was refused with `status` (counted by the status code).
  void OnReject(const Request& req, const Status& status);
  // A pull was answered after waiting at the consistency gate since
  // `req` arrived.
  void OnGateWait(const Request& req);
  // The data directory was replaced by a checkpoint (--restore_from) in
  // `seconds`.
  void OnRestore(double seconds);

  // Registers the scrape-time collector: `collect` runs on `rpc`'s loop
  // thread (metrics::PostedCollector) and emits the server's own counters
  // and gauges. REQUIRES: rpc outlives the registry's exporter.
  void AddLoopCollector(RpcServer* rpc, std::function<void(metrics::MetricSink*)> collect);

  static constexpr int kCollectTimeoutMs = 2000;

 private:
  // The series of `type` / `code`, registered on first use.
  metrics::Counter* RequestCounter(int type);
  metrics::Histogram* LatencyHistogram(int type);
  metrics::Counter* RejectedCounter(StatusCode code);

  metrics::Registry* const registry_;
  // Loop thread only (after construction): indexed by message type / code,
  // the known ones set at construction, others on first use.
  std::vector<metrics::Counter*> requests_;
  std::vector<metrics::Histogram*> latency_;
  std::vector<metrics::Counter*> rejected_;
  // Constant after construction (null without a registry).
  metrics::Counter* pushes_ = nullptr;
  metrics::Counter* pulls_ = nullptr;
  metrics::Counter* gate_waits_ = nullptr;
  metrics::Histogram* gate_wait_seconds_ = nullptr;
  metrics::Counter* restores_ = nullptr;
  metrics::Histogram* restore_seconds_ = nullptr;
};

// Seconds since `req` arrived (steady clock).
double SecondsSince(const Request& req);

}  // namespace server_internal
}  // namespace relaxps

#endif  // RELAXPS_SERVER_INTERNAL_SERVER_METRICS_H_
