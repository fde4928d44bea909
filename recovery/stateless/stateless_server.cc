// The server side of --recovery=stateless (recovery/server_recovery.h):
// writes are applied locally (a stateless worker's resend of a push it gave
// up on is applied once, by the exactly-once record every server keeps); a
// server declared dead restarts in place, empty, and waits to be re-seeded
// from the workers (the coordinator tells it so when it registers again).
#include "recovery/stateless/stateless.h"

namespace relaxps {
namespace recovery {
namespace {

class StatelessServerRecovery final : public ServerRecovery {
 public:
  const char* Name() const override { return StatelessPolicy().name; }
  WriteRule write_rule(const ServerJobInfo& job) const override {
    (void)job;
    return WriteRule::kApplyLocally;
  }
  DeadServerPlan OnDeclaredDead(const ServerJobInfo& job) const override {
    (void)job;
    DeadServerPlan plan;
    plan.action = DeadServerPlan::Action::kRestartInPlace;
    plan.advice = "to be re-seeded from the workers";
    return plan;
  }
};

}  // namespace

std::unique_ptr<ServerRecovery> NewStatelessServerRecovery() {
  return std::make_unique<StatelessServerRecovery>();
}

}  // namespace recovery
}  // namespace relaxps
