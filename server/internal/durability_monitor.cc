#include "server/internal/durability_monitor.h"

#include <glog/logging.h>

namespace relaxps {

StatusOr<OnDiskError> ParseOnDiskError(const std::string& name) {
  if (name == "continue") return OnDiskError::kContinue;
  if (name == "stop") return OnDiskError::kStop;
  return InvalidArgumentError("--on_disk_error must be stop or continue, not '" + name + "'");
}

StatusOr<WalReply> ParseWalReply(const std::string& name) {
  if (name == "applied") return WalReply::kApplied;
  if (name == "durable") return WalReply::kDurable;
  return InvalidArgumentError("--wal_reply must be applied or durable, not '" + name + "'");
}

const char* OnDiskErrorName(OnDiskError e) {
  return e == OnDiskError::kStop ? "stop" : "continue";
}

namespace server_internal {

const char* DurableWriteName(DurableWrite w) {
  switch (w) {
    case DurableWrite::kCheckpoint:
      return "checkpoint";
    case DurableWrite::kFlush:
      return "flush";
    case DurableWrite::kWal:
      return "wal";
  }
  return "unknown";
}

DurabilityMonitor::DurabilityMonitor(const Options& options)
    : options_(options),
      clock_(ClockOrReal(options.clock)),
      log_limiter_(clock_, options.log_period_ms) {}

Status DurabilityMonitor::OnFailure(DurableWrite what, const Status& error) {
  DCHECK(!error.ok());
  Kind& k = kinds_[Index(what)];
  const char* name = DurableWriteName(what);
  ++k.failures;
  ++failures_total_;
  last_error_ = std::string(name) + ": " + error.ToString();
  const bool first_of_kind = !k.failing;
  if (first_of_kind) {
    k.failing = true;
    if (failing_++ == 0) {
      since_unix_ms_ = clock_->NowUnixMs();
      since_mono_ms_ = clock_->NowMs();
    }
    EmitEvent(options_.events, "disk_error",
              {{"server", server_id_},
               {"write", name},
               {"reason", error.ToString()},
               {"since_unix_ms", since_unix_ms_},
               {"action", OnDiskErrorName(options_.on_error)}});
  }
  uint64_t suppressed = 0;
  if (log_limiter_.Allow(name, &suppressed)) {
    LOG(ERROR) << "server " << server_id_ << ": " << name << " write failed, "
               << (options_.on_error == OnDiskError::kStop ? "stopping"
                                                           : "training on NOT durably")
               << " (--on_disk_error=" << OnDiskErrorName(options_.on_error) << "): " << error
               << " (" << k.failures << " failed " << name << " writes so far, " << suppressed
               << " not logged since the last such line)";
  }
  if (options_.on_error == OnDiskError::kStop) {
    return AbortedError("server " + std::to_string(server_id_) + ": " + name +
                        " write failed (--on_disk_error=stop): " + error.ToString());
  }
  return Status::OK();
}

void DurabilityMonitor::OnSuccess(DurableWrite what) {
  Kind& k = kinds_[Index(what)];
  if (!k.failing) return;
  k.failing = false;
  if (--failing_ > 0) return;
  const int64_t outage_ms = clock_->NowMs() - since_mono_ms_;
  LOG(INFO) << "server " << server_id_ << ": durable again (a " << DurableWriteName(what)
            << " write succeeded) after " << outage_ms << " ms";
  EmitEvent(options_.events, "durable_again",
            {{"server", server_id_},
             {"write", DurableWriteName(what)},
             {"not_durable_ms", outage_ms},
             {"failures", failures_total_}});
  since_unix_ms_ = 0;
  since_mono_ms_ = 0;
}

void DurabilityMonitor::FillStats(wire::ServerStats* stats) const {
  stats->set_durable(durable());
  stats->set_not_durable_since_unix_ms(since_unix_ms_);
  stats->set_disk_errors(failures_total_);
  stats->set_last_disk_error(last_error_);
}

}  // namespace server_internal
}  // namespace relaxps
