// ConsistencyGate in isolation, with a fake owner (its visible clock and
// rounds are plain fields) and a FakeClock for deadlines: pulls answered
// once the live workers' clocks let them through, expiry at their deadlines,
// held worker clocks, live-set changes, when rounds are completed and how
// many workers a round is divided by.
#include "server/internal/consistency_gate.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "common/clock.h"
#include "consistency/consistency_policy.h"
#include "tests/test_util.h"

namespace relaxps {
namespace server_internal {
namespace {

// One answered pull: its tag, status and the visible clock it was given.
struct Answered {
  int tag;
  Status status;
  int64_t visible;
};

class ConsistencyGateTest : public ::testing::Test {
 protected:
  // A gate for `model` (staleness 2 for SSP). The fake owner's visible clock
  // follows the live minimum, as a shard's does with no pending round; under
  // BSP its complete_rounds hook "applies" every round below that minimum
  // (applied_ = min), counts the calls and returns rounds_status_.
  void MakeGate(ConsistencyModel model) {
    ConsistencyOptions co;
    co.model = model;
    co.staleness = 2;
    ASSERT_OK_AND_ASSIGN(policy_, NewConsistencyPolicy(co));
    MakeGateWith(policy_.get());
  }
  void MakeGateWith(const ConsistencyPolicy* policy) {
    ConsistencyGate::Hooks hooks;
    hooks.visible_clock = [this] {
      return gate_->aggregates() ? applied_ : std::max(gate_->min_clock(), floor_);
    };
    hooks.complete_rounds = [this] {
      ++rounds_calls_;
      applied_ = std::max(applied_, gate_->min_clock());
      return rounds_status_;
    };
    gate_ = std::make_unique<ConsistencyGate>(policy, " of table 't'", std::move(hooks));
  }

  // Parks (or answers at once) a pull by a worker at `worker_clock`, as a
  // shard's Pull does; the answer is recorded under `tag`.
  void Pull(int tag, int64_t worker_clock, int64_t deadline_ms) {
    const int64_t required = gate_->RequiredClock(worker_clock);
    if (gate_->Passes(required)) {
      answered_.push_back(Answered{tag, Status::OK(), applied_or_min()});
      return;
    }
    gate_->Park(required, deadline_ms, [this, tag](const Status& s, int64_t visible) {
      answered_.push_back(Answered{tag, s, visible});
    });
  }
  int64_t applied_or_min() const {
    return gate_->aggregates() ? applied_ : std::max(gate_->min_clock(), floor_);
  }
  std::vector<int> Tags() const {
    std::vector<int> tags;
    for (const Answered& a : answered_) tags.push_back(a.tag);
    return tags;
  }

