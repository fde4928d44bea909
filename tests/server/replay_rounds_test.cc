// DenseShardState and SparseShardState under BSP after a restore: pushes are
// reflected only once their round is applied, and held worker clocks
// (HoldWorkerClocks) re-form the rounds from replayed pushes so that the
// parameters end as without the failure.
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/optimizer_options.h"
#include "consistency/consistency_policy.h"
#include "kernels/device.h"
#include "kernels/optimizer.h"
#include "server/internal/dense_shard.h"
#include "server/internal/sparse_shard.h"
#include "storage/param_store.h"

namespace relaxps {
namespace server_internal {
namespace {

class ReplayRoundsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ConsistencyOptions co;
    co.model = ConsistencyModel::kBsp;
    policy_ = std::move(NewConsistencyPolicy(co)).value();
    device_ = std::move(kernels::NewDevice(kernels::DeviceOptions{})).value();
  }

  // A dense shard of 4 keys (momentum: the order of rounds matters) in its
  // own memory store, its clock set to `clock` as if loaded from disk.
  std::unique_ptr<DenseShardState> NewShard(ParamStore* store, int64_t clock,
                                            const std::vector<float>& params) {
    DenseShardSpec spec;
    spec.table = "w";
    spec.end = 4;
    spec.num_slots = 2;
    DenseShard* shard = std::move(store->CreateDense(spec)).value();
    std::copy(params.begin(), params.end(), shard->slots[0]);
    shard->clock = clock;
    OptimizerOptions o;
    o.name = "momentum";
    o.lr = 0.1f;
    o.momentum = 0.9f;
    return std::make_unique<DenseShardState>(shard, std::move(kernels::NewOptimizer(o)).value(),
                                             policy_.get(), device_.get(), store);
  }

  static std::vector<float> Grad(int worker, int64_t clock) {
    std::vector<float> g(4);
    for (int k = 0; k < 4; ++k) g[k] = 0.1f * (worker + 1) + 0.01f * clock + 0.001f * k;
    return g;
  }
  static std::vector<float> Params(const DenseShardState& s) {
    FloatBuffer b = s.CopySlot(0, 0, 4);
    return std::vector<float>(b.begin(), b.end());
  }

