// The seeding and merge rules of stateless re-seeding, on small exact inputs
// (values that are sums of powers of two, so float results are exact).
#include "recovery/seed_merge.h"

#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace relaxps {
namespace {

// Two workers that both pulled b = {8, 8} at clock 10. Worker 0 took 3 local
// steps (d0 = {-1, -2}), worker 1 took 2 (d1 = {-4, 2}).
struct TwoCopies {
  std::vector<float> x0{7, 6}, d0{-1, -2};
  std::vector<float> x1{4, 10}, d1{-4, 2};
  std::vector<WorkerCopy> copies() const {
    return {WorkerCopy{0, 13, 10, 3, x0.data(), d0.data()},
            WorkerCopy{1, 12, 10, 2, x1.data(), d1.data()}};
  }
};

TEST(SeedMergeTest, FreshestSeedWithStalenessWeightedChanges) {
  TwoCopies t;
  ASSERT_OK_AND_ASSIGN(MergeResult r,
                       MergeCopies(t.copies(), 2, SeedRule::kFreshest, MergeRule::kStaleness));
  EXPECT_EQ(r.seed_worker, 0);
  EXPECT_EQ(r.clock, 13);  // The highest clock: no rollback.
  // a1 = 1 / (13 - 10): worker 1's change missed 3 clocks of the seed.
  EXPECT_DOUBLE_EQ(r.change_weights[0], 1.0);
  EXPECT_DOUBLE_EQ(r.change_weights[1], 1.0 / 3);
  const float a = static_cast<float>(1.0 / 3);
  EXPECT_EQ(r.params, (std::vector<float>{7 + a * -4, 6 + a * 2}));
}

TEST(SeedMergeTest, FreshestSeedWithAveragedChangesDoesNotCountTheSeedTwice) {
  TwoCopies t;
  ASSERT_OK_AND_ASSIGN(MergeResult r,
                       MergeCopies(t.copies(), 2, SeedRule::kFreshest, MergeRule::kAverage));
  // b + (d0 + d1) / 2 = {8 - 2.5, 8 + 0}: the seed's change ends at weight 1/2.
  EXPECT_EQ(r.params, (std::vector<float>{5.5f, 8.0f}));
}

TEST(SeedMergeTest, BlindSumAddsEveryChangeOnce) {
  TwoCopies t;
  ASSERT_OK_AND_ASSIGN(MergeResult r,
                       MergeCopies(t.copies(), 2, SeedRule::kFreshest, MergeRule::kSum));
  EXPECT_EQ(r.params, (std::vector<float>{3.0f, 8.0f}));  // b + d0 + d1.
}

TEST(SeedMergeTest, WeightedAverageSeedFavoursFresherCopies) {
  TwoCopies t;
  ASSERT_OK_AND_ASSIGN(MergeResult r, MergeCopies(t.copies(), 2, SeedRule::kWeightedAverage,
                                                  MergeRule::kAverage));
  // e ∝ {1, 1/2} -> {2/3, 1/3}; a = {1/2, 1/2}.
  EXPECT_NEAR(r.seed_weights[0], 2.0 / 3, 1e-12);
  EXPECT_NEAR(r.seed_weights[1], 1.0 / 3, 1e-12);
  // Equal bases: the result is b + (d0 + d1) / 2 whatever the seed weights.
  EXPECT_NEAR(r.params[0], 5.5f, 1e-5);
  EXPECT_NEAR(r.params[1], 8.0f, 1e-5);
  EXPECT_EQ(r.clock, 13);
}

TEST(SeedMergeTest, VelocityFollowsTheSeedWeightsAndNeedsEverySeedCopysVelocity) {
  TwoCopies t;
  std::vector<float> v0{2, -4}, v1{8, 4};
  std::vector<WorkerCopy> copies = t.copies();
  copies[0].velocity = v0.data();
  copies[1].velocity = v1.data();
  // Freshest: the seed's own velocity, whatever the merge rule does to changes.
  ASSERT_OK_AND_ASSIGN(MergeResult r,
                       MergeCopies(copies, 2, SeedRule::kFreshest, MergeRule::kAverage));
  EXPECT_EQ(r.velocity, v0);
  // Weighted average: e = {2/3, 1/3}.
  ASSERT_OK_AND_ASSIGN(r, MergeCopies(copies, 2, SeedRule::kWeightedAverage, MergeRule::kAverage));
  EXPECT_NEAR(r.velocity[0], 2.0 * 2 / 3 + 8.0 / 3, 1e-5);
  EXPECT_NEAR(r.velocity[1], -4.0 * 2 / 3 + 4.0 / 3, 1e-5);
  // A seed copy without a velocity (SGD locally): the slot is reset.
  copies[1].velocity = nullptr;
  ASSERT_OK_AND_ASSIGN(r, MergeCopies(copies, 2, SeedRule::kWeightedAverage, MergeRule::kAverage));
  EXPECT_TRUE(r.velocity.empty());
  // ... unless that copy has no seed weight.
  ASSERT_OK_AND_ASSIGN(r, MergeCopies(copies, 2, SeedRule::kFreshest, MergeRule::kAverage));
  EXPECT_EQ(r.velocity, v0);
}

TEST(SeedMergeTest, TiesGoToMoreLocalStepsThenTheLowestId) {
  std::vector<float> x{1}, d{0};
  std::vector<WorkerCopy> c = {WorkerCopy{5, 9, 4, 1, x.data(), d.data()},
                               WorkerCopy{3, 9, 4, 1, x.data(), d.data()},
                               WorkerCopy{7, 9, 4, 2, x.data(), d.data()}};
  ASSERT_OK_AND_ASSIGN(MergeResult r, MergeCopies(c, 1, SeedRule::kFreshest, MergeRule::kSum));
  EXPECT_EQ(r.seed_worker, 7);
  c[2].local_steps = 1;
  ASSERT_OK_AND_ASSIGN(r, MergeCopies(c, 1, SeedRule::kFreshest, MergeRule::kSum));
  EXPECT_EQ(r.seed_worker, 3);
}

TEST(SeedMergeTest, BadInputIsRefused) {
  EXPECT_FALSE(MergeCopies({}, 1, SeedRule::kFreshest, MergeRule::kSum).ok());
  std::vector<float> x{1};
  EXPECT_FALSE(MergeCopies({WorkerCopy{0, 1, 0, 1, x.data(), nullptr}}, 1, SeedRule::kFreshest,
                           MergeRule::kSum)
                   .ok());
  EXPECT_FALSE(ParseSeedRule("newest").ok());
  EXPECT_FALSE(ParseMergeRule("blind").ok());
  ASSERT_OK_AND_ASSIGN(MergeRule m, ParseMergeRule("staleness"));
  EXPECT_STREQ(MergeRuleName(m), "staleness");
}

TEST(SeedMergeTest, ChangeOnlyCopiesCountTheirChangeButNeverSeed) {
  TwoCopies t;
  // Worker 2 never pulled: it trained on the initializer from clock 11, and
  // its copy is the freshest by clock, but no seed candidate.
  std::vector<float> x2{100, 100}, d2{2, 4};
  std::vector<WorkerCopy> copies = t.copies();
  copies.push_back(WorkerCopy{2, 14, 11, 3, x2.data(), d2.data(), /*change_only=*/true});
  ASSERT_OK_AND_ASSIGN(MergeResult r,
                       MergeCopies(copies, 2, SeedRule::kFreshest, MergeRule::kStaleness));
  EXPECT_EQ(r.seed_worker, 0);
  EXPECT_EQ(r.clock, 14);  // Still no rollback.
  EXPECT_DOUBLE_EQ(r.seed_weights[2], 0.0);
  EXPECT_DOUBLE_EQ(r.change_weights[2], 1.0 / 2);  // 13 - 11 clocks stale.
  const float a = static_cast<float>(1.0 / 3);
  EXPECT_EQ(r.params, (std::vector<float>{7 + a * -4 + 0.5f * 2, 6 + a * 2 + 0.5f * 4}));
  ASSERT_OK_AND_ASSIGN(MergeResult avg, MergeCopies(copies, 2, SeedRule::kWeightedAverage,
                                                    MergeRule::kStaleness));
  EXPECT_DOUBLE_EQ(avg.seed_weights[2], 0.0);
  EXPECT_DOUBLE_EQ(avg.seed_weights[0] + avg.seed_weights[1], 1.0);

  // Only change-only copies: no base; MergeChanges sums the weighted changes.
  std::vector<WorkerCopy> only = {copies[2]};
  EXPECT_FALSE(MergeCopies(only, 2, SeedRule::kFreshest, MergeRule::kStaleness).ok());
  std::vector<double> w;
  ASSERT_OK_AND_ASSIGN(std::vector<float> sum, MergeChanges(only, 2, MergeRule::kStaleness, &w));
  EXPECT_EQ(sum, d2);
  EXPECT_EQ(w, std::vector<double>{1.0});
}

}  // namespace
}  // namespace relaxps
