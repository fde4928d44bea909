// Sparse rows under --recovery=stateless, through real processes: while the
// server is lost, each worker serves PullRows / PushRows of its rows locally
// (rows it pulled before, others from the initializer) and keeps its pending
// row changes; the new server starts from its own rows (no checkpoint here:
// the initializer's values) with the workers' changes merged on top by the
// staleness rule.
#include <signal.h>

#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "recovery/seed_merge.h"
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

}  // namespace
}  // namespace test
}  // namespace relaxps
