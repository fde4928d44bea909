// The range plan of a joining server (coordinator/range_plan.h) on maps.
#include "coordinator/range_plan.h"

#include <map>

#include <gtest/gtest.h>

#include "common/shard_map.h"
#include "tests/test_util.h"

namespace relaxps {
namespace coordinator_internal {
namespace {

wire::ShardMap MapOf(uint64_t size, int servers, const std::string& name = "w") {
  wire::ShardMap map;
  wire::TableShards* ts = map.add_tables();
  ts->mutable_table()->set_name(name);
  ts->mutable_table()->set_type(static_cast<int>(TableType::kDense));
  ts->mutable_table()->set_size(size);
  for (const wire::DenseRange& r : ShardMap::AssignDense(size, servers)) *ts->add_ranges() = r;
  return map;
}

std::map<int, uint64_t> Loads(const wire::ShardMap& map) {
  std::map<int, uint64_t> load;
  for (const wire::DenseRange& r : map.tables(0).ranges()) load[r.server()] += r.end() - r.begin();
  return load;
}

// The plan, applied, leaves a valid map (no gaps or overlaps).
wire::ShardMap Applied(wire::ShardMap map, const std::vector<wire::RangeMove>& plan) {
  for (const wire::RangeMove& m : plan) EXPECT_OK(ApplyMove(&map, m));
  wire::ShardMap checked = map;  // With a server list, as the coordinator's.
  for (int id = 0; id < 8; ++id) checked.add_servers()->set_id(id);
  EXPECT_OK(ShardMap::FromProto(checked).status());
  return map;
}

TEST(RangePlanTest, ASecondServerTakesTheTailHalfOnAChunk) {
  const uint64_t size = 3 * kDenseChunk + 1000;
  const std::vector<wire::RangeMove> plan = PlanMovesTo(MapOf(size, 1), 1, {0, 1});
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].source(), 0);
  EXPECT_EQ(plan[0].destination(), 1);
  EXPECT_EQ(plan[0].begin(), 2 * kDenseChunk);  // size / 2 rounded up to a chunk.
  EXPECT_EQ(plan[0].end(), size);
  const wire::ShardMap after = Applied(MapOf(size, 1), plan);
  EXPECT_EQ(after.tables(0).ranges_size(), 2);
  EXPECT_TRUE(MoveApplied(after, plan[0]));
  EXPECT_FALSE(MoveApplied(MapOf(size, 1), plan[0]));
}

TEST(RangePlanTest, AFourthServerTakesTheExcessOfEachAndEveryoneEndsNearTheirShare) {
  const uint64_t size = 120 * kDenseChunk;
  const std::vector<wire::RangeMove> plan = PlanMovesTo(MapOf(size, 3), 3, {0, 1, 2, 3});
  EXPECT_EQ(plan.size(), 3u);  // 10 chunks from each of the three.
  for (const auto& [server, keys] : Loads(Applied(MapOf(size, 3), plan))) {
    EXPECT_EQ(keys, 30 * kDenseChunk) << "server " << server;
  }
}

TEST(RangePlanTest, NothingToMoveBelowAChunkOrForAServerThatHoldsItsShare) {
  EXPECT_TRUE(PlanMovesTo(MapOf(kDenseChunk, 1), 1, {0, 1}).empty());
  const wire::ShardMap two = MapOf(8 * kDenseChunk, 2);
  EXPECT_TRUE(PlanMovesTo(two, 1, {0, 1}).empty());
  EXPECT_TRUE(PlanMovesTo(two, 5, {0, 1}).empty());  // Not a serving server.
}

TEST(RangePlanTest, SparseAndReplicatedTablesStay) {
  wire::ShardMap map = MapOf(8 * kDenseChunk, 1);
  wire::TableShards* sparse = map.add_tables();
  sparse->mutable_table()->set_name("emb");
  sparse->mutable_table()->set_type(static_cast<int>(TableType::kSparse));
  const std::vector<wire::RangeMove> plan = PlanMovesTo(map, 1, {0, 1});
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].table(), "w");
  wire::ShardMap chained = MapOf(8 * kDenseChunk, 2);
  for (wire::DenseRange& r : *chained.mutable_tables(0)->mutable_ranges()) {
    r.add_chain(r.server());
    r.add_chain(1 - r.server());
  }
  EXPECT_TRUE(PlanMovesTo(chained, 2, {0, 1, 2}).empty());
}

TEST(RangePlanTest, ApplyMoveRefusesARangeTheSourceDoesNotEndThere) {
  wire::ShardMap map = MapOf(8 * kDenseChunk, 2);
  const wire::ShardMap before = map;
  wire::RangeMove m;
  m.set_table("w");
  m.set_begin(kDenseChunk);
  m.set_end(3 * kDenseChunk);  // Server 0 holds [0, 4 chunks).
  m.set_source(0);
  m.set_destination(1);
  EXPECT_EQ(ApplyMove(&map, m).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(map.SerializeAsString(), before.SerializeAsString());
  m.set_table("nope");
  EXPECT_EQ(ApplyMove(&map, m).code(), StatusCode::kFailedPrecondition);
  // A whole range changes hands without a cut.
  m.set_table("w");
  m.set_begin(0);
  m.set_end(4 * kDenseChunk);
  m.set_destination(2);
  ASSERT_OK(ApplyMove(&map, m));
  EXPECT_EQ(map.tables(0).ranges_size(), 2);
  EXPECT_EQ(map.tables(0).ranges(0).server(), 2);
}

TEST(RangePlanTest, ADrainMovesEveryWholeRangeToTheLeastLoadedOthers) {
  wire::ShardMap map = MapOf(120 * kDenseChunk, 3);
  for (int id = 0; id < 3; ++id) map.add_servers()->set_id(id);
  ASSERT_OK_AND_ASSIGN(std::vector<wire::RangeMove> plan, PlanMovesFrom(map, 1, {0, 1, 2}));
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].begin(), 40 * kDenseChunk);  // All of server 1's range, uncut.
  EXPECT_EQ(plan[0].end(), 80 * kDenseChunk);
  EXPECT_EQ(plan[0].source(), 1);
  EXPECT_NE(plan[0].destination(), 1);
  const wire::ShardMap after = Applied(map, plan);
  EXPECT_FALSE(HoldsAnything(after, 1));
  EXPECT_TRUE(HoldsAnything(after, 0));
  EXPECT_EQ(Loads(after).count(1), 0u);
  // Nowhere to go; or a sparse table's buckets on the server.
  EXPECT_EQ(PlanMovesFrom(map, 1, {1}).status().code(), StatusCode::kFailedPrecondition);
  wire::TableShards* sparse = map.add_tables();
  sparse->mutable_table()->set_name("emb");
  sparse->mutable_table()->set_type(static_cast<int>(TableType::kSparse));
  sparse->add_buckets()->set_server(0);
  sparse->add_buckets()->set_server(1);
  const Status refused = PlanMovesFrom(map, 1, {0, 1, 2}).status();
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("emb"), std::string::npos) << refused;
  EXPECT_OK(PlanMovesFrom(map, 2, {0, 1, 2}).status());  // Server 2 holds no bucket.
}

}  // namespace
}  // namespace coordinator_internal
}  // namespace relaxps
