#include "recovery/chain/chain.h"

namespace relaxps {
namespace recovery {

const PolicyDefinition& ChainPolicy() {
  static const PolicyDefinition kDefinition = {
      "chain",
      "ranges are chains of replicas (head applies and forwards, tail acknowledges); a lost server is spliced out",
      [] {
        RecoveryNeeds n;
        n.min_servers = 2;
        n.experiment_servers = 3;
        n.min_replicas = 2;
        n.restart = RestartRule::kSameIdRejoinsAsTail;
        n.tolerates_server_loss = true;
        n.tolerates_pause = true;
        return n;
      }(),
      &NewChainCoordinatorRecovery,
      &NewChainServerRecovery,
      &NewChainClientRecovery,
  };
  return kDefinition;
}

}  // namespace recovery
}  // namespace relaxps
