// CoordinatorMetrics: the Prometheus metrics of relaxps-coordinator
// (common/metrics.h).
//
// Recovery events are counted where they happen (the On*() hooks, loop
// thread): servers and workers declared dead, chain failovers, hybrid
// fallbacks, stateless re-seeds (with their duration from the new server's
// registration to its seed) and coordinated checkpoints (with their
// duration). Membership, clocks and the job's state are read at scrape time
// from the same snapshot relaxps-ctl status gets (wire::StatusReply),
// built on the loop thread (metrics::PostedCollector).
//
// The series of every known label value (members server and worker; kinds
// failover, fallback and reseed; results ok and failed) are registered at
// construction with value zero, so that a dashboard tells zero from missing.
//
// With a null registry every hook is a no-op.
//
// Thread-safety: the On*() hooks on the coordinator's loop thread only.
#ifndef RELAXPS_COORDINATOR_COORDINATOR_METRICS_H_
#define RELAXPS_COORDINATOR_COORDINATOR_METRICS_H_

#include <functional>
#include <string>

#include "common/metrics.h"
#include "common/rpc_server.h"
#include "proto/relaxps.pb.h"

namespace relaxps {

class CoordinatorMetrics {
 public:
  // Registers the series (see above) in `registry` (may be null: off).
  explicit CoordinatorMetrics(metrics::Registry* registry);

  // `role` ("server" or "worker") missed its heartbeats.
  void OnDeclaredDead(const std::string& role);
  // A recovery action began: "failover" (a server removed from its chains),
  // "fallback" (hybrid: every replica of a range lost).
  void OnRecovery(const std::string& kind);
  // A recovery action completed in `seconds`: "reseed".
  void OnRecoveryDone(const std::string& kind, double seconds);
  // A coordinated checkpoint ended (ok or failed) after `seconds`.
  void OnCheckpoint(bool ok, double seconds);

  // Registers the scrape-time collector: `status` runs on `rpc`'s loop
  // thread and returns what relaxps-ctl status would get.
  void AddStatusCollector(RpcServer* rpc, std::function<wire::StatusReply()> status);

  static constexpr int kCollectTimeoutMs = 2000;

 private:
  // The series of one label value, registered on first use.
  metrics::Counter* DeclaredDead(const std::string& member);
  metrics::Counter* RecoveryEvents(const std::string& kind);
  metrics::Histogram* RecoverySeconds(const std::string& kind);
  metrics::Counter* Checkpoints(bool ok);
  metrics::Histogram* CheckpointSeconds();

  metrics::Registry* const registry_;
};

// The job's gauges and counters from a status snapshot (exposed for tests).
void CollectStatusMetrics(const wire::StatusReply& status, metrics::MetricSink* sink);

}  // namespace relaxps

#endif  // RELAXPS_COORDINATOR_COORDINATOR_METRICS_H_
