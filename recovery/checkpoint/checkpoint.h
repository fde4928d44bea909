// --recovery=checkpoint: coordinated checkpoints; a lost server restarts from the latest complete one and the workers roll back to its clock.
//
// The policy's definition (registry.h) and its role objects, one file each:
// checkpoint_coordinator.cc, checkpoint_server.cc, checkpoint_client.cc. Only recovery/
// includes this header.
#ifndef RELAXPS_RECOVERY_CHECKPOINT_CHECKPOINT_H_
#define RELAXPS_RECOVERY_CHECKPOINT_CHECKPOINT_H_

#include <memory>

#include "recovery/registry.h"

namespace relaxps {
namespace recovery {

const PolicyDefinition& CheckpointPolicy();

// --checkpoint_mode (RecoveryNeeds::options): whether training waits for
// each snapshot to be durable.
inline constexpr const char* kCheckpointModeFlag = "checkpoint_mode";
inline constexpr const char* kCheckpointAsync = "async";
inline constexpr const char* kCheckpointSync = "sync";

std::unique_ptr<CoordinatorRecovery> NewCheckpointCoordinatorRecovery();
std::unique_ptr<ServerRecovery> NewCheckpointServerRecovery();
std::unique_ptr<ClientRecovery> NewCheckpointClientRecovery(const ClientRecoveryOptions& options);

}  // namespace recovery
}  // namespace relaxps

#endif  // RELAXPS_RECOVERY_CHECKPOINT_CHECKPOINT_H_
