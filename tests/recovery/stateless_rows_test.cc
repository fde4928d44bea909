// Sparse rows under --recovery=stateless, through real processes: while the
// server is lost, each worker serves PullRows / PushRows of its rows locally
// (rows it pulled before, others from the initializer) and keeps its pending
// row changes; the new server starts from its own rows (no checkpoint here:
// the initializer's values) with the workers' changes merged on top by the
// staleness rule.
// Hybrid (--recovery=hybrid --replicas=2, a dense and a sparse table): one
// loss is a chain failover for buckets too; when every replica is lost the
// buckets are stranded like dense ranges, the workers serve their rows
// locally, and a spare (the other server, restarted) takes the stranded
// holder's place: its rows are the initializer's plus the merged changes.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/shard_map.h"
#include "recovery/seed_merge.h"
#include "tests/recovery/chain_util.h"
#include "tests/recovery/recovery_util.h"
#include "tests/recovery/stateless_util.h"
#include "tests/test_util.h"

namespace relaxps {
namespace test {
namespace {

constexpr size_t kWidth = 4;
constexpr float kLr = 0.5f;
constexpr float kInit = 1.0f;

TableOptions SparseSgd() { return SparseSgdTable(kWidth, kLr, kInit); }

// Integer row gradients of `worker` at `step` for `ids`.
FloatBuffer RowGradients(const std::vector<uint64_t>& ids, int worker, int step) {
  FloatBuffer g(ids.size() * kWidth);
  for (size_t i = 0; i < g.size(); ++i) {
    g[i] = static_cast<float>(static_cast<int>((i * 3 + step * 5 + worker * 7 + ids[i / kWidth]) % 9) - 4);
  }
  return g;
}

KeyBuffer Keys(const std::vector<uint64_t>& ids) {
  KeyBuffer k(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) k[i] = ids[i];
  return k;
}

using Rows = std::map<uint64_t, std::vector<float>>;

// One local SGD step on `rows` (missing rows start at kInit); the change goes
// to `change`.
void LocalPush(const std::vector<uint64_t>& ids, const FloatBuffer& g, Rows* rows, Rows* change) {
  for (size_t i = 0; i < ids.size(); ++i) {
    std::vector<float>& r = (*rows)[ids[i]];
    std::vector<float>& d = (*change)[ids[i]];
    r.resize(kWidth, kInit);
    d.resize(kWidth, 0.0f);
    for (size_t j = 0; j < kWidth; ++j) {
      const float before = r[j];
      r[j] = before - kLr * g[i * kWidth + j];
      d[j] += r[j] - before;
    }
  }
}

TEST(StatelessRowsTest, LostRowsAreServedLocallyAndTheirChangesMergedOntoTheNewServer) {
  const std::string dir = MakeTempDir();
  ASSERT_OK_AND_ASSIGN(auto cluster, StartStatelessCluster(dir, 1000, 30000));
  std::unique_ptr<Client> w[2];
  Rows rows[2], change[2];  // What each worker holds locally, and its change.
  for (int i = 0; i < 2; ++i) {
    ASSERT_OK_AND_ASSIGN(w[i], cluster->Connect("worker"));
    ASSERT_OK(w[i]->CreateTable(SparseSgd()));
  }
  // Two rounds through the server, then each worker pulls rows 1, 2 and 3.
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < 2; ++i) {
      ASSERT_OK(w[i]->PushRows("s", Keys({1, 2}), RowGradients({1, 2}, i, round)).get());
      ASSERT_OK(w[i]->Clock());
    }
  }
  for (int i = 0; i < 2; ++i) {
    FloatBuffer out(3 * kWidth);
    ASSERT_OK(w[i]->PullRows("s", Keys({1, 2, 3}), out).get());
    for (uint64_t id = 1; id <= 3; ++id) {
      rows[i][id].assign(out.data() + (id - 1) * kWidth, out.data() + id * kWidth);
    }
  }
  const int64_t base = w[0]->clock();
  ASSERT_EQ(w[1]->clock(), base);

