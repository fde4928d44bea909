// The coordinator side of every registered policy
// (recovery/coordinator_recovery.h), driven through a fake of the
// coordinator's mechanisms: what a loss and a registration make the
// coordinator do, with no process, socket or sleep.
#include "recovery/coordinator_recovery.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/shard_map.h"
#include "proto/relaxps.pb.h"
#include "relaxps/recovery_policy.h"

namespace relaxps {
namespace recovery {
namespace {

// Records what a hook asked for; the map is the test's.
class FakeMechanisms final : public CoordinatorMechanisms {
 public:
  int64_t NowMs() const override { return now_ms; }
  const wire::ShardMap& map() const override { return shard_map; }
  std::vector<int> LiveServers() const override { return live; }
  std::set<int> LiveServersAwaitingSeed() const override { return awaiting_seed; }
  std::set<int> Syncing() const override { return syncing; }
  const wire::CheckpointRecord* LatestCheckpoint() const override {
    return has_checkpoint ? &checkpoint : nullptr;
  }
  wire::ShardMap* mutable_map() override { return &shard_map; }
  void RebuildServerList() override {
    ++rebuilds;
    shard_map.set_version(shard_map.version() + 1);
  }
  void PushMap(const std::string& why) override { pushed.push_back(why); }
  void PublishMap(const std::string& why) override { published.push_back(why); }
  void MarkSyncing(int server) override { syncing.insert(server); }
  void EndSyncing(int server) override { syncing.erase(server); }
  void FailJob(const std::string& reason) override {
    if (job_error.empty()) job_error = reason;
  }
  void CountRecovery(const std::string& kind) override { ++recoveries[kind]; }

