// WriteTracker: the chunks of a span a range move's copy phase sends again.
#include "server/internal/write_tracker.h"

#include <gtest/gtest.h>

namespace relaxps {
namespace server_internal {
namespace {

using Runs = std::vector<std::pair<uint64_t, uint64_t>>;

Runs Taken(WriteTracker* t) {
  Runs out;
  for (const WriteTracker::Run& r : t->Take()) out.push_back({r.offset, r.count});
  return out;
}

TEST(WriteTrackerTest, WritesMarkTheChunksTheyTouchAsRunsRelativeToTheSpan) {
  // Offsets [100, 1100) in chunks of 300: [100,400) [400,700) [700,1000) [1000,1100).
  WriteTracker t(100, 1100, 300);
  EXPECT_EQ(t.written_keys(), 0u);
  EXPECT_TRUE(Taken(&t).empty());
  t.Mark(0, 50);       // Before the span: ignored.
  t.Mark(1100, 10);    // After it: ignored.
  t.Mark(399, 2);      // Chunks 0 and 1.
  EXPECT_EQ(t.written_keys(), 600u);
  t.Mark(1099, 1000);  // The last, shorter chunk (past the end clipped).
  EXPECT_EQ(t.written_keys(), 700u);
  EXPECT_EQ(Taken(&t), (Runs{{0, 600}, {900, 100}}));
  // Taken: forgotten.
  EXPECT_EQ(t.written_keys(), 0u);
  EXPECT_TRUE(Taken(&t).empty());
  t.Mark(750, 1);
  t.Mark(760, 1);  // The same chunk twice.
  EXPECT_EQ(t.written_keys(), 300u);
  EXPECT_EQ(Taken(&t), (Runs{{600, 300}}));
}

TEST(WriteTrackerTest, MarkAllCoversTheSpanInOneRunAndHugeCountsDoNotWrap) {
  WriteTracker t(0, 200, 64);
  t.MarkAll();
  EXPECT_EQ(t.written_keys(), 200u);
  EXPECT_EQ(Taken(&t), (Runs{{0, 200}}));
  t.Mark(150, ~uint64_t{0});  // offset + n wraps: clipped at the end, not lost.
  EXPECT_EQ(Taken(&t), (Runs{{128, 72}}));
  // More than 64 chunks: several words of bits.
  WriteTracker many(0, 1000, 1);
  many.Mark(63, 3);
  many.Mark(999, 1);
  EXPECT_EQ(Taken(&many), (Runs{{63, 3}, {999, 1}}));
}

}  // namespace
}  // namespace server_internal
}  // namespace relaxps
