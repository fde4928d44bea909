// recovery/hybrid_fallback: splicing a lost server out of its chains, and
// stranding the ranges it held alone.
#include "recovery/hybrid_fallback.h"

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

}  // namespace
}  // namespace relaxps
