// One job through three coordinator takeovers under ZooKeeper (issue 40,
// point 6): the leader is SIGKILLed twice and SIGSTOPped once (then
// resumed), with training going on throughout. No process is given a list
// of coordinators: servers get only the ZooKeeper connect string
// (--coordination) and find and follow each leader there; the worker gets
// the endpoint of one coordinator (a standby) and follows the standbys'
// redirects and the leader's list of coordinators. Every takeover makes
// exactly one new term (PATH/epoch); the SIGSTOPped leader, resumed after it
// was deposed, stands by and redirects instead of exiting; the job ends with
// exit status 0 everywhere. Real processes, real signals, a real ZooKeeper
// (scripts/zk.sh; skipped with the reason when java or zookeeper is missing).
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <future>
#include <chrono>
#include <regex>
#include <set>
#include <thread>

#include "client/client.h"
#include "common/rpc_client.h"
#include "tests/coordinator/ha_cluster.h"
#include "tests/test_util.h"

namespace relaxps {
namespace test {
namespace {

constexpr uint64_t kSize = 2 * 8192;
constexpr int kSessionMs = 1000;  // --zk_session_timeout_ms of every process.
constexpr int kCoordinators = 3;

// What `endpoint` answers a GET_SHARD_MAP with: its status and the leader it
// redirects to (Header.leader_endpoint).
struct Answer {
  Status status;
  std::string leader;
};
Answer Ask(const std::string& endpoint) {
  RpcClient rpc;
  const int peer = rpc.Connect(endpoint);
  Message m;
  m.header.set_type(wire::GET_SHARD_MAP);
  auto promise = std::make_shared<std::promise<Answer>>();
  auto future = promise->get_future();
  rpc.Call(peer, std::move(m), 500, [promise](const Status& s, Message&& reply) {
    promise->set_value(Answer{s, reply.header.leader_endpoint()});
  });
  return future.get();
}

// Field `field` (an integer) of each leader_elected event in `events` (JSON
// Lines), in order.
std::vector<uint64_t> Elected(const std::string& events, const std::string& field) {
  std::vector<uint64_t> out;
  const std::regex value("\"" + field + "\":([0-9]+)");
  for (const std::string& line : GrepLines(events, "\"kind\":\"leader_elected\"")) {
    std::smatch m;
    if (std::regex_search(line, m, value)) out.push_back(std::stoull(m[1]));
  }
  return out;
}

TEST(ZkTakeoversTest, TwoKillsAndAStopServersFollowZooKeeperClientsFollowRedirects) {
  const std::string dir = MakeTempDir();
  bool missing = false;
  auto zk_or = LocalZooKeeper::Start(dir, &missing);
  if (missing) GTEST_SKIP() << zk_or.status();
  ASSERT_OK(zk_or.status());
  std::unique_ptr<LocalZooKeeper> zk = std::move(zk_or).value();
  const std::string coordination = "--coordination=zk://" + zk->hostport() + "/relaxps/takeovers";
  const std::string session = "--zk_session_timeout_ms=" + std::to_string(kSessionMs);
  const std::string events = dir + "/events.jsonl";
  HaCluster cluster(dir, 2,
                    {coordination, session, "--recovery=chain", "--replicas=2",
                     "--heartbeat_timeout_ms=2000", "--num_workers=1",
                     "--exit_when_done=true", "--events_file=" + events});
  for (int i = 0; i < kCoordinators; ++i) ASSERT_OK(cluster.StartCoordinator(i));
  int leader = cluster.Leader(20000);
  ASSERT_GE(leader, 0) << "no coordinator leads";
  for (int id = 0; id < 2; ++id) {
    ASSERT_OK(cluster.StartServer(id, {coordination, session, "--store=memory", "--heartbeat_ms=100",
                                       "--coordinator_timeout_ms=30000"}));
  }
  // The worker knows one coordinator, a standby.
  const int given = (leader + 1) % kCoordinators;
  ClientOptions o;
  o.coordinator = cluster.coordinator_endpoint(given);
  o.worker_id = 0;
  o.recovery_timeout_ms = 60000;
  o.coordinator_timeout_ms = 30000;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Client::Connect(o));
  ASSERT_OK(client->CreateTable(OnesTable("w", kSize)));
  PushTrainer trainer(std::move(client), kSize);
  ASSERT_TRUE(trainer.AckedMore(30, 30000));

  std::vector<int> leaders = {leader};
  const auto take_over = [&](const char* how) {
    const int before = leaders.back();
    const auto t0 = std::chrono::steady_clock::now();
    int next = -1;
    ASSERT_TRUE(Eventually([&] {
      next = cluster.Leader(200);
      return next >= 0 && next != before;
    }, 4 * kSessionMs + 15000)) << "no takeover after the " << how;
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - t0).count();
    leaders.push_back(next);
    std::printf("%s of coordinator %d: coordinator %d leads after %lld ms\n", how, before, next,
                static_cast<long long>(ms));
    ASSERT_TRUE(trainer.AckedMore(30, 30000)) << "training stopped after the " << how;
  };

