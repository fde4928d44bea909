// The server side of --recovery=checkpoint (recovery/server_recovery.h),
// shared with the policies that restart a lost server from its checkpoints
// (derive from it; only recovery/ includes this header).
//
// Writes are applied locally; under --checkpoint_mode=sync a checkpoint
// holds them from its capture until the snapshot is durable. A server declared dead restarts in place with
// its id: with a rocksdb store from its latest complete checkpoint (its own
// data dir when it has none yet), and with a memory store (which restores
// nothing) it exits with advice naming the policy's restart flags.
//
// Thread-safety: as ServerRecovery.
#ifndef RELAXPS_RECOVERY_CHECKPOINT_CHECKPOINT_SERVER_H_
#define RELAXPS_RECOVERY_CHECKPOINT_CHECKPOINT_SERVER_H_

#include "recovery/defined_server_recovery.h"

namespace relaxps {
namespace recovery {

class CheckpointServerRecovery : public DefinedServerRecovery {
 public:
  using DefinedServerRecovery::DefinedServerRecovery;

  WriteRule write_rule(const ServerJobInfo& job) const override;
  // --checkpoint_mode=sync.
  bool HoldsWritesDuringCheckpoint(const ServerJobInfo& job) const override;
  DeadServerPlan OnDeclaredDead(const ServerJobInfo& job) const override;
};

}  // namespace recovery
}  // namespace relaxps

#endif  // RELAXPS_RECOVERY_CHECKPOINT_CHECKPOINT_SERVER_H_
