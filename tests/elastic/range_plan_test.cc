// The range plan of a joining server (coordinator/range_plan.h) on maps.
#include "coordinator/range_plan.h"

#include <algorithm>
#include <cstdlib>
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

TEST(RangePlanTest, SparseTablesStay) {
  wire::ShardMap map = MapOf(8 * kDenseChunk, 1);
  wire::TableShards* sparse = map.add_tables();
  sparse->mutable_table()->set_name("emb");
  sparse->mutable_table()->set_type(static_cast<int>(TableType::kSparse));
  const std::vector<wire::RangeMove> plan = PlanMovesTo(map, 1, {0, 1});
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].table(), "w");
}

// A dense table on chains of 2 over `servers` servers (home placement).
wire::ShardMap Chained(uint64_t size, int servers) {
  wire::ShardMap map = MapOf(size, servers);
  map.mutable_tables(0)->clear_ranges();
  for (const wire::DenseRange& r : ShardMap::AssignDense(size, servers, 2)) {
    *map.mutable_tables(0)->add_ranges() = r;
  }
  return map;
}

std::map<int, uint64_t> ReplicaLoads(const wire::ShardMap& map) {
  std::map<int, uint64_t> load;
  for (const wire::DenseRange& r : map.tables(0).ranges()) {
    for (int c : r.chain()) load[c] += r.end() - r.begin();
  }
  return load;
}

TEST(RangePlanTest, AJoinUnderChainsMovesWholeReplicasAndKeepsTheOthersOrder) {
  const uint64_t size = 8 * kDenseChunk;
  const wire::ShardMap two = Chained(size, 2);  // [0, 4 chunks): 0 -> 1; the rest: 1 -> 0.
  const std::vector<wire::RangeMove> plan = PlanMovesTo(two, 2, {0, 1, 2});
  // Share 2/3 of the table's keys: one range's replica (1/2) gets closest.
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_TRUE(IsChainMove(two, plan[0]));
  EXPECT_EQ(plan[0].destination(), 2);
  EXPECT_EQ(plan[0].end() - plan[0].begin(), size / 2);  // A whole range, never cut.
  wire::ShardMap after = Applied(two, plan);
  EXPECT_TRUE(MoveApplied(after, plan[0]));
  EXPECT_FALSE(MoveApplied(two, plan[0]));
  EXPECT_EQ(after.tables(0).ranges_size(), 2);
  const std::vector<int> before_chain = ChainOf(two, plan[0]);
  const std::vector<int> chain = ChainOf(after, plan[0]);
  ASSERT_EQ(chain.size(), 2u);
  // The survivor keeps its place ahead; the destination is the tail.
  for (int c : before_chain) {
    if (c != plan[0].source()) {
      EXPECT_EQ(chain[0], c);
    }
  }
  EXPECT_EQ(chain[1], 2);
  EXPECT_EQ(ReplicaLoads(after)[2], size / 2);
  // Step by step as the coordinator runs it: the destination joins as tail
  // (three replicas), then the source leaves.
  wire::ShardMap steps = two;
  ASSERT_OK(ExtendChain(&steps, plan[0]));
  EXPECT_EQ(ChainOf(steps, plan[0]).size(), 3u);
  EXPECT_EQ(ChainOf(steps, plan[0]).back(), 2);
  ASSERT_OK(SpliceSource(&steps, plan[0]));
  EXPECT_EQ(steps.SerializeAsString(), after.SerializeAsString());
  // Taken back instead: the map as before.
  wire::ShardMap back = two;
  ASSERT_OK(ExtendChain(&back, plan[0]));
  ASSERT_OK(RetractDestination(&back, plan[0]));
  EXPECT_EQ(back.SerializeAsString(), two.SerializeAsString());
  // The destination already a replica: refused, the map unchanged.
  wire::RangeMove twice = plan[0];
  EXPECT_EQ(ApplyMove(&after, twice).code(), StatusCode::kFailedPrecondition);
}

