#include "recovery/chain/chain_client.h"

#include "recovery/chain/chain.h"

namespace relaxps {
namespace recovery {

ChainClientRecovery::ChainClientRecovery(const ClientRecoveryOptions& options)
    : options_(options) {
  features_.exactly_once_keys = true;
  features_.chain_routing = true;
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
