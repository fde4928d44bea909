// Range moves in running in-process jobs (docs/elastic.md): a BSP job of one
// server gets a second one mid-training (relaxps-server --join) and ends bit
// for bit as the same job without it; every push acknowledged during the
// move is reflected once; a request routed by the old map is answered
// "moved" with the new one.
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "client/client.h"
#include "common/rpc_client.h"
#include "common/shard_map.h"
#include "common/member_token.h"
#include "tests/consistency/dense_bsp_driver.h"
#include "tests/elastic/elastic_test_util.h"
#include "tests/operator_session.h"
#include "tests/server/in_process_cluster.h"
#include "tests/test_util.h"

namespace relaxps {
namespace {

using test::Ask;
using test::AskForReply;
using test::Drain;
using test::EventKinds;
using test::JoinedServer;
using test::MapOf;
using test::ServerAlive;

// Three chunks and a bit: the joined server's share is the tail
// [2 chunks, kDim), exactly the last layer; the first two layers stay.
constexpr uint64_t kDim = 3 * kDenseChunk + 1000;
constexpr uint64_t kCut = 2 * kDenseChunk;
const std::vector<uint64_t> kLayers = {0, 5000, kCut, kDim};
constexpr int kClocks = 8;
constexpr int kJoinAfterClock = 2;

TableOptions Dense() {
  TableOptions t;
  t.name = "w";
  t.size = kDim;
  t.optimizer.name = "adam";  // Slots and a step count that must move along.
  t.optimizer.lr = 0.01f;
  t.init.seed = 7;
  t.init.segments.push_back(InitSegment{0, kDim, InitKind::kUniform, -0.1f, 0.1f});
  return t;
}

// The server holding key `key` of "w" in the coordinator's map.
int HolderOf(const wire::ShardMap& map, uint64_t key) {
  for (const wire::DenseRange& r : map.tables(0).ranges()) {
    if (r.begin() <= key && key < r.end()) return r.server();
  }
  return -1;
}

struct JobResult {
  std::vector<float> params;      // Worker 0's final pull.
  size_t most_differing = 0;      // Against the one-process reference, any clock.
  int moved_at_clock = -1;        // The first clock that ran on the new map.
  std::vector<uint64_t> acked;    // Per worker.
  std::vector<uint64_t> applied;  // Per worker: applied parts over every server.
  std::vector<std::string> events;
  wire::Header moved_reply;       // A PULL by the old map after the move.
  uint64_t old_version = 0;
  int drained_at_clock = -1;      // The first clock that ran without server 0.
  bool server0_left = false;      // The coordinator shows it gone.
  // A PULL by the map before the drain, sent to server 0 after its
  // heartbeats had told it it was drained.
  wire::Header drained_reply;
  uint64_t pre_drain_version = 0;
};

// Two BSP workers train "w" through kClocks clocks on a one-server job; with
// `join`, a server (with a quota of `joined_max_bytes`, 0: none) joins after
// clock kJoinAfterClock and the job goes on while the coordinator moves the
// tail of the range to it.
// With `drain_after_clock` >= 0, server 0 is drained (relaxps-ctl
// drain-server 0) at the first clock from then on after the join's move was
// published.
void RunJob(bool join, JobResult* out, uint64_t joined_max_bytes = 0, int drain_after_clock = -1) {
  InProcessCluster cluster(1, ConsistencyModel::kBsp, /*staleness=*/0,
                           /*heartbeat_timeout_ms=*/5000);
  ASSERT_OK_AND_ASSIGN(std::vector<std::unique_ptr<Client>> owned,
                       test::ConnectWorkersInOrder(cluster.coordinator(), 2, {Dense()}));
  std::vector<Client*> workers;
  for (auto& c : owned) workers.push_back(c.get());
  test::DenseBspDriver dense(workers, Dense(), kLayers);
  ASSERT_OK(dense.Start());
  out->old_version = MapOf(cluster.coordinator()).version();
  std::unique_ptr<JoinedServer> joined;
  for (int t = 0; t < kClocks; ++t) {
    // Alternate which worker's pushes arrive first.
    ASSERT_OK(dense.Push(t, t % 2 == 0 ? std::vector<size_t>{0, 1} : std::vector<size_t>{1, 0}));
    for (Client* w : workers) ASSERT_OK(w->Clock());
    ASSERT_OK_AND_ASSIGN(const size_t diff, dense.PullAndCompare());
    out->most_differing = std::max(out->most_differing, diff);
    if (join && joined == nullptr && t == kJoinAfterClock) {
      joined = std::make_unique<JoinedServer>(cluster.coordinator(), joined_max_bytes);
    }
    if (joined != nullptr && out->moved_at_clock < 0 &&
        HolderOf(MapOf(cluster.coordinator()), kCut) == 1) {
      out->moved_at_clock = t + 1;
    }
    if (drain_after_clock >= 0 && t >= drain_after_clock && out->moved_at_clock >= 0) {
      if (out->drained_at_clock == -2 && HolderOf(MapOf(cluster.coordinator()), 0) == 1) {
        out->drained_at_clock = t + 1;
        // Three of its heartbeats (200 ms) later, server 0 knows it holds
        // nothing; a client that has not learned the map yet still asks it.
        std::this_thread::sleep_for(std::chrono::milliseconds(600));
        Message pull;
        pull.header.set_type(wire::PULL);
        pull.header.set_sender(-1);
        pull.header.set_table("w");
        pull.header.set_key_begin(0);
        pull.header.set_key_count(kDim);
        pull.header.set_shard_map_version(out->pre_drain_version);
        out->drained_reply = AskForReply(cluster.server(0)->endpoint(), std::move(pull));
      }
      if (out->drained_at_clock == -1) {
        out->pre_drain_version = MapOf(cluster.coordinator()).version();
        ASSERT_OK(Drain(cluster.coordinator(), 0));
        out->drained_at_clock = -2;  // Asked.
      }
    }
  }
  if (drain_after_clock >= 0) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (ServerAlive(cluster.coordinator(), 0) && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    out->server0_left = !ServerAlive(cluster.coordinator(), 0);
  }
  if (join) {
    ASSERT_NE(joined, nullptr);
    EXPECT_EQ(joined->server()->id(), 1);
  }
  FloatBuffer final_params(kDim);
  ASSERT_OK(workers[0]->Pull("w", 0, final_params).get());
  out->params.assign(final_params.begin(), final_params.end());
  // Acknowledged against applied (relaxps-ctl stats): every server's
  // applied parts of each worker incarnation.
  std::vector<std::string> endpoints;
  if (!out->server0_left) endpoints.push_back(cluster.server(0)->endpoint());
  if (joined != nullptr) endpoints.push_back(joined->server()->endpoint());
  for (Client* w : workers) {
    const ClientStats stats = w->stats();
    out->acked.push_back(stats.acked_updates);
    out->applied.push_back(test::AppliedParts(endpoints, w->worker_id(), stats.incarnation));
  }
  out->events = EventKinds(cluster.coordinator());
  if (joined != nullptr && out->moved_at_clock >= 0 && !out->server0_left) {
    // A client that still routes by the first map: keys now on server 1,
    // asked of server 0, get "moved" with the map that says so.
    Message pull;
    pull.header.set_type(wire::PULL);
    pull.header.set_sender(-1);
    pull.header.set_table("w");
    pull.header.set_key_begin(0);
    pull.header.set_key_count(kDim);
    pull.header.set_shard_map_version(out->old_version);
    out->moved_reply = AskForReply(cluster.server(0)->endpoint(), std::move(pull));
  }
}

TEST(RangeMoveTest, ABspJobThatGetsASecondServerEndsBitIdenticalToTheSameJobWithout) {
  JobResult fixed, grown;
  RunJob(/*join=*/false, &fixed);
  ASSERT_FALSE(HasFatalFailure());
  RunJob(/*join=*/true, &grown);
  ASSERT_FALSE(HasFatalFailure());

  // The move happened while the job trained, and was published.
  ASSERT_GT(grown.moved_at_clock, kJoinAfterClock) << "the range never moved";
  EXPECT_LT(grown.moved_at_clock, kClocks) << "the move must be published before the job ends";
  EXPECT_NE(std::find(grown.events.begin(), grown.events.end(), "range_move_started"),
            grown.events.end());
  EXPECT_NE(std::find(grown.events.begin(), grown.events.end(), "range_move_done"),
            grown.events.end());
  EXPECT_EQ(std::find(grown.events.begin(), grown.events.end(), "range_move_failed"),
            grown.events.end());

  // (a) Bit for bit the same model, and the one-process model at every clock.
  EXPECT_EQ(fixed.most_differing, 0u);
  EXPECT_EQ(grown.most_differing, 0u);
  ASSERT_EQ(grown.params.size(), fixed.params.size());
  EXPECT_EQ(test::DifferingFloats(grown.params.data(), fixed.params.data(), kDim), 0u);

  // (b) Nothing acknowledged is absent, nothing counted twice.
  for (size_t w = 0; w < grown.acked.size(); ++w) {
    EXPECT_GT(grown.acked[w], 0u);
    EXPECT_EQ(grown.applied[w], grown.acked[w]) << "worker rank " << w;
    EXPECT_EQ(fixed.applied[w], fixed.acked[w]) << "worker rank " << w;
  }
  // The same parts either way: every layer lies on one server.
  EXPECT_EQ(grown.acked[0], fixed.acked[0]);

  // (c) A request by the old map: "moved", with the map that moved it.
  const Status moved = StatusFromProto(grown.moved_reply.status());
  EXPECT_EQ(moved.code(), StatusCode::kWrongShard) << moved;
  ASSERT_TRUE(grown.moved_reply.has_shard_map());
  EXPECT_GT(grown.moved_reply.shard_map().version(), grown.old_version);
  EXPECT_EQ(HolderOf(grown.moved_reply.shard_map(), kCut), 1);
  EXPECT_EQ(HolderOf(grown.moved_reply.shard_map(), kCut - 1), 0);
  std::printf("range move: published before clock %d of %d; %zu floats differ from the job "
              "without it; worker 0 acked %llu parts, applied %llu\n",
              grown.moved_at_clock, kClocks,
              test::DifferingFloats(grown.params.data(), fixed.params.data(), kDim),
              static_cast<unsigned long long>(grown.acked[0]),
              static_cast<unsigned long long>(grown.applied[0]));
}

// Async, pushes in flight throughout: two workers push integer gradients to
// the whole table (SGD, lr 1: the sum is exact in any order) while a server
// joins and the tail of the range moves. No request fails, and the model is
// exactly the initial one minus every gradient acknowledged: nothing lost,
// nothing applied twice, although requests routed by the old map were held
// at the cut and sent again by the new one.
TEST(RangeMoveTest, PushesInFlightDuringAMoveAreAllReflectedOnceUnderAsync) {
  constexpr int kSteps = 150;
  InProcessCluster cluster(1, ConsistencyModel::kAsync);
  TableOptions t;
  t.name = "w";
  t.size = kDim;
  t.optimizer.name = "sgd";
  t.optimizer.lr = 1.0f;
  std::vector<std::unique_ptr<Client>> workers;
  for (int k = 0; k < 2; ++k) {
    ClientOptions o;
    o.coordinator = cluster.coordinator();
    o.request_timeout_ms = 20000 * test::TimeScale();
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> c, Client::Connect(o));
    ASSERT_OK(c->CreateTable(t));
    workers.push_back(std::move(c));
  }
  auto gradient = [](int worker, int step, uint64_t key) {
    return static_cast<float>(static_cast<int>((7 * worker + 3 * step + key) % 5) - 2);
  };
  std::atomic<int> steps_done{0};
  std::vector<Status> failures(workers.size());
  std::vector<std::thread> threads;
  for (size_t k = 0; k < workers.size(); ++k) {
    threads.emplace_back([&, k] {
      Client* c = workers[k].get();
      for (int step = 0; step < kSteps; ++step) {
        FloatBuffer grads(kDim), out(kDim);
        for (uint64_t d = 0; d < kDim; ++d) grads[d] = gradient(c->worker_id(), step, d);
        Status s = c->PushPull("w", 0, grads, out).get();
        if (!s.ok()) {
          failures[k] = s;
          return;
        }
        steps_done.fetch_add(1);
      }
    });
  }
  while (steps_done.load() < 20) std::this_thread::yield();
  auto joined = std::make_unique<JoinedServer>(cluster.coordinator());
  for (std::thread& th : threads) th.join();
  for (const Status& s : failures) EXPECT_OK(s);
  // The move ran while they pushed (or right after): wait for its map.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (HolderOf(MapOf(cluster.coordinator()), kCut) != 1 &&
         std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(HolderOf(MapOf(cluster.coordinator()), kCut), 1) << "the range never moved";
  FloatBuffer params(kDim);
  ASSERT_OK(workers[0]->Pull("w", 0, params).get());
  size_t wrong = 0;
  for (uint64_t d = 0; d < kDim; ++d) {
    float expected = 0.0f;
    for (const auto& c : workers) {
      for (int step = 0; step < kSteps; ++step) expected -= gradient(c->worker_id(), step, d);
    }
    wrong += params[d] != expected;
  }
  EXPECT_EQ(wrong, 0u);
  Message m;
  m.header.set_type(wire::SERVER_STATS);
  const wire::Header source = Ask(cluster.server(0)->endpoint(), std::move(m));
  // Every push reached server 0 once: all of the range before the cut, the
  // head after it. The counter includes the shard the cut replaced (a
  // Prometheus counter never goes down: it did by the pushes before the cut).
  EXPECT_EQ(source.server_stats().updates_applied(), 2u * kSteps);
  std::printf("async range move under load: %zu of %llu keys differ from the sum of every push; "
              "server 0 answered %llu request(s) 'moved' or refused\n",
              wrong, static_cast<unsigned long long>(kDim),
              static_cast<unsigned long long>(source.server_stats().rejected()));
}

// The destination refuses the state (its --max_server_mb quota is too small
// for the range): the source takes the range back from its own copy, the
// map stays, range_move_failed says why, and the job goes on to the same
// model with every acknowledged push reflected once.
TEST(RangeMoveTest, ADestinationThatRefusesTheStateLeavesTheJobAsIfNoMoveHadStarted) {
  JobResult fixed, refused;
  RunJob(/*join=*/false, &fixed);
  ASSERT_FALSE(HasFatalFailure());
  RunJob(/*join=*/true, &refused, /*joined_max_bytes=*/4096);
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_EQ(refused.moved_at_clock, -1);
  EXPECT_NE(std::find(refused.events.begin(), refused.events.end(), "range_move_failed"),
            refused.events.end());
  EXPECT_EQ(std::find(refused.events.begin(), refused.events.end(), "range_move_done"),
            refused.events.end());
  EXPECT_EQ(refused.most_differing, 0u);
  EXPECT_EQ(test::DifferingFloats(refused.params.data(), fixed.params.data(), kDim), 0u);
  for (size_t w = 0; w < refused.acked.size(); ++w) {
    EXPECT_EQ(refused.applied[w], refused.acked[w]) << "worker rank " << w;
  }
}

// relaxps-ctl drain-server 0 after the join's move: the joined server takes
// the rest, server 0 leaves once it holds nothing, and the job ends bit for
// bit as the same job without either, with every acknowledged push counted
// on the server that holds it now.
TEST(RangeMoveTest, DrainingTheFirstServerAfterAJoinLeavesTheModelUnchanged) {
  JobResult fixed, drained;
  RunJob(/*join=*/false, &fixed);
  ASSERT_FALSE(HasFatalFailure());
  RunJob(/*join=*/true, &drained, /*joined_max_bytes=*/0, /*drain_after_clock=*/kJoinAfterClock + 1);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_GT(drained.moved_at_clock, 0);
  EXPECT_GT(drained.drained_at_clock, drained.moved_at_clock) << "server 0 was never drained";
  EXPECT_TRUE(drained.server0_left);
  // Drained, it answered a request by the old map "moved" with the map that
  // gives everything to server 1 before it left (it did not just vanish).
  const Status moved = StatusFromProto(drained.drained_reply.status());
  EXPECT_EQ(moved.code(), StatusCode::kWrongShard) << moved;
  EXPECT_EQ(HolderOf(drained.drained_reply.shard_map(), 0), 1);
  EXPECT_EQ(drained.most_differing, 0u);
  EXPECT_EQ(test::DifferingFloats(drained.params.data(), fixed.params.data(), kDim), 0u);
  for (size_t w = 0; w < drained.acked.size(); ++w) {
    EXPECT_EQ(drained.applied[w], drained.acked[w]) << "worker rank " << w;
  }
  EXPECT_EQ(std::find(drained.events.begin(), drained.events.end(), "range_move_failed"),
            drained.events.end());
}

// The servers holding some range of dense table `name` in `map`.
std::set<int> HoldersOf(const wire::ShardMap& map, const std::string& name) {
  std::set<int> holders;
  for (const wire::TableShards& ts : map.tables()) {
    if (ts.table().name() != name) continue;
    for (const wire::DenseRange& r : ts.ranges()) holders.insert(r.server());
  }
  return holders;
}

// A table created after a server joined is spread over it too, and one
// created after a drain avoids the drained server (both were placed over
// the job's first --num_servers ids: the launcher's scaling test saw a
// joined server get nothing of a table its workers created late).
TEST(RangeMoveTest, TablesCreatedAfterAJoinOrADrainAreSpreadOverTheServersThereAreNow) {
  InProcessCluster cluster(1, ConsistencyModel::kAsync, /*staleness=*/0,
                           /*heartbeat_timeout_ms=*/5000);
  ASSERT_OK_AND_ASSIGN(std::vector<std::unique_ptr<Client>> owned,
                       test::ConnectWorkersInOrder(cluster.coordinator(), 1, {Dense()}));
  Client* worker = owned[0].get();
  JoinedServer joined(cluster.coordinator(), 0);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (HolderOf(MapOf(cluster.coordinator()), kCut) != 1 &&
         std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(HolderOf(MapOf(cluster.coordinator()), kCut), 1) << "the join's move never ran";

  TableOptions late = Dense();
  late.name = "late";
  ASSERT_OK(worker->CreateTable(late));
  EXPECT_EQ(HoldersOf(MapOf(cluster.coordinator()), "late"), (std::set<int>{0, 1}));

  ASSERT_OK(Drain(cluster.coordinator(), 0));
  while (ServerAlive(cluster.coordinator(), 0) && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_FALSE(ServerAlive(cluster.coordinator(), 0)) << "server 0 never left";
  TableOptions after = Dense();
  after.name = "after_drain";
  ASSERT_OK(worker->CreateTable(after));
  EXPECT_EQ(HoldersOf(MapOf(cluster.coordinator()), "after_drain"), (std::set<int>{1}));
  // And it trains: a push and a pull of every key, served by server 1.
  FloatBuffer g(kDim), out(kDim);
  std::fill(g.begin(), g.end(), 0.0f);
  ASSERT_OK(worker->PushPull("after_drain", 0, g, out).get());
}

// After one of the job's own servers was drained, the job no longer waits
// for it: a table can still be created (it was refused "waiting for servers:
// 1 of 2 registered" until the client's deadline), on the server that is left.
TEST(RangeMoveTest, ATableCanBeCreatedAfterOneOfTheJobsServersWasDrained) {
  InProcessCluster cluster(2, ConsistencyModel::kAsync, /*staleness=*/0,
                           /*heartbeat_timeout_ms=*/5000);
  ASSERT_OK_AND_ASSIGN(std::vector<std::unique_ptr<Client>> owned,
                       test::ConnectWorkersInOrder(cluster.coordinator(), 1, {Dense()}));
  ASSERT_OK(Drain(cluster.coordinator(), 1));
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (ServerAlive(cluster.coordinator(), 1) && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_FALSE(ServerAlive(cluster.coordinator(), 1)) << "server 1 never left";
  TableOptions late = Dense();
  late.name = "late";
  ASSERT_OK(owned[0]->CreateTable(late));
  EXPECT_EQ(HoldersOf(MapOf(cluster.coordinator()), "late"), (std::set<int>{0}));
  FloatBuffer g(kDim), out(kDim);
  std::fill(g.begin(), g.end(), 0.0f);
  ASSERT_OK(owned[0]->PushPull("late", 0, g, out).get());
}

}  // namespace
}  // namespace relaxps
