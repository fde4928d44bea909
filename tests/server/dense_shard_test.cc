// DenseShardState in isolation: the clock its parameters are reported at,
// per-layer pushes, and BSP rounds bit-identical to one process with the
// combined batch (whatever the arrival order, on every chain replica).
#include "server/internal/dense_shard.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
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

// A range move's piece lent to ZeroMQ (LendSlot): a push of its keys waits
// until the buffer is dropped, so what is sent holds the values of when it
// was lent; a push of other keys goes on at once.
TEST_P(DenseShardClockTest, APushOfLentKeysWaitsUntilTheBufferIsDropped) {
  if (std::string(GetParam()) == "bsp") GTEST_SKIP() << "pushes apply on arrival";
  auto state = NewState();  // 16 keys, sgd lr 0.1, zeros.
  FloatBuffer lent = state->LendSlot(0, 8, 8, /*wait_ms=*/10000);
  const std::vector<float> ones(8, 1.0f);
  ASSERT_OK(state->Push(0, 0, 0, ones.data(), 8, /*new_step=*/true));  // Keys [0, 8): at once.
  EXPECT_EQ(state->lent_spans()->stats().waits, 0u);
  std::atomic<bool> dropped{false};
  std::vector<float> sent;
  std::thread zmq([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    sent.assign(lent.begin(), lent.end());  // What ZeroMQ read.
    dropped = true;
    lent = FloatBuffer();
  });
  ASSERT_OK(state->Push(0, 1, 4, ones.data(), 8, /*new_step=*/true));  // Keys [4, 12).
  EXPECT_TRUE(dropped.load());
  zmq.join();
  EXPECT_EQ(state->lent_spans()->stats().waits, 1u);
  EXPECT_EQ(state->lent_spans()->stats().torn, 0u);
  EXPECT_EQ(sent, std::vector<float>(8, 0.0f));  // The push came after.
  FloatBuffer now = state->CopySlot(0, 0, 16);
  EXPECT_FLOAT_EQ(now[0], -0.1f);
  EXPECT_FLOAT_EQ(now[4], -0.2f);
  EXPECT_FLOAT_EQ(now[11], -0.1f);
  EXPECT_EQ(now[12], 0.0f);
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
  if (std::string(GetParam()) == "bsp") {
    // Keys [0, 8) averaged over the round's two workers (worker 1's gradient
    // there is zero): -0.1 * 2 / 2; [8, 16) untouched.
    EXPECT_FLOAT_EQ(At(*state, 0), -0.1f);
  } else {
    EXPECT_FLOAT_EQ(At(*state, 0), -0.2f);  // Applied on arrival.
  }
  EXPECT_FLOAT_EQ(At(*state, 15), 0.0f);
}

