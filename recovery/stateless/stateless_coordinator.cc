// --recovery=stateless, coordinator side: the job goes on while a server is
// lost (workers train on their own copies); a server that registers with a
// known id starts empty and is seeded from the workers' copies
// (coordinator/reseeder.h) before the map routes to it again.
#include <memory>
#include <string>

#include "recovery/coordinator_await_restart.h"
#include "recovery/stateless/stateless.h"

namespace relaxps {
namespace recovery {
namespace {

class StatelessCoordinator final : public AwaitRestartCoordinator {
 public:
  RegistrationOutcome OnServerRegistered(const ServerRegistration& r,
                                         CoordinatorMechanisms&) override {
    RegistrationOutcome out;
    // A server in place of a known one holds nothing (servers keep their
    // ranges in memory only); before any table exists there is nothing to seed.
    out.seed = r.replaces && r.has_tables;
    return out;
  }
  // The workers' copies follow each map (LocalReplica::FollowMoves): a
  // server lost after a move is re-seeded from copies of exactly the
  // ranges it holds now (docs/elastic.md "Stateless").
  Status AdmitRangeMoves() const override { return Status::OK(); }

 protected:
  std::string RestartAdvice(int server) const override {
    return "workers train on their own copies meanwhile; start a server with --server_id=" +
           std::to_string(server) + " and it is seeded from them";
  }
};

}  // namespace

std::unique_ptr<CoordinatorRecovery> NewStatelessCoordinatorRecovery() {
  return std::make_unique<StatelessCoordinator>();
}

}  // namespace recovery
}  // namespace relaxps
