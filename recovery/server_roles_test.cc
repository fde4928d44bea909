// The server side of every registered policy (recovery/server_recovery.h),
// each role object made as a server makes it
// (NewRecoveryPolicy(name)->NewServerRecovery()) and asked its decisions on
// hand-made ServerJobInfo: how writes are acknowledged, what a server
// declared dead does (per policy and store kind), and whether a restored
// server re-forms its BSP rounds from replayed pushes. No process, store or
// sleep.
#include "recovery/server_recovery.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "relaxps/recovery_policy.h"

namespace relaxps {
namespace recovery {
namespace {

using Action = DeadServerPlan::Action;

std::unique_ptr<ServerRecovery> Make(const std::string& policy) {
  StatusOr<std::unique_ptr<RecoveryPolicy>> p = NewRecoveryPolicy(policy);
  EXPECT_TRUE(p.ok()) << p.status();
  if (!p.ok()) return nullptr;
  std::unique_ptr<ServerRecovery> r = (*p)->NewServerRecovery();
  EXPECT_NE(r, nullptr) << policy;
  return r;
}

std::string RestartFlagsOf(const std::string& policy) {
  StatusOr<std::unique_ptr<RecoveryPolicy>> p = NewRecoveryPolicy(policy);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? (*p)->needs().restart_flags : std::string();
}

ServerJobInfo Job(int replicas, const std::string& store_kind, int complete_checkpoints = 0,
                  bool restored = false) {
  ServerJobInfo job;
  job.server_id = 3;
  job.replicas = replicas;
  job.store_kind = store_kind;
  job.checkpoint_root = "/data/s3/checkpoints";
  job.complete_checkpoints = complete_checkpoints;
  job.restored = restored;
  return job;
}

TEST(ServerRolesTest, EveryRegisteredPolicyMakesAServerRoleNamedAfterIt) {
  const std::vector<std::string> names = RecoveryPolicyNames();
  for (const char* known : {"none", "checkpoint", "chain", "stateless", "hybrid", "replay"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), known), names.end()) << known;
  }
  for (const std::string& name : names) {
    std::unique_ptr<ServerRecovery> r = Make(name);
    ASSERT_NE(r, nullptr) << name;
    EXPECT_EQ(std::string(r->Name()), name);
    // Each call makes a new object (a role object belongs to one server).
    std::unique_ptr<ServerRecovery> other = Make(name);
    EXPECT_NE(r.get(), other.get());
  }
}

TEST(ServerRolesTest, ChainPoliciesForwardAlongChainsOnlyWithReplicas) {
  for (const char* policy : {"chain", "hybrid"}) {
    SCOPED_TRACE(policy);
    std::unique_ptr<ServerRecovery> r = Make(policy);
    ASSERT_NE(r, nullptr);
    for (const char* store : {"memory", "rocksdb"}) {
      EXPECT_EQ(r->write_rule(Job(2, store)), WriteRule::kForwardAlongChain);
      EXPECT_EQ(r->write_rule(Job(3, store)), WriteRule::kForwardAlongChain);
      // A chain of one is a single copy: no chains.
      EXPECT_EQ(r->write_rule(Job(1, store)), WriteRule::kApplyLocally);
    }
  }
}

TEST(ServerRolesTest, OtherPoliciesApplyLocallyWhateverTheJob) {
  for (const char* policy : {"none", "checkpoint", "stateless", "replay"}) {
    SCOPED_TRACE(policy);
    std::unique_ptr<ServerRecovery> r = Make(policy);
    ASSERT_NE(r, nullptr);
    for (int replicas : {1, 2, 3}) {
      for (const char* store : {"memory", "rocksdb"}) {
        EXPECT_EQ(r->write_rule(Job(replicas, store, 2, true)), WriteRule::kApplyLocally)
            << replicas << " " << store;
      }
    }
  }
}

TEST(ServerRolesTest, NoneExitsAndSaysTheJobHasFailed) {
  std::unique_ptr<ServerRecovery> r = Make("none");
  ASSERT_NE(r, nullptr);
  for (const char* store : {"memory", "rocksdb"}) {
    const DeadServerPlan plan = r->OnDeclaredDead(Job(1, store, 4));
    EXPECT_EQ(plan.action, Action::kExit) << store;
    EXPECT_TRUE(plan.restart_flags.empty());
    EXPECT_EQ(plan.advice,
              "restart it with --server_id=3 to rejoin (under --recovery=none the job has failed)");
  }
}

TEST(ServerRolesTest, CheckpointPoliciesRestartInPlaceFromTheLatestCheckpoint) {
  for (const char* policy : {"checkpoint", "replay"}) {
    SCOPED_TRACE(policy);
    std::unique_ptr<ServerRecovery> r = Make(policy);
    ASSERT_NE(r, nullptr);
    ASSERT_EQ(RestartFlagsOf(policy), "--restore_from=latest");

    // rocksdb with a complete checkpoint: back from it, with the policy's
    // restart flags.
    DeadServerPlan plan = r->OnDeclaredDead(Job(1, "rocksdb", 2));
    EXPECT_EQ(plan.action, Action::kRestartInPlace);
    EXPECT_EQ(plan.restart_flags, std::vector<std::string>({"--restore_from=latest"}));
    EXPECT_EQ(plan.advice, "from its latest checkpoint under /data/s3/checkpoints");

    // rocksdb without one: back from its own data dir, no restore flag.
    plan = r->OnDeclaredDead(Job(1, "rocksdb", 0));
    EXPECT_EQ(plan.action, Action::kRestartInPlace);
    EXPECT_TRUE(plan.restart_flags.empty());
    EXPECT_EQ(plan.advice, "from its data dir (it has no complete checkpoint)");

    // A memory store restores nothing: exit, naming the flags to restart with.
    plan = r->OnDeclaredDead(Job(1, "memory", 2));
    EXPECT_EQ(plan.action, Action::kExit);
    EXPECT_TRUE(plan.restart_flags.empty());
    EXPECT_EQ(plan.advice, RestartAdvice(3, "--restore_from=latest"));
    EXPECT_NE(plan.advice.find("--server_id=3 --restore_from=latest"), std::string::npos)
        << plan.advice;
  }
}

TEST(ServerRolesTest, ChainPoliciesRejoinTheirChainsWithReplicasElseExit) {
  for (const char* policy : {"chain", "hybrid"}) {
    SCOPED_TRACE(policy);
    std::unique_ptr<ServerRecovery> r = Make(policy);
    ASSERT_NE(r, nullptr);
    for (const char* store : {"memory", "rocksdb"}) {
      const DeadServerPlan plan = r->OnDeclaredDead(Job(2, store, 1));
      EXPECT_EQ(plan.action, Action::kRejoinChains) << store;
      EXPECT_TRUE(plan.restart_flags.empty());
    }
    const DeadServerPlan alone = r->OnDeclaredDead(Job(1, "rocksdb", 1));
    EXPECT_EQ(alone.action, Action::kExit);
    EXPECT_TRUE(alone.restart_flags.empty());
    EXPECT_EQ(alone.advice, RestartAdvice(3, RestartFlagsOf(policy)));
  }
  // Hybrid falls back to the latest checkpoint; chain has no restart flags.
  EXPECT_EQ(Make("chain")->OnDeclaredDead(Job(1, "memory")).advice,
            "restart it with --server_id=3 to rejoin (under --recovery=none the job has failed)");
  EXPECT_EQ(Make("hybrid")->OnDeclaredDead(Job(1, "memory")).advice,
            "restart it with --server_id=3 --restore_from=latest to rejoin (under "
            "--recovery=none the job has failed)");
}

TEST(ServerRolesTest, StatelessRestartsInPlaceEmptyToBeReseeded) {
  std::unique_ptr<ServerRecovery> r = Make("stateless");
  ASSERT_NE(r, nullptr);
  for (const char* store : {"memory", "rocksdb"}) {
    for (int checkpoints : {0, 3}) {
      const DeadServerPlan plan = r->OnDeclaredDead(Job(1, store, checkpoints));
      EXPECT_EQ(plan.action, Action::kRestartInPlace) << store;
      EXPECT_TRUE(plan.restart_flags.empty()) << store;
      EXPECT_EQ(plan.advice, "to be re-seeded from the workers");
    }
  }
}

TEST(ServerRolesTest, OnlyARestoredReplayServerRebuildsRoundsFromReplay) {
  std::unique_ptr<ServerRecovery> replay = Make("replay");
  ASSERT_NE(replay, nullptr);
  EXPECT_TRUE(replay->RebuildsRoundsFromReplay(Job(1, "rocksdb", 2, /*restored=*/true)));
  EXPECT_FALSE(replay->RebuildsRoundsFromReplay(Job(1, "rocksdb", 2, /*restored=*/false)));
  EXPECT_FALSE(replay->RebuildsRoundsFromReplay(Job(1, "rocksdb", 0, /*restored=*/false)));
  for (const char* policy : {"none", "checkpoint", "chain", "stateless", "hybrid"}) {
    std::unique_ptr<ServerRecovery> r = Make(policy);
    ASSERT_NE(r, nullptr);
    EXPECT_FALSE(r->RebuildsRoundsFromReplay(Job(2, "rocksdb", 2, /*restored=*/true))) << policy;
  }
}

TEST(ServerRolesTest, EveryPolicyAdmitsEveryRequest) {
  for (const std::string& name : RecoveryPolicyNames()) {
    std::unique_ptr<ServerRecovery> r = Make(name);
    ASSERT_NE(r, nullptr);
    r->OnStarted(Job(1, "rocksdb", 1, true));
    r->OnLiveWorkers({0, 1});
    for (wire::MsgType type : {wire::PUSH, wire::PULL, wire::PUSH_ROWS, wire::CLOCK}) {
      wire::Header h;
      h.set_type(type);
      h.set_replayed(type == wire::PUSH);
      EXPECT_TRUE(r->AdmitRequest(h).ok()) << name << " " << type;
    }
  }
}

TEST(ServerRolesTest, PlansAgreeWithTheRestartRuleEachPolicyDeclares) {
  // What a launcher reads (RecoveryNeeds::restart) matches what a server
  // declared dead does in a job the policy is meant for.
  for (const std::string& name : RecoveryPolicyNames()) {
    SCOPED_TRACE(name);
    StatusOr<std::unique_ptr<RecoveryPolicy>> p = NewRecoveryPolicy(name);
    ASSERT_TRUE(p.ok());
    const RecoveryNeeds& needs = (*p)->needs();
    const std::string store = needs.store_kind == "any" ? "rocksdb" : needs.store_kind;
    const DeadServerPlan plan =
        (*p)->NewServerRecovery()->OnDeclaredDead(Job(std::max(needs.min_replicas, 1), store, 1));
    switch (needs.restart) {
      case RestartRule::kNever:
        EXPECT_EQ(plan.action, Action::kExit);
        break;
      case RestartRule::kSameIdFromCheckpoint:
      case RestartRule::kSameIdReseeded:
        EXPECT_EQ(plan.action, Action::kRestartInPlace);
        break;
      case RestartRule::kSameIdRejoinsAsTail:
        EXPECT_EQ(plan.action, Action::kRejoinChains);
        break;
    }
  }
}

}  // namespace
}  // namespace recovery
}  // namespace relaxps