  // Two SIGKILLs; each killed coordinator comes back (same endpoint) as a
  // standby, so there are always two to take over.
  for (int kill = 0; kill < 2; ++kill) {
    const int victim = leaders.back();
    cluster.KillCoordinator(victim);
    take_over("SIGKILL");
    if (HasFatalFailure()) return;
    ASSERT_OK(cluster.StartCoordinator(victim));
  }
  // A SIGSTOP: ZooKeeper expires the paused leader's session and a standby
  // takes over; resumed, the deposed leader stands by again and redirects.
  const int paused = leaders.back();
  cluster.coordinator(paused)->Kill(SIGSTOP);
  take_over("SIGSTOP");
  cluster.coordinator(paused)->Kill(SIGCONT);
  if (HasFatalFailure()) return;
  ASSERT_OK(WaitForLine(cluster.coordinator(paused)->log_path(),
                        "joining the election again as a standby", Millis(20000),
                        cluster.coordinator(paused)));
  const std::string leader_ep = cluster.coordinator_endpoint(leaders.back());
  Answer answer;
  ASSERT_TRUE(Eventually([&] {
    answer = Ask(cluster.coordinator_endpoint(paused));
    return answer.leader == leader_ep;
  }, 20000)) << "the deposed leader answers " << answer.status << " redirecting to '"
             << answer.leader << "', not to the leader " << leader_ep;
  EXPECT_EQ(answer.status.code(), StatusCode::kUnavailable);
  ASSERT_TRUE(trainer.AckedMore(30, 30000));
  trainer.Stop();
  EXPECT_EQ(trainer.failed(), 0);

  // Exactly one new term per takeover: 1 for the first leader, then +1.
  ASSERT_OK_AND_ASSIGN(std::string lines, ReadFile(events));
  const std::vector<uint64_t> terms = Elected(lines, "term");
  EXPECT_EQ(terms, (std::vector<uint64_t>{1, 2, 3, 4})) << lines;
  // No server was lost: no takeover moved the chains' epoch (members get a
  // heartbeat timeout of grace to find the new leader, and find it at once).
  const std::vector<uint64_t> epochs = Elected(lines, "epoch");
  ASSERT_EQ(epochs.size(), terms.size());
  for (uint64_t e : epochs) EXPECT_EQ(e, epochs.front()) << lines;
  EXPECT_TRUE(GrepLines(lines, "\"kind\":\"chain_failover\"").empty()) << lines;
  // The servers found each leader in ZooKeeper (no endpoint was given).
  for (int id = 0; id < 2; ++id) {
    const std::string log = cluster.server(id)->Log();
    for (int l : leaders) {
      EXPECT_FALSE(GrepLines(log, "the coordinator leader is " +
                                      cluster.coordinator_endpoint(l)).empty())
          << "server " << id << " never followed coordinator " << l << ":\n" << log;
    }
  }

  // The job ends: the worker leaves, the leader tells the servers to exit
  // and exits 0; the standbys are stopped by their launcher (exit 0).
  client = trainer.TakeClient();
  // Its heartbeats reach the leader (one may have just gone to a coordinator
  // that is gone).
  ASSERT_TRUE(Eventually([&] { return client->coordinator_healthy(); }, 20000));
  ASSERT_OK(client->ReportFinished(Status::OK(), 5000));
  client.reset();
  for (int id = 0; id < 2; ++id) {
    ASSERT_OK_AND_ASSIGN(int status, cluster.server(id)->Wait(Millis(30000)));
    EXPECT_EQ(status, 0) << "server " << id << ":\n" << cluster.server(id)->Log();
  }
  ASSERT_OK_AND_ASSIGN(int status, cluster.coordinator(leaders.back())->Wait(Millis(30000)));
  EXPECT_EQ(status, 0) << cluster.coordinator(leaders.back())->Log();
  for (int i = 0; i < kCoordinators; ++i) {
    if (i == leaders.back()) continue;
    cluster.coordinator(i)->Kill(SIGTERM);
    ASSERT_OK_AND_ASSIGN(int s, cluster.coordinator(i)->Wait(Millis(20000)));
    EXPECT_EQ(s, 0) << "standby " << i << ":\n" << cluster.coordinator(i)->Log();
  }
  std::printf("terms %llu..%llu over %zu takeovers; %lld pushes acknowledged, 0 failed\n",
              static_cast<unsigned long long>(terms.empty() ? 0 : terms.front()),
              static_cast<unsigned long long>(terms.empty() ? 0 : terms.back()),
              leaders.size() - 1, static_cast<long long>(trainer.acked()));
}

}  // namespace
}  // namespace test
}  // namespace relaxps
