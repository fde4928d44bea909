#include "recovery/checkpoint/checkpoint_server.h"

#include <sstream>
#include <string>

#include "recovery/checkpoint/checkpoint.h"

namespace relaxps {
namespace recovery {

WriteRule CheckpointServerRecovery::write_rule(const ServerJobInfo& job) const {
  (void)job;
  return WriteRule::kApplyLocally;
}

bool CheckpointServerRecovery::HoldsWritesDuringCheckpoint(const ServerJobInfo& job) const {
  return RecoveryOptionValue(job.options, kCheckpointModeFlag, kCheckpointAsync) ==
         kCheckpointSync;
}

DeadServerPlan CheckpointServerRecovery::OnDeclaredDead(const ServerJobInfo& job) const {
  DeadServerPlan plan;
  // Its shards may have moved on without it: its state must not serve
  // again. A rocksdb store comes back from its checkpoints; a memory store
  // holds nothing to come back to.
  if (job.store_kind != "rocksdb") {
    plan.action = DeadServerPlan::Action::kExit;
    plan.advice = RestartAdvice(job.server_id, policy().needs.restart_flags);
    return plan;
  }
  plan.action = DeadServerPlan::Action::kRestartInPlace;
  if (job.complete_checkpoints > 0) {
    std::istringstream flags(policy().needs.restart_flags);
    for (std::string flag; flags >> flag;) plan.restart_flags.push_back(flag);
    plan.advice = "from its latest checkpoint under " + job.checkpoint_root;
  } else {
    plan.advice = "from its data dir (it has no complete checkpoint)";
  }
  return plan;
}

std::unique_ptr<ServerRecovery> NewCheckpointServerRecovery() {
  return std::make_unique<CheckpointServerRecovery>(CheckpointPolicy());
}

}  // namespace recovery
}  // namespace relaxps