TEST(RangePlanTest, AFourthServerUnderChainsTakesAReplicaOfEachOfThreeRangesAtMost) {
  const uint64_t size = 120 * kDenseChunk;
  const wire::ShardMap three = Chained(size, 3);  // 3 ranges, 2 replicas each.
  const std::vector<wire::RangeMove> plan = PlanMovesTo(three, 3, {0, 1, 2, 3});
  // Share: 2 * 120 / 4 = 60 chunks of replicas; one range is 40.
  ASSERT_EQ(plan.size(), 1u);
  const wire::ShardMap after = Applied(three, plan);
  for (const auto& [server, keys] : ReplicaLoads(after)) {
    EXPECT_LE(keys, 80 * kDenseChunk) << "server " << server;
    EXPECT_GE(keys, 40 * kDenseChunk) << "server " << server;
  }
  for (const wire::DenseRange& r : after.tables(0).ranges()) EXPECT_EQ(r.chain_size(), 2);
}

TEST(RangePlanTest, ADrainUnderChainsMovesEveryReplicaOfTheServerOutsideItsChain) {
  wire::ShardMap three = Chained(120 * kDenseChunk, 3);
  for (int id = 0; id < 3; ++id) three.add_servers()->set_id(id);
  ASSERT_OK_AND_ASSIGN(std::vector<wire::RangeMove> plan, PlanMovesFrom(three, 0, {0, 1, 2}));
  ASSERT_EQ(plan.size(), 2u);  // Server 0 is in two of the three chains.
  const wire::ShardMap after = Applied(three, plan);
  EXPECT_FALSE(HoldsAnything(after, 0));
  for (const wire::DenseRange& r : after.tables(0).ranges()) {
    ASSERT_EQ(r.chain_size(), 2);
    EXPECT_NE(r.chain(0), r.chain(1));
    EXPECT_EQ(r.server(), r.chain(0));
  }
  // Two servers, chains of two: nowhere outside the chain to go.
  wire::ShardMap two = Chained(8 * kDenseChunk, 2);
  const Status refused = PlanMovesFrom(two, 0, {0, 1}).status();
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("outside the chain"), std::string::npos) << refused;
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

TEST(RangePlanTest, ADrainSplitsARangeByTheOthersSharesNextToTheirRanges) {
  wire::ShardMap map = MapOf(120 * kDenseChunk, 3);
  for (int id = 0; id < 3; ++id) map.add_servers()->set_id(id);
  ASSERT_OK_AND_ASSIGN(std::vector<wire::RangeMove> plan, PlanMovesFrom(map, 1, {0, 1, 2}));
  // Server 1's range [40, 80) chunks: the tail to server 2 (which holds
  // [80, 120)), then the rest, whole, to server 0 (which holds [0, 40)).
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].begin(), 60 * kDenseChunk);
  EXPECT_EQ(plan[0].end(), 80 * kDenseChunk);
  EXPECT_EQ(plan[0].destination(), 2);
  EXPECT_EQ(plan[1].begin(), 40 * kDenseChunk);
  EXPECT_EQ(plan[1].end(), 60 * kDenseChunk);
  EXPECT_EQ(plan[1].destination(), 0);
  for (const wire::RangeMove& m : plan) EXPECT_EQ(m.source(), 1);
  const wire::ShardMap after = Applied(map, plan);
  EXPECT_FALSE(HoldsAnything(after, 1));
  const std::map<int, uint64_t> load = Loads(after);
  EXPECT_EQ(load.count(1), 0u);
  EXPECT_EQ(load.at(0), 60 * kDenseChunk);
  EXPECT_EQ(load.at(2), 60 * kDenseChunk);
  // Nowhere to go.
  EXPECT_EQ(PlanMovesFrom(map, 1, {1}).status().code(), StatusCode::kFailedPrecondition);
}

