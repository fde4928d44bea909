// --recovery=none: a lost server ends the job with an error naming it (never a hang).
//
// The policy's definition (registry.h) and its role objects, one file each:
// none_coordinator.cc, none_server.cc, none_client.cc. Only recovery/
// includes this header.
#ifndef RELAXPS_RECOVERY_NONE_NONE_H_
#define RELAXPS_RECOVERY_NONE_NONE_H_

#include <memory>

#include "recovery/registry.h"

namespace relaxps {
namespace recovery {

const PolicyDefinition& NonePolicy();

std::unique_ptr<CoordinatorRecovery> NewNoneCoordinatorRecovery();
std::unique_ptr<ServerRecovery> NewNoneServerRecovery();
std::unique_ptr<ClientRecovery> NewNoneClientRecovery(const ClientRecoveryOptions& options);

}  // namespace recovery
}  // namespace relaxps

#endif  // RELAXPS_RECOVERY_NONE_NONE_H_
