#include "coordinator/control_limiter.h"

#include <string>

#include <gtest/gtest.h>

namespace relaxps {
namespace {

TEST(ControlLimiterTest, PerPeerLimitRefusesOnlyThatPeerAndRefillsOverAMinute) {
  ControlLimiter limiter(/*per_peer_per_min=*/3, /*total_per_min=*/100);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(limiter.Take("a", "SET_LEARNING_RATE", 0).ok());
  Status s = limiter.Take("a", "SET_LEARNING_RATE", 0);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("--max_control_per_min_per_peer"), std::string::npos) << s;
  EXPECT_TRUE(limiter.Take("b", "SET_LEARNING_RATE", 0).ok());
  // A third of a minute later one more of 3 per minute is due.
  EXPECT_FALSE(limiter.Take("a", "X", 19999).ok());
  EXPECT_TRUE(limiter.Take("a", "X", 20000).ok());
  EXPECT_FALSE(limiter.Take("a", "X", 20000).ok());
}

TEST(ControlLimiterTest, TotalLimitRefusesEveryoneAndARefusalTakesNothing) {
  ControlLimiter limiter(/*per_peer_per_min=*/10, /*total_per_min=*/4);
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(limiter.Take("p" + std::to_string(i), "TRIGGER_CHECKPOINT", 0).ok());
  }
  Status s = limiter.Take("q", "TRIGGER_CHECKPOINT", 0);
  EXPECT_NE(s.message().find("--max_control_per_min)"), std::string::npos) << s;
  // A minute later the total has refilled.
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(limiter.Take("q", "X", 60000 + i).ok()) << i;
}

TEST(ControlLimiterTest, ZeroIsUnlimitedAndIdlePeersAreForgotten) {
  ControlLimiter unlimited(0, 0);
  for (int i = 0; i < 100000; ++i) ASSERT_TRUE(unlimited.Take("a", "X", 0).ok());
  ControlLimiter limiter(5, 0);
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(limiter.Take("p" + std::to_string(i), "X", 0).ok());
  EXPECT_EQ(limiter.tracked_peers(), 1000u);
  ASSERT_TRUE(limiter.Take("late", "X", 60000).ok());
  EXPECT_EQ(limiter.tracked_peers(), 1u);
}

}  // namespace
}  // namespace relaxps