  FakeClock clock_;
  std::unique_ptr<ConsistencyPolicy> policy_;
  std::unique_ptr<ConsistencyGate> gate_;
  int64_t applied_ = 0;  // BSP: the fake owner's applied rounds.
  int64_t floor_ = 0;    // Not BSP: the clock the owner's state was loaded at.
  int rounds_calls_ = 0;
  Status rounds_status_;
  std::vector<Answered> answered_;
};

// SSP(2): a pull at clock 5 needs every live worker to have completed 3
// clocks; it is answered (once, OK, with the new minimum) when the slowest
// one gets there, not before.
TEST_F(ConsistencyGateTest, SspPullIsAnsweredWhenTheMinimumClockPassesItsBound) {
  MakeGate(ConsistencyModel::kSsp);
  gate_->SetLiveWorkers({0, 1}, {0, 0});
  Pull(1, 5, clock_.NowMs() + 1000);
  EXPECT_EQ(gate_->waiting(), 1u);
  gate_->AdvanceClock(0, 4);  // Worker 0 completed 5 clocks, worker 1 none.
  gate_->AdvanceClock(1, 1);  // Worker 1 completed 2: minimum 2 < 3.
  EXPECT_TRUE(answered_.empty());
  gate_->AdvanceClock(1, 2);  // Minimum 3.
  ASSERT_EQ(answered_.size(), 1u);
  EXPECT_EQ(answered_[0].tag, 1);
  EXPECT_OK(answered_[0].status);
  EXPECT_EQ(answered_[0].visible, 3);
  EXPECT_EQ(gate_->waiting(), 0u);
  gate_->AdvanceClock(1, 3);
  EXPECT_EQ(answered_.size(), 1u);  // Answered once.
  // A pull the minimum already allows is not parked.
  Pull(2, 5, clock_.NowMs() + 1000);
  EXPECT_EQ(gate_->waiting(), 0u);
  EXPECT_EQ(Tags(), std::vector<int>({1, 2}));
  EXPECT_EQ(rounds_calls_, 0);  // Rounds complete only under BSP.
}

// Waiters the owner's state lets through are answered in arrival order; the
// others keep waiting, also when the owner (not the clocks) moved.
TEST_F(ConsistencyGateTest, ServeWaitersAnswersOnlyThoseTheVisibleClockAllows) {
  MakeGate(ConsistencyModel::kSsp);
  gate_->SetLiveWorkers({0}, {0});
  Pull(1, 6, clock_.NowMs() + 1000);  // Needs 4.
  Pull(2, 3, clock_.NowMs() + 1000);  // Needs 1.
  Pull(3, 4, clock_.NowMs() + 1000);  // Needs 2.
  floor_ = 2;  // The owner's state moved (a re-seed).
  gate_->ServeWaiters();
  EXPECT_EQ(Tags(), std::vector<int>({2, 3}));
  EXPECT_EQ(answered_[0].visible, 2);
  EXPECT_EQ(gate_->waiting(), 1u);
  gate_->AdvanceClock(0, 3);
  EXPECT_EQ(Tags(), std::vector<int>({2, 3, 1}));
}

// An answer may park a new pull: it waits for the next move.
TEST_F(ConsistencyGateTest, AnAnswerMayParkAnotherPull) {
  MakeGate(ConsistencyModel::kSsp);
  gate_->SetLiveWorkers({0}, {0});
  gate_->Park(1, clock_.NowMs() + 1000, [this](const Status&, int64_t) {
    Pull(2, 10, clock_.NowMs() + 1000);  // Needs 8.
  });
  gate_->AdvanceClock(0, 0);
  EXPECT_EQ(gate_->waiting(), 1u);
  EXPECT_TRUE(answered_.empty());
  gate_->AdvanceClock(0, 7);
  EXPECT_EQ(Tags(), std::vector<int>({2}));
}

// Pulls expire exactly at their deadlines (FakeClock), in arrival order,
// with DeadlineExceeded naming the clock they waited for; the others stay.
TEST_F(ConsistencyGateTest, PullsExpireAtTheirDeadlines) {
  MakeGate(ConsistencyModel::kSsp);
  gate_->SetLiveWorkers({0, 1}, {0, 0});
  const int64_t start = clock_.NowMs();
  Pull(1, 5, start + 200);
  Pull(2, 5, start + 100);
  Pull(3, 9, start + 300);
  clock_.AdvanceMs(99);
  gate_->ExpireWaiters(clock_.NowMs());
  EXPECT_TRUE(answered_.empty());
  clock_.AdvanceMs(1);  // start + 100: pull 2's deadline.
  gate_->ExpireWaiters(clock_.NowMs());
  ASSERT_EQ(Tags(), std::vector<int>({2}));
  EXPECT_EQ(answered_[0].status.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(answered_[0].status.message().find("pull of table 't' waited for clock 3"),
            std::string::npos)
      << answered_[0].status;
  EXPECT_EQ(answered_[0].visible, 0);
  EXPECT_EQ(gate_->waiting(), 2u);
  // Pull 1 is answered by the clocks before its deadline; pull 3 expires.
  gate_->SetLiveWorkers({0, 1}, {3, 3});
  clock_.AdvanceMs(1000);
  gate_->ExpireWaiters(clock_.NowMs());
  ASSERT_EQ(Tags(), std::vector<int>({2, 1, 3}));
  EXPECT_OK(answered_[1].status);
  EXPECT_EQ(answered_[2].status.code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(gate_->waiting(), 0u);
}

// The live set: a slow worker that leaves holds nobody back any more; one
// that joins starts at the current minimum.
TEST_F(ConsistencyGateTest, LiveSetChangesMoveTheMinimum) {
  MakeGate(ConsistencyModel::kSsp);
  gate_->SetLiveWorkers({0, 1}, {6, 1});
  Pull(1, 6, clock_.NowMs() + 1000);  // Needs 4.
  EXPECT_EQ(gate_->min_clock(), 1);
  gate_->SetLiveWorkers({0}, {6});  // Worker 1 died.
  EXPECT_EQ(Tags(), std::vector<int>({1}));
  EXPECT_EQ(gate_->worker_clock(1), -1);
  gate_->SetLiveWorkers({0, 2}, {6, 0});  // Worker 2 joins at the minimum.
  EXPECT_EQ(gate_->worker_clock(2), 6);
  EXPECT_EQ(gate_->min_clock(), 6);
}

// BSP: the owner's rounds are completed each time the live clocks move
// (live set, CLOCK, release), not when a push only records progress
// (RecordCompleted: the owner completes rounds itself then) or clocks are
// held; a hook error is logged and the waiters are served anyway.
TEST_F(ConsistencyGateTest, BspCompletesRoundsWhenTheClocksMove) {
  MakeGate(ConsistencyModel::kBsp);
  EXPECT_TRUE(gate_->aggregates());
  gate_->HoldWorkerClocks({7}, 0);
  EXPECT_EQ(rounds_calls_, 0);
  gate_->SetLiveWorkers({0, 1}, {0, 0});
  EXPECT_EQ(rounds_calls_, 1);
  Pull(1, 1, clock_.NowMs() + 1000);  // BSP: needs round 0 applied.
  gate_->RecordCompleted(0, 0);
  gate_->RecordCompleted(1, 0);
  EXPECT_EQ(rounds_calls_, 1);
  EXPECT_EQ(gate_->min_clock(), 1);
  EXPECT_TRUE(answered_.empty());  // Not applied yet: the owner decides.
  rounds_status_ = IOError("disk full");
  gate_->AdvanceClock(0, 1);
  EXPECT_EQ(rounds_calls_, 2);
  EXPECT_EQ(applied_, 1);
  EXPECT_EQ(Tags(), std::vector<int>({1}));  // Served despite the error.
  EXPECT_EQ(answered_[0].visible, 1);
}

// A BSP round is divided by its workers: every live one (whether or not it
// pushed to this shard), plus contributors no longer live; never by zero.
TEST_F(ConsistencyGateTest, RoundWorkersAreTheLiveOnesAndTheContributorsThatLeft) {
  MakeGate(ConsistencyModel::kBsp);
  EXPECT_EQ(gate_->RoundWorkers({}), 1u);  // Nobody live, nobody pushed.
  EXPECT_EQ(gate_->RoundWorkers({3}), 1u);
  gate_->SetLiveWorkers({0, 2, 5}, {0, 0, 0});
  EXPECT_EQ(gate_->RoundWorkers({2}), 3u);        // 0 and 5 count as zeros.
  EXPECT_EQ(gate_->RoundWorkers({0, 2, 5}), 3u);
  EXPECT_EQ(gate_->RoundWorkers({0, 1, 7}), 5u);  // 1 and 7 pushed, then left.
  gate_->SetLiveWorkers({0, 5}, {0, 0});          // Worker 2 dies after its push.
  EXPECT_EQ(gate_->RoundWorkers({2}), 3u);
  EXPECT_EQ(gate_->RoundWorkers({}), 2u);
}

// Held workers (a server restored under replay): their clocks start at the
// restored clock and rise only through their own progress, whatever the
// coordinator reports, until released; a worker not held follows the live
// set. Rounds complete (and pulls pass) only as the held clocks allow.
TEST_F(ConsistencyGateTest, HeldWorkerClocksRiseOnlyThroughTheirOwnProgress) {
  MakeGate(ConsistencyModel::kBsp);
  applied_ = 5;  // Restored at clock 5.
  gate_->HoldWorkerClocks({0, 1}, 5);
  EXPECT_TRUE(gate_->holds_worker_clock(0));
  EXPECT_FALSE(gate_->holds_worker_clock(2));
  gate_->SetLiveWorkers({0, 1}, {20, 20});
  EXPECT_EQ(gate_->worker_clock(0), 5);
  EXPECT_EQ(gate_->worker_clock(1), 5);
  EXPECT_EQ(applied_, 5);
  Pull(1, 7, clock_.NowMs() + 1000);  // Needs rounds 5 and 6.
  gate_->AdvanceClock(0, 5);          // Replayed CLOCK of worker 0.
  EXPECT_EQ(applied_, 5);
  gate_->RecordCompleted(1, 5);  // Replayed push of worker 1 covering the shard.
  gate_->AdvanceClock(0, 6);
  EXPECT_EQ(applied_, 6);
  EXPECT_TRUE(answered_.empty());
  gate_->SetLiveWorkers({0, 1}, {25, 25});  // Still held.
  EXPECT_EQ(gate_->min_clock(), 6);
  const int calls = rounds_calls_;
  gate_->ReleaseWorkerClock(2);  // Not held: no-op.
  EXPECT_EQ(rounds_calls_, calls);
  gate_->ReleaseWorkerClock(0);  // Worker 0 jumps to 25; worker 1 still at 6.
  EXPECT_FALSE(gate_->holds_worker_clock(0));
  EXPECT_EQ(gate_->worker_clock(0), 25);
  EXPECT_EQ(rounds_calls_, calls);  // The minimum did not move.
  EXPECT_TRUE(answered_.empty());
  gate_->ReleaseWorkerClock(1);
  EXPECT_EQ(gate_->worker_clock(1), 25);
  EXPECT_EQ(applied_, 25);
  EXPECT_EQ(Tags(), std::vector<int>({1}));
  EXPECT_EQ(answered_[0].visible, 25);
}

// No policy (chain-replicated buckets): nothing waits, rounds never
// complete here, and no complete_rounds hook is needed.
TEST_F(ConsistencyGateTest, WithoutAPolicyPullsNeverWait) {
  ConsistencyGate::Hooks hooks;
  hooks.visible_clock = [] { return int64_t{0}; };
  ConsistencyGate gate(nullptr, "", std::move(hooks));
  EXPECT_FALSE(gate.aggregates());
  EXPECT_TRUE(gate.Passes(gate.RequiredClock(1000)));
  gate.SetLiveWorkers({0}, {0});
  gate.AdvanceClock(0, 3);
  EXPECT_EQ(gate.min_clock(), 4);
}

// Async: every pull passes at once, whatever the clocks.
TEST_F(ConsistencyGateTest, AsyncPullsPassAtOnce) {
  MakeGate(ConsistencyModel::kAsync);
  gate_->SetLiveWorkers({0, 1}, {0, 0});
  Pull(1, 1000, clock_.NowMs());
  EXPECT_EQ(Tags(), std::vector<int>({1}));
  EXPECT_EQ(gate_->waiting(), 0u);
}

}  // namespace
}  // namespace server_internal
}  // namespace relaxps
