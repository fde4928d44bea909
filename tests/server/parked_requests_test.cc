#include "server/internal/parked_requests.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace relaxps {
namespace server_internal {
namespace {

TEST(ParkedRequestsTest, LimitsPerPeerAndInTotalAndTicketsGiveTheBytesBack) {
  ParkedRequests parked(/*per_peer_limit=*/3000, /*total_limit=*/5000);
  std::vector<ParkedRequests::Ticket> tickets;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(parked.Check("a", 1000).ok()) << i;
    tickets.push_back(parked.Charge("a", 1000));
  }
  Status s = parked.Check("a", 1000);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("--max_parked_mb_per_peer"), std::string::npos) << s;
  ASSERT_TRUE(parked.Check("b", 2000).ok());
  tickets.push_back(parked.Charge("b", 2000));
  s = parked.Check("c", 1);
  EXPECT_NE(s.message().find("--max_parked_mb="), std::string::npos) << s;
  EXPECT_EQ(parked.total_bytes(), 5000);
  EXPECT_EQ(parked.peers(), 2u);
  // Moved tickets release once; released ones not again.
  ParkedRequests::Ticket moved = std::move(tickets[0]);
  tickets[0].Release();
  EXPECT_EQ(parked.peer_bytes("a"), 3000);
  moved.Release();
  moved.Release();
  EXPECT_EQ(parked.peer_bytes("a"), 2000);
  tickets.clear();
  EXPECT_EQ(parked.total_bytes(), 0);
  EXPECT_EQ(parked.peers(), 0u);
  EXPECT_EQ(parked.TakeReleasedBytes(), 5000);
  EXPECT_EQ(parked.TakeReleasedBytes(), 0);
}

TEST(ParkedRequestsTest, ZeroLimitsAreUnlimited) {
  ParkedRequests parked(0, 0);
  EXPECT_TRUE(parked.Check("a", int64_t{1} << 40).ok());
}

}  // namespace
}  // namespace server_internal
}  // namespace relaxps
