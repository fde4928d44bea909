// The server side of --recovery=chain (recovery/server_recovery.h), shared
// with the policies that replicate ranges in chains (hybrid derives from it;
// only recovery/ includes this header).
//
// A job with more than one replica per range forwards every write along the
// range's chain and acknowledges it once the tail has it; a server declared
// dead is fenced and rejoins its chains as tail after a state transfer,
// without restarting. (A job of one replica per range has no chains: writes
// are applied locally and a server declared dead exits with advice.)
//
// Thread-safety: as ServerRecovery.
#ifndef RELAXPS_RECOVERY_CHAIN_CHAIN_SERVER_H_
#define RELAXPS_RECOVERY_CHAIN_CHAIN_SERVER_H_

#include "recovery/registry.h"
#include "recovery/server_recovery.h"

namespace relaxps {
namespace recovery {

class ChainServerRecovery : public ServerRecovery {
 public:
  // `policy`: the definition whose name and restart flags this object uses.
  explicit ChainServerRecovery(const PolicyDefinition& policy) : policy_(policy) {}

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

#endif  // RELAXPS_RECOVERY_CHAIN_CHAIN_SERVER_H_
