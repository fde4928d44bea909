// BSP means one large batch, for every table, end to end: N workers (real
// clients) train a dense table pushed layer by layer and a sparse table
// through two in-process servers; after every clock each worker pulls both
// and must read, bit for bit, what one process with the combined batch would
// hold (tests/server/bsp_reference.h): one optimizer step with (the sum of
// the workers' gradients in worker-id order) * (1/N) per clock, a layer or
// row a worker did not push counting as its zero. Every clock one worker
// skips one layer (the last layer is all of the second server's range, so
// that worker pushes nothing there), and the pushes reach the servers in a
// different order of workers each clock (each push acknowledged before the
// next is sent, so the orders are the ones chosen).
#include <algorithm>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "client/client.h"
#include "tests/consistency/dense_bsp_driver.h"
#include "tests/server/bsp_reference.h"
#include "tests/server/in_process_cluster.h"
#include "tests/test_util.h"

namespace relaxps {
namespace {

constexpr uint64_t kDim = 6000;  // Dense chunks of 4096: [0, 4096) and [4096, 6000).
constexpr uint64_t kLayers[] = {0, 2500, 4096, kDim};
constexpr uint32_t kWidth = 4;
constexpr uint64_t kRows = 16;
constexpr int kClocks = 6;

TableOptions Dense() {
  TableOptions t;
  t.name = "w";
  t.size = kDim;
  t.optimizer.name = "adam";
  t.optimizer.lr = 0.01f;
  t.init.seed = 5;
  t.init.segments.push_back(InitSegment{0, kDim, InitKind::kUniform, -0.1f, 0.1f});
  return t;
}

// Momentum: a step's velocity carries into the next, and the rows hash over
// both servers, each with its own step counter (which momentum ignores).
TableOptions Sparse() {
  TableOptions t;
  t.name = "emb";
  t.type = TableType::kSparse;
  t.row_width = kWidth;
  t.optimizer.name = "momentum";
  t.optimizer.lr = 0.05f;
  t.optimizer.momentum = 0.9f;
  t.init.seed = 6;
  t.init.segments.push_back(InitSegment{0, kWidth, InitKind::kUniform, -0.5f, 0.5f});
  return t;
}

// Worker `id`'s row push at clock t: rows of its own, rows some others push,
// one repeated (summed by the server in the order sent), and rows 12..15,
// which every worker pushes.
test::RowPush MakeRowPush(int id, int t) {
  test::RowPush push;
  push.ids = {static_cast<uint64_t>(id + t) % 12, static_cast<uint64_t>(3 * id + 2 * t + 1) % 12,
              static_cast<uint64_t>(id + t) % 12, 12, 13, 14, 15};
  for (size_t i = 0; i < push.ids.size(); ++i) {
    for (uint32_t j = 0; j < kWidth; ++j) {
      push.grads.push_back(test::OrderSensitiveGradient(id, t, 64 * push.ids[i] + 8 * i + j));
    }
  }
  return push;
}

class BspExactTest : public ::testing::TestWithParam<int> {};

TEST_P(BspExactTest, EveryWorkerReadsTheCombinedBatchModel) {
  const size_t n = static_cast<size_t>(GetParam());
  InProcessCluster cluster(2, ConsistencyModel::kBsp, /*staleness=*/0);
  std::vector<std::unique_ptr<Client>> owned;
  for (size_t k = 0; k < n; ++k) {
    ClientOptions o;
    o.coordinator = cluster.coordinator();
    o.request_timeout_ms = 20000 * test::TimeScale();
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> c, Client::Connect(o));
    ASSERT_OK(c->CreateTable(Dense()));
    ASSERT_OK(c->CreateTable(Sparse()));
    owned.push_back(std::move(c));
  }
  std::sort(owned.begin(), owned.end(),
            [](const auto& a, const auto& b) { return a->worker_id() < b->worker_id(); });
  std::vector<Client*> workers;
  for (auto& c : owned) workers.push_back(c.get());
  test::DenseBspDriver dense(workers, Dense(), {kLayers, kLayers + 4});
  ASSERT_OK(dense.Start());
  KeyBuffer all(kRows);
  std::iota(all.begin(), all.end(), 0);
  FloatBuffer rows0(kRows * kWidth);  // The sparse reference starts from the initializer's rows.
  ASSERT_OK(workers[0]->PullRows("emb", all, rows0).get());
  test::ReferenceModel sparse_ref(Sparse().optimizer,
                                  std::vector<float>(rows0.begin(), rows0.end()));
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  for (int t = 0; t < kClocks; ++t) {
    std::next_permutation(order.begin(), order.end());  // Arrival order of this clock.
    ASSERT_OK(dense.Push(t, order));
    std::vector<std::vector<test::RowPush>> row_pushes(n);  // One push per worker (id order).
    for (size_t r = 0; r < n; ++r) row_pushes[r] = {MakeRowPush(workers[r]->worker_id(), t)};
    for (auto r = order.rbegin(); r != order.rend(); ++r) {
      const test::RowPush& p = row_pushes[*r][0];
      KeyBuffer ids(p.ids.size());
      FloatBuffer grads(p.grads.size());
      std::copy(p.ids.begin(), p.ids.end(), ids.begin());
      std::copy(p.grads.begin(), p.grads.end(), grads.begin());
      ASSERT_OK(workers[*r]->PushRows("emb", ids, grads).get());
    }
    for (size_t r : order) ASSERT_OK(workers[r]->Clock());
    test::StepRows(&sparse_ref, row_pushes, kWidth, /*first_row=*/0, t + 1);

    ASSERT_OK_AND_ASSIGN(const size_t dense_diff, dense.PullAndCompare());
    size_t sparse_diff = 0;
    for (Client* w : workers) {
      FloatBuffer rows(kRows * kWidth);
      ASSERT_OK(w->PullRows("emb", all, rows).get());
      sparse_diff = std::max(sparse_diff, test::DifferingFloats(rows.data(), sparse_ref.slot(0).data(),
                                                                kRows * kWidth));
    }
    EXPECT_EQ(dense_diff, 0u) << "clock " << t;
    EXPECT_EQ(sparse_diff, 0u) << "clock " << t;
    std::printf("bsp exact, %zu workers, clock %d: %zu of %llu dense and %zu of %llu sparse "
                "floats differ from one process with the combined batch (most of any worker)\n",
                n, t, dense_diff, static_cast<unsigned long long>(kDim), sparse_diff,
                static_cast<unsigned long long>(kRows * kWidth));
  }
  // The model moved: equality is not the initial values.
  EXPECT_GT(test::DifferingFloats(dense.initial().data(), dense.reference().slot(0).data(), kDim),
            kDim / 2);
}

INSTANTIATE_TEST_SUITE_P(Workers, BspExactTest, ::testing::Values(2, 3),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "workers";
                         });

}  // namespace
}  // namespace relaxps
