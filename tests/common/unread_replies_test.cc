#include "common/unread_replies.h"

#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace relaxps {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

TEST(UnreadRepliesTest, PerPeerAndTotalLimitsAndTheBytesComeBackWithTheTokens) {
  UnreadReplies q(/*per_peer_limit=*/4 * kMiB, /*total_limit=*/10 * kMiB);
  std::vector<std::shared_ptr<void>> held;
  for (int i = 0; i < 4; ++i) {
    auto t = q.Admit("a", kMiB);
    ASSERT_TRUE(t.ok()) << i;
    held.push_back(std::move(t).value());
  }
  auto refused = q.Admit("a", 1);
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("--max_unread_reply_mb_per_peer"), std::string::npos);
  EXPECT_EQ(q.peer_bytes("a"), 4 * kMiB);
  for (const char* p : {"b", "c"}) {
    for (int i = 0; i < 3; ++i) {
      auto t = q.Admit(p, kMiB);
      ASSERT_TRUE(t.ok()) << p << i;
      held.push_back(std::move(t).value());
    }
  }
  EXPECT_EQ(q.total_bytes(), 10 * kMiB);
  // At the total: refused even for a peer with nothing queued.
  auto full = q.Admit("d", 1);
  EXPECT_NE(full.status().message().find("--max_unread_reply_mb)"), std::string::npos)
      << full.status();
  // Tokens released on another thread (ZeroMQ's I/O thread frees them).
  std::thread([&held] { held.clear(); }).join();
  EXPECT_EQ(q.total_bytes(), 0);
  EXPECT_EQ(q.peer_bytes("a"), 0);
  EXPECT_TRUE(q.Admit("a", kMiB).ok());
}

TEST(UnreadRepliesTest, APeerWithNothingQueuedGetsOneReplyLargerThanTheLimits) {
  UnreadReplies q(/*per_peer_limit=*/kMiB, /*total_limit=*/2 * kMiB);
  auto big = q.Admit("a", 5 * kMiB);
  ASSERT_TRUE(big.ok());
  EXPECT_FALSE(q.Admit("a", 1).ok());  // Until it is written.
  EXPECT_FALSE(q.Admit("b", 1).ok());  // And the total is past its limit.
  big = StatusOr<std::shared_ptr<void>>(std::shared_ptr<void>());
  EXPECT_TRUE(q.Admit("b", 1).ok());
}

TEST(UnreadRepliesTest, PeersWithNothingQueuedAreForgotten) {
  UnreadReplies q(kMiB, 0);
  for (int i = 0; i < 5000; ++i) ASSERT_TRUE(q.Admit("peer-" + std::to_string(i), 10).ok());
  // Every token was dropped at once: the table is swept as it grows.
  EXPECT_LT(q.tracked_peers(), 2048u);
  EXPECT_EQ(q.total_bytes(), 0);
}

}  // namespace
}  // namespace relaxps