// A range move's cut shrinks the range in place but keeps counting its old
// size until the move is published or taken back (set_coverage_keys): the
// head's round does not close on the head's pushes while the tail's are held.
// Taken back, the range grows with its pending round, the tail's pushes join
// it, and the step is the one of a range never cut; published, the round
// closes on the head's pushes.
TEST_P(PerLayerPushTest, ACutRangeClosesItsRoundsAsIfUncutWhenTakenBackOrPublished) {
  const bool bsp = std::string(GetParam()) == "bsp";
  for (const bool take_back : {true, false}) {
    SCOPED_TRACE(take_back ? "taken back" : "published");
    shard_->spec = DenseShardSpec{"w", 0, 16, 1, {}, 0.0f};
    std::fill(shard_->slots[0], shard_->slots[0] + 16, 0.0f);
    shard_->clock = 0;
    shard_->step = 0;
    auto state = NewState();
    state->SetLiveWorkers({0, 1}, {0, 0});
    ASSERT_TRUE(state->Reshape("w@0-8", 8).ok());
    state->set_coverage_keys(16);
    EXPECT_EQ(store_->GetDense("w@0-8"), shard_);
    ASSERT_TRUE(state->Push(0, 0, 0, Fill(8, 1.0f).data(), 8).ok());
    ASSERT_TRUE(state->Push(1, 0, 0, Fill(8, 3.0f).data(), 8).ok());
    if (bsp) {
      EXPECT_EQ(state->visible_clock(), 0);  // The tail's pushes are still to come.
      EXPECT_FALSE(state->Quiescent());
      EXPECT_EQ(state->Reshape("w@0-4", 4).code(), StatusCode::kFailedPrecondition);
    }
    if (take_back) {
      ASSERT_TRUE(state->Reshape("w", 16).ok());
      state->set_coverage_keys(0);
      if (bsp) EXPECT_EQ(state->visible_clock(), 0);
      ASSERT_TRUE(state->Push(1, 0, 8, Fill(8, 3.0f).data(), 8).ok());
      ASSERT_TRUE(state->Push(0, 0, 8, Fill(8, 1.0f).data(), 8).ok());
      EXPECT_EQ(state->visible_clock(), 1);
      // One averaged step on every key, bsp: -0.1 * (1 + 3) / 2.
      EXPECT_FLOAT_EQ(At(*state, 0), bsp ? -0.2f : -0.4f);
      EXPECT_FLOAT_EQ(At(*state, 15), bsp ? -0.2f : -0.4f);
    } else {
      state->set_coverage_keys(0);
      // SSP counts the pushes anew (a CLOCK completes the worker's clock).
      EXPECT_EQ(state->visible_clock(), bsp ? 1 : 0);
      EXPECT_FLOAT_EQ(At(*state, 7), bsp ? -0.2f : -0.4f);
      EXPECT_EQ(state->spec().end, 8u);
    }
    EXPECT_TRUE(state->Quiescent());
  }
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

// BSP rounds against the single-process reference (bsp_reference.h), bit for
// bit: N workers (ids not in arrival or index order) push a 16-key shard
// layer by layer ([0, 5), [5, 11), [11, 16)) in seeded random arrival orders;
// at every clock one worker skips one layer and completes the clock with its
// CLOCK. The reference sums the workers' gradients in id order (zero for the
// skipped layer) and multiplies by 1/N. Gradients mix magnitudes from 1e-3
// to 1e6, so summing in arrival order, or dividing a layer by its pushers,
// changes the bits.
class BspRoundTest : public test::BspShardTest {
 protected:
  static constexpr size_t kKeys = 16;
  static constexpr int kClocks = 4;
  static constexpr int kOrders = 12;  // Arrival orders tried per configuration.
  static constexpr uint64_t kLayers[] = {0, 5, 11, 16};

  void SetUp() override {
    test::BspShardTest::SetUp();
    for (size_t k = 0; k < kKeys; ++k) initial_.push_back(0.25f * static_cast<float>(k) - 1.0f);
  }

  // A fresh shard of kKeys keys at initial_, in its own store.
  std::unique_ptr<DenseShardState> NewShard() {
    ParamStore* store = NewStore();
    DenseShardSpec spec;
    spec.table = "w";
    spec.end = kKeys;
    spec.num_slots = NumSlots();
    DenseShard* shard = std::move(store->CreateDense(spec)).value();
    std::copy(initial_.begin(), initial_.end(), shard->slots[0]);
    return std::make_unique<DenseShardState>(shard, std::move(kernels::NewOptimizer(options_)).value(),
                                             policy_.get(), device_.get(), store);
  }

  // The layer worker index k skips at clock t (-1: none); one worker a clock.
  int Skipped(size_t k, int t) const {
    return static_cast<int>(k) == t % static_cast<int>(ids_.size()) ? t % 3 : -1;
  }
  // Worker index k's gradient at clock t, zero on the layer it skips.
  std::vector<float> Grad(size_t k, int t) const {
    std::vector<float> g(kKeys, 0.0f);
    for (int l = 0; l < 3; ++l) {
      if (l == Skipped(k, t)) continue;
      for (uint64_t key = kLayers[l]; key < kLayers[l + 1]; ++key) {
        g[key] = test::OrderSensitiveGradient(ids_[k], t, key);
      }
    }
    return g;
  }
  // One arrival: worker index k's next message at clock t (its layers in
  // order, then its CLOCK), applied to `shards`.
  void Deliver(size_t k, int t, int* next, const std::vector<DenseShardState*>& shards) {
    const std::vector<float> g = Grad(k, t);
    int l = (*next)++;
    if (l == Skipped(k, t)) ++l, ++*next;
    for (DenseShardState* s : shards) {
      if (l >= 3) {
        s->AdvanceClock(ids_[k], t);
      } else {
        const uint64_t b = kLayers[l], e = kLayers[l + 1];
        ASSERT_TRUE(s->Push(ids_[k], t, b, g.data() + b, e - b).ok());
      }
    }
  }
  // Messages of worker index k at clock t: its pushed layers and its CLOCK.
  int Messages(size_t k, int t) const { return (Skipped(k, t) >= 0 ? 2 : 3) + 1; }
  // One clock of the reference: the workers' gradients in id order.
  void StepReference(test::ReferenceModel* ref, int t) const {
    std::vector<std::vector<float>> grads;
    for (int id : sorted_) grads.push_back(Grad(IndexOf(id), t));
    const std::vector<float> mean = test::CombinedBatchGradient(grads);
    ref->Step(0, mean.data(), kKeys, t + 1);
  }
  // Keys of any slot of `s` whose bits differ from the reference.
  size_t Differing(const DenseShardState& s, const test::ReferenceModel& ref) const {
    size_t differing = 0;
    for (int slot = 0; slot < ref.num_slots(); ++slot) {
      differing += test::DifferingFloats(s.CopySlot(slot, 0, kKeys).data(),
                                         ref.slot(slot).data(), kKeys);
    }
    return differing;
  }

  std::vector<float> initial_;
};

TEST_P(BspRoundTest, EveryArrivalOrderGivesTheCombinedBatchStep) {
  std::vector<int64_t> zeros(ids_.size(), 0);
  for (int order = 0; order < kOrders; ++order) {
    auto shard = NewShard();
    shard->SetLiveWorkers(ids_, zeros);
    test::ReferenceModel ref(options_, initial_);
    for (int t = 0; t < kClocks; ++t) {
      std::vector<int> counts, next(ids_.size(), 0);
      for (size_t k = 0; k < ids_.size(); ++k) counts.push_back(Messages(k, t));
      for (int k : test::Interleave(counts, 1000 * order + t)) {
        Deliver(k, t, &next[k], {shard.get()});
      }
      ASSERT_EQ(shard->visible_clock(), t + 1);
      StepReference(&ref, t);
      ASSERT_EQ(Differing(*shard, ref), 0u) << "order " << order << ", clock " << t;
    }
  }
}

// Chain replication: a follower that has seen a different live set (one
// worker fewer) and a replica that joined from a snapshot taken in the middle
// of a round apply the head's rounds with the head's worker counts
// (DescribeRoundsApplied -> CompleteRoundsBelow): all three end bit-identical
// to the reference.
TEST_P(BspRoundTest, ChainReplicasApplyTheHeadsRounds) {
  std::vector<int64_t> zeros(ids_.size(), 0);
  auto head = NewShard();
  auto follower = NewShard();
  head->SetLiveWorkers(ids_, zeros);
  follower->SetFollower(true);
  follower->SetLiveWorkers(std::vector<int>(ids_.begin(), ids_.end() - 1),
                           std::vector<int64_t>(ids_.size() - 1, 0));
  std::unique_ptr<DenseShardState> joiner;
  test::ReferenceModel ref(options_, initial_);
  int64_t forwarded = 0;
  for (int t = 0; t < kClocks; ++t) {
    std::vector<int> counts, next(ids_.size(), 0);
    for (size_t k = 0; k < ids_.size(); ++k) counts.push_back(Messages(k, t));
    const std::vector<int> order = test::Interleave(counts, 77 + t);
    for (size_t i = 0; i < order.size(); ++i) {
      if (t == 1 && i == order.size() / 2) {  // A state transfer in mid-round.
        wire::ChainSnapshot snap;
        std::vector<FloatBuffer> frames;
        follower->SaveState(&snap, &frames);
        ASSERT_GT(snap.round_clocks_size(), 0);
        joiner = NewShard();
        joiner->SetFollower(true);
        std::vector<const float*> data;
        std::vector<size_t> sizes;
        for (const FloatBuffer& f : frames) {
          data.push_back(f.data());
          sizes.push_back(f.size());
        }
        ASSERT_TRUE(joiner->LoadState(snap, data, sizes).ok());
      }
      std::vector<DenseShardState*> replicas = {head.get(), follower.get()};
      if (joiner) replicas.push_back(joiner.get());
      Deliver(order[i], t, &next[order[i]], replicas);
    }
    ASSERT_EQ(head->applied_clock(), t + 1);
    ASSERT_EQ(follower->applied_clock(), t);  // Waits for the head.
    wire::RoundsApplied applied;
    head->DescribeRoundsApplied(forwarded, &applied);
    forwarded = head->applied_clock();
    ASSERT_EQ(applied.clocks_size(), 1);
    EXPECT_EQ(applied.workers(0), ids_.size());
    ASSERT_TRUE(follower->CompleteRoundsBelow(forwarded, applied).ok());
    if (joiner) {
      ASSERT_TRUE(joiner->CompleteRoundsBelow(forwarded, applied).ok());
    }
    StepReference(&ref, t);
    EXPECT_EQ(Differing(*head, ref), 0u) << "clock " << t;
    EXPECT_EQ(Differing(*follower, ref), 0u) << "clock " << t;
    if (joiner) {
      EXPECT_EQ(Differing(*joiner, ref), 0u) << "clock " << t;
    }
  }
  ASSERT_NE(joiner, nullptr);
}

INSTANTIATE_TEST_SUITE_P(
    OptimizersAndWorkers, BspRoundTest,
    ::testing::Combine(::testing::Values("sgd", "momentum", "adam"), ::testing::Values(2, 3)),
    test::BspShardTest::Name);

// A range move's forwarding (docs/elastic.md "One move"): the source's writes
// of a tail that starts at an unaligned key, told to the observer and applied
// to a range of just those keys with ApplyForwardedStep, leave both ranges'
// slots bit-identical (the optimizer state and Adam's bias correction too).
class ForwardedStepTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ForwardedStepTest, ForwardedStepsOfAMovedTailAreBitIdenticalToTheSource) {
  constexpr uint64_t kSize = 1000, kMid = 333;
  std::unique_ptr<ParamStore> store = NewMemoryStore();
  ConsistencyOptions co;
  co.model = ConsistencyModel::kAsync;
  auto policy = NewConsistencyPolicy(co);
  ASSERT_TRUE(policy.ok()) << policy.status();
  auto device = kernels::NewDevice(kernels::DeviceOptions{});
  ASSERT_TRUE(device.ok()) << device.status();
  auto make = [&](const std::string& name, uint64_t begin) {
    OptimizerOptions o;
    o.name = GetParam();
    o.lr = 0.01f;
    auto optimizer = kernels::NewOptimizer(o);
    EXPECT_TRUE(optimizer.ok()) << optimizer.status();
    DenseShardSpec spec;
    spec.table = name;
    spec.begin = begin;
    spec.end = kSize;
    spec.num_slots = 1 + (*optimizer)->num_state_slots();
    auto shard = store->CreateDense(spec);
    EXPECT_TRUE(shard.ok()) << shard.status();
    return std::make_unique<DenseShardState>(*shard, std::move(*optimizer), policy->get(),
                                             device->get(), store.get());
  };
  std::unique_ptr<DenseShardState> source = make("w", 0);
  std::unique_ptr<DenseShardState> tail = make("w2", kMid);
  for (size_t slot = 0; slot < source->num_slots(); ++slot) {
    FloatBuffer copy = source->CopySlot(static_cast<int>(slot), kMid, kSize - kMid);
    ASSERT_OK(tail->LoadSlotPiece(slot, 0, copy.data(), copy.size()));
  }
  int forwarded = 0;
  source->TrackWrites(kMid, kSize, 64, [&](const DenseShardState::Write& w) {
    ASSERT_EQ(w.kind, DenseShardState::Write::kStep);
    const uint64_t lo = std::max(w.offset, kMid), hi = std::min<uint64_t>(w.offset + w.n, kSize);
    if (lo >= hi) return;
    ASSERT_OK(tail->ApplyForwardedStep(lo, w.values + (lo - w.offset), hi - lo, w.step,
                                       w.lr_scale));
    ++forwarded;
  });
  // Whole-range steps and partial ones (a later part of a split push
  // included), at gradients that differ per key and step.
  for (int step = 0; step < 12; ++step) {
    const uint64_t begin = step % 3 == 0 ? 0 : 100 + 37 * step, n = kSize - begin - step;
    std::vector<float> grads(n);
    for (uint64_t d = 0; d < n; ++d) grads[d] = std::sin(0.1f * d + step) * (1 + step % 4);
    ASSERT_OK(source->Push(0, step, begin, grads.data(), n, /*new_step=*/step % 4 != 3));
  }
  EXPECT_EQ(forwarded, 12);
  for (size_t slot = 0; slot < source->num_slots(); ++slot) {
    FloatBuffer a = source->CopySlot(static_cast<int>(slot), kMid, kSize - kMid);
    FloatBuffer b = tail->CopySlot(static_cast<int>(slot), kMid, kSize - kMid);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.bytes()), 0) << "slot " << slot;
  }
}

INSTANTIATE_TEST_SUITE_P(Optimizers, ForwardedStepTest,
                         ::testing::Values("sgd", "momentum", "adam", "adagrad"));

}  // namespace
}  // namespace server_internal
}  // namespace relaxps
