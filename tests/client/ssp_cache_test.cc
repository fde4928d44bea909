// SspCache on its own: which pulls it answers (a range inside the last dense
// pull of the table, fresh within the staleness bound), what it answers with,
// and that a Fill replaces the entry. Clocks here are worker clocks (logical
// steps), passed in: the cache reads no time, so no clock and no sleeps.
#include "client/internal/ssp_cache.h"

#include <atomic>
#include <cstdint>
#include <limits>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace relaxps {
namespace client_internal {
namespace {

// n floats first, first + 1, ...
FloatBuffer Iota(size_t n, float first) {
  FloatBuffer b(n);
  for (size_t i = 0; i < n; ++i) b[i] = first + static_cast<float>(i);
  return b;
}

// n copies of v: what an untouched output buffer holds.
FloatBuffer Filled(size_t n, float v) {
  FloatBuffer b(n);
  for (size_t i = 0; i < n; ++i) b[i] = v;
  return b;
}

std::vector<float> Values(const FloatBuffer& b) { return std::vector<float>(b.data(), b.data() + b.size()); }

constexpr float kUntouched = -42.0f;
constexpr int64_t kUnsetClock = -7;

TEST(SspCacheTest, MissesBeforeAnyFillAndForAnotherTable) {
  SspCache cache(/*staleness_bound=*/3);
  FloatBuffer out = Filled(4, kUntouched);
  int64_t params_clock = kUnsetClock;
  EXPECT_FALSE(cache.Serve("w", 0, out, 0, &params_clock));
  cache.Fill("w", 0, Iota(16, 0.0f), 5);
  EXPECT_FALSE(cache.Serve("other", 0, out, 5, &params_clock));
  // A miss leaves the caller's buffer and clock alone.
  EXPECT_EQ(Values(out), Values(Filled(4, kUntouched)));
  EXPECT_EQ(params_clock, kUnsetClock);
  EXPECT_EQ(cache.hits(), 0u);
  EXPECT_EQ(cache.misses(), 2u);
}

TEST(SspCacheTest, ServesAnyRangeInsideTheLastPullWithItsValuesAndClock) {
  SspCache cache(/*staleness_bound=*/2);
  // Keys [100, 110) hold 100, 101, ..., 109.
  cache.Fill("w", 100, Iota(10, 100.0f), 7);

  FloatBuffer whole = Filled(10, kUntouched);
  int64_t params_clock = kUnsetClock;
  ASSERT_TRUE(cache.Serve("w", 100, whole, 7, &params_clock));
  EXPECT_EQ(Values(whole), Values(Iota(10, 100.0f)));
  EXPECT_EQ(params_clock, 7);

  FloatBuffer middle = Filled(4, kUntouched);
  params_clock = kUnsetClock;
  ASSERT_TRUE(cache.Serve("w", 103, middle, 8, &params_clock));
  EXPECT_EQ(Values(middle), (std::vector<float>{103, 104, 105, 106}));
  EXPECT_EQ(params_clock, 7);

  FloatBuffer last = Filled(1, kUntouched);
  ASSERT_TRUE(cache.Serve("w", 109, last, 9, &params_clock));
  EXPECT_EQ(Values(last), (std::vector<float>{109}));

  EXPECT_EQ(cache.hits(), 3u);
  EXPECT_EQ(cache.misses(), 0u);
}

TEST(SspCacheTest, MissesARangeThatLeavesThePull) {
  SspCache cache(/*staleness_bound=*/2);
  cache.Fill("w", 100, Iota(10, 100.0f), 7);
  struct Range {
    uint64_t offset;
    size_t n;
  };
  // Starts before, ends after, lies just past, contains the pull.
  for (const Range r : {Range{99, 2}, Range{108, 3}, Range{110, 1}, Range{99, 12}, Range{0, 4}}) {
    FloatBuffer out = Filled(r.n, kUntouched);
    int64_t params_clock = kUnsetClock;
    EXPECT_FALSE(cache.Serve("w", r.offset, out, 7, &params_clock))
        << "[" << r.offset << ", " << r.offset + r.n << ")";
    EXPECT_EQ(Values(out), Values(Filled(r.n, kUntouched)));
    EXPECT_EQ(params_clock, kUnsetClock);
  }
  EXPECT_EQ(cache.hits(), 0u);
  EXPECT_EQ(cache.misses(), 5u);
}

// Values reflecting clock c serve a worker at clock w iff c >= w - bound.
TEST(SspCacheTest, ServesOnlyWithinTheStalenessBound) {
  SspCache cache(/*staleness_bound=*/2);
  cache.Fill("w", 0, Iota(8, 0.0f), 5);
  FloatBuffer out(8);
  int64_t params_clock = kUnsetClock;
  EXPECT_TRUE(cache.Serve("w", 0, out, 5, &params_clock));
  EXPECT_TRUE(cache.Serve("w", 0, out, 6, &params_clock));
  EXPECT_TRUE(cache.Serve("w", 0, out, 7, &params_clock));  // 5 >= 7 - 2: the bound itself.
  EXPECT_EQ(params_clock, 5);
  params_clock = kUnsetClock;
  EXPECT_FALSE(cache.Serve("w", 0, out, 8, &params_clock));  // 5 < 8 - 2.
  EXPECT_FALSE(cache.Serve("w", 0, out, 100, &params_clock));
  EXPECT_EQ(params_clock, kUnsetClock);
  // Values newer than the worker (another worker ran ahead) are fresh.
  EXPECT_TRUE(cache.Serve("w", 0, out, 0, &params_clock));
  EXPECT_EQ(cache.hits(), 4u);
  EXPECT_EQ(cache.misses(), 2u);
}

// Bound 0 (what BSP-like strictness would be): only values of the worker's
// own clock or newer.
TEST(SspCacheTest, ZeroBoundServesOnlyTheWorkersOwnClock) {
  SspCache cache(/*staleness_bound=*/0);
  cache.Fill("w", 0, Iota(4, 0.0f), 5);
  FloatBuffer out(4);
  int64_t params_clock = kUnsetClock;
  EXPECT_TRUE(cache.Serve("w", 0, out, 5, &params_clock));
  EXPECT_FALSE(cache.Serve("w", 0, out, 6, &params_clock));
}

TEST(SspCacheTest, FillReplacesTheTablesEntryEvenWithAnOlderClock) {
  SspCache cache(/*staleness_bound=*/2);
  cache.Fill("w", 0, Iota(8, 0.0f), 3);
  cache.Fill("w", 4, Iota(2, 50.0f), 9);  // Keys [4, 6) only.
  FloatBuffer out = Filled(2, kUntouched);
  int64_t params_clock = kUnsetClock;
  // The first pull's range is gone, not merged.
  EXPECT_FALSE(cache.Serve("w", 0, out, 3, &params_clock));
  EXPECT_FALSE(cache.Serve("w", 3, out, 9, &params_clock));
  ASSERT_TRUE(cache.Serve("w", 4, out, 9, &params_clock));
  EXPECT_EQ(Values(out), (std::vector<float>{50, 51}));
  EXPECT_EQ(params_clock, 9);
  // The newest Fill wins whatever its clock: now too stale for clock 9.
  cache.Fill("w", 4, Iota(2, 70.0f), 1);
  params_clock = kUnsetClock;
  EXPECT_FALSE(cache.Serve("w", 4, out, 9, &params_clock));
  ASSERT_TRUE(cache.Serve("w", 4, out, 3, &params_clock));
  EXPECT_EQ(Values(out), (std::vector<float>{70, 71}));
  EXPECT_EQ(params_clock, 1);
}

TEST(SspCacheTest, KeepsACopyOfTheFilledValues) {
  SspCache cache(/*staleness_bound=*/1);
  FloatBuffer pulled = Iota(4, 10.0f);
  cache.Fill("w", 0, pulled, 2);
  // The caller reuses its buffer (the next pull lands in it).
  for (size_t i = 0; i < pulled.size(); ++i) pulled[i] = -1.0f;
  FloatBuffer out(4);
  int64_t params_clock = kUnsetClock;
  ASSERT_TRUE(cache.Serve("w", 0, out, 2, &params_clock));
  EXPECT_EQ(Values(out), (std::vector<float>{10, 11, 12, 13}));
  // Nor does writing into a served buffer change the cache.
  out[0] = 99.0f;
  FloatBuffer again(4);
  ASSERT_TRUE(cache.Serve("w", 0, again, 2, &params_clock));
  EXPECT_EQ(Values(again), (std::vector<float>{10, 11, 12, 13}));
}

TEST(SspCacheTest, TablesHaveTheirOwnEntries) {
  SspCache cache(/*staleness_bound=*/1);
  cache.Fill("a", 0, Iota(4, 0.0f), 10);
  cache.Fill("b", 2, Iota(4, 20.0f), 3);
  FloatBuffer out(2);
  int64_t params_clock = kUnsetClock;
  ASSERT_TRUE(cache.Serve("a", 0, out, 10, &params_clock));
  EXPECT_EQ(Values(out), (std::vector<float>{0, 1}));
  EXPECT_EQ(params_clock, 10);
  // "b" covers [2, 6), not [0, 2), and is too stale for clock 10.
  EXPECT_FALSE(cache.Serve("b", 0, out, 3, &params_clock));
  EXPECT_FALSE(cache.Serve("b", 2, out, 10, &params_clock));
  ASSERT_TRUE(cache.Serve("b", 4, out, 4, &params_clock));
  EXPECT_EQ(Values(out), (std::vector<float>{22, 23}));
  EXPECT_EQ(params_clock, 3);
}

// Fill and Serve from several threads: a hit always sees one whole Fill
// (values and clock of the same pull), never a mix. No sleeps: the threads
// run a fixed number of iterations.
TEST(SspCacheTest, ConcurrentFillsAndServesSeeWholeEntries) {
  constexpr size_t kKeys = 256;
  constexpr int kRounds = 2000;
  SspCache cache(/*staleness_bound=*/1 << 20);
  cache.Fill("w", 0, Filled(kKeys, 0.0f), 0);
  std::atomic<int> torn{0};
  std::thread writer([&] {
    for (int c = 1; c <= kRounds; ++c) cache.Fill("w", 0, Filled(kKeys, static_cast<float>(c)), c);
  });
  std::thread reader([&] {
    FloatBuffer out(kKeys);
    for (int i = 0; i < kRounds; ++i) {
      int64_t params_clock = kUnsetClock;
      if (!cache.Serve("w", 0, out, 0, &params_clock)) {
        torn.fetch_add(1);
        continue;
      }
      for (size_t k = 0; k < kKeys; ++k) {
        if (out[k] != static_cast<float>(params_clock)) {
          torn.fetch_add(1);
          break;
        }
      }
    }
  });
  writer.join();
  reader.join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_EQ(cache.hits(), static_cast<uint64_t>(kRounds));
}

// A pull far past the cached range (an offset near 2^64; the cache does not
// rely on Client::Pull having validated it) is not covered: a miss that
// leaves `out` untouched. A coverage test computing offset + out.size()
// would wrap around, count it as covered and read far out of bounds.
TEST(SspCacheTest, AnOffsetNearTheEndOfTheKeySpaceIsAMiss) {
  SspCache cache(/*staleness_bound=*/1);
  cache.Fill("w", 0, Iota(8, 0.0f), 1);
  FloatBuffer out = Filled(4, kUntouched);
  int64_t params_clock = kUnsetClock;
  EXPECT_FALSE(cache.Serve("w", std::numeric_limits<uint64_t>::max() - 1, out, 1, &params_clock));
  EXPECT_EQ(Values(out), Values(Filled(4, kUntouched)));
}

}  // namespace
}  // namespace client_internal
}  // namespace relaxps
