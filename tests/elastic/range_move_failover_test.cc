// A range move through a coordinator failover (docs/elastic.md, Failures):
// two in-process coordinators under a local ZooKeeper; the leader plans and
// starts the move of a joining server's share, is stopped while the source
// still waits for its range to drain (a BSP round half pushed), and the
// standby that takes over resumes the move from the durable state. The map
// ends with the move published exactly once (one range_move_done, one cut,
// the keys where the plan put them) and both servers serve the right state.
// Skipped with the reason when java or zookeeper is missing.
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "client/client.h"
#include "common/rpc_client.h"
#include "common/shard_map.h"
#include "coordinator/coordinator.h"
#include "server/server.h"
#include "tests/coordinator/ha_cluster.h"
#include "tests/test_util.h"

namespace relaxps {
namespace test {
namespace {

constexpr uint64_t kDim = 2 * kDenseChunk;  // The joined server's share: the tail half.
constexpr int kSessionMs = 1000;

// A coordinator or server on its own thread, stopped when it goes (or
// earlier, by Stop()).
template <typename T>
class Running {
 public:
  explicit Running(std::unique_ptr<T> t) : t_(std::move(t)) {
    thread_ = std::thread([this] { Run(); });
  }
  ~Running() { Stop(); }
  void Stop() {
    if (!thread_.joinable()) return;
    t_->Stop();
    thread_.join();
  }
  T* get() { return t_.get(); }

 private:
  void Run();
  std::unique_ptr<T> t_;
  std::thread thread_;
};
template <>
void Running<Coordinator>::Run() { t_->Run(); }
template <>
void Running<Server>::Run() { t_->Run().IgnoreError(); }

size_t Count(const std::string& text, const std::string& re) { return GrepLines(text, re).size(); }

std::string Events(const std::string& path) {
  StatusOr<std::string> text = ReadFile(path);
  return text.ok() ? *text : "";
}

// BSP step of one worker: a push of `value` everywhere, then its clock.
Status Step(Client* c, float value) {
  FloatBuffer grads(kDim);
  for (uint64_t d = 0; d < kDim; ++d) grads[d] = value;
  RETURN_IF_ERROR(c->Push("w", 0, grads).get());
  return c->Clock();
}

TEST(RangeMoveFailoverTest, TheStandbyFinishesAMoveItsLeaderStartedAndPublishesItOnce) {
  const std::string dir = MakeTempDir();
  bool missing = false;
  auto zk_or = LocalZooKeeper::Start(dir, &missing);
  if (missing) GTEST_SKIP() << zk_or.status();
  ASSERT_OK(zk_or.status());
  std::unique_ptr<LocalZooKeeper> zk = std::move(zk_or).value();
  const std::string events = dir + "/events.jsonl";

  CoordinatorOptions co;
  co.num_servers = 1;
  co.num_workers = 2;
  co.consistency = ConsistencyModel::kBsp;
  co.heartbeat_timeout_ms = 10000;
  co.coordination = "zk://" + zk->hostport() + "/relaxps/move_failover";
  co.zk_session_timeout_ms = kSessionMs;
  co.events_file = events;  // Both write to it (O_APPEND).
  std::vector<std::unique_ptr<Running<Coordinator>>> coordinators;
  for (int i = 0; i < 2; ++i) {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Coordinator> c, Coordinator::Start(co));
    coordinators.push_back(std::make_unique<Running<Coordinator>>(std::move(c)));
    if (i == 0) {  // The first leads, the second stands by.
      ASSERT_TRUE(Eventually([&] { return coordinators[0]->get()->leading(); }, 20000));
    }
  }
  Coordinator* leader = coordinators[0]->get();
  Coordinator* standby = coordinators[1]->get();
  ASSERT_FALSE(standby->leading());
  const std::string both = leader->endpoint() + "," + standby->endpoint();
  auto server_options = [&](bool join) {
    ServerOptions so;
    so.coordinator = both;
    so.store.kind = "memory";
    so.heartbeat_ms = 100;
    so.coordinator_timeout_ms = 30000;
    so.move_drain_timeout_ms = 60000;  // The drain outlasts the failover.
    so.join = join;
    return so;
  };
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Server> s0, Server::Start(server_options(false)));
  Running<Server> server0(std::move(s0));
  std::vector<std::unique_ptr<Client>> workers;
  workers.resize(2);
  {  // Both connect at once: the start barrier waits for two workers.
    std::vector<std::thread> connecting;
    std::vector<Status> connected(2);
    for (int k = 0; k < 2; ++k) {
      connecting.emplace_back([&, k] {
        ClientOptions o;
        o.coordinator = both;
        o.request_timeout_ms = 60000 * TimeScale();
        o.coordinator_timeout_ms = 30000;
        o.recovery_timeout_ms = 60000;
        StatusOr<std::unique_ptr<Client>> c = Client::Connect(o);
        connected[k] = c.status();
        if (c.ok()) workers[k] = std::move(c).value();
      });
    }
    for (std::thread& t : connecting) t.join();
    for (const Status& s : connected) ASSERT_OK(s);
  }
  for (auto& w : workers) ASSERT_OK(w->CreateTable(OnesTable("w", kDim)));  // Both know it.
  for (auto& w : workers) ASSERT_OK(Step(w.get(), 1.0f));  // Round 0.

