// EventFollowers on its own: a GET_EVENTS request with news is due at once,
// one without waits until an event comes or its wait (clamped to
// kMaxWaitMs) ends, each gets at most its max_events (kMaxPerReply at most)
// lines after its after_seq, and a request is due once. Time comes from a
// FakeClock the test advances: no sleeps.
#include "coordinator/event_followers.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/clock.h"

namespace relaxps {
namespace {

Request GetEvents(uint64_t id, uint64_t after, int wait_ms, uint32_t max_events = 0) {
  Request r;
  r.msg.header.set_type(wire::GET_EVENTS);
  r.msg.header.set_request_id(id);
  wire::EventsRequest* e = r.msg.header.mutable_events_request();
  e->set_after_seq(after);
  e->set_wait_ms(wait_ms);
  e->set_max_events(max_events);
  return r;
}

std::vector<uint64_t> Ids(const std::vector<EventFollowers::Due>& due) {
  std::vector<uint64_t> ids;
  for (const EventFollowers::Due& d : due) ids.push_back(d.req->msg.header.request_id());
  return ids;
}

TEST(EventFollowersTest, ARequestWithNewsIsDueAtOnce) {
  FakeClock clock;
  EventRing ring(100);
  ring.Append("a");
  ring.Append("b");
  EventFollowers f;
  f.Add(GetEvents(1, /*after=*/0, /*wait_ms=*/10000), clock.NowMs());
  std::vector<EventFollowers::Due> due = f.TakeDue(ring, clock.NowMs());
  ASSERT_EQ(Ids(due), (std::vector<uint64_t>{1}));
  EXPECT_EQ(due[0].slice.lines, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(due[0].slice.last_seq, 2u);
  EXPECT_EQ(f.size(), 0u);
  EXPECT_TRUE(f.TakeDue(ring, clock.NowMs()).empty());  // Due once.
}

TEST(EventFollowersTest, AFollowerWaitsForTheNextEventOrItsDeadline) {
  FakeClock clock;
  EventRing ring(100);
  ring.Append("a");
  EventFollowers f;
  f.Add(GetEvents(1, /*after=*/1, /*wait_ms=*/5000), clock.NowMs());
  f.Add(GetEvents(2, /*after=*/1, /*wait_ms=*/1000), clock.NowMs());
  EXPECT_TRUE(f.TakeDue(ring, clock.NowMs()).empty());
  EXPECT_EQ(f.size(), 2u);
  clock.AdvanceMs(999);
  EXPECT_TRUE(f.TakeDue(ring, clock.NowMs()).empty());
  clock.AdvanceMs(1);
  // Request 2's wait ended: answered with nothing new.
  std::vector<EventFollowers::Due> due = f.TakeDue(ring, clock.NowMs());
  ASSERT_EQ(Ids(due), (std::vector<uint64_t>{2}));
  EXPECT_TRUE(due[0].slice.lines.empty());
  EXPECT_EQ(due[0].slice.last_seq, 1u);
  // An event: request 1 gets it before its deadline.
  ring.Append("b");
  due = f.TakeDue(ring, clock.NowMs());
  ASSERT_EQ(Ids(due), (std::vector<uint64_t>{1}));
  EXPECT_EQ(due[0].slice.lines, (std::vector<std::string>{"b"}));
  EXPECT_EQ(f.size(), 0u);
}

TEST(EventFollowersTest, WaitsAndRepliesAreBounded) {
  FakeClock clock;
  EventRing ring(5000);
  for (int i = 0; i < 1500; ++i) ring.Append("e" + std::to_string(i));
  EventFollowers f;
  f.Add(GetEvents(1, 0, 0, /*max_events=*/3), clock.NowMs());
  f.Add(GetEvents(2, 0, 0), clock.NowMs());  // No max: kMaxPerReply.
  f.Add(GetEvents(3, 0, 0, /*max_events=*/100000), clock.NowMs());
  std::vector<EventFollowers::Due> due = f.TakeDue(ring, clock.NowMs());
  ASSERT_EQ(Ids(due), (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(due[0].slice.lines, (std::vector<std::string>{"e0", "e1", "e2"}));
  EXPECT_EQ(due[1].slice.lines.size(), EventFollowers::kMaxPerReply);
  EXPECT_EQ(due[2].slice.lines.size(), EventFollowers::kMaxPerReply);

  // A day-long wait is cut to kMaxWaitMs; a negative one answers at once.
  f.Add(GetEvents(4, /*after=*/1500, /*wait_ms=*/86400000), clock.NowMs());
  f.Add(GetEvents(5, /*after=*/1500, /*wait_ms=*/-5), clock.NowMs());
  EXPECT_EQ(Ids(f.TakeDue(ring, clock.NowMs())), (std::vector<uint64_t>{5}));
  clock.AdvanceMs(EventFollowers::kMaxWaitMs - 1);
  EXPECT_TRUE(f.TakeDue(ring, clock.NowMs()).empty());
  clock.AdvanceMs(1);
  EXPECT_EQ(Ids(f.TakeDue(ring, clock.NowMs())), (std::vector<uint64_t>{4}));
}

TEST(EventFollowersTest, AReaderBehindTheRingLearnsHowManyItMissed) {
  FakeClock clock;
  EventRing ring(2);
  for (const char* line : {"a", "b", "c", "d"}) ring.Append(line);
  EventFollowers f;
  f.Add(GetEvents(1, /*after=*/0, /*wait_ms=*/0), clock.NowMs());
  std::vector<EventFollowers::Due> due = f.TakeDue(ring, clock.NowMs());
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].slice.lines, (std::vector<std::string>{"c", "d"}));
  EXPECT_EQ(due[0].slice.missed, 2u);
}

}  // namespace
}  // namespace relaxps
