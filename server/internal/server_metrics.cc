#include "server/internal/server_metrics.h"

#include <chrono>
#include <string>

#include "proto/relaxps.pb.h"
#include "server/internal/server_impl.h"

namespace relaxps {
namespace server_internal {
namespace {

using metrics::Labels;
using metrics::MetricSink;

std::string TypeName(int type) {
  const std::string name = wire::MsgType_IsValid(type)
                               ? wire::MsgType_Name(static_cast<wire::MsgType>(type))
                               : "";
  return name.empty() ? "unknown" : name;
}

// Slot of `type` in the per-type vectors (unknown types share the last).
size_t TypeSlot(int type) {
  return type >= 0 && type <= wire::MsgType_MAX ? static_cast<size_t>(type)
                                                : static_cast<size_t>(wire::MsgType_MAX) + 1;
}

// The types a server handles: their series exist from the start at zero,
// so that a dashboard tells "none yet" from "not reported". Others (a
// coordinator message sent to a server by mistake, an unknown type) get
// theirs when they first arrive.
constexpr wire::MsgType kServerTypes[] = {
    wire::PUSH,        wire::PULL,       wire::PUSH_PULL,        wire::PUSH_ROWS,
    wire::PULL_ROWS,   wire::CLOCK,      wire::INSTALL_MAP,      wire::WORKER_SET,
    wire::SERVER_STATS, wire::CHECKPOINT, wire::LIST_CHECKPOINTS, wire::CHAIN_SNAPSHOT,
    wire::CHAIN_COMPLETE, wire::PING,    wire::SEED,
};

}  // namespace

double SecondsSince(const Request& req) {
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  return static_cast<double>(now - req.received_ns) * 1e-9;
}

ServerMetrics::ServerMetrics(metrics::Registry* registry) : registry_(registry) {
  if (registry_ == nullptr) return;
  requests_.resize(wire::MsgType_MAX + 2, nullptr);
  latency_.resize(wire::MsgType_MAX + 2, nullptr);
  rejected_.resize(static_cast<size_t>(StatusCode::kMaxCode) + 1, nullptr);
  for (wire::MsgType type : kServerTypes) {
    RequestCounter(type);
    LatencyHistogram(type);
  }
  for (int code = 1; code <= static_cast<int>(StatusCode::kMaxCode); ++code) {
    RejectedCounter(static_cast<StatusCode>(code));
  }
  pushes_ = registry_->GetCounter(
      "relaxps_server_pushes_total",
      "Pushes received (PUSH, PUSH_PULL and PUSH_ROWS requests, forwarded ones excluded).");
  pulls_ = registry_->GetCounter("relaxps_server_pulls_total",
                                 "Pulls received (PULL, PUSH_PULL and PULL_ROWS requests).");
  gate_waits_ = registry_->GetCounter(
      "relaxps_server_gate_waits_total",
      "Pulls that waited at the consistency gate (BSP round or SSP staleness bound).");
  gate_wait_seconds_ = registry_->GetHistogram(
      "relaxps_server_gate_wait_seconds",
      "How long pulls that waited at the consistency gate waited.", metrics::LatencyBuckets());
  restores_ = registry_->GetCounter(
      "relaxps_server_restores_total",
      "Data directories replaced by a checkpoint at start (--restore_from).");
  restore_seconds_ = registry_->GetHistogram("relaxps_server_restore_seconds",
                                             "Duration of those restores.",
                                             metrics::DurationBuckets());
}

metrics::Counter* ServerMetrics::RequestCounter(int type) {
  metrics::Counter*& c = requests_[TypeSlot(type)];
  if (c == nullptr) {
    c = registry_->GetCounter("relaxps_server_requests_total",
                              "Requests received by this server, by message type.",
                              {{"type", TypeName(type)}});
  }
  return c;
}

metrics::Histogram* ServerMetrics::LatencyHistogram(int type) {
  metrics::Histogram*& h = latency_[TypeSlot(type)];
  if (h == nullptr) {
    h = registry_->GetHistogram(
        "relaxps_server_request_seconds",
        "Time from receiving a request to handing its reply over (gate waits included; "
        "a reply queued for a WAL group sync waits a little longer), by message type.",
        metrics::LatencyBuckets(), {{"type", TypeName(type)}});
  }
  return h;
}

metrics::Counter* ServerMetrics::RejectedCounter(StatusCode code) {
  metrics::Counter*& c = rejected_[static_cast<size_t>(code)];
  if (c == nullptr) {
    c = registry_->GetCounter(
        "relaxps_server_rejected_total",
        "Requests answered with an error, by reason (the status code: InvalidArgument for "
        "malformed input or NaN gradients, PermissionDenied for forged control messages, "
        "FailedPrecondition for quotas, WrongShard/NotFound for stale routing, ...).",
        {{"reason", StatusCodeName(code)}});
  }
  return c;
}

void ServerMetrics::OnRequest(const Request& req) {
  if (registry_ == nullptr) return;
  const int type = req.msg.header.type();
  RequestCounter(type)->Increment();
  const bool client = !req.msg.header.forwarded();
  const bool push =
      client && (type == wire::PUSH || type == wire::PUSH_PULL || type == wire::PUSH_ROWS);
  const bool pull =
      client && (type == wire::PULL || type == wire::PUSH_PULL || type == wire::PULL_ROWS);
  if (push) pushes_->Increment();
  if (pull) pulls_->Increment();
}

void ServerMetrics::OnReply(const Request& req) {
  if (registry_ == nullptr || req.received_ns == 0) return;
  LatencyHistogram(req.msg.header.type())->Observe(SecondsSince(req));
}

void ServerMetrics::OnReject(const Request& req, const Status& status) {
  if (registry_ == nullptr) return;
  (void)req;
  const size_t code = static_cast<size_t>(status.code());
  if (code == 0 || code >= rejected_.size()) return;
  RejectedCounter(status.code())->Increment();
}

void ServerMetrics::OnGateWait(const Request& req) {
  if (registry_ == nullptr) return;
  gate_waits_->Increment();
  gate_wait_seconds_->Observe(SecondsSince(req));
}

void ServerMetrics::OnRestore(double seconds) {
  if (registry_ == nullptr) return;
  restores_->Increment();
  restore_seconds_->Observe(seconds);
}

void ServerMetrics::AddLoopCollector(RpcServer* rpc, std::function<void(MetricSink*)> collect) {
  if (registry_ == nullptr) return;
  registry_->AddCollector(metrics::PostedCollector(
      [rpc](std::function<void()> task) { rpc->Post(std::move(task)); }, std::move(collect),
      kCollectTimeoutMs));
}

// Loop thread (posted by the collector): the counters the server keeps in
// wire::ServerStats and the state of its shards.
void ServerImpl::CollectMetrics(MetricSink* sink) {
  const Labels none;
  const auto counter = [&](const char* name, const char* help, uint64_t v) {
    sink->Counter(name, help, none, static_cast<double>(v));
  };
  const uint64_t applied = UpdatesApplied();
  counter("relaxps_server_bytes_in_total", "Payload bytes received.", stats_.bytes_in());
  counter("relaxps_server_bytes_out_total", "Payload bytes sent in replies.", stats_.bytes_out());
  counter("relaxps_server_updates_applied_total", "Updates (pushes, rounds) applied to shards.",
          applied);
  counter("relaxps_server_nonfinite_rejected_total", "Gradients refused for NaN or Inf.",
          stats_.nonfinite_rejected());
  counter("relaxps_server_quota_rejected_total",
          "Requests refused for a quota or a control check (subset of rejected).",
          stats_.quota_rejected());
  counter("relaxps_server_malformed_total", "Messages dropped or refused as unparsable.",
          rpc_->malformed_count());
  counter("relaxps_server_replies_dropped_total",
          "Replies dropped because their peer did not read them (--max_queued_replies).",
          stats_.replies_dropped());
  counter("relaxps_server_unread_refused_total",
          "Requests refused (ResourceExhausted, retried by the client) because their reply "
          "would pass --max_unread_reply_mb_per_peer or --max_unread_reply_mb; a PushPull's "
          "counts too when only its pull was refused (its push applied, answered as a PUSH).",
          rpc_->unread_refused_count());
  counter("relaxps_server_unread_dropped_total",
          "Messages without a reservation dropped for the limits on unread replies.",
          rpc_->unread_dropped_count());
  counter("relaxps_server_chain_duplicates_skipped_total",
          "Resent pushes found already applied (exactly-once).", stats_.duplicates_skipped());
  counter("relaxps_server_chain_forwarded_total", "Updates forwarded to a chain successor.",
          stats_.forwarded());
  counter("relaxps_server_stale_epoch_refused_total", "Messages or replies with an old epoch.",
          stats_.stale_epoch_refused());
  sink->Gauge("relaxps_server_id", "This server's id.", none, id_);
  sink->Gauge("relaxps_server_shard_map_version", "Version of the installed shard map.", none,
              static_cast<double>(map_version_));
  sink->Gauge("relaxps_server_held_bytes", "Bytes of dense shards (all slots) held here.", none,
              static_cast<double>(held_bytes_));
  sink->Gauge("relaxps_server_live_workers", "Live workers in the coordinator's latest set.",
              none, live_workers_.ids_size());
  sink->Gauge("relaxps_server_durable",
              "1 while every kind of durable write (checkpoint, flush, WAL) last succeeded; 0 "
              "after a disk fault until one of the same kind succeeds.",
              none, durability_.durable() ? 1 : 0);
  sink->Gauge("relaxps_server_not_durable_since_timestamp_seconds",
              "Unix time of the first failed write of the current outage (0: durable).", none,
              static_cast<double>(durability_.not_durable_since_unix_ms()) / 1000.0);
  counter("relaxps_server_disk_errors_total", "Failed checkpoint, flush and WAL writes.",
          durability_.failures());
  sink->Gauge("relaxps_server_awaiting_seed", "1 while waiting to be re-seeded (stateless).",
              none, awaiting_seed_ ? 1 : 0);
  for (auto& [key, range] : dense_) {
    const Labels l = {{"table", key.first}, {"begin", std::to_string(key.second)}};
    const DenseShardState* s = range.shard.get();
    sink->Gauge("relaxps_server_shard_visible_clock",
                "Clock every parameter of the dense shard reflects.", l,
                static_cast<double>(s->visible_clock()));
    sink->Gauge("relaxps_server_shard_min_worker_clock",
                "Slowest live worker's completed clock at the dense shard.", l,
                static_cast<double>(s->min_worker_clock()));
    sink->Gauge("relaxps_server_shard_waiting_pulls", "Pulls parked at the consistency gate.", l,
                static_cast<double>(s->waiting_pulls()));
  }
}

}  // namespace server_internal
}  // namespace relaxps
