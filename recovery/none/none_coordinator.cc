// --recovery=none, coordinator side: a lost server fails the job.
#include <memory>
#include <string>

#include "recovery/none/none.h"
#include "recovery/recovery_policy.h"

namespace relaxps {
namespace recovery {
namespace {

class NoneCoordinator final : public CoordinatorRecovery {
 public:
  Status Configure(const CoordinatorJob&) override { return Status::OK(); }
  // Every client learns the reason from its next heartbeat (never a hang).
  void OnServerLost(int server, const std::string& why, CoordinatorMechanisms& m) override {
    m.RebuildServerList();
    m.FailJob(why + "; recovery policy 'none' ends the job");
  }
  // Nothing is kept about servers but the live state, which a move carries.
  Status AdmitRangeMoves() const override { return Status::OK(); }
};

}  // namespace

std::unique_ptr<CoordinatorRecovery> NewNoneCoordinatorRecovery() {
  return std::make_unique<NoneCoordinator>();
}

}  // namespace recovery
}  // namespace relaxps
