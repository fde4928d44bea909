// The recovery policy registry (recovery/registry.h): names parsed in one
// place, needs declared by every policy, and the help a script reads.
#include "recovery/registry.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace relaxps {
namespace {

TEST(RegistryTest, EveryRegisteredNameMakesItsPolicy) {
  const std::vector<std::string> names = RecoveryPolicyNames();
  ASSERT_GE(names.size(), 5u);
  std::set<std::string> unique(names.begin(), names.end());
  EXPECT_EQ(unique.size(), names.size()) << "a name is registered twice";
  for (const char* name : {"none", "checkpoint", "chain", "stateless", "hybrid", "replay"}) {
    EXPECT_TRUE(unique.count(name)) << name;
  }
  for (const std::string& name : names) {
    ASSERT_TRUE(CheckRecoveryPolicyName(name).ok()) << name;
    StatusOr<std::unique_ptr<RecoveryPolicy>> p = NewRecoveryPolicy(name);
    ASSERT_TRUE(p.ok()) << name << ": " << p.status();
    EXPECT_EQ((*p)->Name(), name);
    EXPECT_GT(std::string((*p)->Description()).size(), 10u) << name;
    const RecoveryNeeds& n = (*p)->needs();
    EXPECT_GE(n.min_servers, 1) << name;
    EXPECT_GE(n.experiment_servers, n.min_servers) << name;
    EXPECT_GE(n.min_replicas, 1) << name;
    EXPECT_LE(n.min_replicas, n.min_servers) << name;
    EXPECT_TRUE(n.store_kind == "any" || n.store_kind == "rocksdb" || n.store_kind == "memory")
        << name << ": " << n.store_kind;
    // A policy that never brings a server back tolerates no server loss.
    if (n.restart == RestartRule::kNever) {
      EXPECT_FALSE(n.tolerates_server_loss) << name;
    }
    if (n.tolerates_chain_loss) {
      EXPECT_TRUE(n.tolerates_server_loss) << name;
    }
    EXPECT_NE(p->get()->NewCoordinatorRecovery(), nullptr) << name;
    EXPECT_NE(p->get()->NewServerRecovery(), nullptr) << name;
  }
}

TEST(RegistryTest, NeedsOfTheBuiltInPolicies) {
  auto none = NewRecoveryPolicy("none");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ((*none)->needs().restart, RestartRule::kNever);
  auto ckpt = NewRecoveryPolicy("checkpoint");
  ASSERT_TRUE(ckpt.ok());
  EXPECT_EQ((*ckpt)->needs().restart, RestartRule::kSameIdFromCheckpoint);
  EXPECT_EQ((*ckpt)->needs().restart_flags, "--restore_from=latest");
  EXPECT_TRUE((*ckpt)->needs().rolls_back);
  auto chain = NewRecoveryPolicy("chain");
  ASSERT_TRUE(chain.ok());
  EXPECT_EQ((*chain)->needs().min_replicas, 2);
  EXPECT_EQ((*chain)->needs().experiment_servers, 3);
  EXPECT_FALSE((*chain)->needs().tolerates_chain_loss);
  auto stateless = NewRecoveryPolicy("stateless");
  ASSERT_TRUE(stateless.ok());
  EXPECT_EQ((*stateless)->needs().restart, RestartRule::kSameIdReseeded);
  EXPECT_EQ((*stateless)->needs().store_kind, "memory");
  auto hybrid = NewRecoveryPolicy("hybrid");
  ASSERT_TRUE(hybrid.ok());
  EXPECT_TRUE((*hybrid)->needs().tolerates_chain_loss);
  EXPECT_EQ((*hybrid)->needs().min_replicas, 2);
  // Replay restarts like checkpoint but loses nothing it logged.
  auto replay = NewRecoveryPolicy("replay");
  ASSERT_TRUE(replay.ok());
  EXPECT_EQ((*replay)->needs().restart, RestartRule::kSameIdFromCheckpoint);
  EXPECT_EQ((*replay)->needs().store_kind, "rocksdb");
  EXPECT_FALSE((*replay)->needs().rolls_back);
}

TEST(RegistryTest, UnknownNamesAreRefusedNamingTheKnownOnes) {
  for (const char* name : {"bogus", "", "Checkpoint", "chain "}) {
    StatusOr<std::unique_ptr<RecoveryPolicy>> p = NewRecoveryPolicy(name);
    ASSERT_FALSE(p.ok()) << name;
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(p.status().message().find("'" + std::string(name) + "'"), std::string::npos);
    EXPECT_NE(p.status().message().find("checkpoint"), std::string::npos) << p.status();
    EXPECT_EQ(CheckRecoveryPolicyName(name).code(), StatusCode::kInvalidArgument);
  }
}

TEST(RegistryTest, HelpListsEveryPolicyForPeopleAndScripts) {
  const std::string table = DescribeRecoveryPolicies(false);
  const std::string json = DescribeRecoveryPolicies(true);
  ASSERT_EQ(json.front(), '[');
  for (const std::string& name : RecoveryPolicyNames()) {
    EXPECT_NE(table.find(name + " "), std::string::npos) << table;
    EXPECT_NE(json.find("\"name\": \"" + name + "\""), std::string::npos) << json;
  }
  EXPECT_NE(json.find("\"restart\": \"same-id-from-checkpoint\""), std::string::npos);
  EXPECT_NE(json.find("\"experiment_servers\": 3"), std::string::npos);
}

TEST(RegistryTest, OptionsTakeTheirDefaultsAndOnlyTheValuesTheyList) {
  // Every option of a policy comes back, given or defaulted.
  StatusOr<RecoveryOptionValues> ckpt = ResolveRecoveryOptions("checkpoint", {});
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ(*ckpt, (RecoveryOptionValues{{"checkpoint_mode", "async"}}));
  ckpt = ResolveRecoveryOptions("checkpoint", {{"checkpoint_mode", "sync"}});
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ(ckpt->at("checkpoint_mode"), "sync");
  StatusOr<RecoveryOptionValues> chain = ResolveRecoveryOptions("chain", {{"replication", "async"}});
  ASSERT_TRUE(chain.ok()) << chain.status();
  EXPECT_EQ(*chain,
            (RecoveryOptionValues{{"replication", "async"}, {"replication_max_lag", "64"}}));
  StatusOr<RecoveryOptionValues> none = ResolveRecoveryOptions("none", {});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());

