// DenseShardState in isolation: the clock its parameters are reported at.
#include "server/internal/dense_shard.h"

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/optimizer_options.h"
#include "consistency/consistency_policy.h"
#include "kernels/device.h"
#include "kernels/optimizer.h"
#include "storage/param_store.h"

namespace relaxps {
namespace server_internal {
namespace {

class DenseShardClockTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    ConsistencyOptions co;
    co.model = ParseConsistencyModel(GetParam()).value();
    co.staleness = 2;
    auto policy = NewConsistencyPolicy(co);
    ASSERT_TRUE(policy.ok()) << policy.status();
    policy_ = std::move(*policy);
    auto device = kernels::NewDevice(kernels::DeviceOptions{});
    ASSERT_TRUE(device.ok()) << device.status();
    device_ = std::move(*device);
    DenseShardSpec spec;
    spec.table = "w";
    spec.end = 16;
    auto shard = store_->CreateDense(spec);
    ASSERT_TRUE(shard.ok()) << shard.status();
    shard_ = *shard;
  }

  std::unique_ptr<DenseShardState> NewState() {
    OptimizerOptions o;
    o.name = "sgd";
    o.lr = 0.1f;
    auto optimizer = kernels::NewOptimizer(o);
    EXPECT_TRUE(optimizer.ok()) << optimizer.status();
    return std::make_unique<DenseShardState>(shard_, std::move(*optimizer), policy_.get(),
                                             device_.get(), store_.get());
  }

