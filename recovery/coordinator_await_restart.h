// AwaitRestartCoordinator: the coordinator side shared by policies whose lost
// server keeps its place in the map until a process registers with its id
// (checkpoint restarts, stateless re-seeding, and policies built on them).
//
// On a loss the server list is rebuilt (the map shows the server dead:
// clients park or serve locally, as their side of the policy says) and the
// advice the policy gives for restarting it is logged for the person or
// launcher supervising the job. No chains: every range has one server.
//
// Thread-safety: as CoordinatorRecovery (the coordinator's loop thread).
#ifndef RELAXPS_RECOVERY_COORDINATOR_AWAIT_RESTART_H_
#define RELAXPS_RECOVERY_COORDINATOR_AWAIT_RESTART_H_

#include <string>

#include "recovery/coordinator_recovery.h"
#include "recovery/recovery_policy.h"

namespace relaxps {
namespace recovery {

class AwaitRestartCoordinator : public CoordinatorRecovery {
 public:
  Status Configure(const CoordinatorJob& job) override {
    job_ = job;
    return Status::OK();
  }
  void OnServerLost(int server, const std::string& why, CoordinatorMechanisms& m) override {
    m.RebuildServerList();
    LOG(WARNING) << "waiting for server " << server << ": " << RestartAdvice(server);
  }

 protected:
  // How to bring server `server` back, for the log line of its loss.
  virtual std::string RestartAdvice(int server) const = 0;

  CoordinatorJob job_;  // Set by Configure.
};

}  // namespace recovery
}  // namespace relaxps

#endif  // RELAXPS_RECOVERY_COORDINATOR_AWAIT_RESTART_H_
