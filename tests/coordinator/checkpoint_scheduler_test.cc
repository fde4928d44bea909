// CheckpointScheduler on its own: when a periodic checkpoint is due (a
// multiple of every_clocks crossed by the min worker clock, every_s of
// FakeClock time after the previous start), one at a time, and the record of
// complete checkpoints (only successes, bounded history, Restore). Time comes
// from a FakeClock the test advances: no sleeps.
#include "coordinator/checkpoint_scheduler.h"

#include <deque>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "common/clock.h"

namespace relaxps {
namespace {

wire::CheckpointRecord Record(int64_t clock) {
  wire::CheckpointRecord r;
  r.set_clock(clock);
  r.add_shards();
  return r;
}

std::vector<int64_t> Clocks(const std::deque<wire::CheckpointRecord>& history) {
  std::vector<int64_t> clocks;
  for (const wire::CheckpointRecord& r : history) clocks.push_back(r.clock());
  return clocks;
}

// Starts and completes a checkpoint tagged `clock` at the clock's now.
void Checkpoint(CheckpointScheduler* s, const FakeClock& clock, int64_t tag) {
  ASSERT_FALSE(s->in_flight());
  s->Start(tag, clock.NowMs());
  ASSERT_TRUE(s->in_flight());
  s->Finish(Status::OK(), Record(tag), clock.NowMs());
  ASSERT_FALSE(s->in_flight());
}

TEST(CheckpointSchedulerTest, DisabledByDefaultAndNeverDue) {
  FakeClock clock;
  CheckpointScheduler s(CheckpointSchedulerOptions(), clock.NowMs());
  EXPECT_FALSE(s.enabled());
  clock.AdvanceMs(int64_t{24} * 3600 * 1000);
  EXPECT_FALSE(s.Due(1000000, clock.NowMs()));
  EXPECT_FALSE(s.latest().has_value());
  EXPECT_TRUE(s.history().empty());
  EXPECT_EQ(s.failed(), 0u);

  CheckpointSchedulerOptions by_clocks;
  by_clocks.every_clocks = 10;
  EXPECT_TRUE(CheckpointScheduler(by_clocks, clock.NowMs()).enabled());
  CheckpointSchedulerOptions by_time;
  by_time.every_s = 0.5;
  EXPECT_TRUE(CheckpointScheduler(by_time, clock.NowMs()).enabled());
}

TEST(CheckpointSchedulerTest, DueWhenTheMinWorkerClockCrossesAMultiple) {
  FakeClock clock;
  CheckpointSchedulerOptions options;
  options.every_clocks = 10;
  CheckpointScheduler s(options, clock.NowMs());
  EXPECT_FALSE(s.Due(0, clock.NowMs()));
  EXPECT_FALSE(s.Due(9, clock.NowMs()));
  EXPECT_TRUE(s.Due(10, clock.NowMs()));
  s.Start(10, clock.NowMs());
  // One at a time: not due while in flight, whatever the clock.
  EXPECT_FALSE(s.Due(25, clock.NowMs()));
  s.Finish(Status::OK(), Record(10), clock.NowMs());
  // Time alone never makes one due (every_s is off).
  clock.AdvanceMs(int64_t{3600} * 1000);
  EXPECT_FALSE(s.Due(10, clock.NowMs()));
  EXPECT_FALSE(s.Due(19, clock.NowMs()));
  EXPECT_TRUE(s.Due(20, clock.NowMs()));
  // A min clock that jumped past several multiples: one checkpoint, and the
  // next is due at the next multiple after its tag.
  EXPECT_TRUE(s.Due(45, clock.NowMs()));
  Checkpoint(&s, clock, 45);
  EXPECT_FALSE(s.Due(49, clock.NowMs()));
  EXPECT_TRUE(s.Due(50, clock.NowMs()));
}

// A manual checkpoint (relaxps-ctl) tagged with an older clock does not make
// the multiples already checkpointed due again.
TEST(CheckpointSchedulerTest, AnOlderManualCheckpointDoesNotLowerTheMark) {
  FakeClock clock;
  CheckpointSchedulerOptions options;
  options.every_clocks = 10;
  CheckpointScheduler s(options, clock.NowMs());
  Checkpoint(&s, clock, 30);
  EXPECT_FALSE(s.Due(39, clock.NowMs()));
  Checkpoint(&s, clock, 5);
  EXPECT_FALSE(s.Due(39, clock.NowMs()));
  EXPECT_TRUE(s.Due(40, clock.NowMs()));
  EXPECT_EQ(s.latest()->clock(), 5);  // The newest complete one, whatever its tag.
}

// every_s counts from the previous start (not its finish), by FakeClock time.
TEST(CheckpointSchedulerTest, DueEverySecondsAfterThePreviousStart) {
  FakeClock clock;
  CheckpointSchedulerOptions options;
  options.every_s = 1.5;
  CheckpointScheduler s(options, clock.NowMs());
  clock.AdvanceMs(1499);
  EXPECT_FALSE(s.Due(0, clock.NowMs()));
  clock.AdvanceMs(1);
  EXPECT_TRUE(s.Due(0, clock.NowMs()));

  s.Start(0, clock.NowMs());
  clock.AdvanceMs(1000);
  s.Finish(Status::OK(), Record(0), clock.NowMs());
  clock.AdvanceMs(499);  // 1499 ms after the start.
  EXPECT_FALSE(s.Due(0, clock.NowMs()));
  clock.AdvanceMs(1);
  EXPECT_TRUE(s.Due(0, clock.NowMs()));

  // A slow checkpoint: past the period while in flight, not due; due at once
  // when it finishes.
  s.Start(0, clock.NowMs());
  clock.AdvanceMs(5000);
  EXPECT_FALSE(s.Due(0, clock.NowMs()));
  s.Finish(UnavailableError("server 1 lost"), wire::CheckpointRecord(), clock.NowMs());
  EXPECT_TRUE(s.Due(0, clock.NowMs()));
}

// With both triggers, a start for either resets the timer.
TEST(CheckpointSchedulerTest, AClockTriggeredStartResetsTheTimer) {
  FakeClock clock;
  CheckpointSchedulerOptions options;
  options.every_clocks = 100;
  options.every_s = 2;
  CheckpointScheduler s(options, clock.NowMs());
  clock.AdvanceMs(1500);
  ASSERT_TRUE(s.Due(100, clock.NowMs()));
  Checkpoint(&s, clock, 100);
  clock.AdvanceMs(1999);
  EXPECT_FALSE(s.Due(150, clock.NowMs()));
  clock.AdvanceMs(1);
  EXPECT_TRUE(s.Due(150, clock.NowMs()));
}

TEST(CheckpointSchedulerTest, OnlyACompleteCheckpointBecomesLatest) {
  FakeClock clock;
  CheckpointSchedulerOptions options;
  options.every_clocks = 10;
  CheckpointScheduler s(options, clock.NowMs());
  Checkpoint(&s, clock, 10);
  ASSERT_TRUE(s.latest().has_value());
  EXPECT_EQ(s.latest()->clock(), 10);
  EXPECT_EQ(s.latest()->shards_size(), 1);

  s.Start(20, clock.NowMs());
  s.Finish(UnavailableError("server 2 lost"), Record(20), clock.NowMs());
  EXPECT_FALSE(s.in_flight());
  EXPECT_EQ(s.failed(), 1u);
  EXPECT_EQ(s.latest()->clock(), 10);
  EXPECT_EQ(Clocks(s.history()), (std::vector<int64_t>{10}));
  EXPECT_TRUE(s.Due(30, clock.NowMs()));
}

TEST(CheckpointSchedulerTest, HistoryKeepsTheNewestOldestFirst) {
  FakeClock clock;
  CheckpointSchedulerOptions options;
  options.every_clocks = 1;
  options.history = 3;
  CheckpointScheduler s(options, clock.NowMs());
  for (int64_t c = 1; c <= 5; ++c) {
    Checkpoint(&s, clock, c);
    clock.AdvanceMs(10);
  }
  EXPECT_EQ(Clocks(s.history()), (std::vector<int64_t>{3, 4, 5}));
  EXPECT_EQ(s.latest()->clock(), 5);
}

TEST(CheckpointSchedulerTest, RestoreResumesTheRegistryAndTheClockMark) {
  FakeClock clock;
  CheckpointSchedulerOptions options;
  options.every_clocks = 10;
  options.history = 2;
  CheckpointScheduler s(options, clock.NowMs());
  s.Restore({Record(10), Record(20), Record(30)}, /*failed=*/4);
  EXPECT_EQ(Clocks(s.history()), (std::vector<int64_t>{20, 30}));
  ASSERT_TRUE(s.latest().has_value());
  EXPECT_EQ(s.latest()->clock(), 30);
  EXPECT_EQ(s.failed(), 4u);
  EXPECT_FALSE(s.in_flight());
  // Clock 30 is checkpointed already.
  EXPECT_FALSE(s.Due(39, clock.NowMs()));
  EXPECT_TRUE(s.Due(40, clock.NowMs()));
  // An empty registry clears what was there.
  s.Restore({}, 0);
  EXPECT_FALSE(s.latest().has_value());
  EXPECT_TRUE(s.history().empty());
  EXPECT_EQ(s.failed(), 0u);
}

TEST(CheckpointSchedulerTest, EachRoundGetsTheNextSeqFailedOnesToo) {
  FakeClock clock;
  CheckpointScheduler s(CheckpointSchedulerOptions(), clock.NowMs());
  EXPECT_EQ(s.next_seq(), 1u);
  EXPECT_EQ(s.Start(0, clock.NowMs()), 1u);
  s.Finish(UnavailableError("server 1 did not answer"), Record(0), clock.NowMs());
  clock.AdvanceMs(1000);
  EXPECT_EQ(s.Start(5, clock.NowMs()), 2u);  // A failed round used its seq.
  s.Finish(Status::OK(), Record(5), clock.NowMs());
  EXPECT_EQ(s.next_seq(), 3u);
}

TEST(CheckpointSchedulerTest, RestoreResumesTheSeqAfterTheNewestRecord) {
  FakeClock clock;
  CheckpointSchedulerOptions options;
  options.history = 1;
  CheckpointScheduler s(options, clock.NowMs());
  wire::CheckpointRecord older = Record(10), newer = Record(20);
  older.set_seq(7);
  newer.set_seq(9);
  // Even a record the bounded history drops counts.
  s.Restore({newer, older}, /*failed=*/0);
  EXPECT_EQ(s.next_seq(), 10u);
  EXPECT_EQ(s.Start(30, clock.NowMs()), 10u);
  // A restore never moves the seq back.
  s.Finish(Status::OK(), Record(30), clock.NowMs());
  s.Restore({older}, 0);
  EXPECT_EQ(s.next_seq(), 11u);
}

TEST(CheckpointSchedulerTest, ManualRequestsQueuedDuringARoundGoToTheNextInOrder) {
  FakeClock clock;
  CheckpointScheduler s(CheckpointSchedulerOptions(), clock.NowMs());
  EXPECT_TRUE(s.TakeQueued().empty());
  s.Start(0, clock.NowMs());
  std::vector<std::shared_ptr<Request>> first, second;
  for (uint64_t id : {1, 2}) {
    first.push_back(std::make_shared<Request>());
    first.back()->msg.header.set_request_id(id);
  }
  second.push_back(std::make_shared<Request>());
  second.back()->msg.header.set_request_id(3);
  s.Queue(std::move(first));
  s.Queue(std::move(second));
  EXPECT_EQ(s.queued(), 3u);
  std::vector<uint64_t> ids;
  for (const std::shared_ptr<Request>& r : s.TakeQueued()) ids.push_back(r->msg.header.request_id());
  EXPECT_EQ(ids, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(s.queued(), 0u);
  EXPECT_TRUE(s.TakeQueued().empty());
}

}  // namespace
}  // namespace relaxps
