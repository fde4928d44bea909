// The server side of --recovery=none (recovery/server_recovery.h): writes
// are applied locally; a server declared dead exits (the job has failed).
#include "recovery/none/none.h"

namespace relaxps {
namespace recovery {
namespace {

class NoneServerRecovery final : public ServerRecovery {
 public:
  const char* Name() const override { return NonePolicy().name; }
  WriteRule write_rule(const ServerJobInfo& job) const override {
    (void)job;
    return WriteRule::kApplyLocally;
  }
  DeadServerPlan OnDeclaredDead(const ServerJobInfo& job) const override {
    DeadServerPlan plan;
    plan.action = DeadServerPlan::Action::kExit;
    plan.advice = RestartAdvice(job.server_id, NonePolicy().needs.restart_flags);
    return plan;
  }
};

}  // namespace

std::unique_ptr<ServerRecovery> NewNoneServerRecovery() {
  return std::make_unique<NoneServerRecovery>();
}

}  // namespace recovery
}  // namespace relaxps
