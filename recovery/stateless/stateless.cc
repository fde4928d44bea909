#include "recovery/stateless/stateless.h"

namespace relaxps {
namespace recovery {

const PolicyDefinition& StatelessPolicy() {
  static const PolicyDefinition kDefinition = {
      "stateless",
      "servers keep state in memory; workers train on their own copies while one is lost and re-seed it",
      [] {
        RecoveryNeeds n;
        n.store_kind = "memory";
        n.restart = RestartRule::kSameIdReseeded;
        n.tolerates_server_loss = true;
        n.tolerates_chain_loss = true;
        n.tolerates_pause = true;
        return n;
      }(),
      &NewStatelessCoordinatorRecovery,
      &NewStatelessServerRecovery,
      &NewStatelessClientRecovery,
  };
  return kDefinition;
}

}  // namespace recovery
}  // namespace relaxps
