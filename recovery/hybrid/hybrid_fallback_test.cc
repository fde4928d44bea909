// recovery/hybrid_fallback: splicing a lost server out of its chains, and
// stranding the ranges it held alone.
#include "recovery/hybrid/hybrid_fallback.h"

#include <gtest/gtest.h>

#include "common/shard_map.h"

namespace relaxps {
namespace {

// Two servers, R = 2: range 0 on chain [0, 1], range 1 on [1, 0].
wire::ShardMap TwoByTwo() {
  wire::ShardMap m;
  wire::TableShards* ts = m.add_tables();
  ts->mutable_table()->set_name("w");
  ts->mutable_table()->set_size(2 * kDenseChunk);
  for (const wire::DenseRange& r : ShardMap::AssignDense(2 * kDenseChunk, 2, 2)) {
    *ts->add_ranges() = r;
  }
  return m;
}

std::vector<int> ChainOf(const wire::ShardMap& m, int range) {
  return std::vector<int>(m.tables(0).ranges(range).chain().begin(),
                          m.tables(0).ranges(range).chain().end());
}

TEST(HybridFallbackTest, FirstLossIsSplicedSecondStrandsWithTheLastHolder) {
  wire::ShardMap m = TwoByTwo();
  SpliceResult first = SpliceOrStrand(&m, 0);
  EXPECT_EQ(first.changed, 2);
  EXPECT_TRUE(first.stranded.empty());
  EXPECT_EQ(ChainOf(m, 0), std::vector<int>({1}));
  EXPECT_EQ(m.tables(0).ranges(0).server(), 1);  // The next replica heads.
  EXPECT_EQ(ChainOf(m, 1), std::vector<int>({1}));

  SpliceResult second = SpliceOrStrand(&m, 1);
  EXPECT_EQ(second.changed, 0);
  ASSERT_EQ(second.stranded.size(), 2u);
  EXPECT_EQ(second.stranded[0].begin, 0u);
  EXPECT_EQ(second.stranded[1].end, 2 * kDenseChunk);
  // The map keeps them with their last holder, so a server registering with
  // its id is the one seeded.
  EXPECT_EQ(ChainOf(m, 0), std::vector<int>({1}));
  EXPECT_EQ(m.tables(0).ranges(1).server(), 1);
  EXPECT_EQ(RangesHeldAlone(m, 1).size(), 2u);
  EXPECT_TRUE(RangesHeldAlone(m, 0).empty());
  EXPECT_EQ(DescribeRanges(second.stranded), "w[0,4096);w[4096,8192)");
  EXPECT_EQ(DescribeRanges({}), "none");
}

TEST(HybridFallbackTest, ReplicasStillAwaitingTheirStateDoNotCount) {
  wire::ShardMap m = TwoByTwo();
  // Server 1 rejoined both chains as tail and has not received their state:
  // losing server 0 loses the data, so both ranges stay with server 0 alone.
  SpliceResult r = SpliceOrStrand(&m, 0, {1});
  EXPECT_EQ(r.stranded.size(), 2u);
  EXPECT_EQ(r.changed, 2);
  EXPECT_EQ(ChainOf(m, 0), std::vector<int>({0}));
  EXPECT_EQ(ChainOf(m, 1), std::vector<int>({0}));
  EXPECT_EQ(m.tables(0).ranges(1).server(), 0);
}

TEST(HybridFallbackTest, AJoiningServerStaysOutOfChainsThatAwaitTheirSeed) {
  wire::ShardMap m = TwoByTwo();
  SpliceOrStrand(&m, 0);
  SpliceOrStrand(&m, 1);
  // Server 0 comes back first; JoinChains would put it behind a dead head.
  EXPECT_EQ(JoinChains(&m, 0, 2, 2), 2);
  EXPECT_EQ(LeaveStrandedChains(&m, 0, {1}), 2);
  EXPECT_EQ(ChainOf(m, 0), std::vector<int>({1}));
  EXPECT_EQ(ChainOf(m, 1), std::vector<int>({1}));
  // Once server 1 is seeded, nothing is stranded: server 0 joins as tail.
  EXPECT_EQ(JoinChains(&m, 0, 2, 2), 2);
  EXPECT_EQ(LeaveStrandedChains(&m, 0, {}), 0);
  EXPECT_EQ(ChainOf(m, 0), std::vector<int>({1, 0}));
  // The stranded holder itself never leaves its own chain.
  EXPECT_EQ(LeaveStrandedChains(&m, 1, {1}), 0);
}

// TwoByTwo plus a sparse table of two buckets, chains [0, 1] and [1, 0].
wire::ShardMap WithBuckets() {
  wire::ShardMap m = TwoByTwo();
  wire::TableShards* ts = m.add_tables();
  ts->mutable_table()->set_name("s");
  for (const wire::SparseBucket& b : ShardMap::AssignBuckets(2, 2, 2)) *ts->add_buckets() = b;
  return m;
}

TEST(HybridFallbackTest, BucketsAreSplicedAndStrandedLikeRanges) {
  wire::ShardMap m = WithBuckets();
  SpliceResult first = SpliceOrStrand(&m, 0);
  EXPECT_EQ(first.changed, 4);  // Two ranges and two buckets.
  EXPECT_TRUE(first.stranded.empty());
  EXPECT_EQ(m.tables(1).buckets(0).server(), 1);
  SpliceResult second = SpliceOrStrand(&m, 1);
  ASSERT_EQ(second.stranded.size(), 4u);
  EXPECT_EQ(second.stranded[2].bucket, 0);
  EXPECT_EQ(DescribeRanges(second.stranded), "w[0,4096);w[4096,8192);s#0;s#1");
  EXPECT_EQ(RangesHeldAlone(m, 1).size(), 4u);
  // Server 0 rejoins: it stays out of the stranded buckets' chains too.
  EXPECT_EQ(JoinChains(&m, 0, 2, 2), 4);
  EXPECT_EQ(LeaveStrandedChains(&m, 0, {1}), 4);
  EXPECT_EQ(m.tables(1).buckets(1).chain_size(), 1);
}

TEST(HybridFallbackTest, ASpareTakesOverWhatTheHolderHeldAlone) {
  wire::ShardMap m = WithBuckets();
  SpliceOrStrand(&m, 0);
  SpliceOrStrand(&m, 1);
  const std::vector<StrandedRange> moved = MoveStranded(&m, 1, 2);
  EXPECT_EQ(DescribeRanges(moved), "w[0,4096);w[4096,8192);s#0;s#1");
  EXPECT_TRUE(RangesHeldAlone(m, 1).empty());
  EXPECT_EQ(RangesHeldAlone(m, 2).size(), 4u);
  EXPECT_EQ(m.tables(0).ranges(0).server(), 2);
  EXPECT_EQ(m.tables(1).buckets(1).chain(0), 2);
  EXPECT_TRUE(MoveStranded(&m, 1, 2).empty());
}

TEST(HybridFallbackTest, SpareRulePicksTheLongestStrandedHolderAfterTheGrace) {
  const std::map<int, int64_t> stranded = {{1, 1000}, {3, 500}};
  EXPECT_EQ(PickStrandedForSpare(stranded, {}, 0, 1000, 0), 3);      // Longest first.
  EXPECT_EQ(PickStrandedForSpare(stranded, {3}, 0, 1000, 0), 1);     // 3 is being seeded.
  EXPECT_EQ(PickStrandedForSpare(stranded, {}, 3, 1000, 0), 1);      // Its own restart.
  EXPECT_EQ(PickStrandedForSpare(stranded, {}, 0, 1400, 1000), -1);  // Within the grace.
  EXPECT_EQ(PickStrandedForSpare(stranded, {}, 0, 1500, 1000), 3);
  EXPECT_EQ(PickStrandedForSpare({}, {}, 0, 1500, 0), -1);
}

}  // namespace
}  // namespace relaxps
