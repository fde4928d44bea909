// DenseShardState in isolation: the clock its parameters are reported at.
#include "server/internal/dense_shard.h"

#include <memory>
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

INSTANTIATE_TEST_SUITE_P(Models, DenseShardClockTest, ::testing::Values("async", "ssp", "bsp"));

}  // namespace
}  // namespace server_internal
}  // namespace relaxps