  std::unique_ptr<ConsistencyPolicy> policy_;
  std::unique_ptr<kernels::Device> device_;
};

TEST_F(ReplayRoundsTest, APushIsReflectedOnlyOnceItsRoundIsApplied) {
  auto store = NewMemoryStore();
  auto shard = NewShard(store.get(), 0, std::vector<float>(4, 0.0f));
  std::vector<int64_t> applied;
  shard->set_on_rounds_applied([&](int64_t c) { applied.push_back(c); });
  shard->SetLiveWorkers({0, 1}, {0, 0});
  ASSERT_TRUE(shard->Push(0, 0, 0, Grad(0, 0).data(), 4).ok());
  EXPECT_FALSE(shard->Reflects(0));
  EXPECT_TRUE(applied.empty());
  ASSERT_TRUE(shard->Push(1, 0, 0, Grad(1, 0).data(), 4).ok());
  EXPECT_TRUE(shard->Reflects(0));
  EXPECT_FALSE(shard->Reflects(1));
  ASSERT_EQ(applied.size(), 1u);
  EXPECT_EQ(applied[0], 1);
}

// Workers 0 and 1 run clocks 0..5; the server checkpoints after round 2
// (clock 3), dies after round 4, and comes back from the checkpoint while
// the coordinator reports both workers at clock 6. The workers replay their
// pushes of clocks 3..5 (interleaved badly: all of worker 1's first) and then
// send something new. The parameters end as without the failure.
TEST_F(ReplayRoundsTest, HeldClocksReformTheRoundsOfAReplay) {
  auto straight_store = NewMemoryStore();
  auto straight = NewShard(straight_store.get(), 0, std::vector<float>(4, 0.5f));
  straight->SetLiveWorkers({0, 1}, {0, 0});
  std::vector<float> at_checkpoint;
  for (int64_t c = 0; c < 6; ++c) {
    for (int w = 0; w < 2; ++w) ASSERT_TRUE(straight->Push(w, c, 0, Grad(w, c).data(), 4).ok());
    if (c == 2) at_checkpoint = Params(*straight);
  }
  ASSERT_EQ(straight->visible_clock(), 6);
  // The momentum slot at the checkpoint is needed too: run it again to 3.
  auto copy_store = NewMemoryStore();
  auto copy = NewShard(copy_store.get(), 0, std::vector<float>(4, 0.5f));
  copy->SetLiveWorkers({0, 1}, {0, 0});
  for (int64_t c = 0; c < 3; ++c) {
    for (int w = 0; w < 2; ++w) ASSERT_TRUE(copy->Push(w, c, 0, Grad(w, c).data(), 4).ok());
  }
  ASSERT_EQ(Params(*copy), at_checkpoint);

  // Without holding: the restored shard jumps to the reported clocks and
  // applies each replayed push on arrival (the bug this mechanism fixes).
  {
    auto store = NewMemoryStore();
    auto restored = NewShard(store.get(), 3, at_checkpoint);
    restored->SetLiveWorkers({0, 1}, {6, 6});
    EXPECT_EQ(restored->applied_clock(), 6);
  }

  // Restored "copy" at clock 3 (its store holds the momentum slot as well).
  DenseShard* restored_shard = copy_store->GetDense("w");
  ASSERT_NE(restored_shard, nullptr);
  restored_shard->clock = 3;
  OptimizerOptions o;
  o.name = "momentum";
  o.lr = 0.1f;
  o.momentum = 0.9f;
  copy.reset();
  DenseShardState restored(restored_shard, std::move(kernels::NewOptimizer(o)).value(),
                           policy_.get(), device_.get(), copy_store.get());
  restored.HoldWorkerClocks({0, 1});
  restored.SetLiveWorkers({0, 1}, {6, 6});
  EXPECT_EQ(restored.applied_clock(), 3);
  EXPECT_EQ(restored.worker_clock(0), 3);
  for (int64_t c = 3; c < 6; ++c) {
    ASSERT_TRUE(restored.Push(1, c, 0, Grad(1, c).data(), 4).ok());
    EXPECT_FALSE(restored.Reflects(c));  // Worker 0 has not replayed it.
  }
  for (int64_t c = 3; c < 6; ++c) {
    ASSERT_TRUE(restored.Push(0, c, 0, Grad(0, c).data(), 4).ok());
    EXPECT_TRUE(restored.Reflects(c));  // Round c, with both pushes, applied.
  }
  EXPECT_EQ(Params(restored), Params(*straight));
  // Replay done: each worker's first new request releases its clock.
  restored.ReleaseWorkerClock(0);
  restored.ReleaseWorkerClock(1);
  EXPECT_FALSE(restored.holds_worker_clock(0));
  EXPECT_EQ(restored.worker_clock(0), 6);
  EXPECT_EQ(restored.applied_clock(), 6);
  EXPECT_EQ(Params(restored), Params(*straight));
}

// A worker that pushed nothing here for clocks 4 and 5 (it sent CLOCKs,
// which are not replayed): its clock stays held at 4, so the rounds worker 1
// replays stay open until worker 0 is released, and are applied then, in
// order (a push for a later clock would have completed the earlier ones).
TEST_F(ReplayRoundsTest, ARoundWithoutAReplayedPushWaitsForTheRelease) {
  auto store = NewMemoryStore();
  auto shard = NewShard(store.get(), 4, std::vector<float>(4, 0.0f));
  std::vector<int64_t> applied;
  shard->set_on_rounds_applied([&](int64_t c) { applied.push_back(c); });
  shard->HoldWorkerClocks({0, 1});
  shard->SetLiveWorkers({0, 1}, {6, 6});
  ASSERT_TRUE(shard->Push(1, 4, 0, Grad(1, 4).data(), 4).ok());
  ASSERT_TRUE(shard->Push(1, 5, 0, Grad(1, 5).data(), 4).ok());
  EXPECT_EQ(shard->worker_clock(0), 4);
  EXPECT_EQ(shard->worker_clock(1), 6);
  EXPECT_EQ(shard->applied_clock(), 4);
  shard->ReleaseWorkerClock(1);  // Worker 1 moved on: nothing closes yet.
  EXPECT_EQ(shard->applied_clock(), 4);
  EXPECT_TRUE(applied.empty());
  shard->ReleaseWorkerClock(0);
  EXPECT_EQ(shard->applied_clock(), 6);
  EXPECT_EQ(applied, std::vector<int64_t>{6});
  EXPECT_TRUE(shard->Reflects(5));
  // The same two rounds applied straight.
  auto straight_store = NewMemoryStore();
  auto straight = NewShard(straight_store.get(), 4, std::vector<float>(4, 0.0f));
  straight->SetLiveWorkers({0, 1}, {4, 4});
  for (int64_t c = 4; c < 6; ++c) {
    ASSERT_TRUE(straight->Push(1, c, 0, Grad(1, c).data(), 4).ok());
    straight->AdvanceClock(0, c);
  }
  EXPECT_EQ(Params(*shard), Params(*straight));
}

// A worker that joins after the hold is not held.
TEST_F(ReplayRoundsTest, AWorkerThatJoinsLaterIsNotHeld) {
  auto store = NewMemoryStore();
  auto shard = NewShard(store.get(), 2, std::vector<float>(4, 0.0f));
  shard->HoldWorkerClocks({0});
  shard->SetLiveWorkers({0}, {5});
  shard->SetLiveWorkers({0, 1}, {5, 5});
  EXPECT_FALSE(shard->holds_worker_clock(1));
  EXPECT_EQ(shard->worker_clock(0), 2);
  EXPECT_EQ(shard->worker_clock(1), 5);
}

// Sparse rounds: a row push completes no clock, so held clocks rise through
// the workers' CLOCKs; rounds are applied in order once they all arrived.
TEST_F(ReplayRoundsTest, SparseRoundsWaitForHeldClocks) {
  auto store = NewMemoryStore();
  SparseTableSpec spec;
  spec.table = "emb";
  spec.width = 2;
  spec.num_slots = 1;
  ASSERT_TRUE(store->CreateSparse(spec).ok());
  OptimizerOptions o;
  o.name = "sgd";
  o.lr = 1.0f;
  SparseShardState shard(spec, std::move(kernels::NewOptimizer(o)).value(), policy_.get(),
                         device_.get(), store.get());
  std::vector<int64_t> applied;
  shard.set_on_rounds_applied([&](int64_t c) { applied.push_back(c); });
  shard.HoldWorkerClocks({0, 1}, 3);
  shard.SetLiveWorkers({0, 1}, {6, 6});
  EXPECT_EQ(shard.visible_clock(), 3);  // Not the reported 6.
  applied.clear();
  const uint64_t id = 42;
  const float g[2] = {1.0f, 2.0f};
  ASSERT_TRUE(shard.Push(0, 3, &id, 1, g).ok());
  EXPECT_FALSE(shard.Reflects(3));
  shard.AdvanceClock(0, 3);
  EXPECT_TRUE(applied.empty());
  shard.AdvanceClock(1, 3);
  ASSERT_EQ(applied.size(), 1u);
  EXPECT_EQ(applied[0], 4);
  EXPECT_TRUE(shard.Reflects(3));
  auto rows = shard.Read(&id, 1);
  ASSERT_TRUE(rows.ok());
  // Worker 1 pushed nothing: the round's mean is {1, 2} / 2.
  EXPECT_FLOAT_EQ((*rows)[1], -1.0f);
  shard.ReleaseWorkerClock(0);
  shard.ReleaseWorkerClock(1);
  EXPECT_EQ(shard.visible_clock(), 6);
}

}  // namespace
}  // namespace server_internal
}  // namespace relaxps
