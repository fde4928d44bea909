// The server side of --recovery=chain (recovery/server_recovery.h), shared
// with the policies that replicate ranges in chains (hybrid derives from it;
// only recovery/ includes this header).
//
// A job with more than one replica per range forwards every write along the
// range's chain and acknowledges it once the tail has it (under
// --replication=async once it is applied, while at most
// --replication_max_lag updates of the range are not on the tail); a server declared
// dead is fenced and rejoins its chains as tail after a state transfer,
// without restarting. (A job of one replica per range has no chains: writes
// are applied locally and a server declared dead exits with advice.)
//
// Thread-safety: as ServerRecovery.
#ifndef RELAXPS_RECOVERY_CHAIN_CHAIN_SERVER_H_
#define RELAXPS_RECOVERY_CHAIN_CHAIN_SERVER_H_

#include "recovery/defined_server_recovery.h"

namespace relaxps {
namespace recovery {

class ChainServerRecovery : public DefinedServerRecovery {
 public:
  using DefinedServerRecovery::DefinedServerRecovery;

  WriteRule write_rule(const ServerJobInfo& job) const override;
  // --replication=async: --replication_max_lag; sync: 0.
  int64_t ReplicationLag(const ServerJobInfo& job) const override;
  DeadServerPlan OnDeclaredDead(const ServerJobInfo& job) const override;
};

}  // namespace recovery
}  // namespace relaxps

#endif  // RELAXPS_RECOVERY_CHAIN_CHAIN_SERVER_H_
