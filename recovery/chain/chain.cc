#include "recovery/chain/chain.h"

#include <algorithm>

namespace relaxps {
namespace recovery {

const PolicyDefinition& ChainPolicy() {
  static const PolicyDefinition kDefinition = {
      "chain",
      "ranges are chains of replicas (head applies and forwards, tail acknowledges); a lost server is spliced out",
      [] {
        RecoveryNeeds n;
        n.min_servers = 2;
        n.experiment_servers = 3;
        n.min_replicas = 2;
        n.restart = RestartRule::kSameIdRejoinsAsTail;
        n.tolerates_server_loss = true;
        n.tolerates_pause = true;
        n.options = {
            {kReplicationFlag,
             {kReplicationSync, kReplicationAsync},
             0,
             kReplicationSync,
             "sync: the head acknowledges a write once the tail has it (a head failure loses "
             "nothing acknowledged); async: once it applied it, forwarding in the background, "
             "blocking while --replication_max_lag updates of the range are not on the tail "
             "(a head failure loses up to that many acknowledged updates per range, counted by "
             "the workers: event chain_async_lost)"},
            {kReplicationMaxLagFlag,
             {},
             1,
             "64",
             "--replication=async: updates per range (or sparse bucket) the head may acknowledge "
             "before the tail has them; more waits less and may lose more"}};
        return n;
      }(),
      &NewChainCoordinatorRecovery,
      &NewChainServerRecovery,
      &NewChainClientRecovery,
  };
  return kDefinition;
}

int64_t ReplicationLag(const RecoveryOptionValues& options) {
  if (RecoveryOptionValue(options, kReplicationFlag, kReplicationSync) != kReplicationAsync) {
    return 0;
  }
  return std::max<int64_t>(1, RecoveryOptionInt(options, kReplicationMaxLagFlag, 64));
}

}  // namespace recovery
}  // namespace relaxps
