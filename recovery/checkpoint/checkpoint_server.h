// The server side of --recovery=checkpoint (recovery/server_recovery.h),
// shared with the policies that restart a lost server from its checkpoints
// (derive from it; only recovery/ includes this header).
//
// Writes are applied locally. A server declared dead restarts in place with
// its id: with a rocksdb store from its latest complete checkpoint (its own
// data dir when it has none yet), and with a memory store (which restores
// nothing) it exits with advice naming the policy's restart flags.
//
// Thread-safety: as ServerRecovery.
#ifndef RELAXPS_RECOVERY_CHECKPOINT_CHECKPOINT_SERVER_H_
#define RELAXPS_RECOVERY_CHECKPOINT_CHECKPOINT_SERVER_H_

#include "recovery/registry.h"
#include "recovery/server_recovery.h"

namespace relaxps {
namespace recovery {

class CheckpointServerRecovery : public ServerRecovery {
 public:
  // `policy`: the definition whose name and restart flags this object uses.
  explicit CheckpointServerRecovery(const PolicyDefinition& policy) : policy_(policy) {}

  const char* Name() const override { return policy_.name; }
  WriteRule write_rule(const ServerJobInfo& job) const override;
  DeadServerPlan OnDeclaredDead(const ServerJobInfo& job) const override;

 protected:
  const PolicyDefinition& policy() const { return policy_; }

 private:
  const PolicyDefinition& policy_;  // Static storage.
};

}  // namespace recovery
}  // namespace relaxps

#endif  // RELAXPS_RECOVERY_CHECKPOINT_CHECKPOINT_SERVER_H_
