#include "recovery/checkpoint/checkpoint.h"

namespace relaxps {
namespace recovery {

const PolicyDefinition& CheckpointPolicy() {
  static const PolicyDefinition kDefinition = {
      "checkpoint",
      "coordinated checkpoints; a lost server restarts from the latest complete one (updates since it are lost)",
      [] {
        RecoveryNeeds n;
        n.store_kind = "rocksdb";
        n.restart = RestartRule::kSameIdFromCheckpoint;
        n.restart_flags = "--restore_from=latest";
        n.tolerates_server_loss = true;
        n.tolerates_chain_loss = true;
        n.tolerates_pause = true;
        n.rolls_back = true;
        return n;
      }(),
      &NewCheckpointCoordinatorRecovery,
      &NewCheckpointServerRecovery,
      &NewCheckpointClientRecovery,
  };
  return kDefinition;
}

}  // namespace recovery
}  // namespace relaxps
