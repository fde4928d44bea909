// Sparse tables under BSP and SSP, end to end through real servers: BSP
// aggregates each clock's rows (the workers' sum divided by the round's
// workers, not by the pushers of a row; one step per row and clock) and a
// pull sees every worker's rows of the clocks before it; SSP applies on
// arrival but holds a pull that is too far ahead.
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "client/client.h"
#include "tests/server/in_process_cluster.h"

namespace relaxps {
namespace {

constexpr uint32_t kWidth = 4;
constexpr uint64_t kRows = 8;

TableOptions Embeddings() {
  TableOptions t;
  t.name = "emb";
  t.type = TableType::kSparse;
  t.row_width = kWidth;
  t.optimizer.name = "sgd";
  t.optimizer.lr = 0.5f;
  return t;  // Rows start at 0.
}

std::unique_ptr<Client> Connect(const InProcessCluster& cluster) {
  ClientOptions o;
  o.coordinator = cluster.coordinator();
  auto c = Client::Connect(o);
  CHECK(c.ok()) << c.status();
  return std::move(c).value();
}

// Worker k pushes, at clock t, gradient (k + 1) * (t + 1) on every column of
// rows k .. k + 3 (rows 1..3 get both workers' pushes, row 0 only worker 0's,
// row 4 only worker 1's: those are divided by 2 all the same).
float Grad(int k, int t) { return static_cast<float>((k + 1) * (t + 1)); }

TEST(SparseBspTest, EachClockIsOneAveragedStepSeenByEveryWorker) {
  InProcessCluster cluster(2, ConsistencyModel::kBsp);  // Rows hash over two servers.
  std::unique_ptr<Client> workers[2] = {Connect(cluster), Connect(cluster)};
  for (auto& w : workers) ASSERT_TRUE(w->CreateTable(Embeddings()).ok());
  const int kClocks = 5;
  // The expected rows after each clock, computed serially.
  std::vector<std::vector<float>> expected(kClocks, std::vector<float>(kRows, 0.0f));
  std::vector<float> row(kRows, 0.0f);
  for (int t = 0; t < kClocks; ++t) {
    for (uint64_t r = 0; r < kRows; ++r) {
      float sum = 0;
      bool pushed = false;
      for (int k = 0; k < 2; ++k) {
        if (r >= static_cast<uint64_t>(k) && r < static_cast<uint64_t>(k) + 4) {
          sum += Grad(k, t);
          pushed = true;
        }
      }
      if (pushed) row[r] -= 0.5f * (sum * (1.0f / 2));
    }
    expected[t] = row;
  }
  std::atomic<int> mismatches{0};
  auto run = [&](int k) {
    Client* c = workers[k].get();
    KeyBuffer all(kRows);
    for (uint64_t r = 0; r < kRows; ++r) all[r] = r;
    for (int t = 0; t < kClocks; ++t) {
      // Worker 1 is slower: under "applied on arrival" worker 0 would read
      // its own push alone.
      if (k == 1) std::this_thread::sleep_for(std::chrono::milliseconds(30));
      KeyBuffer ids(4);
      FloatBuffer grads(4 * kWidth);
      for (int i = 0; i < 4; ++i) ids[i] = k + i;
      for (size_t i = 0; i < grads.size(); ++i) grads[i] = Grad(k, t);
      ASSERT_TRUE(c->PushRows("emb", ids, grads).get().ok());
      ASSERT_TRUE(c->Clock().ok());
      FloatBuffer out(kRows * kWidth);
      Status s = c->PullRows("emb", all, out).get();
      ASSERT_TRUE(s.ok()) << s;
      for (uint64_t r = 0; r < kRows; ++r) {
        for (uint32_t j = 0; j < kWidth; ++j) {
          if (out[r * kWidth + j] != expected[t][r]) {
            ++mismatches;
            ADD_FAILURE() << "worker " << k << " clock " << t << " row " << r << ": "
                          << out[r * kWidth + j] << " expected " << expected[t][r];
          }
        }
      }
    }
  };
  std::thread other(run, 1);
  run(0);
  other.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(SparseSspTest, PullTooFarAheadWaitsForTheSlowWorker) {
  InProcessCluster cluster(1, ConsistencyModel::kSsp, /*staleness=*/1);
  std::unique_ptr<Client> fast = Connect(cluster), slow = Connect(cluster);
  ASSERT_TRUE(fast->CreateTable(Embeddings()).ok());
  ASSERT_TRUE(slow->CreateTable(Embeddings()).ok());
  KeyBuffer ids(1);
  ids[0] = 3;
  FloatBuffer grads(kWidth);
  for (float& g : grads) g = 1.0f;
  // Applied on arrival: the slow worker's push is visible at once.
  ASSERT_TRUE(slow->PushRows("emb", ids, grads).get().ok());
  FloatBuffer out(kWidth);
  ASSERT_TRUE(fast->PullRows("emb", ids, out).get().ok());
  EXPECT_EQ(out[0], -0.5f);
  // Clock 1 is within the bound of a slow worker at clock 0; clock 2 is not.
  ASSERT_TRUE(fast->Clock().ok());
  ASSERT_TRUE(fast->PullRows("emb", ids, out).get().ok());
  ASSERT_TRUE(fast->Clock().ok());
  std::future<Status> held = fast->PullRows("emb", ids, out);
  EXPECT_EQ(held.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  ASSERT_TRUE(slow->Clock().ok());
  ASSERT_EQ(held.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  EXPECT_TRUE(held.get().ok());
}

}  // namespace
}  // namespace relaxps
