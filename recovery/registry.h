// The registry of recovery policies: one PolicyDefinition per folder
// recovery/<name>/.
//
// A policy folder defines `const PolicyDefinition& <Name>Policy()` in
// namespace relaxps::recovery (its name, one-line description, needs and
// the factories of its role objects), has a CMakeLists.txt adding its
// sources to relaxps_recovery, and is registered by adding its name to
// RELAXPS_RECOVERY_POLICIES in recovery/CMakeLists.txt (registry.cc's table
// is generated from that list); nothing else in the tree names it
// (docs/recovery.md).
//
// Thread-safety: definitions are constants; the registry is immutable.
#ifndef RELAXPS_RECOVERY_REGISTRY_H_
#define RELAXPS_RECOVERY_REGISTRY_H_

#include <memory>

#include "recovery/client_recovery.h"
#include "recovery/coordinator_recovery.h"
#include "recovery/server_recovery.h"
#include "relaxps/recovery_policy.h"

namespace relaxps {
namespace recovery {

struct PolicyDefinition {
  const char* name;         // What --recovery takes.
  const char* description;  // One line for --recovery=help.
  RecoveryNeeds needs;
  std::unique_ptr<CoordinatorRecovery> (*new_coordinator)();
  std::unique_ptr<ServerRecovery> (*new_server)();
  std::unique_ptr<ClientRecovery> (*new_client)(const ClientRecoveryOptions& options);
};

}  // namespace recovery
}  // namespace relaxps

#endif  // RELAXPS_RECOVERY_REGISTRY_H_
