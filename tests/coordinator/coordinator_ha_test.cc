// Coordinator high availability (issue 18): a RocksDB-backed coordinator
// restarted under training load resumes the job; the leader of two
// ZooKeeper-coordinated coordinators SIGKILLed under load is replaced within
// 2x the session timeout with training going on; a chain server killed while
// no coordinator leads fails over once the new leader is up, losing nothing
// acknowledged. Real processes, real SIGKILLs, a real ZooKeeper (skipped with
// the reason when java or zookeeper is missing).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "client/client.h"
#include "common/rpc_client.h"
#include "tests/coordinator/ha_cluster.h"
#include "tests/recovery/chain_util.h"
#include "tests/recovery/recovery_util.h"
#include "tests/test_util.h"

namespace relaxps {
namespace test {
namespace {

constexpr uint64_t kSize = 3 * 8192;  // Three ranges: one per server.
constexpr int kSessionMs = 2000;  // --zk_session_timeout_ms of the ZooKeeper tests.

TableOptions Table() { return OnesTable("w", kSize); }

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class Trainer : public PushTrainer {
 public:
  explicit Trainer(std::unique_ptr<Client> client) : PushTrainer(std::move(client), kSize) {}
};

StatusOr<std::unique_ptr<Client>> ConnectWorker(const std::string& coordinators) {
  ClientOptions o;
  o.coordinator = coordinators;
  o.worker_id = 0;
  o.recovery_timeout_ms = 60000;
  o.coordinator_timeout_ms = 30000;
  return Client::Connect(o);
}

// Waits until the client's heartbeats are answered again.
bool WaitHealthy(Client* client, int timeout_ms) {
  const int64_t until = NowMs() + Scaled(Millis(timeout_ms)).count();
  while (!client->coordinator_healthy() && NowMs() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return client->coordinator_healthy();
}

// Polls `endpoint` until it answers GET_SHARD_MAP (it leads): the version.
StatusOr<uint64_t> WaitUntilLeads(const std::string& endpoint, int timeout_ms) {
  const int64_t until = NowMs() + Scaled(Millis(timeout_ms)).count();
  while (true) {
    StatusOr<uint64_t> v = MapVersion(endpoint, 300);
    if (v.ok() || NowMs() > until) return v;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

class CoordinatorHaTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = MakeTempDir(); }
  // Starts ZooKeeper; false (and the test skipped) if it is not installed.
  bool StartZooKeeper() {
    bool missing = false;
    auto zk = LocalZooKeeper::Start(dir_, &missing);
    if (missing) {
      skip_reason_ = zk.status().ToString();
      return false;
    }
    EXPECT_TRUE(zk.ok()) << zk.status();
    if (!zk.ok()) return false;
    zk_ = std::move(zk).value();
    return true;
  }
  std::vector<std::string> ZkFlags(const std::string& job) const {
    return {"--coordination=zk://" + zk_->hostport() + "/relaxps/" + job,
            "--zk_session_timeout_ms=" + std::to_string(kSessionMs),
            "--heartbeat_timeout_ms=1500"};
  }

  std::string dir_;
  std::string skip_reason_;
  std::unique_ptr<LocalZooKeeper> zk_;  // Stopped after the cluster (declared first).
};

TEST_F(CoordinatorHaTest, RocksDbCoordinatorRestartedUnderLoadResumesTheJob) {
  HaCluster cluster(dir_, 2, {"--data_dir=" + dir_ + "/coordinator-state"});
  ASSERT_OK(cluster.StartCoordinator(0));
  for (int id = 0; id < 2; ++id) ASSERT_OK(cluster.StartServer(id, {"--heartbeat_ms=100"}));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, ConnectWorker(cluster.coordinator_list()));
  ASSERT_OK(client->CreateTable(Table()));
  const int worker_id = client->worker_id();
  Trainer trainer(std::move(client));
  ASSERT_TRUE(trainer.AckedMore(50, 30000));
  ASSERT_OK_AND_ASSIGN(uint64_t before, MapVersion(cluster.coordinator_endpoint(0), 2000));

  cluster.KillCoordinator(0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  ASSERT_OK(cluster.StartCoordinator(0));  // Same --bind and --data_dir.
  ASSERT_OK_AND_ASSIGN(uint64_t after, WaitUntilLeads(cluster.coordinator_endpoint(0), 10000));
  EXPECT_GE(after, before) << "the restarted coordinator lost shard map versions";
  ASSERT_OK(WaitForLine(cluster.coordinator(0)->log_path(), "resumed from rocksdb:",
                        Millis(10000), cluster.coordinator(0)));
  // Training goes on, and the worker's heartbeats are answered again under
  // its old id (no re-registration: the coordinator knew it).
  ASSERT_TRUE(trainer.AckedMore(50, 30000));
  EXPECT_TRUE(WaitHealthy(trainer.client(), 10000));
  EXPECT_EQ(trainer.client()->worker_id(), worker_id);
  const std::string log = cluster.coordinator(0)->Log();
  EXPECT_TRUE(GrepLines(log, "created dense table").empty()) << "the table was created again";
  EXPECT_TRUE(GrepLines(log, "registered at|worker 0 registered").empty())
      << "a member had to register again:\n" << log;
  ASSERT_OK_AND_ASSIGN(auto tables, trainer.client()->ListTables());
  ASSERT_EQ(tables.size(), 1u);
  trainer.Stop();
  EXPECT_EQ(trainer.failed(), 0);
  for (int id = 0; id < 2; ++id) EXPECT_TRUE(cluster.server(id)->IsRunning()) << "server " << id;
  std::printf("rocksdb restart: map version %llu -> %llu, %lld pushes acknowledged, 0 failed\n",
              static_cast<unsigned long long>(before), static_cast<unsigned long long>(after),
              static_cast<long long>(trainer.acked()));
}

TEST_F(CoordinatorHaTest, LeaderKilledUnderLoadStandbyLeadsWithinTwoSessionTimeouts) {
  if (!StartZooKeeper()) GTEST_SKIP() << skip_reason_;
  HaCluster cluster(dir_, 2, ZkFlags("kill_leader"));
  ASSERT_OK(cluster.StartCoordinator(0));
  ASSERT_OK(WaitUntilLeads(cluster.coordinator_endpoint(0), 20000).status());
  ASSERT_OK(cluster.StartCoordinator(1));
  ASSERT_OK(WaitForLine(cluster.coordinator(1)->log_path(), "standby until elected",
                        Millis(20000), cluster.coordinator(1)));
  const std::vector<std::string> server_flags = {"--heartbeat_ms=100",
                                                 "--coordinator_timeout_ms=30000"};
  for (int id = 0; id < 2; ++id) ASSERT_OK(cluster.StartServer(id, server_flags));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, ConnectWorker(cluster.coordinator_list()));
  ASSERT_OK(client->CreateTable(Table()));
  Trainer trainer(std::move(client));
  ASSERT_TRUE(trainer.AckedMore(50, 30000));

  // The map versions any coordinator answers with, in order, across the kill.
  std::atomic<bool> stop_probe{false};
  std::vector<uint64_t> versions;
  std::thread probe([&] {
    RpcClient rpc;
    const int peers[2] = {rpc.Connect(cluster.coordinator_endpoint(0)),
                          rpc.Connect(cluster.coordinator_endpoint(1))};
    while (!stop_probe.load()) {
      for (int peer : peers) {
        Message m;
        m.header.set_type(wire::GET_SHARD_MAP);
        StatusOr<Message> v = rpc.CallSync(peer, std::move(m), 200);
        if (v.ok()) versions.push_back(v->header.shard_map().version());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  const int64_t killed_at = NowMs();
  cluster.KillCoordinator(0);
  StatusOr<uint64_t> led = WaitUntilLeads(cluster.coordinator_endpoint(1), 4 * kSessionMs + 10000);
  const int64_t takeover_ms = NowMs() - killed_at;
  ASSERT_OK(led.status());
  ASSERT_TRUE(trainer.AckedMore(100, 30000)) << "training stopped after the takeover";
  // The worker's heartbeats reach the new leader (it rotated to it).
  ASSERT_TRUE(WaitHealthy(trainer.client(), 10000));
  stop_probe = true;
  probe.join();
  trainer.Stop();

  EXPECT_LE(takeover_ms, 2 * kSessionMs) << "the standby took too long to lead";
  ASSERT_FALSE(versions.empty());
  for (size_t i = 1; i < versions.size(); ++i) {
    ASSERT_GE(versions[i], versions[i - 1]) << "the shard map version went back";
  }
  EXPECT_EQ(trainer.failed(), 0);
  for (int id = 0; id < 2; ++id) EXPECT_TRUE(cluster.server(id)->IsRunning()) << "server " << id;
  EXPECT_FALSE(GrepLines(cluster.coordinator(1)->Log(), "LEADER coordinator").empty());
  std::printf("zk leader kill: standby leads %lld ms after the SIGKILL (session %d ms); map "
              "versions %llu .. %llu in %zu answers, never back; %lld pushes acknowledged\n",
              static_cast<long long>(takeover_ms), kSessionMs,
              static_cast<unsigned long long>(versions.front()),
              static_cast<unsigned long long>(versions.back()), versions.size(),
              static_cast<long long>(trainer.acked()));
}

TEST_F(CoordinatorHaTest, ChainServerKilledWhileNoCoordinatorLeadsFailsOverLosingNothing) {
  if (!StartZooKeeper()) GTEST_SKIP() << skip_reason_;
  std::vector<std::string> flags = ZkFlags("chain");
  flags.push_back("--recovery=chain");
  flags.push_back("--replicas=2");
  HaCluster cluster(dir_, 3, flags);
  ASSERT_OK(cluster.StartCoordinator(0));
  ASSERT_OK(WaitUntilLeads(cluster.coordinator_endpoint(0), 20000).status());
  ASSERT_OK(cluster.StartCoordinator(1));
  const std::vector<std::string> server_flags = {"--store=memory", "--heartbeat_ms=100",
                                                 "--coordinator_timeout_ms=30000"};
  for (int id = 0; id < 3; ++id) ASSERT_OK(cluster.StartServer(id, server_flags));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, ConnectWorker(cluster.coordinator_list()));
  ASSERT_OK(client->CreateTable(Table()));
  Trainer trainer(std::move(client));
  ASSERT_TRUE(trainer.AckedMore(50, 30000));

  cluster.KillCoordinator(0);
  const int64_t killed_at = NowMs();
  // No coordinator leads until coordinator 0's session expires.
  cluster.server(1)->Kill(SIGKILL);
  cluster.server(1)->Wait(Millis(10000)).status().IgnoreError();
  EXPECT_FALSE(MapVersion(cluster.coordinator_endpoint(1), 300).ok())
      << "the standby already led when the server was killed";
  ASSERT_OK(WaitUntilLeads(cluster.coordinator_endpoint(1), 4 * kSessionMs + 10000).status());
  const int64_t leader_ms = NowMs() - killed_at;
  // The new leader declares server 1 dead and splices it out; the pushes
  // that waited for it are resent and acknowledged.
  ASSERT_OK(WaitForLine(cluster.coordinator(1)->log_path(), "server 1 removed from",
                        Millis(30000), cluster.coordinator(1)));
  const int64_t failover_ms = NowMs() - killed_at;
  ASSERT_TRUE(trainer.AckedMore(100, 30000)) << "training stopped after the failover";
  trainer.Stop();
  EXPECT_EQ(trainer.failed(), 0);
  // Every live replica holds each acknowledged push exactly once.
  const float expected = -static_cast<float>(trainer.acked());
  for (int id : {0, 2}) ASSERT_TRUE(cluster.server(id)->IsRunning()) << "server " << id;
  ASSERT_OK_AND_ASSIGN(wire::ShardMap map, GetShardMap(cluster.coordinator_endpoint(1), 2000));
  int replicas_checked = 0;
  for (const wire::TableShards& ts : map.tables()) {
    for (const wire::DenseRange& r : ts.ranges()) {
      EXPECT_TRUE(std::find(r.chain().begin(), r.chain().end(), 1) == r.chain().end())
          << "server 1 is still in a chain";
      for (int id : r.chain()) {
        StatusOr<std::vector<float>> w = WhenInSync([&] {
          return ReadDenseSlot(cluster.server_endpoint(id), "w", r.begin(), r.end() - r.begin(), 0);
        });
        ASSERT_OK(w.status()) << "server " << id << " range [" << r.begin() << ", " << r.end() << ")";
        for (size_t i = 0; i < w->size(); ++i) {
          ASSERT_EQ((*w)[i], expected) << "server " << id << " key " << r.begin() + i;
        }
        ++replicas_checked;
      }
    }
  }
  EXPECT_GE(replicas_checked, 3);
  std::printf("chain: server 1 killed with no leader; new leader after %lld ms, chains spliced "
              "after %lld ms; %lld pushes acknowledged, each applied once on every live "
              "replica\n",
              static_cast<long long>(leader_ms), static_cast<long long>(failover_ms),
              static_cast<long long>(trainer.acked()));
}

// Issue 40: relaxps-ctl given only a standby's endpoint follows its redirect
// (Header.leader_endpoint) for every kind of command: a read (status), the
// events ring, and an operator command (shutdown, which needs a session the
// leader opens) that ends the leader's job.
TEST_F(CoordinatorHaTest, CtlGivenAStandbyFollowsItsRedirectToTheLeader) {
  if (!StartZooKeeper()) GTEST_SKIP() << skip_reason_;
  HaCluster cluster(dir_, 1, ZkFlags("ctl_redirect"));
  ASSERT_OK(cluster.StartCoordinator(0));
  ASSERT_OK(WaitUntilLeads(cluster.coordinator_endpoint(0), 20000).status());
  ASSERT_OK(cluster.StartCoordinator(1));
  ASSERT_OK(WaitForLine(cluster.coordinator(1)->log_path(), "standby until elected",
                        Millis(20000), cluster.coordinator(1)));
  ASSERT_OK(cluster.StartServer(0, {"--heartbeat_ms=100"}));
  const std::string standby = cluster.coordinator_endpoint(1);
  // The standby itself serves nothing.
  EXPECT_EQ(MapVersion(standby, 2000).status().code(), StatusCode::kUnavailable);
  int runs = 0;
  auto ctl = [&](const std::vector<std::string>& args) {
    std::vector<std::string> argv = {BinPath("relaxps-ctl"), "--coordinator=" + standby};
    argv.insert(argv.end(), args.begin(), args.end());
    StatusOr<CommandResult> r =
        RunCommand(argv, dir_ + "/ctl-" + std::to_string(runs++) + ".log", Scaled(Millis(30000)));
    CHECK(r.ok()) << r.status();
    return *r;
  };
  // The leader's status: its job and its server (registered by now: it
  // heartbeats every 100 ms).
  CommandResult status;
  for (int i = 0; i < 50; ++i) {
    status = ctl({"--json", "status"});
    if (status.output.find(cluster.server_endpoint(0)) != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(status.exit_status, 0) << status.output;
  EXPECT_NE(status.output.find(cluster.server_endpoint(0)), std::string::npos) << status.output;
  const CommandResult events = ctl({"events"});
  EXPECT_EQ(events.exit_status, 0) << events.output;
  EXPECT_NE(events.output.find("\"kind\":\"leader_elected\""), std::string::npos) << events.output;
  const CommandResult shutdown = ctl({"shutdown"});
  EXPECT_EQ(shutdown.exit_status, 0) << shutdown.output;
  EXPECT_NE(shutdown.output.find("shutdown requested"), std::string::npos) << shutdown.output;
  // The leader ended the job: its server flushes and exits 0.
  StatusOr<int> server_exit = cluster.server(0)->Wait(Scaled(Millis(30000)));
  ASSERT_OK(server_exit.status());
  EXPECT_EQ(*server_exit, 0) << cluster.server(0)->Log();
  std::printf("relaxps-ctl via standby %s: status, events and shutdown answered by the leader "
              "%s\n", standby.c_str(), cluster.coordinator_endpoint(0).c_str());
}

}  // namespace
}  // namespace test
}  // namespace relaxps
