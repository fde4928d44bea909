// --recovery=replay, coordinator side: as checkpoint (the job waits for a
// lost server to restart with its id from its latest complete checkpoint),
// and checkpoints are always scheduled: they bound the workers' logs. A job
// that asks for none gets one every kDefaultEveryS seconds.
#include <memory>
#include <string>

#include "recovery/coordinator_await_restart.h"
#include "recovery/replay/replay.h"

namespace relaxps {
namespace recovery {
namespace {

constexpr double kDefaultEveryS = 2.0;

class ReplayCoordinator final : public AwaitRestartCoordinator {
 public:
  CheckpointSchedule Checkpoints(const CheckpointSchedule& requested) const override {
    CheckpointSchedule s = requested;
    if (s.every_clocks <= 0 && s.every_s <= 0) s.every_s = kDefaultEveryS;
    return s;
  }
  // A moved range takes its state and exactly-once record to the
  // destination, and each worker's log follows the new map (UpdateLog::
  // Reroute): a restarted server is replayed what its keys' state lacks,
  // wherever it was acknowledged (docs/elastic.md "Replay").
  Status AdmitRangeMoves() const override { return Status::OK(); }

 protected:
  std::string RestartAdvice(int server) const override {
    return "restart it with --server_id=" + std::to_string(server) +
           " --restore_from=latest; the workers replay what they logged since that checkpoint";
  }
};

}  // namespace

std::unique_ptr<CoordinatorRecovery> NewReplayCoordinatorRecovery() {
  return std::make_unique<ReplayCoordinator>();
}

}  // namespace recovery
}  // namespace relaxps
