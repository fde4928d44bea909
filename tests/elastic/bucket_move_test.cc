// Moves of sparse hash buckets in running in-process jobs (docs/elastic.md):
// a BSP job with a dense and a sparse table (Adam) gets a second server,
// which takes half of the dense range and half of the buckets, then the
// first server is drained (its range and buckets go to the second) and
// leaves; the job ends bit for bit as the same job without either, with
// every acknowledged push counted once. Async row pushes in flight while
// buckets move are all reflected exactly once.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "client/client.h"
#include "common/shard_map.h"
#include "tests/consistency/dense_bsp_driver.h"
#include "tests/elastic/elastic_test_util.h"
#include "tests/server/in_process_cluster.h"
#include "tests/test_util.h"

namespace relaxps {
namespace {

using test::Ask;
using test::AskForReply;
using test::JoinedServer;
using test::MapOf;

constexpr uint64_t kDim = 3 * kDenseChunk + 1000;
const std::vector<uint64_t> kLayers = {0, 5000, 2 * kDenseChunk, kDim};
constexpr int kBuckets = 8;
constexpr uint32_t kWidth = 4;
constexpr int kRowsPerPush = 48;  // Over every bucket: each round touches every server's rows.
constexpr int kJoinAfterClock = 2;
constexpr int kMostClocks = 40;

TableOptions Dense() {
  TableOptions t;
  t.name = "w";
  t.size = kDim;
  t.optimizer.name = "adam";
  t.optimizer.lr = 0.01f;
  t.init.seed = 7;
  t.init.segments.push_back(InitSegment{0, kDim, InitKind::kUniform, -0.1f, 0.1f});
  return t;
}

TableOptions Sparse(const std::string& optimizer = "adam", float lr = 0.01f) {
  TableOptions t;
  t.name = "emb";
  t.type = TableType::kSparse;
  t.row_width = kWidth;
  t.optimizer.name = optimizer;  // Adam: two state slots and the step move along.
  t.optimizer.lr = lr;
  if (optimizer == "adam") {
    t.init.seed = 11;
    t.init.segments.push_back(InitSegment{0, kWidth, InitKind::kUniform, -0.5f, 0.5f});
  }
  return t;
}

CoordinatorOptions Job(ConsistencyModel model) {
  CoordinatorOptions co;
  co.num_servers = 1;
  co.consistency = model;
  co.staleness = 0;
  co.heartbeat_timeout_ms = 5000 * test::TimeScale();
  co.sparse_buckets = kBuckets;
  return co;
}

// The buckets of "emb" each server holds in `map`.
std::vector<int> BucketsOf(const wire::ShardMap& map, int server) {
  std::vector<int> held;
  for (const wire::TableShards& ts : map.tables()) {
    if (ts.table().name() != "emb") continue;
    for (int k = 0; k < ts.buckets_size(); ++k) {
      if (ts.buckets(k).server() == server) held.push_back(k);
    }
  }
  return held;
}

bool HoldsDense(const wire::ShardMap& map, int server) {
  for (const wire::TableShards& ts : map.tables()) {
    for (const wire::DenseRange& r : ts.ranges()) {
      if (r.server() == server) return true;
    }
  }
  return false;
}

// Waits (bounded) until the coordinator's map is newer than `version`.
void WaitForNewerMap(const std::string& coordinator, uint64_t version) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  while (MapOf(coordinator).version() <= version && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// Clock t's rows of worker `rank` (kRowsPerPush distinct ids, some shared
// with the other worker, some its own; some rows recur every clock) and
// their gradient values.
std::vector<uint64_t> RowsAt(size_t rank, int t) {
  std::vector<uint64_t> ids;
  for (int i = 0; i < kRowsPerPush; ++i) {
    ids.push_back(i % 3 == 0 ? static_cast<uint64_t>(i)
                             : 1000 + 97 * static_cast<uint64_t>((t * 5 + i + 13 * rank) % 64));
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}
float RowGradient(size_t rank, int t, uint64_t id, uint32_t c) {
  return 1e-2f * static_cast<float>(static_cast<int>((id * 7 + rank * 3 + t * 5 + c) % 11) - 5);
}
std::vector<uint64_t> EveryRow() {
  std::vector<uint64_t> all;
  for (int t = 0; t < kMostClocks; ++t) {
    for (size_t r = 0; r < 2; ++r) {
      for (uint64_t id : RowsAt(r, t)) all.push_back(id);
    }
  }
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  return all;
}

struct JobResult {
  std::vector<float> dense;   // Worker 0's final pull of "w".
  std::vector<float> rows;    // Worker 0's final pull of every row of "emb".
  std::vector<float> initial_rows;  // The same before training.
  size_t dense_most_differing = 0;  // Against the one-process model, any clock.
  int clocks = 0;
  int joined_at_clock = -1;   // The join's plan was published before this clock.
  int drained_at_clock = -1;  // Server 0 held nothing before this clock.
  bool server0_left = false;
  std::vector<uint64_t> acked, applied;  // Per worker.
  std::vector<std::string> events;
  wire::Header moved_reply;   // Rows of a moved bucket asked of server 0 by the old map.
};

// Two BSP workers train "w" and "emb" on a one-server job. With `elastic`, a
// server joins after clock kJoinAfterClock; once it holds its share of both
// tables, server 0 is drained, and the job runs two clocks more after it left
// (at most kMostClocks in all). Otherwise it runs `clocks` clocks.
void RunJob(bool elastic, int clocks, JobResult* out) {
  InProcessCluster cluster(Job(ConsistencyModel::kBsp), ServerOptions());
  const std::string& coordinator = cluster.coordinator();
  ASSERT_OK_AND_ASSIGN(std::vector<std::unique_ptr<Client>> owned,
                       test::ConnectWorkersInOrder(coordinator, 2, {Dense(), Sparse()}));
  std::vector<Client*> workers;
  for (auto& c : owned) workers.push_back(c.get());
  test::DenseBspDriver dense(workers, Dense(), kLayers);
  ASSERT_OK(dense.Start());
  const std::vector<uint64_t> all = EveryRow();
  KeyBuffer keys(all.size());
  std::copy(all.begin(), all.end(), keys.begin());
  FloatBuffer rows(all.size() * kWidth);
  ASSERT_OK(workers[0]->PullRows("emb", keys, rows).get());
  out->initial_rows.assign(rows.begin(), rows.end());
  std::unique_ptr<JoinedServer> joined;
  int left_at = -1;
  int t = 0;
  for (; elastic ? t < kMostClocks && (left_at < 0 || t < left_at + 2) : t < clocks; ++t) {
    ASSERT_OK(dense.Push(t, t % 2 == 0 ? std::vector<size_t>{0, 1} : std::vector<size_t>{1, 0}));
    for (size_t r = 0; r < workers.size(); ++r) {
      const std::vector<uint64_t> ids = RowsAt(r, t);
      KeyBuffer keys(ids.size());
      FloatBuffer grads(ids.size() * kWidth);
      for (size_t i = 0; i < ids.size(); ++i) {
        keys[i] = ids[i];
        for (uint32_t c = 0; c < kWidth; ++c) grads[i * kWidth + c] = RowGradient(r, t, ids[i], c);
      }
      ASSERT_OK(workers[r]->PushRows("emb", keys, grads).get());
    }
    for (Client* w : workers) ASSERT_OK(w->Clock());
    ASSERT_OK_AND_ASSIGN(const size_t diff, dense.PullAndCompare());
    out->dense_most_differing = std::max(out->dense_most_differing, diff);
    if (!elastic) continue;
    const wire::ShardMap map = MapOf(coordinator);
    if (joined == nullptr && t == kJoinAfterClock) {
      joined = std::make_unique<JoinedServer>(coordinator);
    } else if (joined != nullptr && out->joined_at_clock < 0 &&
               BucketsOf(map, 1).size() == kBuckets / 2 && HoldsDense(map, 1)) {
      out->joined_at_clock = t + 1;
      ASSERT_OK(test::Drain(coordinator, 0));
    } else if (out->joined_at_clock >= 0 && out->drained_at_clock < 0 &&
               BucketsOf(map, 0).empty() && !HoldsDense(map, 0)) {
      out->drained_at_clock = t + 1;
    }
    if (out->drained_at_clock >= 0 && left_at < 0 && !test::ServerAlive(coordinator, 0)) {
      left_at = t;
    }
    // Each move cuts at a quiescent instant (a BSP round applied and no pull
    // waiting), which this pause between clocks leaves room for.
    if (joined != nullptr && left_at < 0) WaitForNewerMap(coordinator, map.version());
  }
  out->clocks = t;
  out->server0_left = elastic && !test::ServerAlive(coordinator, 0);
  FloatBuffer final_dense(kDim);
  ASSERT_OK(workers[0]->Pull("w", 0, final_dense).get());
  out->dense.assign(final_dense.begin(), final_dense.end());
  ASSERT_OK(workers[0]->PullRows("emb", keys, rows).get());
  out->rows.assign(rows.begin(), rows.end());
  std::vector<std::string> endpoints;
  if (!out->server0_left) endpoints.push_back(cluster.server(0)->endpoint());
  if (joined != nullptr) endpoints.push_back(joined->server()->endpoint());
  for (Client* w : workers) {
    const ClientStats stats = w->stats();
    out->acked.push_back(stats.acked_updates);
    out->applied.push_back(test::AppliedParts(endpoints, w->worker_id(), stats.incarnation));
  }
  out->events = test::EventKinds(coordinator);
}

size_t Count(const std::vector<std::string>& events, const std::string& kind) {
  return static_cast<size_t>(std::count(events.begin(), events.end(), kind));
}

TEST(BucketMoveTest, ABspJobWithDenseAndSparseTablesThatAddsAndDrainsEndsBitIdentical) {
  JobResult elastic, fixed;
  RunJob(/*elastic=*/true, 0, &elastic);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_GT(elastic.joined_at_clock, kJoinAfterClock) << "the join's moves never finished";
  ASSERT_GT(elastic.drained_at_clock, elastic.joined_at_clock) << "server 0 was never drained";
  EXPECT_TRUE(elastic.server0_left);
  EXPECT_LT(elastic.clocks, kMostClocks);
  RunJob(/*elastic=*/false, elastic.clocks, &fixed);
  ASSERT_FALSE(HasFatalFailure());

  // The join moved the dense tail and 4 of the 8 buckets, the drain the
  // dense head and the other 4: 4 moves (each server's buckets in one cut-over),
  // none failed.
  EXPECT_EQ(Count(elastic.events, "range_move_done"), 4u);
  EXPECT_EQ(Count(elastic.events, "range_move_failed"), 0u);

  // Bit for bit the same model: dense (and the one-process model at every
  // clock) and every row of the sparse table.
  EXPECT_EQ(elastic.dense_most_differing, 0u);
  EXPECT_EQ(fixed.dense_most_differing, 0u);
  ASSERT_EQ(elastic.dense.size(), fixed.dense.size());
  EXPECT_EQ(test::DifferingFloats(elastic.dense.data(), fixed.dense.data(), kDim), 0u);
  ASSERT_EQ(elastic.rows.size(), fixed.rows.size());
  EXPECT_EQ(test::DifferingFloats(elastic.rows.data(), fixed.rows.data(), elastic.rows.size()),
            0u);
  // The rows did train (the comparison is not of two untouched tables).
  EXPECT_GT(test::DifferingFloats(elastic.rows.data(), elastic.initial_rows.data(),
                                  elastic.rows.size()),
            elastic.rows.size() / 2);
  // Nothing acknowledged is absent, nothing counted twice, on the server
  // that holds everything now.
  for (size_t w = 0; w < elastic.acked.size(); ++w) {
    EXPECT_GT(elastic.acked[w], 0u);
    EXPECT_EQ(elastic.applied[w], elastic.acked[w]) << "worker rank " << w;
    EXPECT_EQ(fixed.applied[w], fixed.acked[w]) << "worker rank " << w;
  }
  std::printf("bucket moves under BSP: joined (dense tail + 4 buckets) before clock %d, server 0 "
              "drained before clock %d, %d clocks; %zu dense and %zu row floats differ from the "
              "job without them; worker 0 acked %llu parts, applied %llu\n",
              elastic.joined_at_clock, elastic.drained_at_clock, elastic.clocks,
              test::DifferingFloats(elastic.dense.data(), fixed.dense.data(), kDim),
              test::DifferingFloats(elastic.rows.data(), fixed.rows.data(), elastic.rows.size()),
              static_cast<unsigned long long>(elastic.acked[0]),
              static_cast<unsigned long long>(elastic.applied[0]));
}

// Async, row pushes in flight throughout: two workers push integer
// gradients (SGD, lr 1, rows starting at 0: sums exact in any order) to rows
// of every bucket while a server joins and half of the buckets move to it.
// No request fails, and every row is exactly minus the sum of every push:
// nothing lost, nothing applied twice, though requests that reached the
// source during a cut-over were held and sent again, split by the new map.
TEST(BucketMoveTest, AsyncRowPushesInFlightDuringBucketMovesAreReflectedOnce) {
  constexpr int kSteps = 200;
  constexpr uint64_t kRows = 64;
  InProcessCluster cluster(Job(ConsistencyModel::kAsync), ServerOptions());
  std::vector<std::unique_ptr<Client>> workers;
  for (int k = 0; k < 2; ++k) {
    ClientOptions o;
    o.coordinator = cluster.coordinator();
    o.request_timeout_ms = 20000 * test::TimeScale();
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> c, Client::Connect(o));
    ASSERT_OK(c->CreateTable(Sparse("sgd", 1.0f)));
    workers.push_back(std::move(c));
  }
  auto gradient = [](int worker, int step, uint64_t id, uint32_t c) {
    return static_cast<float>(static_cast<int>((7 * worker + 3 * step + id + c) % 5) - 2);
  };
  std::atomic<int> steps_done{0};
  std::vector<Status> failures(workers.size());
  std::vector<std::thread> threads;
  for (size_t k = 0; k < workers.size(); ++k) {
    threads.emplace_back([&, k] {
      Client* c = workers[k].get();
      for (int step = 0; step < kSteps; ++step) {
        KeyBuffer ids(kRows);
        FloatBuffer grads(kRows * kWidth);
        for (uint64_t i = 0; i < kRows; ++i) {
          ids[i] = i;
          for (uint32_t col = 0; col < kWidth; ++col) {
            grads[i * kWidth + col] = gradient(c->worker_id(), step, i, col);
          }
        }
        Status s = c->PushRows("emb", ids, grads).get();
        if (!s.ok()) {
          failures[k] = s;
          return;
        }
        steps_done.fetch_add(1);
      }
    });
  }
  while (steps_done.load() < 20) std::this_thread::yield();
  const uint64_t old_version = MapOf(cluster.coordinator()).version();
  auto joined = std::make_unique<JoinedServer>(cluster.coordinator());
  for (std::thread& th : threads) th.join();
  for (const Status& s : failures) EXPECT_OK(s);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (BucketsOf(MapOf(cluster.coordinator()), 1).size() < kBuckets / 2 &&
         std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(BucketsOf(MapOf(cluster.coordinator()), 1).size(), kBuckets / 2u)
      << "the buckets never moved";
  KeyBuffer ids(kRows);
  for (uint64_t i = 0; i < kRows; ++i) ids[i] = i;
  FloatBuffer rows(kRows * kWidth);
  ASSERT_OK(workers[0]->PullRows("emb", ids, rows).get());
  size_t wrong = 0;
  for (uint64_t i = 0; i < kRows; ++i) {
    for (uint32_t col = 0; col < kWidth; ++col) {
      float expected = 0.0f;
      for (const auto& c : workers) {
        for (int step = 0; step < kSteps; ++step) {
          expected -= gradient(c->worker_id(), step, i, col);
        }
      }
      wrong += rows[i * kWidth + col] != expected;
    }
  }
  EXPECT_EQ(wrong, 0u);
  // Acknowledged parts against applied ones, over both servers.
  for (const auto& c : workers) {
    const ClientStats stats = c->stats();
    EXPECT_EQ(test::AppliedParts({cluster.server(0)->endpoint(), joined->server()->endpoint()},
                                 c->worker_id(), stats.incarnation),
              stats.acked_updates);
  }
  // A client routing by the first map: rows of a moved bucket, asked of
  // server 0, are answered "moved" with the map that moved them.
  const int moved = BucketsOf(MapOf(cluster.coordinator()), 1).front();
  uint64_t row = 0;
  while (SparseOwner(row, kBuckets) != moved) ++row;
  Message pull;
  pull.header.set_type(wire::PULL_ROWS);
  pull.header.set_sender(-1);
  pull.header.set_table("emb");
  pull.header.set_key_count(1);
  pull.header.set_shard_map_version(old_version);
  KeyBuffer one(1);
  one[0] = row;
  pull.frames.push_back(Frame::Share(one));
  const wire::Header reply = AskForReply(cluster.server(0)->endpoint(), std::move(pull));
  EXPECT_EQ(StatusFromProto(reply.status()).code(), StatusCode::kWrongShard);
  ASSERT_TRUE(reply.has_shard_map());
  EXPECT_EQ(BucketsOf(reply.shard_map(), 1).size(), kBuckets / 2u);
  Message m;
  m.header.set_type(wire::SERVER_STATS);
  const wire::Header source = Ask(cluster.server(0)->endpoint(), std::move(m));
  std::printf("async bucket moves under load: %zu of %llu row floats differ from the sum of "
              "every push; server 0 answered %llu request(s) 'moved' or refused\n",
              wrong, static_cast<unsigned long long>(kRows * kWidth),
              static_cast<unsigned long long>(source.server_stats().rejected()));
}

}  // namespace
}  // namespace relaxps
