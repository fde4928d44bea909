// JobOutcome on its own: the first end and the first failure win, when the
// coordinator's loop may stop (a failed job after failed_exit_ms, an ended
// one once everyone left or after done_grace_ms), every verdict and its exit
// status, and Finish() computing the verdict once. Time comes from a
// FakeClock the test advances: no sleeps.
#include "coordinator/job_outcome.h"

#include <gtest/gtest.h>

#include "common/clock.h"

namespace relaxps {
namespace {

using Exit = JobOutcome::Exit;

// A leader whose job ends by itself once its workers are done.
JobEndFacts Led() {
  JobEndFacts f;
  f.ever_led = true;
  f.ends_by_itself = true;
  return f;
}

TEST(JobOutcomeTest, TheFirstEndAndTheFirstFailureWin) {
  FakeClock clock;
  JobOutcome o(/*failed_exit_ms=*/1000, /*done_grace_ms=*/5000);
  EXPECT_FALSE(o.done());
  EXPECT_FALSE(o.failed());
  EXPECT_EQ(o.error(), "");
  EXPECT_TRUE(o.End("relaxps-ctl shutdown", clock.NowMs()));
  clock.AdvanceMs(10);
  EXPECT_FALSE(o.End("every worker left", clock.NowMs()));
  EXPECT_EQ(o.Verdict(Led()).reason, "relaxps-ctl shutdown");

  EXPECT_TRUE(o.Fail("server 0 lost", clock.NowMs()));
  EXPECT_EQ(o.failed_at_ms(), clock.NowMs());
  clock.AdvanceMs(10);
  EXPECT_FALSE(o.Fail("server 1 lost", clock.NowMs()));
  EXPECT_EQ(o.error(), "server 0 lost");
  EXPECT_EQ(o.failed_at_ms(), clock.NowMs() - 10);
}

TEST(JobOutcomeTest, AFailedJobExitsAfterFailedExitMs) {
  FakeClock clock;
  JobOutcome o(/*failed_exit_ms=*/1000, /*done_grace_ms=*/5000);
  EXPECT_EQ(o.ShouldExit(clock.NowMs(), 2, 1), Exit::kStay);
  ASSERT_TRUE(o.Fail("server 0 lost", clock.NowMs()));
  clock.AdvanceMs(999);
  EXPECT_EQ(o.ShouldExit(clock.NowMs(), 2, 1), Exit::kStay);  // Clients learn why meanwhile.
  clock.AdvanceMs(1);
  EXPECT_EQ(o.ShouldExit(clock.NowMs(), 2, 1), Exit::kFailed);

  // failed_exit_ms 0: a failed job waits for its launcher.
  JobOutcome stays(/*failed_exit_ms=*/0, /*done_grace_ms=*/5000);
  ASSERT_TRUE(stays.Fail("server 0 lost", clock.NowMs()));
  clock.AdvanceMs(int64_t{24} * 3600 * 1000);
  EXPECT_EQ(stays.ShouldExit(clock.NowMs(), 2, 1), Exit::kStay);
}

TEST(JobOutcomeTest, AnEndedJobExitsWhenEveryoneLeftOrItsGraceIsOver) {
  FakeClock clock;
  JobOutcome o(/*failed_exit_ms=*/1000, /*done_grace_ms=*/5000);
  // Everyone gone before the end means nothing: the job has not ended.
  EXPECT_EQ(o.ShouldExit(clock.NowMs(), 0, 0), Exit::kStay);
  ASSERT_TRUE(o.End("relaxps-ctl shutdown", clock.NowMs()));
  EXPECT_EQ(o.ShouldExit(clock.NowMs(), 1, 0), Exit::kStay);  // A worker still leaving.
  EXPECT_EQ(o.ShouldExit(clock.NowMs(), 0, 1), Exit::kStay);  // A server still flushing.
  EXPECT_EQ(o.ShouldExit(clock.NowMs(), 0, 0), Exit::kEveryoneLeft);
  clock.AdvanceMs(4999);
  EXPECT_EQ(o.ShouldExit(clock.NowMs(), 1, 1), Exit::kStay);
  clock.AdvanceMs(1);
  EXPECT_EQ(o.ShouldExit(clock.NowMs(), 1, 1), Exit::kGraceOver);
  EXPECT_EQ(o.done_grace_ms(), 5000);
}

TEST(JobOutcomeTest, AFailureOutranksTheEnd) {
  FakeClock clock;
  JobOutcome o(/*failed_exit_ms=*/1000, /*done_grace_ms=*/5000);
  ASSERT_TRUE(o.End("relaxps-ctl shutdown", clock.NowMs()));
  ASSERT_TRUE(o.Fail("server 0 lost", clock.NowMs()));
  clock.AdvanceMs(1000);
  EXPECT_EQ(o.ShouldExit(clock.NowMs(), 0, 0), Exit::kFailed);
  const JobEnd end = o.Verdict(Led());
  EXPECT_EQ(end.verdict, "failed");
  EXPECT_EQ(end.reason, "server 0 lost");
  EXPECT_EQ(end.exit_code, kExitJobFailed);
}

TEST(JobOutcomeTest, VerdictsOfAnEndedJob) {
  FakeClock clock;
  JobOutcome o(/*failed_exit_ms=*/1000, /*done_grace_ms=*/5000);
  ASSERT_TRUE(o.End("2 worker(s) finished or left, 0 lost", clock.NowMs()));
  JobEnd end = o.Verdict(Led());
  EXPECT_EQ(end.verdict, "done");
  EXPECT_EQ(end.reason, "2 worker(s) finished or left, 0 lost");
  EXPECT_EQ(end.exit_code, kExitDone);

  JobEndFacts lost = Led();
  lost.lost_workers = 1;
  lost.failed_workers = {"worker 3: out of memory"};  // Lost outranks failed.
  end = o.Verdict(lost);
  EXPECT_EQ(end.verdict, "workers_lost");
  EXPECT_EQ(end.reason, "1 worker(s) went silent without finishing or leaving "
                        "(2 worker(s) finished or left, 0 lost)");
  EXPECT_EQ(end.exit_code, kExitWorkersLost);

  JobEndFacts failed = Led();
  failed.failed_workers = {"worker 3: out of memory", "worker 4: bad batch"};
  end = o.Verdict(failed);
  EXPECT_EQ(end.verdict, "workers_failed");
  EXPECT_EQ(end.reason, "2 worker(s) failed: worker 3: out of memory (and 1 more)");
  EXPECT_EQ(end.exit_code, kExitWorkersLost);

  JobEndFacts stepped_down = Led();
  stepped_down.stepped_down = true;
  o.Abort("coordinator stepped down: its ZooKeeper session expired");
  end = o.Verdict(stepped_down);
  EXPECT_EQ(end.verdict, "stepped_down");
  EXPECT_EQ(end.reason, "coordinator stepped down: its ZooKeeper session expired");
  EXPECT_EQ(end.exit_code, kExitSteppedDown);
}

TEST(JobOutcomeTest, VerdictsOfAJobStoppedBeforeItEnded) {
  JobOutcome o(/*failed_exit_ms=*/1000, /*done_grace_ms=*/5000);
  JobEndFacts standby;  // Never led.
  EXPECT_EQ(o.Verdict(standby).verdict, "stopped");
  EXPECT_EQ(o.Verdict(standby).reason, "a standby coordinator was stopped");
  EXPECT_EQ(o.Verdict(standby).exit_code, kExitDone);

  JobEndFacts launcher;  // Its job ends only when it is stopped.
  launcher.ever_led = true;
  EXPECT_EQ(o.Verdict(launcher).verdict, "stopped");
  EXPECT_EQ(o.Verdict(launcher).exit_code, kExitDone);

  JobEndFacts interrupted = Led();
  interrupted.live_workers = 2;
  interrupted.lost_workers = 1;
  const JobEnd end = o.Verdict(interrupted);
  EXPECT_EQ(end.verdict, "interrupted");
  EXPECT_EQ(end.reason, "stopped before the job ended (2 worker(s) live, 1 lost)");
  EXPECT_EQ(end.exit_code, kExitInterrupted);

  // An aborted run (e.g. its first state write failed) that never ended.
  o.Abort("the first write of the coordinator state failed");
  EXPECT_EQ(o.Verdict(interrupted).verdict, "failed");
  EXPECT_EQ(o.Verdict(interrupted).exit_code, kExitJobFailed);
}

TEST(JobOutcomeTest, FinishComputesTheVerdictOnceAndAbortsTheResult) {
  FakeClock clock;
  JobOutcome o(/*failed_exit_ms=*/1000, /*done_grace_ms=*/5000);
  JobEndFacts interrupted = Led();
  interrupted.live_workers = 1;
  EXPECT_TRUE(o.result().ok());
  ASSERT_TRUE(o.Finish(interrupted));
  EXPECT_EQ(o.job_end().verdict, "interrupted");
  EXPECT_EQ(o.result().code(), StatusCode::kAborted);
  EXPECT_EQ(o.result().message(),
            "job interrupted: stopped before the job ended (1 worker(s) live, 0 lost)");
  // Later facts change nothing.
  ASSERT_TRUE(o.End("relaxps-ctl shutdown", clock.NowMs()));
  EXPECT_FALSE(o.Finish(Led()));
  EXPECT_EQ(o.job_end().verdict, "interrupted");

  JobOutcome done(/*failed_exit_ms=*/1000, /*done_grace_ms=*/5000);
  ASSERT_TRUE(done.End("relaxps-ctl shutdown", clock.NowMs()));
  ASSERT_TRUE(done.Finish(Led()));
  EXPECT_EQ(done.job_end().verdict, "done");
  EXPECT_TRUE(done.result().ok());  // A job that ended in order is OK.
}

TEST(JobOutcomeTest, AResumedJobKeepsItsEndAndFailureWithFreshTimers) {
  FakeClock clock;
  clock.AdvanceMs(100000);
  JobOutcome o(/*failed_exit_ms=*/1000, /*done_grace_ms=*/5000);
  o.Resume(/*done=*/true, /*error=*/"server 0 lost", /*workers_left=*/3, clock.NowMs());
  EXPECT_TRUE(o.done());
  EXPECT_EQ(o.error(), "server 0 lost");
  EXPECT_EQ(o.workers_left(), 3);
  o.WorkerLeft();
  EXPECT_EQ(o.workers_left(), 4);
  // The new leader gives clients failed_exit_ms to learn of the failure.
  EXPECT_EQ(o.ShouldExit(clock.NowMs(), 1, 1), Exit::kStay);
  clock.AdvanceMs(1000);
  EXPECT_EQ(o.ShouldExit(clock.NowMs(), 1, 1), Exit::kFailed);

  JobOutcome running(/*failed_exit_ms=*/1000, /*done_grace_ms=*/5000);
  running.Resume(/*done=*/false, /*error=*/"", /*workers_left=*/0, clock.NowMs());
  EXPECT_FALSE(running.done());
  EXPECT_FALSE(running.failed());
}

}  // namespace
}  // namespace relaxps
