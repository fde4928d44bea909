#include "recovery/none/none.h"

namespace relaxps {
namespace recovery {

const PolicyDefinition& NonePolicy() {
  static const PolicyDefinition kDefinition = {
      "none",
      "a lost server ends the job with an error naming it",
      [] {
        RecoveryNeeds n;
        n.restart = RestartRule::kNever;
        return n;
      }(),
      &NewNoneCoordinatorRecovery,
      &NewNoneServerRecovery,
      &NewNoneClientRecovery,
  };
  return kDefinition;
}

}  // namespace recovery
}  // namespace relaxps