  cluster->server(0)->Kill(SIGKILL);
  ASSERT_OK(cluster->server(0)->Wait(Millis(10000)).status());
  // Worker 0: two steps on rows 1 (pulled) and 7 (never seen: initializer);
  // worker 1: one step on rows 2 and 7. Every request completes locally.
  const std::vector<std::vector<uint64_t>> touched = {{1, 7}, {2, 7}};
  for (int i = 0; i < 2; ++i) {
    for (int step = 0; step < 2 - i; ++step) {
      FloatBuffer g = RowGradients(touched[i], i, 10 + step);
      ASSERT_OK(w[i]->PushRows("s", Keys(touched[i]), g).get());
      LocalPush(touched[i], g, &rows[i], &change[i]);
      ASSERT_OK(w[i]->Clock());
    }
    FloatBuffer out(2 * kWidth);
    ASSERT_OK(w[i]->PullRows("s", Keys(touched[i]), out).get());
    for (size_t k = 0; k < 2; ++k) {
      EXPECT_EQ(std::vector<float>(out.data() + k * kWidth, out.data() + (k + 1) * kWidth),
                rows[i][touched[i][k]])
          << "worker " << i << " row " << touched[i][k];
    }
    EXPECT_EQ(w[i]->stats().local_steps, static_cast<uint64_t>(2 - i));
  }

