#include "coordinator/coordinator_metrics.h"

#include <algorithm>
#include <limits>
#include <memory>

#include "consistency/consistency_policy.h"

namespace relaxps {

using metrics::Labels;

namespace {

// ConsistencyPolicy::staleness_bound() of `job`, +Inf for none (async);
// NaN for a job config no policy accepts.
double StalenessBound(const wire::JobConfig& job) {
  StatusOr<ConsistencyModel> model = ParseConsistencyModel(job.consistency());
  if (!model.ok()) return std::numeric_limits<double>::quiet_NaN();
  StatusOr<std::unique_ptr<ConsistencyPolicy>> policy =
      NewConsistencyPolicy({*model, job.staleness()});
  if (!policy.ok()) return std::numeric_limits<double>::quiet_NaN();
  const int bound = (*policy)->staleness_bound();
  return bound < 0 ? std::numeric_limits<double>::infinity() : bound;
}

}  // namespace

CoordinatorMetrics::CoordinatorMetrics(metrics::Registry* registry) : registry_(registry) {
  if (registry_ == nullptr) return;
  for (const char* member : {"server", "worker"}) DeclaredDead(member);
  for (const char* kind : {"failover", "fallback", "reseed"}) RecoveryEvents(kind);
  RecoverySeconds("reseed");
  for (bool ok : {true, false}) Checkpoints(ok);
  CheckpointSeconds();
}

metrics::Counter* CoordinatorMetrics::DeclaredDead(const std::string& member) {
  // Not "role": scrape configs label each target with its role.
  return registry_->GetCounter("relaxps_coordinator_declared_dead_total",
                               "Members declared dead after missing their heartbeats, by kind "
                               "of member (server, worker).",
                               {{"member", member}});
}

metrics::Counter* CoordinatorMetrics::RecoveryEvents(const std::string& kind) {
  return registry_->GetCounter("relaxps_coordinator_recovery_events_total",
                               "Recovery actions: failover (a server spliced out of its chains), "
                               "fallback (hybrid: every replica of a range lost), reseed (a new "
                               "server seeded from the workers' copies).",
                               {{"kind", kind}});
}

metrics::Histogram* CoordinatorMetrics::RecoverySeconds(const std::string& kind) {
  return registry_->GetHistogram("relaxps_coordinator_recovery_seconds",
                                 "Duration of completed recovery actions (reseed: from the new "
                                 "server's registration to its seed).",
                                 metrics::DurationBuckets(), {{"kind", kind}});
}

metrics::Counter* CoordinatorMetrics::Checkpoints(bool ok) {
  return registry_->GetCounter("relaxps_coordinator_checkpoints_total",
                               "Coordinated checkpoints, by result.",
                               {{"result", ok ? "ok" : "failed"}});
}

metrics::Histogram* CoordinatorMetrics::CheckpointSeconds() {
  return registry_->GetHistogram("relaxps_coordinator_checkpoint_seconds",
                                 "Coordinated checkpoints: trigger to the last server's reply.",
                                 metrics::DurationBuckets());
}

void CoordinatorMetrics::OnDeclaredDead(const std::string& role) {
  if (registry_ == nullptr) return;
  DeclaredDead(role)->Increment();
}

void CoordinatorMetrics::OnRecovery(const std::string& kind) {
  if (registry_ == nullptr) return;
  RecoveryEvents(kind)->Increment();
}

void CoordinatorMetrics::OnRecoveryDone(const std::string& kind, double seconds) {
  if (registry_ == nullptr) return;
  OnRecovery(kind);
  RecoverySeconds(kind)->Observe(seconds);
}

void CoordinatorMetrics::OnCheckpoint(bool ok, double seconds) {
  if (registry_ == nullptr) return;
  Checkpoints(ok)->Increment();
  if (ok) CheckpointSeconds()->Observe(seconds);
}

void CoordinatorMetrics::AddStatusCollector(RpcServer* rpc,
                                            std::function<wire::StatusReply()> status) {
  if (registry_ == nullptr) return;
  registry_->AddCollector(metrics::PostedCollector(
      [rpc](std::function<void()> task) { rpc->Post(std::move(task)); },
      [status = std::move(status)](metrics::MetricSink* sink) {
        CollectStatusMetrics(status(), sink);
      },
      kCollectTimeoutMs));
}

void CollectStatusMetrics(const wire::StatusReply& status, metrics::MetricSink* sink) {
  const Labels none;
  int live_servers = 0;
  int live_workers = 0;
  for (const wire::ServerState& s : status.servers()) live_servers += s.info().alive() ? 1 : 0;
  int64_t min_clock = std::numeric_limits<int64_t>::max();
  int64_t max_clock = 0;
  for (const wire::WorkerState& w : status.workers()) {
    if (!w.alive()) continue;
    ++live_workers;
    min_clock = std::min(min_clock, w.clock());
    max_clock = std::max(max_clock, w.clock());
    sink->Gauge("relaxps_coordinator_worker_clock", "Completed clock of each live worker.",
                {{"worker", std::to_string(w.id())}}, static_cast<double>(w.clock()));
  }
  if (live_workers == 0) min_clock = 0;
  sink->Gauge("relaxps_coordinator_live_servers", "Servers alive (heartbeating).", none,
              live_servers);
  sink->Gauge("relaxps_coordinator_live_workers", "Workers alive (heartbeating).", none,
              live_workers);
  sink->Gauge("relaxps_coordinator_registered_servers", "Servers ever registered.", none,
              status.servers_size());
  sink->Gauge("relaxps_coordinator_min_worker_clock", "Slowest live worker's clock.", none,
              static_cast<double>(min_clock));
  sink->Gauge("relaxps_coordinator_max_worker_clock", "Fastest live worker's clock.", none,
              static_cast<double>(max_clock));
  sink->Gauge("relaxps_coordinator_clock_spread",
              "Fastest minus slowest live worker's clock: the staleness the consistency model "
              "allows in practice (bounded by --staleness under SSP, 0 under BSP).",
              none, static_cast<double>(max_clock - min_clock));
  sink->Gauge("relaxps_coordinator_staleness_bound",
              "Staleness bound the job's consistency model enforces, in clocks: 0 under bsp, "
              "--staleness under ssp, +Inf under async (no bound; --staleness is ignored).",
              {{"consistency", status.job().consistency()}}, StalenessBound(status.job()));
  sink->Gauge("relaxps_coordinator_shard_map_version", "Version of the shard map.", none,
              static_cast<double>(status.shard_map().version()));
  sink->Gauge("relaxps_coordinator_epoch", "Job epoch (bumped by every chain failover).", none,
              static_cast<double>(status.shard_map().epoch()));
  sink->Gauge("relaxps_coordinator_job_failed", "1 once the job failed.", none,
              status.job_error().empty() ? 0 : 1);
  sink->Gauge("relaxps_coordinator_uptime_seconds", "Seconds since the coordinator started.",
              none, status.uptime_s());
  sink->Gauge("relaxps_coordinator_latest_checkpoint_clock",
              "Clock of the latest complete checkpoint (0: none).", none,
              static_cast<double>(status.has_latest_checkpoint()
                                      ? status.latest_checkpoint().clock()
                                      : 0));
}

}  // namespace relaxps
