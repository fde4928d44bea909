// ShardMap chains (--recovery=chain): home placement, validation, removal of
// a dead server (promotion of the next replica, refusal of the last replica)
// and rejoin as tail, for dense ranges and sparse buckets.
#include "common/shard_map.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "tests/test_util.h"

namespace relaxps {
namespace {

wire::ShardMap ChainMap(int servers, int replicas) {
  wire::ShardMap m;
  m.set_version(1);
  m.set_epoch(1);
  test::AddLiveServers(&m, servers);
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

// CheckDenseRange (and so SplitDense) accepts a non-empty range inside the
// table and refuses one that is empty, leaves it, or whose end wraps past
// 2^64, naming the range without a wrapped end.
TEST(ShardMapTest, DenseRangesOutsideTheTableOrWrappingAreRefused) {
  ASSERT_OK_AND_ASSIGN(ShardMap map, ShardMap::FromProto(ChainMap(3, 1)));
  const uint64_t size = 3 * kDenseChunk;
  EXPECT_OK(map.CheckDenseRange("w", 0, size));
  EXPECT_OK(map.CheckDenseRange("w", size - 1, 1));
  EXPECT_EQ(map.CheckDenseRange("nope", 0, 1).code(), StatusCode::kNotFound);
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  for (const auto& [offset, count] : std::vector<std::pair<uint64_t, uint64_t>>{
           {0, 0}, {size, 1}, {size - 1, 2}, {max, 1}, {max - 1, 4}, {1, max}}) {
    SCOPED_TRACE(std::to_string(offset) + " + " + std::to_string(count));
    const Status s = map.CheckDenseRange("w", offset, count);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
    EXPECT_EQ(map.SplitDense("w", offset, count).status().code(), StatusCode::kInvalidArgument);
  }
  EXPECT_NE(map.CheckDenseRange("w", max - 1, 4).message().find(std::to_string(max - 1) + " + 4)"),
            std::string::npos);
  EXPECT_NE(map.CheckDenseRange("w", 0, 0).message().find("range [0, 0) is outside table 'w'"),
            std::string::npos);
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

// A map with sparse table "e" of `buckets` buckets over `servers` servers.
wire::ShardMap SparseMap(int servers, int buckets, int replicas) {
  wire::ShardMap m = ChainMap(servers, replicas);
  wire::TableShards* ts = m.add_tables();
  ts->mutable_table()->set_name("e");
  ts->mutable_table()->set_type(static_cast<int>(TableType::kSparse));
  ts->mutable_table()->set_row_width(4);
  for (const wire::SparseBucket& b : ShardMap::AssignBuckets(buckets, servers, replicas)) {
    *ts->add_buckets() = b;
  }
  return m;
}

std::vector<int> BucketChain(const wire::ShardMap& m, int bucket) {
  const auto& c = m.tables(1).buckets(bucket).chain();
  return std::vector<int>(c.begin(), c.end());
}

TEST(ShardMapChainTest, SparseRowsHashIntoFixedBucketsPlacedLikeRanges) {
  wire::ShardMap m = SparseMap(3, 8, 2);
  ASSERT_OK_AND_ASSIGN(ShardMap map, ShardMap::FromProto(m));
  const wire::TableShards& e = map.proto().tables(1);
  EXPECT_EQ(map.NumBuckets(e), 8);
  EXPECT_EQ(BucketChain(m, 0), (std::vector<int>{0, 1}));
  EXPECT_EQ(BucketChain(m, 5), (std::vector<int>{2, 0}));
  std::vector<int> rows_per_bucket(8, 0);
  for (uint64_t r = 0; r < 8000; ++r) {
    const int b = map.SparseBucket(e, r);
    ASSERT_GE(b, 0);
    ASSERT_LT(b, 8);
    ++rows_per_bucket[b];
    EXPECT_EQ(map.SparseServer(e, r), m.tables(1).buckets(b).server());
  }
  for (int n : rows_per_bucket) EXPECT_GT(n, 800);  // Well mixed.
  // A server loss moves no row to another bucket: only the heads change.
  ASSERT_OK_AND_ASSIGN(int changed, RemoveFromChains(&m, 0, 2));
  EXPECT_EQ(changed, 2 + 5);  // Two dense ranges, buckets 0, 2, 3, 5, 6.
  ASSERT_OK_AND_ASSIGN(ShardMap after, ShardMap::FromProto(m));
  for (uint64_t r = 0; r < 8000; ++r) {
    EXPECT_EQ(after.SparseBucket(after.proto().tables(1), r), map.SparseBucket(e, r));
  }
  EXPECT_EQ(BucketChain(m, 0), (std::vector<int>{1}));
  EXPECT_EQ(m.tables(1).buckets(0).server(), 1);  // Promoted.
  EXPECT_EQ(JoinChains(&m, 0, 3, 2), 2 + 5);
  EXPECT_EQ(BucketChain(m, 0), (std::vector<int>{1, 0}));
  // Without buckets (a map of an older version) row r is on server hash % n.
  m.mutable_tables(1)->clear_buckets();
  ASSERT_OK_AND_ASSIGN(ShardMap legacy, ShardMap::FromProto(m));
  EXPECT_EQ(legacy.SparseServer(legacy.proto().tables(1), 12345), SparseOwner(12345, 3));
}

TEST(ShardMapChainTest, RejectsBadBuckets) {
  wire::ShardMap m = SparseMap(3, 4, 2);
  m.mutable_tables(1)->mutable_buckets(2)->set_server(1);  // Chain starts at 2.
  EXPECT_EQ(ShardMap::FromProto(m).status().code(), StatusCode::kInvalidArgument);
  m = SparseMap(3, 4, 2);
  m.mutable_tables(1)->mutable_buckets(1)->set_server(3);
  EXPECT_EQ(ShardMap::FromProto(m).status().code(), StatusCode::kInvalidArgument);
  m = SparseMap(3, 4, 2);
  m.mutable_tables(1)->mutable_buckets(1)->add_chain(1);  // Named twice.
  EXPECT_EQ(ShardMap::FromProto(m).status().code(), StatusCode::kInvalidArgument);
  m = SparseMap(3, 4, 2);
  *m.mutable_tables(1)->add_ranges() = m.tables(0).ranges(0);
  EXPECT_EQ(ShardMap::FromProto(m).status().code(), StatusCode::kInvalidArgument);
  // The last replica of a bucket cannot be removed.
  m = SparseMap(2, 2, 2);
  ASSERT_OK(RemoveFromChains(&m, 0, 2).status());
  EXPECT_EQ(RemoveFromChains(&m, 1, 2).status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace relaxps