  int64_t now_ms = 1000;
  wire::ShardMap shard_map;
  std::vector<int> live;
  std::set<int> awaiting_seed;
  std::set<int> syncing;
  bool has_checkpoint = false;
  wire::CheckpointRecord checkpoint;
  int rebuilds = 0;
  std::vector<std::string> pushed, published;
  std::string job_error;
  std::map<std::string, int> recoveries;
};

std::unique_ptr<CoordinatorRecovery> Make(const std::string& policy, int num_servers,
                                          int replicas) {
  StatusOr<std::unique_ptr<RecoveryPolicy>> p = NewRecoveryPolicy(policy);
  EXPECT_TRUE(p.ok()) << p.status();
  std::unique_ptr<CoordinatorRecovery> r = (*p)->NewCoordinatorRecovery();
  CoordinatorJob job;
  job.num_servers = num_servers;
  job.replicas = replicas;
  EXPECT_TRUE(r->Configure(job).ok()) << policy;
  return r;
}

// One dense table over `servers` servers, `replicas` per chain.
wire::ShardMap Map(int servers, int replicas) {
  wire::ShardMap m;
  m.set_version(1);
  m.set_epoch(1);
  wire::TableShards* ts = m.add_tables();
  ts->mutable_table()->set_name("w");
  ts->mutable_table()->set_size(servers * kDenseChunk);
  for (const wire::DenseRange& r :
       ShardMap::AssignDense(servers * kDenseChunk, servers, replicas)) {
    *ts->add_ranges() = r;
  }
  return m;
}

bool InSomeChain(const wire::ShardMap& m, int server) {
  for (const wire::DenseRange& r : m.tables(0).ranges()) {
    for (int s : r.chain()) {
      if (s == server) return true;
    }
  }
  return false;
}

TEST(CoordinatorRecoveryTest, EveryPolicyConfiguresForAJobItCanRun) {
  for (const std::string& name : RecoveryPolicyNames()) {
    StatusOr<std::unique_ptr<RecoveryPolicy>> p = NewRecoveryPolicy(name);
    ASSERT_TRUE(p.ok()) << name;
    CoordinatorJob job;
    job.num_servers = 3;
    job.replicas = (*p)->needs().min_replicas > 1 ? (*p)->needs().min_replicas : 2;
    std::unique_ptr<CoordinatorRecovery> r = (*p)->NewCoordinatorRecovery();
    EXPECT_TRUE(r->Configure(job).ok()) << name;
    // The map holds what the policy declares it needs.
    EXPECT_EQ(r->ReplicasPerRange() > 1, (*p)->needs().min_replicas > 1) << name;
  }
}

// Range moves are opt-in (docs/elastic.md): every built-in policy says how
// its state follows one; a policy that does not override AdmitRangeMoves
// refuses them, naming the hook.
TEST(CoordinatorRecoveryTest, RangeMovesAreAdmittedOnlyByPoliciesThatOptIn) {
  for (const std::string& name : RecoveryPolicyNames()) {
    StatusOr<std::unique_ptr<RecoveryPolicy>> p = NewRecoveryPolicy(name);
    ASSERT_TRUE(p.ok()) << name;
    EXPECT_TRUE((*p)->NewCoordinatorRecovery()->AdmitRangeMoves().ok()) << name;
  }
  class Silent final : public CoordinatorRecovery {
   public:
    Status Configure(const CoordinatorJob&) override { return Status::OK(); }
    void OnServerLost(int, const std::string&, CoordinatorMechanisms&) override {}
  };
  const Status s = Silent().AdmitRangeMoves();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("AdmitRangeMoves"), std::string::npos) << s;
}

TEST(CoordinatorRecoveryTest, NoneFailsTheJobNamingTheServer) {
  std::unique_ptr<CoordinatorRecovery> r = Make("none", 2, 2);
  EXPECT_EQ(r->ReplicasPerRange(), 1);
  EXPECT_FALSE(r->ProbesClosedConnections());
  FakeMechanisms m;
  r->OnServerLost(1, "server 1 missed heartbeats", m);
  EXPECT_EQ(m.job_error, "server 1 missed heartbeats; recovery policy 'none' ends the job");
  EXPECT_EQ(m.rebuilds, 1);
}

TEST(CoordinatorRecoveryTest, CheckpointWaitsForTheRestartWithItsShards) {
  std::unique_ptr<CoordinatorRecovery> r = Make("checkpoint", 2, 2);
  FakeMechanisms m;
  m.shard_map = Map(2, 1);
  const std::string before = m.shard_map.tables(0).SerializeAsString();
  r->OnServerLost(1, "lost", m);
  EXPECT_TRUE(m.job_error.empty());
  EXPECT_EQ(m.rebuilds, 1);
  ServerRegistration back;
  back.id = 1;
  back.replaces = true;
  back.has_tables = true;
  const RegistrationOutcome out = r->OnServerRegistered(back, m);
  EXPECT_FALSE(out.seed);  // It restored its own checkpoint.
  EXPECT_EQ(out.joined_chains, 0);
  EXPECT_EQ(m.shard_map.tables(0).SerializeAsString(), before);  // Same shards.
}

TEST(CoordinatorRecoveryTest, StatelessSeedsAServerInALostOnesPlace) {
  std::unique_ptr<CoordinatorRecovery> r = Make("stateless", 2, 2);
  FakeMechanisms m;
  r->OnServerLost(0, "lost", m);
  EXPECT_TRUE(m.job_error.empty());
  ServerRegistration reg;
  reg.id = 0;
  reg.has_tables = true;
  EXPECT_FALSE(r->OnServerRegistered(reg, m).seed);  // First registration.
  reg.replaces = true;
  EXPECT_TRUE(r->OnServerRegistered(reg, m).seed);
  reg.has_tables = false;
  EXPECT_FALSE(r->OnServerRegistered(reg, m).seed);  // Nothing to seed yet.
}

TEST(CoordinatorRecoveryTest, ChainNeedsReplicasAndSplicesALostServerOut) {
  StatusOr<std::unique_ptr<RecoveryPolicy>> p = NewRecoveryPolicy("chain");
  ASSERT_TRUE(p.ok());
  CoordinatorJob bad;
  bad.num_servers = 2;
  bad.replicas = 3;
  Status s = (*p)->NewCoordinatorRecovery()->Configure(bad);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("under --recovery=chain"), std::string::npos) << s;

  std::unique_ptr<CoordinatorRecovery> r = Make("chain", 3, 2);
  EXPECT_EQ(r->ReplicasPerRange(), 2);
  EXPECT_TRUE(r->ProbesClosedConnections());
  FakeMechanisms m;
  m.shard_map = Map(3, 2);
  m.syncing = {};
  r->OnServerLost(1, "lost", m);
  EXPECT_TRUE(m.job_error.empty());
  EXPECT_FALSE(InSomeChain(m.shard_map, 1));
  EXPECT_EQ(m.shard_map.epoch(), 2u);
  EXPECT_EQ(m.published, std::vector<std::string>({"server 1 lost"}));
  EXPECT_EQ(m.recoveries["failover"], 1);

