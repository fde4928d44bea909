// Barriers in isolation: the start barrier and worker barriers, with times
// passed in (no clock, no sleeps).
#include "coordinator/barriers.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace relaxps {
namespace {

// Records how each held request was answered.
struct Answers {
  std::vector<Status> got;
  Barriers::Release Next() {
    const size_t i = got.size();
    got.emplace_back(InternalError("unanswered"));
    return [this, i](const Status& s) { got[i] = s; };
  }
  bool answered(size_t i) const { return got[i].code() != StatusCode::kInternal; }
};

TEST(BarriersTest, StartBarrierOpensOnceEnoughWorkersAreLiveAndStaysOpen) {
  Barriers b(2);
  Answers a;
  b.WaitStart(1000, a.Next());
  b.Update({0}, 10);
  EXPECT_FALSE(a.answered(0));
  b.Update({0, 1}, 20);
  EXPECT_TRUE(a.got[0].ok()) << a.got[0];
  // A worker died and a replacement joins: no waiting any more.
  b.Update({1}, 30);
  b.WaitStart(1000, a.Next());
  EXPECT_TRUE(a.got[1].ok()) << a.got[1];
}

TEST(BarriersTest, StartBarrierTimesOutNamingTheCount) {
  Barriers b(3);
  Answers a;
  b.WaitStart(100, a.Next());
  b.Update({0}, 99);
  EXPECT_FALSE(a.answered(0));
  b.Update({0}, 100);
  EXPECT_EQ(a.got[0].code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(a.got[0].message().find("1 of 3 workers"), std::string::npos) << a.got[0];
}

TEST(BarriersTest, NoStartBarrierWithoutWorkerCount) {
  Barriers b(0);
  Answers a;
  b.WaitStart(100, a.Next());
  EXPECT_TRUE(a.got[0].ok());
}

TEST(BarriersTest, WorkerBarrierPassesWhenEveryLiveWorkerArrived) {
  Barriers b(0);
  Answers a;
  b.Update({0, 1, 2}, 0);
  b.Arrive(0, 0, 1000, a.Next());
  b.Arrive(2, 0, 1000, a.Next());
  b.Update({0, 1, 2}, 1);
  EXPECT_FALSE(a.answered(0));
  b.Arrive(1, 0, 1000, a.Next());
  b.Update({0, 1, 2}, 2);
  for (const Status& s : a.got) EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(b.generation(), 1);
  // A late joiner's stale generation passes at once; one ahead is refused.
  b.Arrive(3, 0, 1000, a.Next());
  EXPECT_TRUE(a.got[3].ok());
  b.Arrive(3, 5, 1000, a.Next());
  EXPECT_EQ(a.got[4].code(), StatusCode::kInvalidArgument);
}

TEST(BarriersTest, DeadWorkerIsNotWaitedForAndTimeoutsNameTheMissing) {
  Barriers b(0);
  Answers a;
  b.Update({0, 1, 2}, 0);
  b.Arrive(0, 0, 50, a.Next());
  b.Update({0, 1, 2}, 60);
  EXPECT_EQ(a.got[0].code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(a.got[0].message().find("worker(s) 1, 2"), std::string::npos) << a.got[0];
  b.Arrive(0, 0, 1000, a.Next());
  b.Arrive(1, 0, 1000, a.Next());
  b.Update({0, 1}, 70);  // Worker 2 died.
  EXPECT_TRUE(a.got[1].ok());
  EXPECT_TRUE(a.got[2].ok());
}

}  // namespace
}  // namespace relaxps
