#include "recovery/checkpoint/checkpoint_client.h"

#include "recovery/checkpoint/checkpoint.h"

namespace relaxps {
namespace recovery {

PartAction CheckpointClientRecovery::OnServerFailed(const FailedPart& /*part*/) const {
  return PartAction::kPark;
}

std::unique_ptr<ClientRecovery> NewCheckpointClientRecovery(const ClientRecoveryOptions& options) {
  return std::make_unique<CheckpointClientRecovery>(options);
}

}  // namespace recovery
}  // namespace relaxps