  ServerRegistration back;
  back.id = 1;
  back.replaces = true;
  back.has_tables = true;
  const RegistrationOutcome out = r->OnServerRegistered(back, m);
  EXPECT_FALSE(out.seed);
  EXPECT_GT(out.joined_chains, 0);
  EXPECT_TRUE(out.push_map);
  EXPECT_TRUE(InSomeChain(m.shard_map, 1));
}

TEST(CoordinatorRecoveryTest, ChainFailsTheJobWhenARangeLosesEveryReplica) {
  std::unique_ptr<CoordinatorRecovery> r = Make("chain", 2, 2);
  FakeMechanisms m;
  m.shard_map = Map(2, 2);
  r->OnServerLost(0, "first", m);
  EXPECT_TRUE(m.job_error.empty());
  r->OnServerLost(1, "second", m);
  EXPECT_NE(m.job_error.find("every replica is lost"), std::string::npos) << m.job_error;
}

TEST(CoordinatorRecoveryTest, HybridStrandsTheLastReplicaAndSeedsItsRestart) {
  std::unique_ptr<CoordinatorRecovery> r = Make("hybrid", 2, 2);
  FakeMechanisms m;
  m.shard_map = Map(2, 2);
  r->OnServerLost(0, "first", m);
  r->OnServerLost(1, "second", m);
  EXPECT_TRUE(m.job_error.empty());  // Workers train on their copies.
  EXPECT_EQ(m.recoveries["fallback"], 1);
  wire::StoredRecovery saved;
  r->SaveState(&saved);
  EXPECT_EQ(std::vector<int>(saved.stranded_holders().begin(), saved.stranded_holders().end()),
            std::vector<int>({1}));

  // A restarted coordinator resumes the stranded holder.
  std::unique_ptr<CoordinatorRecovery> resumed = Make("hybrid", 2, 2);
  resumed->RestoreState(saved, m.now_ms);
  m.live = {0, 1};
  ServerRegistration back;
  back.id = 1;
  back.replaces = true;
  back.has_tables = true;
  EXPECT_TRUE(resumed->OnServerRegistered(back, m).seed);
  m.awaiting_seed = {1};  // The core begins its re-seed.
  ServerRegistration other;
  other.id = 0;
  other.replaces = true;
  other.has_tables = true;
  EXPECT_FALSE(resumed->OnServerRegistered(other, m).seed);  // Not stranded: rejoins.
  EXPECT_FALSE(InSomeChain(m.shard_map, 0));  // Kept out until 1 is seeded.
  m.awaiting_seed.clear();  // Its SEED was acknowledged.
  resumed->OnServerSeeded(1, m);
  EXPECT_TRUE(InSomeChain(m.shard_map, 0));
  EXPECT_EQ(m.syncing, std::set<int>({0}));
  wire::StoredRecovery after;
  resumed->SaveState(&after);
  EXPECT_EQ(after.stranded_holders_size(), 0);
}

TEST(CoordinatorRecoveryTest, HybridWithoutAWorkerCopyKeepsTheLatestCheckpoint) {
  std::unique_ptr<CoordinatorRecovery> r = Make("hybrid", 2, 2);
  FakeMechanisms m;
  m.shard_map = Map(2, 2);
  m.has_checkpoint = true;
  m.checkpoint.set_clock(40);
  SeedReport report;
  report.server = 1;
  report.source = "initializer";
  r->OnSeedWithoutWorkerCopy(&report, m);
  EXPECT_EQ(report.source, "checkpoint@40");
  // Stateless seeds from the initializer as merged.
  std::unique_ptr<CoordinatorRecovery> stateless = Make("stateless", 2, 2);
  report.source = "initializer";
  stateless->OnSeedWithoutWorkerCopy(&report, m);
  EXPECT_EQ(report.source, "initializer");
}

}  // namespace
}  // namespace recovery
}  // namespace relaxps
