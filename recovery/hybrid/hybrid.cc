#include "recovery/hybrid/hybrid.h"

namespace relaxps {
namespace recovery {

const PolicyDefinition& HybridPolicy() {
  static const PolicyDefinition kDefinition = {
      "hybrid",
      "chains while a replica lives, the workers' copies when none does, the latest checkpoint last",
      [] {
        RecoveryNeeds n;
        n.min_servers = 2;
        n.experiment_servers = 3;
        n.min_replicas = 2;
        n.restart = RestartRule::kSameIdRejoinsAsTail;
        // A range no worker holds falls back to the latest checkpoint.
        n.restart_flags = "--restore_from=latest";
        n.tolerates_server_loss = true;
        n.tolerates_chain_loss = true;
        n.tolerates_pause = true;
        return n;
      }(),
      &NewHybridCoordinatorRecovery,
      &NewHybridServerRecovery,
      &NewHybridClientRecovery,
  };
  return kDefinition;
}

}  // namespace recovery
}  // namespace relaxps
