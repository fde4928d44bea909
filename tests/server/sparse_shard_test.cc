// SparseShardState in isolation: BSP rounds of rows bit-identical to one
// process with the combined batch, whatever order the pushes arrive in.
#include "server/internal/sparse_shard.h"

#include <algorithm>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "common/optimizer_options.h"
#include "consistency/consistency_policy.h"
#include "kernels/device.h"
#include "kernels/optimizer.h"
#include "storage/param_store.h"
#include "tests/server/bsp_reference.h"
#include "tests/test_util.h"

namespace relaxps {
namespace server_internal {
namespace {

// N workers (ids not in index order) each send two row pushes and a CLOCK per
// clock, in seeded random arrival orders. Each touches rows of its own, rows
// some others touch and rows every worker touches, and repeats a row within
// a push and across its two pushes. Gradients mix magnitudes from 1e-3 to
// 1e6, so summing the workers in another order changes the bits. The reference (bsp_reference.h) sums each worker's entries of a row
// in the order it sent them, then the workers' sums in id order (a worker
// that did not push the row: zero), multiplies by 1/N and takes one optimizer
// step on every row any worker pushed; the other rows stay as they were.
class SparseBspRoundTest : public test::BspShardTest {
 protected:
  static constexpr uint32_t kWidth = 3;
  static constexpr uint64_t kRows = 8;  // Ids 100 .. 107.
  static constexpr int kClocks = 4;
  static constexpr int kOrders = 12;

  void SetUp() override {
    test::BspShardTest::SetUp();
    for (uint64_t r = 0; r < kRows; ++r) all_.push_back(100 + r);
  }

  // A fresh table "emb" in its own store, rows initialized U(-1, 1).
  std::unique_ptr<SparseShardState> NewShard() {
    ParamStore* store = NewStore();
    SparseTableSpec spec;
    spec.table = "emb";
    spec.width = kWidth;
    spec.num_slots = NumSlots();
    spec.init.seed = 3;
    spec.init.segments.push_back(InitSegment{0, kWidth, InitKind::kUniform, -1.0f, 1.0f});
    EXPECT_OK(store->CreateSparse(spec));
    return std::make_unique<SparseShardState>(spec,
                                              std::move(kernels::NewOptimizer(options_)).value(),
                                              policy_.get(), device_.get(), store);
  }

  // Push p (0 or 1) of worker index k at clock t.
  test::RowPush Push(size_t k, int t, int p) const {
    const uint64_t a = 100 + (k + t) % kRows, b = 100 + (3 * k + 2 * t + 1) % kRows;
    const uint64_t c = 100 + (5 * k + t + 4) % kRows;
    test::RowPush push;
    // Rows 104..107 are pushed by every worker (push 1).
    push.ids = p == 0 ? std::vector<uint64_t>{a, b, a} : std::vector<uint64_t>{c, b, 104, 105, 106, 107};
    for (size_t i = 0; i < push.ids.size(); ++i) {
      for (uint32_t j = 0; j < kWidth; ++j) {
        push.grads.push_back(
            test::OrderSensitiveGradient(ids_[k], 10 * t + p, 16 * push.ids[i] + 4 * i + j));
      }
    }
    return push;
  }

  // Rows of all_ (slot `slot`) as the shard holds them.
  std::vector<float> Rows(SparseShardState* s, int slot) {
    auto rows = s->Read(all_.data(), all_.size(), slot);
    EXPECT_OK(rows.status());
    return rows.ok() ? std::vector<float>(rows->begin(), rows->end()) : std::vector<float>();
  }

  // One clock of the reference.
  void StepReference(test::ReferenceModel* ref, int t) const {
    std::vector<std::vector<test::RowPush>> pushes;
    for (int id : sorted_) pushes.push_back({Push(IndexOf(id), t, 0), Push(IndexOf(id), t, 1)});
    test::StepRows(ref, pushes, kWidth, /*first_row=*/100, t + 1);
  }

  std::vector<uint64_t> all_;
};

TEST_P(SparseBspRoundTest, EveryArrivalOrderGivesTheCombinedBatchStep) {
  std::vector<int64_t> zeros(ids_.size(), 0);
  for (int order = 0; order < kOrders; ++order) {
    auto shard = NewShard();
    shard->SetLiveWorkers(ids_, zeros);
    test::ReferenceModel ref(options_, Rows(shard.get(), 0));
    for (int t = 0; t < kClocks; ++t) {
      std::vector<int> next(ids_.size(), 0);
      for (int k : test::Interleave(std::vector<int>(ids_.size(), 3), 1000 * order + t)) {
        ASSERT_EQ(shard->visible_clock(), t);
        const int m = next[k]++;
        if (m < 2) {
          const test::RowPush push = Push(k, t, m);
          ASSERT_OK(shard->Push(ids_[k], t, push.ids.data(), push.ids.size(), push.grads.data()));
        } else {
          shard->AdvanceClock(ids_[k], t);  // Its CLOCK, after its pushes.
        }
      }
      ASSERT_EQ(shard->visible_clock(), t + 1);
      StepReference(&ref, t);
      for (int slot = 0; slot < ref.num_slots(); ++slot) {
        const std::vector<float> rows = Rows(shard.get(), slot);
        ASSERT_EQ(rows.size(), ref.slot(slot).size());
        EXPECT_EQ(test::DifferingFloats(rows.data(), ref.slot(slot).data(), rows.size()), 0u)
            << "order " << order << ", clock " << t << ", slot " << slot;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    OptimizersAndWorkers, SparseBspRoundTest,
    ::testing::Combine(::testing::Values("sgd", "momentum", "adam"), ::testing::Values(2, 3)),
    test::BspShardTest::Name);

}  // namespace
}  // namespace server_internal
}  // namespace relaxps
