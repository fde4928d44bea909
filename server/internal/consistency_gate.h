// ConsistencyGate: the consistency gate of one shard (a dense key range or a
// sparse table), shared by DenseShardState and SparseShardState.
//
// Owns the shard's view of the workers: the live set and its VectorClock
// (consistency/vector_clock.h), the held clocks of a server restored under
// replay (HoldWorkerClocks: a held worker's clock rises only through its own
// pushes and CLOCKs until ReleaseWorkerClock), and the queue of pulls waiting
// for a clock (Park / ServeWaiters / ExpireWaiters). It decides when BSP
// rounds may complete: each time the live clocks move (SetLiveWorkers,
// AdvanceClock, ReleaseWorkerClock) it calls the owner's `complete_rounds`
// hook (BSP only), then answers the pulls the owner's visible clock now lets
// through.
//
// The owner keeps what differs between shards, behind hooks: its parameters
// and pending rounds (how a round is applied; Hooks::complete_rounds), the
// clock its state reflects (Hooks::visible_clock), and how a parked pull is
// answered (the Answer given to Park, which reads the parameters itself).
// The gate never touches parameters.
//
// Thread-safety: not synchronized; used only on the server's loop thread,
// with its owner. Hooks and answers are called on that thread, from the
// gate's methods; an answer may call back into the gate.
#ifndef RELAXPS_SERVER_INTERNAL_CONSISTENCY_GATE_H_
#define RELAXPS_SERVER_INTERNAL_CONSISTENCY_GATE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "common/status.h"
#include "consistency/consistency_policy.h"
#include "consistency/vector_clock.h"

namespace relaxps {
namespace server_internal {

class ConsistencyGate {
 public:
  // Answers one parked pull: OK with the clock the owner's state reflects
  // (the pull may read it now), or DeadlineExceeded (and that clock) when
  // its deadline passed first.
  using Answer = std::function<void(const Status& status, int64_t visible_clock)>;

  // What differs between owners. Both are called only from the gate's
  // methods, never from its constructor.
  struct Hooks {
    // The clock every item of the owner's state reflects (a parked pull
    // requiring at most this is answered). Required.
    std::function<int64_t()> visible_clock;
    // BSP only (the policy aggregates pushes): the live clocks moved; apply
    // the rounds every live worker completed (min_clock()). An error is
    // logged by the gate; the waiters are served either way. Required when
    // the policy aggregates pushes.
    std::function<Status()> complete_rounds;
  };

  // REQUIRES: `policy` outlives this (nullptr: pulls never wait and rounds
  // never complete here: every push is applied on arrival). `label` is put
  // after "pull" and "completing BSP rounds" in errors and logs (e.g.
  // " of sparse table 'emb'"; empty for none).
  ConsistencyGate(const ConsistencyPolicy* policy, std::string label, Hooks hooks);
  ConsistencyGate(const ConsistencyGate&) = delete;
  ConsistencyGate& operator=(const ConsistencyGate&) = delete;

  // Whether the policy aggregates pushes into rounds (BSP).
  bool aggregates() const { return policy_ != nullptr && policy_->AggregatesPushes(); }

  // ---- Pulls ----
  // The clock the owner's state must reflect before a pull by a worker at
  // `worker_clock` is answered (policy null: the lowest clock, never waits).
  int64_t RequiredClock(int64_t worker_clock) const;
  // Whether a pull requiring `required` may be answered now.
  bool Passes(int64_t required) const { return hooks_.visible_clock() >= required; }
  // Queues a pull that did not pass: `answer` is called once, from
  // ServeWaiters when the visible clock reaches `required`, or from
  // ExpireWaiters once `deadline_ms` (monotonic) is reached.
  void Park(int64_t required, int64_t deadline_ms, Answer answer);
  // Answers (in arrival order) the parked pulls the visible clock lets
  // through now. The owner calls it after its state moved (a push applied,
  // a round applied, a re-seed); the gate after the clocks moved.
  void ServeWaiters();
  // Fails (DeadlineExceeded, in arrival order) the parked pulls whose
  // deadline is at or before `now_ms`.
  void ExpireWaiters(int64_t now_ms);
  size_t waiting() const { return waiters_.size(); }

  // ---- Worker clocks ----
  // The coordinator's live worker set changed (ids and their clocks).
  // Completes rounds and serves waiters.
  void SetLiveWorkers(const std::vector<int>& ids, const std::vector<int64_t>& clocks);
  // Holds the clocks of `ids` at `start` (VectorClock::Hold): each rises
  // only through AdvanceClock / RecordCompleted, not through the clocks
  // SetLiveWorkers reports. REQUIRES: none of `ids` live yet.
  void HoldWorkerClocks(const std::vector<int>& ids, int64_t start);
  // Ends the hold of `worker`: the clock the coordinator reported for it
  // last applies; if the minimum moved, completes rounds and serves waiters.
  // No-op if not held.
  void ReleaseWorkerClock(int worker);
  // `worker` completed `clock` (its CLOCK message): completes rounds and
  // serves waiters.
  void AdvanceClock(int worker, int64_t clock);
  // Records that `worker` completed `clock` (its pushes covered the shard,
  // or a loaded snapshot), and nothing else: the owner completes rounds and
  // serves waiters itself when it should.
  void RecordCompleted(int worker, int64_t clock) { clocks_.Advance(worker, clock); }

  bool holds_worker_clock(int worker) const { return clocks_.IsHeld(worker); }
  // Completed clock of a live worker (-1: not live).
  int64_t worker_clock(int worker) const { return clocks_.Get(worker); }
  // Minimum completed clock over the live workers (0 if none).
  int64_t min_clock() const { return clocks_.Min(); }
  // BSP: how many workers a round that closes now is averaged over (at
  // least 1): the live workers, each of which completed the round's clock
  // whether or not it pushed to this shard (a key or row it did not push is
  // a zero in its gradient), and the `contributors` (workers whose pushes
  // are in the round) that have left the live set since. So N workers of
  // batch b take the step one process would take with batch N*b.
  size_t RoundWorkers(const std::vector<int>& contributors) const;
  const VectorClock& clocks() const { return clocks_; }

 private:
  struct Waiter {
    int64_t required;
    int64_t deadline_ms;
    Answer answer;
  };

  // After the live clocks moved: completes rounds (BSP), serves waiters.
  void ClocksMoved();

  // Constant after construction.
  const ConsistencyPolicy* const policy_;
  const std::string label_;
  const Hooks hooks_;

  VectorClock clocks_;
  std::vector<Waiter> waiters_;  // Parked pulls, in arrival order.
};

}  // namespace server_internal
}  // namespace relaxps

#endif  // RELAXPS_SERVER_INTERNAL_CONSISTENCY_GATE_H_
