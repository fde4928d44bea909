#include "recovery/replay/replay.h"

namespace relaxps {
namespace recovery {

const PolicyDefinition& ReplayPolicy() {
  static const PolicyDefinition kDefinition = {
      "replay",
      "checkpoints plus each worker's log of its acknowledged updates, replayed exactly once "
      "into a restarted server",
      [] {
        RecoveryNeeds n;
        n.store_kind = "rocksdb";
        n.restart = RestartRule::kSameIdFromCheckpoint;
        n.restart_flags = "--restore_from=latest";
        n.tolerates_server_loss = true;
        n.tolerates_chain_loss = true;
        n.tolerates_pause = true;
        return n;
      }(),
      &NewReplayCoordinatorRecovery,
      &NewReplayServerRecovery,
      &NewReplayClientRecovery,
  };
  return kDefinition;
}

}  // namespace recovery
}  // namespace relaxps
