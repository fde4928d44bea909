// CoordinatorStateStore (RocksDB and ZooKeeper) and LeaderElection: records
// round-trip through a claim, a claim bumps the term, and a deposed holder's
// write fails (fencing). The ZooKeeper cases start their own ZooKeeper and
// are skipped, naming why, where java or zookeeper is missing.
#include "coordinator/state_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/rpc_client.h"
#include "common/wire.h"
#include "coordinator/coordinator.h"
#include "coordinator/leader_election.h"
#include "coordinator/leader_watch.h"
#include "coordinator/zk_session.h"
#include "tests/coordinator/ha_cluster.h"
#include "storage/fault_injecting_fs.h"
#include "tests/test_util.h"

namespace relaxps {
namespace test {
namespace {

TEST(StateStoreTest, RocksDbRoundTripsRecordsAndBumpsTheTerm) {
  const std::string dir = MakeTempDir() + "/state";
  {
    ASSERT_OK_AND_ASSIGN(auto store, NewRocksDbStateStore(dir));
    ASSERT_OK_AND_ASSIGN(ClaimedState c, store->Claim());
    EXPECT_EQ(c.term, 1u);
    EXPECT_TRUE(c.records.empty());
    ASSERT_OK(store->Write({{"map", "v1"}, {"job", "j"}}));
    ASSERT_OK(store->Write({{"map", std::string("v2\0x", 4)}}));
    // A second coordinator on the same directory is refused while this one runs.
    auto second = NewRocksDbStateStore(dir);
    ASSERT_FALSE(second.ok());
    EXPECT_NE(second.status().message().find("another coordinator"), std::string::npos)
        << second.status();
  }
  ASSERT_OK_AND_ASSIGN(auto store, NewRocksDbStateStore(dir));
  ASSERT_OK_AND_ASSIGN(ClaimedState c, store->Claim());
  EXPECT_EQ(c.term, 2u);
  EXPECT_EQ(c.records.size(), 2u);
  EXPECT_EQ(c.records["map"], std::string("v2\0x", 4));
  EXPECT_EQ(c.records["job"], "j");
}

TEST(StateStoreTest, WriteBeforeClaimIsRefused) {
  ASSERT_OK_AND_ASSIGN(auto store, NewRocksDbStateStore(MakeTempDir() + "/s"));
  EXPECT_EQ(store->Write({{"a", "b"}}).code(), StatusCode::kFailedPrecondition);
}

// The RocksDB store opens its database through the given file system: a
// disk that fills up (ENOSPC injected there) fails Write() with IOError
// naming the directory and the disk error; what was written before survives.
TEST(StateStoreTest, RocksDbWriteOnAFullDiskFailsNamingIt) {
  const std::string dir = MakeTempDir() + "/state";
  auto fs = std::make_shared<FaultInjectingFileSystem>();
  {
    ASSERT_OK_AND_ASSIGN(auto store, NewRocksDbStateStore(dir, fs));
    ASSERT_OK_AND_ASSIGN(ClaimedState c, store->Claim());
    EXPECT_EQ(c.term, 1u);
    ASSERT_OK(store->Write({{"map", "v1"}}));
    fs->SetWriteError(FaultInjectingFileSystem::WriteError::kNoSpace);
    const Status full = store->Write({{"map", "v2"}});
    EXPECT_EQ(full.code(), StatusCode::kIOError) << full;
    EXPECT_NE(full.message().find("No space left on device"), std::string::npos) << full;
    EXPECT_NE(full.message().find(dir), std::string::npos) << full;
    EXPECT_GT(fs->injected_errors(), 0u);
    fs->SetWriteError(FaultInjectingFileSystem::WriteError::kNone);
  }
  ASSERT_OK_AND_ASSIGN(auto store, NewRocksDbStateStore(dir));
  ASSERT_OK_AND_ASSIGN(ClaimedState c, store->Claim());
  EXPECT_EQ(c.term, 2u);
  EXPECT_EQ(c.records["map"], "v1");
}

// A coordinator whose state store (CoordinatorOptions::file_system) hits a
// full disk while it runs: the write of a change (a server registering)
// fails, the coordinator steps down instead of crashing or acting on state
// it could not store, and result() names the disk error.
TEST(StateStoreTest, CoordinatorStepsDownNamingAFullDisk) {
  auto fs = std::make_shared<FaultInjectingFileSystem>();
  CoordinatorOptions co;
  co.num_servers = 1;
  co.data_dir = MakeTempDir() + "/coordinator";
  co.file_system = fs;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Coordinator> coordinator, Coordinator::Start(co));
  EXPECT_TRUE(coordinator->leading());
  std::thread running([&] { coordinator->Run(); });
  fs->SetWriteError(FaultInjectingFileSystem::WriteError::kNoSpace);
  RpcClient rpc;
  Message reg;
  reg.header.set_type(wire::REGISTER);
  wire::RegisterRequest* r = reg.header.mutable_register_request();
  r->set_role("server");
  r->set_requested_id(-1);
  r->set_endpoint("tcp://127.0.0.1:9");  // Nobody listens: nothing there answers.
  r->set_pid(4242);
  r->set_protocol_version(kProtocolVersion);
  // The registration is never acknowledged: it could not be stored.
  EXPECT_FALSE(rpc.CallSync(rpc.Connect(coordinator->endpoint()), std::move(reg), 1000).ok());
  running.join();  // Run() returns on its own once the coordinator stepped down.
  EXPECT_FALSE(coordinator->leading());
  const Status result = coordinator->result();
  EXPECT_EQ(result.code(), StatusCode::kAborted) << result;
  EXPECT_NE(result.message().find("writing the coordinator state"), std::string::npos) << result;
  EXPECT_NE(result.message().find("No space left on device"), std::string::npos) << result;
  EXPECT_GT(fs->injected_errors(), 0u);
}

TEST(StateStoreTest, ParsesZooKeeperAddresses) {
  ASSERT_OK_AND_ASSIGN(ZkAddress a, ParseZkAddress("zk://h1:2181,h2:2182/relaxps/job/"));
  EXPECT_EQ(a.hosts, "h1:2181,h2:2182");
  EXPECT_EQ(a.path, "/relaxps/job");
  for (const char* bad : {"h:1/p", "zk://h:1", "zk://h:1/", "zk://h/p", "zk://h:0/p", "zk://:1/p",
                          "zk://h:1,/p", "zk://h:1//p"}) {
    EXPECT_EQ(ParseZkAddress(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

class ZkStateStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir();
    bool missing = false;
    auto zk = LocalZooKeeper::Start(dir_, &missing);
    if (missing) GTEST_SKIP() << zk.status();
    ASSERT_OK(zk.status());
    zk_ = std::move(zk).value();
  }
  std::unique_ptr<ZkSession> Session() {
    ZkSessionOptions o;
    o.hosts = zk_->hostport();
    o.session_timeout_ms = 2000;
    auto s = ZkSession::Connect(o);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  std::string dir_;
  std::unique_ptr<LocalZooKeeper> zk_;
};

TEST_F(ZkStateStoreTest, RoundTripAndTheDeposedHoldersWriteFails) {
  auto sa = Session();
  auto sb = Session();
  ASSERT_TRUE(sa && sb);
  ASSERT_OK_AND_ASSIGN(auto a, NewZkStateStore(sa.get(), "/t/job"));
  ASSERT_OK_AND_ASSIGN(auto b, NewZkStateStore(sb.get(), "/t/job"));
  ASSERT_OK_AND_ASSIGN(ClaimedState ca, a->Claim());
  EXPECT_EQ(ca.term, 1u);
  ASSERT_OK(a->Write({{"map", "m1"}, {"members", "x"}}));
  ASSERT_OK(a->Write({{"map", "m2"}}));
  // b takes over: it sees everything a wrote, and a is fenced.
  ASSERT_OK_AND_ASSIGN(ClaimedState cb, b->Claim());
  EXPECT_EQ(cb.term, 2u);
  EXPECT_EQ(cb.records["map"], "m2");
  EXPECT_EQ(cb.records["members"], "x");
  Status deposed = a->Write({{"map", "from the deposed leader"}});
  EXPECT_EQ(deposed.code(), StatusCode::kAborted) << deposed;
  ASSERT_OK(b->Write({{"map", "m3"}, {"job", "j"}}));
  ASSERT_OK_AND_ASSIGN(ClaimedState again, a->Claim());
  EXPECT_EQ(again.term, 3u);
  EXPECT_EQ(again.records["map"], "m3");
  EXPECT_EQ(again.records["job"], "j");
  EXPECT_EQ(b->Write({{"map", "late"}}).code(), StatusCode::kAborted);
}

TEST_F(ZkStateStoreTest, LowestCandidateLeadsAndTheNextTakesOverWhenItLeaves) {
  auto sa = Session();
  auto sb = Session();
  ASSERT_TRUE(sa && sb);
  std::atomic<bool> a_leads{false}, b_leads{false};
  ASSERT_OK_AND_ASSIGN(auto ea, LeaderElection::Start(sa.get(), "/t/election_job", "tcp://a:1",
                                                      [&] { a_leads = true; }));
  for (int i = 0; i < 200 && !a_leads; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(a_leads);
  ASSERT_OK_AND_ASSIGN(auto eb, LeaderElection::Start(sb.get(), "/t/election_job", "tcp://b:2",
                                                      [&] { b_leads = true; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_FALSE(b_leads) << "two leaders";
  for (int i = 0; i < 100 && eb->leader_endpoint().empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(eb->leader_endpoint(), "tcp://a:1");
  // a's session ends (a crash expires it; a close deletes its node at once).
  ea.reset();
  sa.reset();
  for (int i = 0; i < 500 && !b_leads; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(b_leads) << "the standby did not take over";
}

// LeaderWatch (how servers follow the leader) and the candidate list the
// leader hands to clients.
TEST_F(ZkStateStoreTest, LeaderWatchFollowsEachLeaderAndTheLeaderListsTheCandidates) {
  std::mutex mu;
  std::vector<std::string> followed;
  LeaderWatchOptions wo;
  wo.coordination = "zk://" + zk_->hostport() + "/t/watched_job";
  wo.on_leader = [&](const std::string& e) {
    std::lock_guard<std::mutex> l(mu);
    followed.push_back(e);
  };
  // Before any coordinator: nothing to follow yet.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<LeaderWatch> watch, LeaderWatch::Start(wo));
  EXPECT_EQ(watch->WaitForLeader(100).status().code(), StatusCode::kDeadlineExceeded);
  auto sa = Session();
  auto sb = Session();
  ASSERT_TRUE(sa && sb);
  std::atomic<bool> b_leads{false};
  ASSERT_OK_AND_ASSIGN(auto ea, LeaderElection::Start(sa.get(), "/t/watched_job", "tcp://a:1",
                                                      [] {}));
  ASSERT_OK_AND_ASSIGN(std::string first, watch->WaitForLeader(10000));
  EXPECT_EQ(first, "tcp://a:1");
  ASSERT_OK_AND_ASSIGN(auto eb, LeaderElection::Start(sb.get(), "/t/watched_job", "tcp://b:2",
                                                      [&] { b_leads = true; }));
  // The leader's list: every candidate, the leader first (refreshed within
  // a second).
  ASSERT_TRUE(Eventually([&] { return ea->candidates().size() == 2; }, 5000));
  EXPECT_EQ(ea->candidates(), (std::vector<std::string>{"tcp://a:1", "tcp://b:2"}));
  ea.reset();
  sa.reset();
  ASSERT_TRUE(Eventually([&] { return watch->leader() == "tcp://b:2"; }, 10000))
      << "the watch still names " << watch->leader();
  EXPECT_TRUE(Eventually([&] { return b_leads.load(); }, 5000));
  std::lock_guard<std::mutex> l(mu);
  EXPECT_EQ(followed, (std::vector<std::string>{"tcp://a:1", "tcp://b:2"}));
}

}  // namespace
}  // namespace test
}  // namespace relaxps
