// --recovery=chain, coordinator side: a lost server is spliced out of every
// chain at once (epoch + 1, the new map installed on every live server); a
// server that registers again with its id joins its home chains as tail and
// counts as a copy once its state transfers arrived. A range that would be
// left without a replica fails the job.
#include "recovery/chain/chain_coordinator.h"

#include <memory>
#include <string>

#include "common/shard_map.h"
#include "recovery/chain/chain.h"
#include "recovery/recovery_policy.h"

namespace relaxps {
namespace recovery {

Status ChainCoordinatorBase::Configure(const CoordinatorJob& job) {
  if (job.replicas < 2 || job.replicas > job.num_servers) {
    return InvalidArgumentError("--replicas must be between 2 and --num_servers (" +
                                std::to_string(job.num_servers) + ") under --recovery=" +
                                policy_ + ", got " + std::to_string(job.replicas));
  }
  job_ = job;
  return Status::OK();
}

namespace {

class ChainCoordinator final : public ChainCoordinatorBase {
 public:
  ChainCoordinator() : ChainCoordinatorBase("chain") {}

  // A move of a chained range replaces one replica the way a restarted
  // server rejoins: the destination joins as tail and gets the state by
  // transfer before the source leaves (docs/elastic.md "Chains"), so every
  // acknowledged update is on every replica of the chain throughout.
  Status AdmitRangeMoves() const override { return Status::OK(); }

  void OnServerLost(int server, const std::string& why, CoordinatorMechanisms& m) override {
    LOG(WARNING) << why;
    m.CountRecovery("failover");
    wire::ShardMap* map = m.mutable_map();
    StatusOr<int> changed = RemoveFromChains(map, server, job_.replicas, m.Syncing());
    if (!changed.ok()) {
      m.RebuildServerList();
      m.FailJob(why + "; " + changed.status().message() + ": every replica is lost");
      return;
    }
    map->set_epoch(map->epoch() + 1);
    m.RebuildServerList();
    LOG(WARNING) << "server " << server << " removed from " << *changed << " chain(s); epoch "
                 << map->epoch() << ", map version " << map->version() << ". "
                 << RestartAdvice(server);
    m.PublishMap("server " + std::to_string(server) + " lost");
  }

  RegistrationOutcome OnServerRegistered(const ServerRegistration& r,
                                         CoordinatorMechanisms& m) override {
    RegistrationOutcome out;
    if (!r.has_tables) return out;
    wire::ShardMap* map = m.mutable_map();
    m.EndSyncing(r.id);
    if (r.was_live) {
      // Its old instance's state is gone: out of its chains first.
      StatusOr<int> removed = RemoveFromChains(map, r.id, job_.replicas, m.Syncing());
      if (!removed.ok()) m.FailJob(removed.status().message());
    }
    out.joined_chains = JoinChains(map, r.id, job_.num_servers, job_.replicas);
    map->set_epoch(map->epoch() + 1);
    LOG(INFO) << "server " << r.id << " joins " << out.joined_chains
              << " chain(s) as tail; epoch " << map->epoch();
    out.push_map = out.joined_chains > 0;
    return out;
  }

 protected:
  std::string RestartAdvice(int server) const override {
    return "restart it with --server_id=" + std::to_string(server) +
           " to copy its ranges from a live replica and rejoin its chains as tail";
  }
};

}  // namespace

std::unique_ptr<CoordinatorRecovery> NewChainCoordinatorRecovery() {
  return std::make_unique<ChainCoordinator>();
}

}  // namespace recovery
}  // namespace relaxps
