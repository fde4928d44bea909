// How large requests are cut into parts (client/internal/dense_parts.h):
// coverage, alignment, the part cap and the continues flags, on hand-made
// slices. The parts' reassembly and their single optimizer step are tested
// against whole requests on a real cluster in client_test.cc
// (SplitDenseRequestsMatchWholeOnesBitForBit).
#include "client/internal/dense_parts.h"

#include <gtest/gtest.h>

#include <vector>

namespace relaxps {
namespace client_internal {
namespace {

constexpr uint64_t kMiBKeys = (uint64_t{1} << 20) / sizeof(float);

DenseSlice Slice(int server, uint64_t begin, uint64_t count, uint64_t offset) {
  DenseSlice s;
  s.server = server;
  s.begin = begin;
  s.count = count;
  s.offset = offset;
  s.range_begin = begin - begin % 4096;
  s.range_end = begin + count;
  return s;
}

// Every part of `in`'s slices, in order, covers its slice exactly.
void ExpectCovers(const std::vector<DenseSlice>& in, const std::vector<DenseSlice>& parts) {
  size_t p = 0;
  for (const DenseSlice& s : in) {
    uint64_t next = s.begin;
    while (p < parts.size() && parts[p].server == s.server && next < s.begin + s.count) {
      EXPECT_EQ(parts[p].begin, next);
      EXPECT_EQ(parts[p].offset, s.offset + (next - s.begin));
      EXPECT_GT(parts[p].count, 0u);
      EXPECT_EQ(parts[p].range_begin, s.range_begin);
      next += parts[p].count;
      ++p;
    }
    EXPECT_EQ(next, s.begin + s.count) << "slice at " << s.begin;
  }
  EXPECT_EQ(p, parts.size());
}

TEST(DensePartsTest, SmallSlicesStayWholeAndNoFlagsAreMade) {
  std::vector<DenseSlice> slices = {Slice(0, 0, kMiBKeys, 0), Slice(1, kMiBKeys, 100, kMiBKeys)};
  const std::vector<DenseSlice> before = slices;
  std::vector<bool> continues = {true};
  SplitDenseParts(4 * kMiBKeys, kMiBKeys / 2, &slices, &continues);
  ASSERT_EQ(slices.size(), 2u);
  EXPECT_EQ(slices[0].count, before[0].count);
  EXPECT_TRUE(continues.empty());
}

TEST(DensePartsTest, A16MiBSliceGoesAsEightAlignedPartsThatCoverIt) {
  std::vector<DenseSlice> slices = {Slice(0, 0, 16 * kMiBKeys, 0)};
  const std::vector<DenseSlice> in = slices;
  std::vector<bool> continues;
  SplitDenseParts(4 * kMiBKeys, kMiBKeys / 2, &slices, &continues);
  ASSERT_EQ(slices.size(), kMaxSplitParts);
  ExpectCovers(in, slices);
  ASSERT_EQ(continues.size(), slices.size());
  for (size_t i = 0; i < slices.size(); ++i) {
    EXPECT_EQ(continues[i], i > 0);
    EXPECT_EQ(slices[i].begin % kDensePartAlignKeys, 0u);
    EXPECT_EQ(slices[i].count, 2 * kMiBKeys);
  }
}

// A slice of an odd size starting at an odd key (a request at an offset):
// inner boundaries are aligned in the table's key space, the outer ones are
// the slice's own, and the parts stay within one alignment unit of even.
TEST(DensePartsTest, InnerBoundariesOfAnUnevenSliceAreAligned) {
  const uint64_t begin = 3 * 4096 + 77, count = 6 * kMiBKeys + 12345;
  std::vector<DenseSlice> slices = {Slice(2, begin, count, 500)};
  const std::vector<DenseSlice> in = slices;
  std::vector<bool> continues;
  SplitDenseParts(4 * kMiBKeys, kMiBKeys, &slices, &continues);
  ASSERT_EQ(slices.size(), 7u);  // ceil(count / 1 MiB of keys).
  ExpectCovers(in, slices);
  EXPECT_EQ(slices.front().begin, begin);
  for (size_t i = 1; i < slices.size(); ++i) {
    EXPECT_EQ(slices[i].begin % kDensePartAlignKeys, 0u) << "part " << i;
    EXPECT_NEAR(static_cast<double>(slices[i].count), static_cast<double>(count) / 7,
                2.0 * kDensePartAlignKeys)
        << "part " << i;
  }
}

// Parts too small to align (a test's tiny split sizes) keep the even
// boundaries: never an empty part, never a gap.
TEST(DensePartsTest, TinyPartsFallBackToEvenBoundaries) {
  std::vector<DenseSlice> slices = {Slice(0, 10, 1000, 0), Slice(1, 1010, 40, 1000),
                                    Slice(0, 1050, 300, 1040)};
  const std::vector<DenseSlice> in = slices;
  std::vector<bool> continues;
  SplitDenseParts(/*split_keys=*/64, /*part_keys=*/16, &slices, &continues);
  ExpectCovers(in, slices);
  // 8 (capped) + 1 + 8 (capped).
  ASSERT_EQ(slices.size(), 17u);
  ASSERT_EQ(continues.size(), 17u);
  EXPECT_FALSE(continues[0]);
  EXPECT_TRUE(continues[7]);
  EXPECT_FALSE(continues[8]);  // The unsplit slice of server 1.
  EXPECT_FALSE(continues[9]);  // The first part of the third slice.
  EXPECT_TRUE(continues[16]);
}

TEST(DensePartsTest, NumSplitPartsIsCappedAndOneWithoutAPartSize) {
  EXPECT_EQ(NumSplitParts(100, 200, 10), 1u);
  EXPECT_EQ(NumSplitParts(1000, 200, 0), 1u);
  EXPECT_EQ(NumSplitParts(300, 200, 100), 3u);
  EXPECT_EQ(NumSplitParts(301, 200, 100), 4u);
  EXPECT_EQ(NumSplitParts(1 << 30, 200, 100), kMaxSplitParts);
}

TEST(CoalesceByServerTest, AdjacentSlicesOfOneServerBecomeOneKeepingTheFirstRange) {
  // Ranges [0,4k) [4k,8k) on server 0, [8k,12k) on 1, [12k,16k) [16k,20k) on
  // 0: the request [1000, 18000) is 3 slices after the merge, one per run.
  std::vector<DenseSlice> slices = {
      Slice(0, 1000, 3096, 0),    Slice(0, 4096, 4096, 3096),   Slice(1, 8192, 4096, 7192),
      Slice(0, 12288, 4096, 11288), Slice(0, 16384, 1616, 15384)};
  slices[0].range_begin = 0;
  slices[0].range_end = 4096;
  CoalesceByServer(&slices);
  ASSERT_EQ(slices.size(), 3u);
  EXPECT_EQ(slices[0].server, 0);
  EXPECT_EQ(slices[0].begin, 1000u);
  EXPECT_EQ(slices[0].count, 8192u - 1000u);
  EXPECT_EQ(slices[0].offset, 0u);
  // The range its first key lies in: begin + count past range_end says it
  // spans several.
  EXPECT_EQ(slices[0].range_begin, 0u);
  EXPECT_EQ(slices[0].range_end, 4096u);
  EXPECT_EQ(slices[1].server, 1);
  EXPECT_EQ(slices[1].count, 4096u);
  EXPECT_EQ(slices[2].server, 0);
  EXPECT_EQ(slices[2].begin, 12288u);
  EXPECT_EQ(slices[2].count, 4096u + 1616u);
  EXPECT_EQ(slices[2].offset, 11288u);
}

TEST(CoalesceByServerTest, OneSliceOrNoneIsLeftAlone) {
  std::vector<DenseSlice> none;
  CoalesceByServer(&none);
  EXPECT_TRUE(none.empty());
  std::vector<DenseSlice> one = {Slice(2, 0, 10, 0)};
  CoalesceByServer(&one);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].count, 10u);
}

}  // namespace
}  // namespace client_internal
}  // namespace relaxps
