// MemberSession on its own: when the coordinator counts as lost (silence
// over coordinator_timeout_ms since the start, the last answer or a
// registration again), failures logged one in ten, the job's end reported
// once, the announced checkpoint only growing, one map watch at a time and
// one failover log per epoch. Time comes from a FakeClock the test
// advances: no sleeps.
#include "client/internal/member_session.h"

#include <vector>

#include <gtest/gtest.h>

#include "common/clock.h"

namespace relaxps {
namespace client_internal {
namespace {

constexpr int64_t kTimeoutMs = 3000;

wire::HeartbeatReply Reply(bool job_done = false, uint64_t checkpoint_seq = 0) {
  wire::HeartbeatReply r;
  r.set_job_done(job_done);
  if (checkpoint_seq > 0) r.mutable_latest_checkpoint()->set_seq(checkpoint_seq);
  return r;
}

TEST(MemberSessionTest, TheCoordinatorIsLostAfterItsTimeoutOfSilence) {
  FakeClock clock;
  MemberSession s("tcp://coord:5000", kTimeoutMs, &clock);
  // A long period: the thread never beats while the test drives the session.
  s.Start(/*period_ms=*/3600 * 1000, [] {});
  EXPECT_TRUE(s.started());
  EXPECT_TRUE(s.healthy());

  clock.AdvanceMs(kTimeoutMs);
  MemberSession::Silence silence = s.Failed();
  EXPECT_EQ(silence.silent_ms, kTimeoutMs);
  EXPECT_FALSE(silence.lost);  // Not over the timeout yet.
  EXPECT_FALSE(s.healthy());
  clock.AdvanceMs(1);
  silence = s.Failed();
  EXPECT_TRUE(silence.lost);
  EXPECT_EQ(silence.why,
            "no answer from the coordinator tcp://coord:5000 for 3001 ms "
            "(--coordinator_timeout_ms=3000)");

  // An answer starts the silence again.
  s.Answered(Reply());
  EXPECT_TRUE(s.healthy());
  clock.AdvanceMs(kTimeoutMs);
  EXPECT_FALSE(s.Failed().lost);
  // So does registering again.
  clock.AdvanceMs(kTimeoutMs);
  s.Registered();
  EXPECT_TRUE(s.healthy());
  clock.AdvanceMs(kTimeoutMs);
  EXPECT_FALSE(s.Failed().lost);
  s.Stop();
  s.Stop();  // Idempotent.
}

TEST(MemberSessionTest, FailuresAreLoggedOneInTenUntilAnAnswer) {
  FakeClock clock;
  MemberSession s("tcp://coord:5000", kTimeoutMs, &clock);
  EXPECT_FALSE(s.started());  // Not a worker: no thread.
  std::vector<int> logged;
  for (int i = 0; i < 21; ++i) {
    EXPECT_EQ(s.ShouldLog(), i % 10 == 0);
    if (s.Failed().log) logged.push_back(i);
  }
  EXPECT_EQ(logged, (std::vector<int>{0, 10, 20}));
  EXPECT_EQ(s.failures(), 21);
  s.Answered(Reply());
  EXPECT_EQ(s.failures(), 0);
  EXPECT_TRUE(s.Failed().log);  // The first failure after an answer is logged.
}

TEST(MemberSessionTest, TheJobsEndIsReportedOnceAndTheCheckpointOnlyGrows) {
  FakeClock clock;
  MemberSession s("tcp://coord:5000", kTimeoutMs, &clock);
  EXPECT_EQ(s.checkpoint_seq(), 0u);
  EXPECT_FALSE(s.Answered(Reply(/*job_done=*/false, /*checkpoint_seq=*/3)).job_done);
  EXPECT_EQ(s.checkpoint_seq(), 3u);
  EXPECT_TRUE(s.Answered(Reply(/*job_done=*/true)).job_done);
  EXPECT_EQ(s.checkpoint_seq(), 3u);  // No checkpoint in that reply.
  EXPECT_FALSE(s.Answered(Reply(/*job_done=*/true, /*checkpoint_seq=*/2)).job_done);
  EXPECT_EQ(s.checkpoint_seq(), 3u);  // An older announcement (a stale leader).
  s.Answered(Reply(/*job_done=*/true, /*checkpoint_seq=*/5));
  EXPECT_EQ(s.checkpoint_seq(), 5u);
}

TEST(MemberSessionTest, OneMapWatchAtATime) {
  FakeClock clock;
  MemberSession s("tcp://coord:5000", kTimeoutMs, &clock);
  EXPECT_TRUE(s.BeginMapWatch());
  EXPECT_FALSE(s.BeginMapWatch());  // One is out.
  s.EndMapWatch();
  EXPECT_TRUE(s.BeginMapWatch());
}

TEST(MemberSessionTest, AFailoverIsLoggedOncePerEpoch) {
  FakeClock clock;
  MemberSession s("tcp://coord:5000", kTimeoutMs, &clock);
  EXPECT_TRUE(s.FirstFailoverAckIn(2));
  EXPECT_FALSE(s.FirstFailoverAckIn(2));
  EXPECT_FALSE(s.FirstFailoverAckIn(1));  // An older epoch's late ack.
  EXPECT_TRUE(s.FirstFailoverAckIn(3));
}

}  // namespace
}  // namespace client_internal
}  // namespace relaxps
