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
        n.options = {{kCheckpointModeFlag,
                      {kCheckpointAsync, kCheckpointSync},
                      0,
                      kCheckpointAsync,
                      "async: training goes on while the servers write each snapshot (a server "
                      "restarted from it loses what it acknowledged after capturing it, the "
                      "write included); sync: each server holds the workers' writes from its "
                      "capture until its snapshot is durable (event checkpoint_writes_held: the "
                      "time training waited), so nothing it acknowledged before that is lost"}};
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
