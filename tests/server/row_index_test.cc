// Tests of RowIndex (server/internal/row_index.h): the duplicate-id finder of
// sparse pushes.
#include "server/internal/row_index.h"

#include <cstdint>
#include <random>
#include <unordered_map>

#include <gtest/gtest.h>

namespace relaxps {
namespace server_internal {
namespace {

TEST(RowIndexTest, FindsEarlierPositionsAndForgetsThemAtReset) {
  RowIndex index;
  index.Reset(4);
  EXPECT_EQ(index.Insert(7, 0), std::make_pair(0u, true));
  EXPECT_EQ(index.Insert(1ull << 40, 1), std::make_pair(1u, true));
  EXPECT_EQ(index.Insert(7, 2), std::make_pair(0u, false));
  EXPECT_EQ(index.Insert(0, 2), std::make_pair(2u, true));
  index.Reset(4);
  EXPECT_EQ(index.Insert(7, 5), std::make_pair(5u, true));
}

TEST(RowIndexTest, AgreesWithAHashMapAcrossResetsAndGrowth) {
  RowIndex index;
  std::mt19937_64 rng(3);
  for (size_t n : {10, 1000, 3, 5000, 64}) {
    index.Reset(n);
    std::unordered_map<uint64_t, uint32_t> expected;
    for (size_t i = 0; i < n; ++i) {
      // Few distinct ids, many collisions of the low bits.
      const uint64_t id = (rng() % (n / 2 + 1)) << 32;
      auto [it, inserted] = expected.emplace(id, static_cast<uint32_t>(i));
      ASSERT_EQ(index.Insert(id, static_cast<uint32_t>(i)), std::make_pair(it->second, inserted))
          << "n " << n << " i " << i;
    }
  }
}

}  // namespace
}  // namespace server_internal
}  // namespace relaxps
