// --recovery=hybrid: chains while a replica lives; the workers' copies (stateless re-seeding) when none does; the latest checkpoint as the last resort.
//
// The policy's definition (registry.h) and its role objects, one file each:
// hybrid_coordinator.cc, hybrid_server.cc, hybrid_client.cc. Only recovery/
// includes this header.
#ifndef RELAXPS_RECOVERY_HYBRID_HYBRID_H_
#define RELAXPS_RECOVERY_HYBRID_HYBRID_H_

#include <memory>

#include "recovery/registry.h"

namespace relaxps {
namespace recovery {

const PolicyDefinition& HybridPolicy();

std::unique_ptr<CoordinatorRecovery> NewHybridCoordinatorRecovery();
std::unique_ptr<ServerRecovery> NewHybridServerRecovery();
std::unique_ptr<ClientRecovery> NewHybridClientRecovery(const ClientRecoveryOptions& options);

}  // namespace recovery
}  // namespace relaxps

#endif  // RELAXPS_RECOVERY_HYBRID_HYBRID_H_
