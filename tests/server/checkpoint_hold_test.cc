// CheckpointHold on its own: writes wait while a checkpoint is written,
// pulls pass unless their sender has a held request, everything held goes
// on in arrival order once the last checkpoint in progress ended, and how
// long the first of them waited. Time comes from a FakeClock the test
// advances: no sleeps.
#include "server/internal/checkpoint_hold.h"

#include <vector>

#include <gtest/gtest.h>

#include "common/clock.h"

namespace relaxps {
namespace server_internal {
namespace {

Request Data(wire::MsgType type, int sender, uint64_t id) {
  Request r;
  r.msg.header.set_type(type);
  r.msg.header.set_sender(sender);
  r.msg.header.set_request_id(id);
  return r;
}

std::vector<uint64_t> Ids(const std::deque<Request>& requests) {
  std::vector<uint64_t> ids;
  for (const Request& r : requests) ids.push_back(r.msg.header.request_id());
  return ids;
}

// Holds `r` if it must wait; true if it did.
bool Offer(CheckpointHold* hold, Request r, const FakeClock& clock) {
  if (!hold->Holds(r.msg.header)) return false;
  hold->Add(std::move(r), clock.NowMs());
  return true;
}

TEST(CheckpointHoldTest, NothingWaitsWithoutACheckpointBeingWritten) {
  FakeClock clock;
  CheckpointHold hold;
  EXPECT_FALSE(hold.writing());
  for (wire::MsgType type : {wire::PUSH, wire::PUSH_PULL, wire::PUSH_ROWS, wire::CLOCK,
                             wire::PULL, wire::PULL_ROWS}) {
    EXPECT_FALSE(Offer(&hold, Data(type, 1, 1), clock)) << wire::MsgType_Name(type);
  }
  EXPECT_EQ(hold.held(), 0u);
}

TEST(CheckpointHoldTest, WritesAndTheirSendersLaterRequestsWaitInOrder) {
  FakeClock clock;
  CheckpointHold hold;
  hold.Begin();
  EXPECT_TRUE(hold.writing());
  // Another worker's pull passes: it has nothing held.
  EXPECT_FALSE(Offer(&hold, Data(wire::PULL, 2, 1), clock));
  clock.AdvanceMs(5);
  EXPECT_TRUE(Offer(&hold, Data(wire::PUSH, 1, 2), clock));
  clock.AdvanceMs(10);
  // Worker 1's pull after its push waits too (it must see its push).
  EXPECT_TRUE(Offer(&hold, Data(wire::PULL_ROWS, 1, 3), clock));
  EXPECT_FALSE(Offer(&hold, Data(wire::PULL_ROWS, 2, 4), clock));
  EXPECT_TRUE(Offer(&hold, Data(wire::CLOCK, 2, 5), clock));  // A write of worker 2.
  EXPECT_TRUE(Offer(&hold, Data(wire::PULL, 2, 6), clock));   // Now worker 2 waits too.
  EXPECT_EQ(hold.held(), 4u);

  clock.AdvanceMs(20);
  CheckpointHold::Released released = hold.End(clock.NowMs());
  EXPECT_EQ(Ids(released.requests), (std::vector<uint64_t>{2, 3, 5, 6}));
  EXPECT_EQ(released.waited_ms, 30);  // Since the first held one (the push).
  EXPECT_FALSE(hold.writing());
  EXPECT_EQ(hold.held(), 0u);
  // Senders are forgotten with their requests.
  hold.Begin();
  EXPECT_FALSE(Offer(&hold, Data(wire::PULL, 1, 7), clock));
}

TEST(CheckpointHoldTest, OnlyTheLastCheckpointInProgressReleases) {
  FakeClock clock;
  CheckpointHold hold;
  hold.Begin();
  hold.Begin();  // A second checkpoint captured before the first is durable.
  EXPECT_TRUE(Offer(&hold, Data(wire::PUSH, 1, 1), clock));
  clock.AdvanceMs(100);
  CheckpointHold::Released first = hold.End(clock.NowMs());
  EXPECT_TRUE(first.requests.empty());
  EXPECT_TRUE(hold.writing());
  EXPECT_EQ(hold.held(), 1u);
  EXPECT_TRUE(Offer(&hold, Data(wire::PUSH, 1, 2), clock));
  clock.AdvanceMs(50);
  CheckpointHold::Released second = hold.End(clock.NowMs());
  EXPECT_EQ(Ids(second.requests), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(second.waited_ms, 150);
}

TEST(CheckpointHoldTest, AnEndWithNothingHeldReleasesNothing) {
  FakeClock clock;
  CheckpointHold hold;
  hold.Begin();
  CheckpointHold::Released released = hold.End(clock.NowMs());
  EXPECT_TRUE(released.requests.empty());
  EXPECT_EQ(released.waited_ms, 0);
  EXPECT_FALSE(hold.writing());
}

TEST(CheckpointHoldDeathTest, AnEndWithoutABeginIsABug) {
  FakeClock clock;
  CheckpointHold hold;
  EXPECT_DEATH(hold.End(clock.NowMs()), "did not begin");
}

}  // namespace
}  // namespace server_internal
}  // namespace relaxps