// The acceptance run's sequence (issue 43): one server, a second and a third
// join, the first is drained. The two that remain hold even halves (within a
// chunk), and the drained range's pieces land next to ranges their server
// holds already.
TEST(RangePlanTest, TwoJoinsAndADrainOfTheFirstLeaveTwoEvenHalves) {
  const uint64_t size = 813258;  // The cnn model's one dense table.
  wire::ShardMap map = MapOf(size, 1);
  for (int id = 0; id < 3; ++id) map.add_servers()->set_id(id);
  map = Applied(map, PlanMovesTo(map, 1, {0, 1}));
  map = Applied(map, PlanMovesTo(map, 2, {0, 1, 2}));
  ASSERT_OK_AND_ASSIGN(std::vector<wire::RangeMove> plan, PlanMovesFrom(map, 0, {0, 1, 2}));
  EXPECT_EQ(plan.size(), 2u);
  const wire::ShardMap after = Applied(map, plan);
  const std::map<int, uint64_t> load = Loads(after);
  EXPECT_EQ(load.count(0), 0u);
  EXPECT_LE(load.at(1) > load.at(2) ? load.at(1) - load.at(2) : load.at(2) - load.at(1),
            kDenseChunk);
  // Adjacent ranges of one server, counted as one (what one request covers
  // once a server's adjacent ranges are coalesced): two each.
  std::map<int, int> runs;
  int last = -1;
  for (const wire::DenseRange& r : after.tables(0).ranges()) {
    if (r.server() != last) ++runs[r.server()];
    last = r.server();
  }
  EXPECT_EQ(runs.at(1), 2);
  EXPECT_EQ(runs.at(2), 2);
}

// A sparse table "emb" of `buckets` buckets placed as the coordinator does
// on `servers` servers (bucket k on server k mod servers).
wire::TableShards* AddSparse(wire::ShardMap* map, int buckets, int servers) {
  wire::TableShards* ts = map->add_tables();
  ts->mutable_table()->set_name("emb");
  ts->mutable_table()->set_type(static_cast<int>(TableType::kSparse));
  ts->mutable_table()->set_row_width(4);
  for (const wire::SparseBucket& b : ShardMap::AssignBuckets(buckets, servers)) {
    *ts->add_buckets() = b;
  }
  return ts;
}

std::map<int, int> BucketLoads(const wire::ShardMap& map, const std::string& name = "emb") {
  std::map<int, int> load;
  for (const wire::TableShards& ts : map.tables()) {
    if (ts.table().name() != name) continue;
    for (const wire::SparseBucket& b : ts.buckets()) ++load[b.server()];
  }
  return load;
}

TEST(RangePlanTest, AJoiningServerTakesBucketsUntilTheCountsEvenOut) {
  wire::ShardMap map = MapOf(8 * kDenseChunk, 1);
  AddSparse(&map, 8, 1);
  std::vector<wire::RangeMove> plan = PlanMovesTo(map, 1, {0, 1});
  // The dense half, then the last four of the eight buckets in one move.
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].table(), "w");
  EXPECT_EQ(plan[1].table(), "emb");
  EXPECT_EQ(plan[1].begin(), 4u);
  EXPECT_EQ(plan[1].end(), 8u);
  EXPECT_EQ(plan[1].source(), 0);
  EXPECT_EQ(plan[1].destination(), 1);
  wire::ShardMap two = Applied(map, plan);
  EXPECT_EQ(BucketLoads(two), (std::map<int, int>{{0, 4}, {1, 4}}));
  EXPECT_TRUE(MoveApplied(two, plan[1]));
  EXPECT_FALSE(MoveApplied(map, plan[1]));
  // A third server: 8 / 3 = 2 each at least, taken from the fuller ones,
  // one move from each giving server; its range holds the other's buckets,
  // which stay.
  plan = PlanMovesTo(two, 2, {0, 1, 2});
  for (const wire::RangeMove& m : plan) {
    if (m.table() == "emb") {
      EXPECT_EQ(m.end(), 8u);
    }
  }
  const wire::ShardMap three = Applied(two, plan);
  std::map<int, int> load = BucketLoads(three);
  EXPECT_EQ(load[2], 2);
  EXPECT_EQ(load[0] + load[1] + load[2], 8);
  EXPECT_LE(std::max(load[0], load[1]) - std::min(load[0], load[1]), 1);
  // Nothing more to even out.
  std::vector<wire::RangeMove> again = PlanMovesTo(three, 2, {0, 1, 2});
  for (const wire::RangeMove& m : again) EXPECT_NE(m.table(), "emb");
}

