#include "recovery/chain/chain_client.h"

#include <glog/logging.h>

#include "recovery/chain/chain.h"

namespace relaxps {
namespace recovery {

ChainClientRecovery::ChainClientRecovery(const ClientRecoveryOptions& options)
    : options_(options) {
  features_.exactly_once_keys = true;
  features_.chain_routing = true;
  const int64_t lag = ReplicationLag(options.policy_options);
  if (lag > 0 && options.worker) {
    features_.report_acked_pushes = true;
    async_losses_ = std::make_unique<AsyncLossCounter>(static_cast<uint64_t>(lag));
  }
}

void ChainClientRecovery::OnPushAcked(const AckedPush& push) {
  if (async_losses_ == nullptr) return;
  const AsyncLossCounter::Loss loss = async_losses_->OnAcked(
      push.table, push.key_begin, push.chain_seq, push.chain_head_since, push.chain_head_epoch);
  if (loss.lost == 0) return;
  LOG(WARNING) << "worker " << mechanisms()->worker_id() << ": " << loss.lost
               << " acknowledged push(es) to table '" << push.table << "' at " << push.key_begin
               << " were lost with a chain head (asynchronous replication; the new head took over "
               << "at seq " << loss.head_since << ", epoch " << loss.head_epoch << ")";
  EmitEvent(mechanisms()->events(), "chain_async_lost",
            {{"worker", mechanisms()->worker_id()},
             {"table", push.table},
             {"key_begin", push.key_begin},
             {"lost", loss.lost},
             {"head_since_seq", loss.head_since},
             {"epoch", loss.head_epoch}});
}

void ChainClientRecovery::AddCounters(std::map<std::string, uint64_t>* counters) const {
  if (async_losses_ != nullptr) (*counters)["chain_async_lost"] = async_losses_->lost();
}

void ChainClientRecovery::OnStarted() {
  if (options_.worker) mechanisms()->WatchMap();
}

PartAction ChainClientRecovery::OnServerFailed(const FailedPart& /*part*/) const {
  return PartAction::kReroute;
}

void ChainClientRecovery::OnHeartbeat() {
  mechanisms()->WatchMap();
  // Parts a server refused for now (an epoch it had not installed yet, a
  // replica still awaiting its state) are tried again.
  mechanisms()->RetryParkedBefore(mechanisms()->NowMs() - options_.heartbeat_ms);
}

std::unique_ptr<ClientRecovery> NewChainClientRecovery(const ClientRecoveryOptions& options) {
  return std::make_unique<ChainClientRecovery>(options);
}

}  // namespace recovery
}  // namespace relaxps
