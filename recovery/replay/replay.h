// --recovery=replay: checkpoint + upstream backup. Servers checkpoint as
// under checkpoint and a lost one restarts with its id from the latest
// complete checkpoint; every worker keeps its acknowledged updates since the
// last complete checkpoint (UpdateLog) and replays those of a restarted
// server's ranges, in order and exactly once (the server's applied ledger
// skips what its restored state reflects), before any new request of that
// worker reaches it. Workers keep their clocks; on one server no
// acknowledged update is lost unless the log overflowed (counted).
//
// The policy's definition (registry.h) and its role objects:
// replay_coordinator.cc, replay_server.cc, replay_client.cc. Only recovery/
// includes this header.
#ifndef RELAXPS_RECOVERY_REPLAY_REPLAY_H_
#define RELAXPS_RECOVERY_REPLAY_REPLAY_H_

#include <memory>

#include "recovery/registry.h"

namespace relaxps {
namespace recovery {

const PolicyDefinition& ReplayPolicy();

std::unique_ptr<CoordinatorRecovery> NewReplayCoordinatorRecovery();
std::unique_ptr<ServerRecovery> NewReplayServerRecovery();
std::unique_ptr<ClientRecovery> NewReplayClientRecovery(const ClientRecoveryOptions& options);

}  // namespace recovery
}  // namespace relaxps

#endif  // RELAXPS_RECOVERY_REPLAY_REPLAY_H_