  std::unique_ptr<ParamStore> store_ = NewMemoryStore();
  std::unique_ptr<ConsistencyPolicy> policy_;
  std::unique_ptr<kernels::Device> device_;
  DenseShard* shard_ = nullptr;
};

TEST_P(DenseShardClockTest, FreshShardStartsAtZero) {
  EXPECT_EQ(NewState()->visible_clock(), 0);
}

// A shard loaded at clock 100 (a restart from a flush or a checkpoint) holds
// every update up to it: its parameters are reported at 100 or later, even
// before the live set arrives or while the known worker clocks are older.
TEST_P(DenseShardClockTest, LoadedShardIsVisibleAtItsStoredClock) {
  shard_->clock = 100;
  auto state = NewState();
  EXPECT_EQ(state->visible_clock(), 100);
  state->SetLiveWorkers({0, 1}, {5, 7});
  EXPECT_EQ(state->visible_clock(), 100);
  state->SetLiveWorkers({0, 1}, {150, 160});
  EXPECT_EQ(state->visible_clock(), 150);  // BSP: no open round, so everything up to 150.
}

// A re-seed carries a velocity only for a momentum table: refused for SGD,
// with nothing changed.
TEST_P(DenseShardClockTest, SeedWithAVelocityIsRefusedForANonMomentumTable) {
  auto state = NewState();
  const std::vector<float> params(16, 3.0f), velocity(16, 1.0f);
  const float before = state->CopySlot(0, 0, 1)[0];
  EXPECT_EQ(state->Seed(params.data(), 16, 5, velocity.data()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(state->CopySlot(0, 0, 1)[0], before);
  ASSERT_TRUE(state->Seed(params.data(), 16, 5).ok());
  EXPECT_EQ(state->CopySlot(0, 0, 1)[0], 3.0f);
  EXPECT_EQ(state->visible_clock(), 5);
}

INSTANTIATE_TEST_SUITE_P(Models, DenseShardClockTest, ::testing::Values("async", "ssp", "bsp"));

// Per-layer pushes: a clock may carry several pushes of one worker to
// disjoint pieces of the shard.
class PerLayerPushTest : public DenseShardClockTest {
 protected:
  static std::vector<float> Fill(size_t n, float v) { return std::vector<float>(n, v); }
  static float At(const DenseShardState& s, uint64_t key) { return s.CopySlot(0, key, 1)[0]; }
};

TEST_P(PerLayerPushTest, WorkerIsDoneOnlyOnceItsPushesCoverTheShard) {
  auto state = NewState();
  state->SetLiveWorkers({0, 1}, {0, 0});
  ASSERT_TRUE(state->Push(1, 0, 0, Fill(16, 3.0f).data(), 16).ok());
  ASSERT_TRUE(state->Push(0, 0, 0, Fill(8, 1.0f).data(), 8).ok());
  EXPECT_EQ(state->visible_clock(), 0);  // Worker 0 has half of the shard in.
  ASSERT_TRUE(state->Push(0, 0, 8, Fill(8, 1.0f).data(), 8).ok());
  EXPECT_EQ(state->visible_clock(), 1);
  if (std::string(GetParam()) == "bsp") {
    // One averaged step: -0.1 * (1 + 3) / 2 on every key.
    EXPECT_FLOAT_EQ(At(*state, 0), -0.2f);
    EXPECT_FLOAT_EQ(At(*state, 15), -0.2f);
  }
}

TEST_P(PerLayerPushTest, ClockMessageClosesAPartlyPushedRound) {
  auto state = NewState();
  state->SetLiveWorkers({0, 1}, {0, 0});
  ASSERT_TRUE(state->Push(0, 0, 0, Fill(8, 2.0f).data(), 8).ok());
  state->AdvanceClock(1, 0);  // Worker 1 pushed nothing here.
  EXPECT_EQ(state->visible_clock(), 0);
  state->AdvanceClock(0, 0);
  EXPECT_EQ(state->visible_clock(), 1);
  // Keys [0, 8) averaged over their one pusher, [8, 16) untouched.
  EXPECT_FLOAT_EQ(At(*state, 0), -0.2f);
  EXPECT_FLOAT_EQ(At(*state, 15), 0.0f);
}

TEST_P(PerLayerPushTest, OverlappingPushesForOneClockAreRefusedUnderBsp) {
  if (std::string(GetParam()) != "bsp") GTEST_SKIP() << "only BSP aggregates rounds";
  auto state = NewState();
  state->SetLiveWorkers({0, 1}, {0, 0});
  ASSERT_TRUE(state->Push(0, 0, 0, Fill(8, 1.0f).data(), 8).ok());
  Status s = state->Push(0, 0, 4, Fill(8, 1.0f).data(), 8);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("pushed keys [4, 12)"), std::string::npos) << s;
  ASSERT_TRUE(state->Push(0, 0, 8, Fill(8, 1.0f).data(), 8).ok());
}

// A chain replica's snapshot carries each worker's pieces of a pending round.
TEST_P(PerLayerPushTest, SnapshotKeepsThePiecesOfAPendingRound) {
  if (std::string(GetParam()) != "bsp") GTEST_SKIP() << "only BSP has pending rounds";
  auto head = NewState();
  head->SetLiveWorkers({0, 1}, {0, 0});
  ASSERT_TRUE(head->Push(0, 0, 0, Fill(8, 1.0f).data(), 8).ok());
  wire::ChainSnapshot snap;
  std::vector<FloatBuffer> frames;
  head->SaveState(&snap, &frames);
  DenseShardSpec spec;
  spec.table = "w2";
  spec.end = 16;
  auto shard = store_->CreateDense(spec);
  ASSERT_TRUE(shard.ok()) << shard.status();
  OptimizerOptions o;
  o.name = "sgd";
  o.lr = 0.1f;
  DenseShardState replica(*shard, std::move(kernels::NewOptimizer(o)).value(), policy_.get(),
                          device_.get(), store_.get());
  std::vector<const float*> data;
  std::vector<size_t> sizes;
  for (const FloatBuffer& f : frames) {
    data.push_back(f.data());
    sizes.push_back(f.size());
  }
  ASSERT_TRUE(replica.LoadState(snap, data, sizes).ok());
  replica.SetLiveWorkers({0, 1}, {0, 0});
  EXPECT_EQ(replica.Push(0, 0, 0, Fill(8, 1.0f).data(), 8).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(replica.Push(0, 0, 8, Fill(8, 1.0f).data(), 8).ok());
  ASSERT_TRUE(replica.Push(1, 0, 0, Fill(16, 3.0f).data(), 16).ok());
  EXPECT_EQ(replica.visible_clock(), 1);
  EXPECT_FLOAT_EQ(At(replica, 3), -0.2f);
}

INSTANTIATE_TEST_SUITE_P(Models, PerLayerPushTest, ::testing::Values("ssp", "bsp"));

}  // namespace
}  // namespace server_internal
}  // namespace relaxps
