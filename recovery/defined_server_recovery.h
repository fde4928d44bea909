// DefinedServerRecovery: the base of server role objects that speak for a
// registered policy definition (its name in logs, its restart flags in the
// advice a dead server gives). Only recovery/ includes this header.
//
// Thread-safety: as ServerRecovery (the definition is a constant).
#ifndef RELAXPS_RECOVERY_DEFINED_SERVER_RECOVERY_H_
#define RELAXPS_RECOVERY_DEFINED_SERVER_RECOVERY_H_

#include "recovery/registry.h"
#include "recovery/server_recovery.h"

namespace relaxps {
namespace recovery {

class DefinedServerRecovery : public ServerRecovery {
 public:
  // `policy`: the definition whose name and restart flags this object uses
  // (static storage).
  explicit DefinedServerRecovery(const PolicyDefinition& policy) : policy_(policy) {}

  const char* Name() const override { return policy_.name; }

 protected:
  const PolicyDefinition& policy() const { return policy_; }

 private:
  const PolicyDefinition& policy_;
};

}  // namespace recovery
}  // namespace relaxps

#endif  // RELAXPS_RECOVERY_DEFINED_SERVER_RECOVERY_H_
