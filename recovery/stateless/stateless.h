// --recovery=stateless: servers hold state in memory; workers train on their own copies while one is lost and re-seed it when it is back.
//
// The policy's definition (registry.h) and its role objects, one file each:
// stateless_coordinator.cc, stateless_server.cc, stateless_client.cc. Only recovery/
// includes this header.
#ifndef RELAXPS_RECOVERY_STATELESS_STATELESS_H_
#define RELAXPS_RECOVERY_STATELESS_STATELESS_H_

#include <memory>

#include "recovery/registry.h"

namespace relaxps {
namespace recovery {

const PolicyDefinition& StatelessPolicy();

std::unique_ptr<CoordinatorRecovery> NewStatelessCoordinatorRecovery();
std::unique_ptr<ServerRecovery> NewStatelessServerRecovery();
std::unique_ptr<ClientRecovery> NewStatelessClientRecovery(const ClientRecoveryOptions& options);

}  // namespace recovery
}  // namespace relaxps

#endif  // RELAXPS_RECOVERY_STATELESS_STATELESS_H_