  // Round 1 half pushed: the range cannot be cut until worker 1 pushes.
  FloatBuffer ones(kDim);
  for (uint64_t d = 0; d < kDim; ++d) ones[d] = 1.0f;
  ASSERT_OK(workers[0]->Push("w", 0, ones).get());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Server> s1, Server::Start(server_options(true)));
  Running<Server> server1(std::move(s1));
  ASSERT_TRUE(Eventually([&] { return Count(Events(events), "range_move_started") == 1; }, 20000))
      << "the leader never started the move";
  // The source has the move and waits for the round; the leader goes (its
  // ZooKeeper session with it).
  coordinators[0].reset();
  leader = nullptr;
  ASSERT_TRUE(Eventually([&] { return standby->leading(); }, 4 * kSessionMs + 15000))
      << "the standby never took over";
  ASSERT_TRUE(Eventually([&] {
    return GrepLines(Events(events), "range_move_started.*\"resumed\":true").size() == 1;
  }, 20000)) << "the standby did not resume the move:\n" << Events(events);
  EXPECT_EQ(Count(Events(events), "range_move_done"), 0u);  // Still draining.

  // Worker 1 completes round 1: the source cuts, copies, the standby publishes.
  ASSERT_OK(workers[1]->Push("w", 0, ones).get());
  for (auto& w : workers) ASSERT_OK(w->Clock());
  ASSERT_TRUE(Eventually([&] { return Count(Events(events), "range_move_done") >= 1; }, 30000))
      << Events(events);
  for (auto& w : workers) ASSERT_OK(Step(w.get(), 1.0f));  // Round 2, by the new map.
  FloatBuffer out(kDim);
  ASSERT_OK(workers[0]->Pull("w", 0, out).get());

  ASSERT_OK_AND_ASSIGN(wire::ShardMap map, GetShardMap(standby->endpoint(), 10000));
  ASSERT_EQ(map.tables_size(), 1);
  std::vector<std::string> ranges;
  for (const wire::DenseRange& r : map.tables(0).ranges()) {
    ranges.push_back("[" + std::to_string(r.begin()) + ", " + std::to_string(r.end()) + ") on " +
                     std::to_string(r.server()));
  }
  const std::string all = Events(events);
  EXPECT_EQ(Count(all, "range_move_done"), 1u) << all;
  EXPECT_EQ(Count(all, "range_move_failed"), 0u) << all;
  EXPECT_EQ(ranges, (std::vector<std::string>{
                        "[0, " + std::to_string(kDim / 2) + ") on 0",
                        "[" + std::to_string(kDim / 2) + ", " + std::to_string(kDim) + ") on 1"}));
  size_t wrong = 0;
  for (uint64_t d = 0; d < kDim; ++d) wrong += out[d] != -3.0f;  // Three rounds of mean 1.
  EXPECT_EQ(wrong, 0u);
  std::printf("move through a failover: %s; published %zu time(s) (map version %llu); %zu of "
              "%llu keys wrong after 3 rounds\n",
              ranges.empty() ? "" : (ranges[0] + ", " + ranges.back()).c_str(),
              Count(all, "range_move_done"), static_cast<unsigned long long>(map.version()),
              wrong, static_cast<unsigned long long>(kDim));
  workers.clear();
  server1.Stop();
  server0.Stop();
  coordinators.clear();
  zk.reset();
  RemoveTree(dir);
}

}  // namespace
}  // namespace test
}  // namespace relaxps
