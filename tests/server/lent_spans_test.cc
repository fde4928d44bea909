// LentSpans: writes of lent keys wait until ZeroMQ gives them back, writes of
// other keys do not, and a span not back within the bound is let go of and
// reported torn.
#include "server/internal/lent_spans.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace relaxps {
namespace server_internal {
namespace {

TEST(LentSpansTest, AWriteOfLentKeysWaitsUntilTheyAreGivenBack) {
  LentSpans lent;
  std::shared_ptr<void> handle = lent.Lend(100, 50);
  EXPECT_TRUE(lent.Any());
  std::atomic<bool> given_back{false};
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    given_back = true;
    handle.reset();  // ZeroMQ freed the message.
  });
  lent.WaitUntilReturned(149, 10, /*wait_ms=*/10000);  // Overlaps key 149.
  EXPECT_TRUE(given_back.load());
  sender.join();
  EXPECT_FALSE(lent.Any());
  EXPECT_EQ(lent.stats().waits, 1u);
  EXPECT_GE(lent.stats().wait_us, 40000u);
  EXPECT_EQ(lent.stats().torn, 0u);
  EXPECT_TRUE(lent.TakeTorn().empty());
}

TEST(LentSpansTest, AWriteOfOtherKeysDoesNotWait) {
  LentSpans lent;
  std::shared_ptr<void> handle = lent.Lend(100, 50);
  lent.WaitUntilReturned(0, 100, /*wait_ms=*/10000);   // Ends right before 100.
  lent.WaitUntilReturned(150, 10, /*wait_ms=*/10000);  // Starts right after 149.
  EXPECT_EQ(lent.stats().waits, 0u);
  EXPECT_TRUE(lent.Any());
  EXPECT_EQ(lent.stats().lent, 1u);
  EXPECT_EQ(lent.stats().lent_keys, 50u);
}

TEST(LentSpansTest, ASpanNotBackWithinTheBoundIsLetGoOfAsTorn) {
  LentSpans lent;
  std::shared_ptr<void> stuck = lent.Lend(0, 10);
  std::shared_ptr<void> other = lent.Lend(1000, 10);
  const auto start = std::chrono::steady_clock::now();
  lent.WaitUntilReturned(5, 1, /*wait_ms=*/30);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(30));
  EXPECT_EQ(lent.stats().torn, 1u);
  const std::vector<LentSpans::Span> torn = lent.TakeTorn();
  ASSERT_EQ(torn.size(), 1u);
  EXPECT_EQ(torn[0].offset, 0u);
  EXPECT_EQ(torn[0].count, 10u);
  EXPECT_TRUE(lent.TakeTorn().empty());
  // The next write of those keys does not wait for it again; the other span
  // is still lent.
  lent.WaitUntilReturned(5, 1, /*wait_ms=*/10000);
  EXPECT_EQ(lent.stats().waits, 1u);
  EXPECT_TRUE(lent.Any());
  stuck.reset();  // Given back late: nothing left to give.
  other.reset();
  EXPECT_FALSE(lent.Any());
}

TEST(LentSpansTest, AHandleMayOutliveTheSpans) {
  std::shared_ptr<void> handle;
  {
    LentSpans lent;
    handle = lent.Lend(0, 1);
  }
  handle.reset();  // Must not touch freed memory (ASAN).
}

}  // namespace
}  // namespace server_internal
}  // namespace relaxps
