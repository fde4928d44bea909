#include "recovery/replay/replay.h"

#include "recovery/checkpoint/checkpoint.h"

namespace relaxps {
namespace recovery {

const PolicyDefinition& ReplayPolicy() {
  static const PolicyDefinition kDefinition = {
      "replay",
      "checkpoints plus each worker's log of its acknowledged updates, replayed exactly once "
      "into a restarted server",
      [] {
        // Checkpoint's restarts, without its losses: the replay brings back
        // what was acknowledged after the checkpoint.
        RecoveryNeeds n = CheckpointPolicy().needs;
        n.rolls_back = false;
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