  // Refused, naming the flag, the value and what it takes.
  StatusOr<RecoveryOptionValues> bad =
      ResolveRecoveryOptions("checkpoint", {{"checkpoint_mode", "eventually"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("--checkpoint_mode='eventually'"), std::string::npos)
      << bad.status();
  EXPECT_NE(bad.status().message().find("async|sync"), std::string::npos) << bad.status();
  for (const char* lag : {"0", "-3", "ten", "", "5x"}) {
    bad = ResolveRecoveryOptions("chain", {{"replication_max_lag", lag}});
    ASSERT_FALSE(bad.ok()) << lag;
    EXPECT_NE(bad.status().message().find("an integer >= 1"), std::string::npos) << bad.status();
  }
  // Another policy's option names the policies that have it.
  bad = ResolveRecoveryOptions("checkpoint", {{"replication", "async"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--replication is not an option of --recovery=checkpoint"),
            std::string::npos)
      << bad.status();
  EXPECT_NE(bad.status().message().find("--recovery=chain"), std::string::npos) << bad.status();
  bad = ResolveRecoveryOptions("hybrid", {{"bogus", "1"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("no policy has it"), std::string::npos) << bad.status();
  EXPECT_FALSE(ResolveRecoveryOptions("bogus", {}).ok());

  const std::vector<std::string> flags = RecoveryOptionFlags();
  EXPECT_EQ(std::set<std::string>(flags.begin(), flags.end()),
            (std::set<std::string>{"checkpoint_mode", "replication", "replication_max_lag"}));
  EXPECT_EQ(RecoveryOptionInt({{"replication_max_lag", "12"}}, "replication_max_lag", 1), 12);
  EXPECT_EQ(RecoveryOptionInt({}, "replication_max_lag", 7), 7);
  EXPECT_EQ(RecoveryOptionValue({}, "replication", "sync"), "sync");
}

TEST(RegistryTest, HelpListsEachPolicysOptions) {
  const std::string table = DescribeRecoveryPolicies(false);
  const std::string json = DescribeRecoveryPolicies(true);
  EXPECT_NE(table.find("--checkpoint_mode=async|sync (default async)"), std::string::npos)
      << table;
  EXPECT_NE(table.find("--replication=sync|async (default sync)"), std::string::npos) << table;
  EXPECT_NE(table.find("--replication_max_lag=an integer >= 1 (default 64)"), std::string::npos)
      << table;
  EXPECT_NE(json.find("\"options\": [{\"flag\": \"checkpoint_mode\", \"choices\": [\"async\", "
                      "\"sync\"], \"min_value\": 0, \"default\": \"async\""),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("{\"flag\": \"replication_max_lag\", \"choices\": [], \"min_value\": 1, "
                      "\"default\": \"64\""),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"options\": []"), std::string::npos) << "a policy without options";
}

}  // namespace
}  // namespace relaxps
