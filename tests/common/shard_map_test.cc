// ShardMap chains (--recovery=chain): home placement, validation, removal of
// a dead server (promotion of the next replica, refusal of the last replica)
// and rejoin as tail.
#include "common/shard_map.h"

#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace relaxps {
namespace {

wire::ShardMap ChainMap(int servers, int replicas) {
  wire::ShardMap m;
  m.set_version(1);
  m.set_epoch(1);
  for (int i = 0; i < servers; ++i) {
    wire::ServerInfo* s = m.add_servers();
    s->set_id(i);
    s->set_endpoint("tcp://127.0.0.1:" + std::to_string(1000 + i));
    s->set_alive(true);
  }
  wire::TableShards* ts = m.add_tables();
  ts->mutable_table()->set_name("w");
  ts->mutable_table()->set_size(3 * kDenseChunk);
  for (const wire::DenseRange& r : ShardMap::AssignDense(3 * kDenseChunk, servers, replicas)) {
    *ts->add_ranges() = r;
  }
  return m;
}

std::vector<int> ChainOf(const wire::ShardMap& m, int range) {
  const auto& c = m.tables(0).ranges(range).chain();
  return std::vector<int>(c.begin(), c.end());
}

TEST(ShardMapChainTest, RangesAreHeldByTheirOwnerAndTheNextServers) {
  wire::ShardMap m = ChainMap(3, 2);
  EXPECT_EQ(ChainOf(m, 0), (std::vector<int>{0, 1}));
  EXPECT_EQ(ChainOf(m, 1), (std::vector<int>{1, 2}));
  EXPECT_EQ(ChainOf(m, 2), (std::vector<int>{2, 0}));
  ASSERT_OK_AND_ASSIGN(ShardMap map, ShardMap::FromProto(m));
  EXPECT_EQ(map.epoch(), 1u);
  // Requests are routed to the head.
  ASSERT_OK_AND_ASSIGN(std::vector<DenseSlice> slices, map.SplitDense("w", kDenseChunk, 1));
  EXPECT_EQ(slices[0].server, 1);
  EXPECT_TRUE(ChainMap(3, 1).tables(0).ranges(0).chain().empty());
}

TEST(ShardMapChainTest, RejectsAChainWhoseHeadIsNotTheOwner) {
  wire::ShardMap m = ChainMap(3, 2);
  m.mutable_tables(0)->mutable_ranges(0)->set_server(1);
  EXPECT_EQ(ShardMap::FromProto(m).status().code(), StatusCode::kInvalidArgument);
  m = ChainMap(3, 2);
  m.mutable_tables(0)->mutable_ranges(1)->add_chain(7);
  EXPECT_EQ(ShardMap::FromProto(m).status().code(), StatusCode::kInvalidArgument);
}

TEST(ShardMapChainTest, RemovingAServerPromotesItsSuccessorAndRejoinAppendsAsTail) {
  wire::ShardMap m = ChainMap(3, 2);
  ASSERT_OK_AND_ASSIGN(int changed, RemoveFromChains(&m, 0, 2));
  EXPECT_EQ(changed, 2);
  EXPECT_EQ(ChainOf(m, 0), (std::vector<int>{1}));
  EXPECT_EQ(m.tables(0).ranges(0).server(), 1);  // Promoted.
  EXPECT_EQ(ChainOf(m, 2), (std::vector<int>{2}));
  ASSERT_OK(ShardMap::FromProto(m).status());
  // Server 1 now holds the last replica of range 0: losing it is refused.
  StatusOr<int> last = RemoveFromChains(&m, 1, 2);
  EXPECT_EQ(last.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(ChainOf(m, 1), (std::vector<int>{1, 2}));  // Unchanged.
  EXPECT_EQ(JoinChains(&m, 0, 3, 2), 2);
  EXPECT_EQ(ChainOf(m, 0), (std::vector<int>{1, 0}));
  EXPECT_EQ(ChainOf(m, 2), (std::vector<int>{2, 0}));
  EXPECT_EQ(JoinChains(&m, 0, 3, 2), 0);  // Idempotent.
}

}  // namespace
}  // namespace relaxps
