// LateSteps: local steps kept by clock until their change reaches a server,
// and the staleness histogram (common/staleness_histogram.h) they end in.
#include "client/internal/late_steps.h"

#include <vector>

#include <gtest/gtest.h>

namespace relaxps {
namespace client_internal {
namespace {

TEST(StalenessHistogramTest, PowerOfTwoBuckets) {
  EXPECT_EQ(StalenessHistogram::BucketOf(-3), 0);
  EXPECT_EQ(StalenessHistogram::BucketOf(0), 0);
  EXPECT_EQ(StalenessHistogram::BucketOf(1), 1);
  EXPECT_EQ(StalenessHistogram::BucketOf(2), 2);
  EXPECT_EQ(StalenessHistogram::BucketOf(3), 2);
  EXPECT_EQ(StalenessHistogram::BucketOf(4), 3);
  EXPECT_EQ(StalenessHistogram::BucketOf(7), 3);
  EXPECT_EQ(StalenessHistogram::BucketOf(8), 4);
  EXPECT_EQ(StalenessHistogram::BucketOf(INT64_MAX), 63);
  StalenessHistogram h;
  EXPECT_TRUE(h.EventCounts().empty());
  h.Add(0);
  h.Add(5, 3);
  StalenessHistogram other;
  other.Add(1);
  h.Merge(other);
  EXPECT_EQ(h.total(), 5u);
  EXPECT_EQ(h.EventCounts(), (std::vector<int>{1, 1, 0, 3}));
}

TEST(LateStepsTest, StepsAreAsFarBehindAsTheClockTheyReachAServerAt) {
  LateSteps late;
  // Steps at clocks 10..13 for server 1 (two parts of step 11), 20 for 2.
  for (int64_t c : {10, 11, 11, 12, 13}) late.Record(1, c);
  late.Record(2, 20);
  // Rejoined at clock 14: 4, 3, 2, 1 clocks behind.
  const StalenessHistogram h = late.Take(1, 14);
  EXPECT_EQ(h.total(), 4u);
  EXPECT_EQ(h.EventCounts(), (std::vector<int>{0, 1, 2, 1}));
  // Taken means forgotten; the other server's steps are its own.
  EXPECT_EQ(late.Take(1, 30).total(), 0u);
  EXPECT_EQ(late.Take(2, 20).EventCounts(), (std::vector<int>{1}));
}

TEST(LateStepsTest, AReseedCopyAppliesTheStepsSoFarAtItsClock) {
  LateSteps late;
  late.Record(0, 1);
  late.Record(0, 2);
  late.HandBack(0, 3);  // The re-seed copy at clock 3: 2 and 1 behind.
  late.Record(0, 3);
  late.Record(0, 7);    // Not consecutive: a run of its own.
  // The rest at the rejoin, clock 8: 5 and 1 behind.
  const StalenessHistogram h = late.Take(0, 8);
  EXPECT_EQ(h.total(), 4u);
  EXPECT_EQ(h.EventCounts(), (std::vector<int>{0, 2, 1, 1}));
}

TEST(LateStepsTest, ATakeOverMovesTheSteps) {
  LateSteps late;
  late.Record(1, 5);
  late.HandBack(1, 6);
  late.Record(1, 6);
  late.Move(1, 3);
  EXPECT_EQ(late.Take(1, 100).total(), 0u);
  EXPECT_EQ(late.Take(3, 8).EventCounts(), (std::vector<int>{0, 1, 1}));
}

}  // namespace
}  // namespace client_internal
}  // namespace relaxps
