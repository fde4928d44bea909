#include "recovery/chain/chain_server.h"

#include "recovery/chain/chain.h"

namespace relaxps {
namespace recovery {

WriteRule ChainServerRecovery::write_rule(const ServerJobInfo& job) const {
  // The coordinator gives a replicating job at least two replicas per range;
  // a chain of one would be a single copy.
  return job.replicas >= 2 ? WriteRule::kForwardAlongChain : WriteRule::kApplyLocally;
}

int64_t ChainServerRecovery::ReplicationLag(const ServerJobInfo& job) const {
  return recovery::ReplicationLag(job.options);
}

DeadServerPlan ChainServerRecovery::OnDeclaredDead(const ServerJobInfo& job) const {
  DeadServerPlan plan;
  if (write_rule(job) == WriteRule::kForwardAlongChain) {
    plan.action = DeadServerPlan::Action::kRejoinChains;
    return plan;
  }
  plan.action = DeadServerPlan::Action::kExit;
  plan.advice = RestartAdvice(job.server_id, policy().needs.restart_flags);
  return plan;
}

std::unique_ptr<ServerRecovery> NewChainServerRecovery() {
  return std::make_unique<ChainServerRecovery>(ChainPolicy());
}

}  // namespace recovery
}  // namespace relaxps