  // The new server: the initializer's rows plus the merged changes. Worker 0
  // is the freshest (clock base + 2): weight 1; worker 1's change is
  // 2 clocks stale: weight 1/2 (staleness rule).
  ASSERT_OK(cluster->StartServer(0, StatelessServerFlags()));
  const std::vector<double> a =
      ChangeWeights({WorkerCopy{w[0]->worker_id(), base + 2, base, 2, nullptr, nullptr},
                     WorkerCopy{w[1]->worker_id(), base + 1, base, 1, nullptr, nullptr}},
                    MergeRule::kStaleness);
  ASSERT_EQ(a, (std::vector<double>{1.0, 0.5}));
  const std::vector<uint64_t> ids = {1, 2, 3, 7};
  StatusOr<std::vector<float>> seeded = UnavailableError("not read");
  for (int i = 0; i < 300 && !seeded.ok(); ++i) {
    seeded = ReadRowsSlot(cluster->server_endpoint(0), "s", ids, 0);
    if (!seeded.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_OK(seeded);
  for (size_t k = 0; k < ids.size(); ++k) {
    for (size_t j = 0; j < kWidth; ++j) {
      float merged = 0.0f;  // In worker order, as the coordinator sums.
      for (int i = 0; i < 2; ++i) {
        if (change[i].count(ids[k])) merged += static_cast<float>(a[i]) * change[i][ids[k]][j];
      }
      EXPECT_EQ((*seeded)[k * kWidth + j], kInit + merged) << "row " << ids[k] << " [" << j << "]";
    }
  }
  // Served by the server again, once the worker saw it seeded (row 1 then
  // reads the merged value, not its own copy).
  const std::vector<float> row1(seeded->begin(), seeded->begin() + kWidth);
  FloatBuffer got(kWidth);
  for (int i = 0; i < 300; ++i) {
    ASSERT_OK(w[0]->PullRows("s", Keys({1}), got).get());
    if (std::vector<float>(got.data(), got.data() + kWidth) == row1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(std::vector<float>(got.data(), got.data() + kWidth), row1);
  ASSERT_OK(w[0]->PushRows("s", Keys({3}), RowGradients({3}, 0, 20)).get());
  EXPECT_EQ(w[0]->stats().local_steps, 2u);
  ASSERT_OK_AND_ASSIGN(std::string log, ReadFile(dir + "/coordinator.log"));
  EXPECT_NE(log.find("RESEED server=0 source=initializer"), std::string::npos) << log;
  EXPECT_NE(log.find("rows=3"), std::string::npos) << log;
  RemoveTree(dir);
}

// Reads `ids` (any buckets) from one replica at `endpoint`, bucket by bucket
// (2 buckets), retrying while it awaits its seed or state transfer.
StatusOr<Rows> ReadBuckets(const std::string& endpoint, const std::vector<uint64_t>& ids) {
  Rows out;
  for (uint64_t bucket = 0; bucket < 2; ++bucket) {
    std::vector<uint64_t> in;
    for (uint64_t id : ids) {
      if (static_cast<uint64_t>(SparseOwner(id, 2)) == bucket) in.push_back(id);
    }
    if (in.empty()) continue;
    StatusOr<std::vector<float>> got = UnavailableError("not read");
    for (int i = 0; i < 300 && !got.ok(); ++i) {
      got = ReadRowsSlot(endpoint, "s", in, 0, bucket);
      if (!got.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    RETURN_IF_ERROR(got.status());
    for (size_t k = 0; k < in.size(); ++k) {
      out[in[k]].assign(got->begin() + k * kWidth, got->begin() + (k + 1) * kWidth);
    }
  }
  return out;
}

// Until every bucket of "s" has `replicas` replicas, none of them `gone`.
bool WaitForBuckets(RecoveryCluster* cluster, size_t replicas, int gone) {
  for (int i = 0; i < 150; ++i) {
    std::vector<ChainRange> b = BucketChains(cluster, "s");
    bool done = b.size() == 2;
    for (const ChainRange& r : b) {
      done = done && (gone >= 0 ? std::find(r.chain.begin(), r.chain.end(), gone) == r.chain.end()
                                : r.chain.size() == replicas);
    }
    if (done) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

TEST(StatelessRowsTest, HybridStrandsBucketsLikeRangesAndASpareIsSeededWithTheRule) {
  constexpr uint64_t kSize = 64;
  const std::string dir = MakeTempDir();
  ASSERT_OK_AND_ASSIGN(auto cluster,
                       RecoveryCluster::Start(dir, 2, {"--recovery=hybrid", "--replicas=2",
                                                       "--sparse_buckets=2",
                                                       "--heartbeat_timeout_ms=1000",
                                                       "--reseed_timeout_ms=30000"}));
  const std::vector<std::string> flags = {"--store=memory", "--heartbeat_ms=100"};
  for (int id = 0; id < 2; ++id) ASSERT_OK(cluster->StartServer(id, flags));
  std::unique_ptr<Client> w[2];
  for (int i = 0; i < 2; ++i) {
    ASSERT_OK_AND_ASSIGN(w[i], cluster->Connect("worker"));
    ASSERT_OK(w[i]->CreateTable(SgdTable(kSize, kLr, 8.0f)));
    ASSERT_OK(w[i]->CreateTable(SparseSgd()));
  }
  const std::vector<uint64_t> ids = {1, 2, 3, 4, 7};
  ASSERT_NE(SparseOwner(1, 2), SparseOwner(2, 2));  // Rows of both buckets change.
  Rows expected;  // Init minus every acknowledged row push, once.
  auto round = [&](int r) {
    for (int i = 0; i < 2; ++i) {
      const std::vector<uint64_t> pushed = {1, 2, 3, 4};
      FloatBuffer g = RowGradients(pushed, i, r);
      ASSERT_OK(w[i]->PushRows("s", Keys(pushed), g).get());
      Rows ignored;
      LocalPush(pushed, g, &expected, &ignored);
      ASSERT_OK(w[i]->Push("w", 0, IntegerGradient(kSize, i, r)).get());
      ASSERT_OK(w[i]->Clock());
    }
  };
  for (int r = 0; r < 2; ++r) ASSERT_NO_FATAL_FAILURE(round(r));
  // One loss: a chain failover for the buckets, every push applied once.
  cluster->server(0)->Kill(SIGKILL);
  ASSERT_OK(cluster->server(0)->Wait(Millis(10000)).status());
  for (int r = 2; r < 4; ++r) ASSERT_NO_FATAL_FAILURE(round(r));
  ASSERT_TRUE(WaitForBuckets(cluster.get(), 1, 0));
  for (int i = 0; i < 2; ++i) EXPECT_EQ(w[i]->stats().local_steps, 0u);
  ASSERT_OK_AND_ASSIGN(Rows survivor, ReadBuckets(cluster->server_endpoint(1), {1, 2, 3, 4}));
  EXPECT_EQ(survivor, expected);
  ASSERT_OK(cluster->StartServer(0, flags));
  ASSERT_TRUE(WaitForBuckets(cluster.get(), 2, -1));
  ASSERT_TRUE(WaitForChains(cluster.get(), "w", -1, 2, 15000));

  // Both die: each worker holds its dense copy and the rows it pulled.
  Rows rows[2], change[2];
  std::vector<float> copy[2], dense_change[2];
  int64_t base_clock[2];
  for (int i = 0; i < 2; ++i) {
    FloatBuffer out(4 * kWidth);
    ASSERT_OK(w[i]->PullRows("s", Keys({1, 2, 3, 4}), out).get());
    for (uint64_t id = 1; id <= 4; ++id) {
      rows[i][id].assign(out.data() + (id - 1) * kWidth, out.data() + id * kWidth);
      EXPECT_EQ(rows[i][id], expected[id]) << id;
    }
    FloatBuffer p(kSize);
    ASSERT_OK(w[i]->Pull("w", 0, p).get());
    copy[i].assign(p.data(), p.data() + kSize);
    dense_change[i].assign(kSize, 0.0f);
    base_clock[i] = w[i]->last_params_clock();
  }
  const int64_t base = w[0]->clock();
  ASSERT_EQ(w[1]->clock(), base);
  cluster->server(0)->Kill(SIGKILL);
  cluster->server(1)->Kill(SIGKILL);
  for (int id = 0; id < 2; ++id) ASSERT_OK(cluster->server(id)->Wait(Millis(10000)).status());
  ASSERT_OK_AND_ASSIGN(std::string fallback,
                       WaitForLine(dir + "/coordinator.log",
                                   "FALLBACK cause=all-replicas-lost server=[01] .*s#",
                                   Scaled(Millis(15000))));
  const int holder = fallback[fallback.find("server=") + 7] - '0';
  // Worker 0 takes 3 local steps (rows 1 and 7), worker 1 two (rows 2, 7).
  const std::vector<std::vector<uint64_t>> touched = {{1, 7}, {2, 7}};
  for (int i = 0; i < 2; ++i) {
    for (int step = 0; step < 3 - i; ++step) {
      FloatBuffer g = RowGradients(touched[i], i, 10 + step);
      ASSERT_OK(w[i]->PushRows("s", Keys(touched[i]), g).get());
      LocalPush(touched[i], g, &rows[i], &change[i]);
      FloatBuffer dg = IntegerGradient(kSize, i, 10 + step), out(kSize);
      ASSERT_OK(w[i]->PushPull("w", 0, dg, out).get());
      for (uint64_t k = 0; k < kSize; ++k) {
        const float before = copy[i][k];
        copy[i][k] = before - kLr * dg[k];
        dense_change[i][k] += copy[i][k] - before;
      }
      EXPECT_EQ(std::vector<float>(out.data(), out.data() + kSize), copy[i]);
      ASSERT_OK(w[i]->Clock());
    }
    FloatBuffer out(2 * kWidth);
    ASSERT_OK(w[i]->PullRows("s", Keys(touched[i]), out).get());
    for (size_t k = 0; k < 2; ++k) {
      EXPECT_EQ(std::vector<float>(out.data() + k * kWidth, out.data() + (k + 1) * kWidth),
                rows[i][touched[i][k]]) << "worker " << i << " row " << touched[i][k];
    }
    // Each step is one row push and one dense push, both served locally.
    EXPECT_EQ(w[i]->stats().local_steps, static_cast<uint64_t>(2 * (3 - i)));
  }

  // The other server registers first: a spare with another id, it takes
  // the holder's stranded ranges and buckets at once (--spare_takeover_ms=0).
  const int spare = 1 - holder;
  ASSERT_OK(cluster->StartServer(spare, flags));
  ASSERT_OK(WaitForLine(dir + "/coordinator.log",
                        "TAKEOVER server=" + std::to_string(spare) + " holder=" +
                            std::to_string(holder) + " ranges=.*s#",
                        Scaled(Millis(15000))).status());
  // Rows: the initializer's (a memory store, no checkpoint) plus the
  // staleness-weighted changes: worker 1's base is 3 clocks behind worker 0.
  const std::vector<double> a = ChangeWeights(
      {WorkerCopy{w[0]->worker_id(), base + 3, base, 3, nullptr, nullptr},
       WorkerCopy{w[1]->worker_id(), base + 2, base, 2, nullptr, nullptr}},
      MergeRule::kStaleness);
  ASSERT_EQ(a, (std::vector<double>{1.0, 1.0 / 3}));
  ASSERT_OK_AND_ASSIGN(Rows seeded, ReadBuckets(cluster->server_endpoint(spare), ids));
  for (uint64_t id : ids) {
    for (size_t j = 0; j < kWidth; ++j) {
      float merged = 0.0f;  // In worker order, as the coordinator sums.
      for (int i = 0; i < 2; ++i) {
        if (change[i].count(id)) merged += static_cast<float>(a[i]) * change[i][id][j];
      }
      EXPECT_EQ(seeded[id][j], kInit + merged) << "row " << id << " [" << j << "]";
    }
  }
  // The dense range: exactly the stateless rule on the workers' copies.
  ASSERT_OK_AND_ASSIGN(
      MergeResult dense,
      MergeCopies({WorkerCopy{w[0]->worker_id(), base + 3, base_clock[0], 3, copy[0].data(),
                              dense_change[0].data()},
                   WorkerCopy{w[1]->worker_id(), base + 2, base_clock[1], 2, copy[1].data(),
                              dense_change[1].data()}},
                  kSize, SeedRule::kFreshest, MergeRule::kStaleness));
  ASSERT_OK_AND_ASSIGN(std::vector<float> seeded_dense,
                       WhenInSync([&] {
                         return ReadDenseSlot(cluster->server_endpoint(spare), "w", 0, kSize, 0);
                       }));
  EXPECT_EQ(seeded_dense, dense.params);

  // The holder comes back and joins as tail with the seeded rows.
  ASSERT_OK(cluster->StartServer(holder, flags));
  ASSERT_TRUE(WaitForBuckets(cluster.get(), 2, -1));
  Rows tail;
  for (int i = 0; i < 100; ++i) {
    StatusOr<Rows> got = ReadBuckets(cluster->server_endpoint(holder), ids);
    if (got.ok() && *got == seeded) {
      tail = *got;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(tail, seeded);
  // Training goes on through the chains: once worker 0 reads the seeded row
  // 1 its next row push applies on it.
  FloatBuffer got(kWidth);
  for (int i = 0; i < 300; ++i) {
    ASSERT_OK(w[0]->PullRows("s", Keys({1}), got).get());
    if (std::vector<float>(got.data(), got.data() + kWidth) == seeded[1]) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(std::vector<float>(got.data(), got.data() + kWidth), seeded[1]);
  FloatBuffer g = RowGradients({1}, 0, 30);
  ASSERT_OK(w[0]->PushRows("s", Keys({1}), g).get());
  EXPECT_EQ(w[0]->stats().local_steps, 6u);
  ASSERT_OK_AND_ASSIGN(Rows after, ReadBuckets(cluster->server_endpoint(spare), {1}));
  for (size_t j = 0; j < kWidth; ++j) EXPECT_EQ(after[1][j], seeded[1][j] - kLr * g[j]) << j;
  ASSERT_OK_AND_ASSIGN(std::string log, ReadFile(dir + "/coordinator.log"));
  EXPECT_NE(log.find("RESEED server=" + std::to_string(spare) + " source=worker:" +
                     std::to_string(w[0]->worker_id())),
            std::string::npos)
      << log;
  EXPECT_NE(log.find(" buckets=2 rows=3"), std::string::npos) << log;
  for (auto& c : w) c.reset();
  RemoveTree(dir);
}

}  // namespace
}  // namespace test
}  // namespace relaxps