TEST(RangePlanTest, BucketsOfAReplicatedTableOrBelowAShareStay) {
  wire::ShardMap map;
  AddSparse(&map, 1, 1);  // One bucket: a second server's share is 0.
  EXPECT_TRUE(PlanMovesTo(map, 1, {0, 1}).empty());
  wire::ShardMap chained;
  wire::TableShards* ts = AddSparse(&chained, 4, 2);
  for (wire::SparseBucket& b : *ts->mutable_buckets()) {
    b.add_chain(b.server());
    b.add_chain(1 - b.server());
  }
  EXPECT_TRUE(PlanMovesTo(chained, 2, {0, 1, 2}).empty());
  EXPECT_EQ(PlanMovesFrom(chained, 1, {0, 1}).status().code(), StatusCode::kFailedPrecondition);
}

TEST(RangePlanTest, ADrainMovesEveryBucketToTheOthersEvenly) {
  wire::ShardMap map = MapOf(120 * kDenseChunk, 3);
  for (int id = 0; id < 3; ++id) map.add_servers()->set_id(id);
  AddSparse(&map, 9, 3);
  ASSERT_OK_AND_ASSIGN(std::vector<wire::RangeMove> plan, PlanMovesFrom(map, 1, {0, 1, 2}));
  // Its dense range in two halves (one to each other server); its buckets
  // 1, 4, 7 in two runs, one to each other server.
  ASSERT_EQ(plan.size(), 4u);
  EXPECT_EQ(plan[0].table(), "w");
  EXPECT_EQ(plan[1].table(), "w");
  EXPECT_NE(plan[2].destination(), plan[3].destination());
  EXPECT_EQ(plan[2].begin(), 1u);
  EXPECT_EQ(plan[3].end(), 8u);
  EXPECT_LE(plan[2].end(), plan[3].begin());  // [1, 5) and [7, 8), or [1, 2) and [4, 8).
  const wire::ShardMap after = Applied(map, plan);
  EXPECT_FALSE(HoldsAnything(after, 1));
  const std::map<int, int> load = BucketLoads(after);
  EXPECT_EQ(load.count(1), 0u);
  EXPECT_EQ(load.at(0) + load.at(2), 9);
  EXPECT_LE(std::abs(load.at(0) - load.at(2)), 1);
  // A table without buckets (a map of an older version): its rows cannot move.
  wire::ShardMap old = MapOf(8 * kDenseChunk, 2);
  for (int id = 0; id < 2; ++id) old.add_servers()->set_id(id);
  wire::TableShards* sparse = old.add_tables();
  sparse->mutable_table()->set_name("emb");
  sparse->mutable_table()->set_type(static_cast<int>(TableType::kSparse));
  const Status refused = PlanMovesFrom(old, 1, {0, 1}).status();
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("emb"), std::string::npos) << refused;
}

TEST(RangePlanTest, ApplyMoveRefusesABucketTheSourceDoesNotHold) {
  wire::ShardMap map;
  AddSparse(&map, 4, 2);
  const wire::ShardMap before = map;
  wire::RangeMove m;
  m.set_table("emb");
  m.set_begin(1);  // Server 1's only.
  m.set_end(2);
  m.set_source(0);
  m.set_destination(2);
  EXPECT_EQ(ApplyMove(&map, m).code(), StatusCode::kFailedPrecondition);
  m.set_begin(3);  // Past the last bucket.
  m.set_end(5);
  EXPECT_EQ(ApplyMove(&map, m).code(), StatusCode::kFailedPrecondition);
  m.set_begin(2);  // Empty.
  m.set_end(2);
  EXPECT_EQ(ApplyMove(&map, m).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(map.SerializeAsString(), before.SerializeAsString());
  // Server 0's buckets in [0, 4) (0 and 2) go; server 1's stay.
  m.set_begin(0);
  m.set_end(4);
  ASSERT_OK(ApplyMove(&map, m));
  EXPECT_TRUE(MoveApplied(map, m));
  EXPECT_EQ(BucketLoads(map), (std::map<int, int>{{1, 2}, {2, 2}}));
}

}  // namespace
}  // namespace coordinator_internal
}  // namespace relaxps
