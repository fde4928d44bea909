// DenseShard logic of a server: one key range of a dense table, with its
// optimizer, consistency gate and waiting pulls.
//
// Owns nothing of the parameter memory (the ParamStore does); owns the BSP
// aggregation buffers and its ConsistencyGate (consistency_gate.h: the live
// workers' clocks, held clocks and the queue of pulls waiting for a clock),
// answering the gate's hooks: its visible clock, how rounds complete, how a
// waiting pull is answered.
//
// BSP: a push of clock c is kept in round c, apart per worker, and applied
// with it once every live worker completed clock c (Reflects(c) turns true
// then; the server's exactly-once record counts the push only from then on,
// through set_on_rounds_applied). The round's step is one optimizer step with
// (the workers' gradients summed in worker-id order) * (1 / W), W the round's
// workers (ConsistencyGate::RoundWorkers: the live workers when it closes,
// whether or not they pushed every key, plus contributors that left): N
// workers of batch b take the step of one process with batch N*b, bit for
// bit, whatever order the pushes arrived in. A push for a round already
// applied (a worker that fell behind) is applied on arrival.
//
// Memory: a pending round holds one shard-sized float buffer per worker that
// pushed to it (taken from the server's BufferPool at its first push, given
// back when the round is applied); the server refuses pushes more than --max_clocks_ahead clocks
// ahead of the applied rounds, so at most (max_clocks_ahead + 1) rounds *
// pushing workers * size() floats are pending (default 5 * N * size()).
//
// Rounds re-formed from a replay (HoldWorkerClocks): a shard restored from a
// checkpoint would otherwise take the live workers' current clocks from the
// coordinator (SetLiveWorkers), close every round up to them at once and
// apply the pushes the workers replay (clocks at or after the restored one)
// one by one on arrival, so the job would not end as it would have without
// the failure. Holding the workers live at the time keeps each one's clock
// at the shard's restored clock, rising only through its own pushes
// (replayed or not: whole-shard coverage, as always) and CLOCKs, until
// ReleaseWorkerClock (its first request that is not a replay reached the
// server; the client sends nothing new before its replay is done): the
// replayed pushes fill rounds again, each applied once every held worker
// completed it, in clock order, as in the run without the failure. Workers
// that join later are not held. Switched on by the recovery policy
// (ServerRecovery::RebuildsRoundsFromReplay); async and SSP are unchanged
// (their clocks only open the gate; holding them only makes pulls wait).
//
// Thread-safety: not synchronized; used only on the server's loop thread.
#ifndef RELAXPS_SERVER_INTERNAL_DENSE_SHARD_H_
#define RELAXPS_SERVER_INTERNAL_DENSE_SHARD_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/buffer.h"
#include "common/buffer_pool.h"
#include "common/status.h"
#include "common/table.h"
#include "consistency/consistency_policy.h"
#include "kernels/device.h"
#include "kernels/optimizer.h"
#include "proto/relaxps.pb.h"
#include "server/internal/consistency_gate.h"
#include "server/internal/lent_spans.h"
#include "server/internal/write_tracker.h"
#include "storage/param_store.h"

namespace relaxps {
namespace server_internal {

// Answers a waiting pull: called with the status and, when OK, a copy of the
// requested parameters and the clock they reflect.
using PullReply = std::function<void(const Status&, FloatBuffer params, int64_t params_clock)>;

// Applies a logged optimizer step while the store loads `shard`
// (ParamStore::CreateDenseReplaying): the same call DenseShardState makes for
// the update, so the same floats. REQUIRES: `optimizer` is the table's, with
// shard->slots.size() == 1 + its state slots.
Status ReplayStep(const kernels::Optimizer& optimizer, kernels::Device* device, DenseShard* shard,
                  const DenseStep& step);

class DenseShardState {
 public:
  // REQUIRES: all pointers outlive this object. Pull snapshots come from
  // `pool` (nullptr: plain allocations).
  DenseShardState(DenseShard* shard, std::unique_ptr<kernels::Optimizer> optimizer,
                  const ConsistencyPolicy* policy, kernels::Device* device, ParamStore* store,
                  BufferPool* pool = nullptr);

  const DenseShardSpec& spec() const { return shard_->spec; }
  // The table's learning rate by clock: pushes (and BSP rounds) of clock c
  // are applied with lr_scale table.LrScaleAt(c). Constant until set.
  void set_rates(const TableOptions& table) { rates_ = table; }

  // Checks that [begin, begin + count) lies inside this shard.
  Status CheckRange(uint64_t begin, uint64_t count) const;

  // Applies (or, under BSP, aggregates) a gradient for keys [begin, begin+n)
  // computed by `worker` at `clock`. REQUIRES: CheckRange OK, grads finite.
  //
  // A clock may carry several pushes of one worker to disjoint key ranges
  // (per-layer pushes). The worker counts as done with `clock` here once its
  // pushes for it cover the whole shard, or when its CLOCK arrives
  // (AdvanceClock). Under BSP a key a worker did not push counts as a zero
  // gradient of that worker (the round is divided by its workers, not by the
  // pushers of a key); InvalidArgument if a worker pushes a key twice for one
  // clock.
  //
  // `new_step` false: a later part of one push split by the client (the
  // optimizer step is not counted again; wire::Header.push_continues).
  Status Push(int worker, int64_t clock, uint64_t begin, const float* grads, size_t n,
              bool new_step = true);

  // Push() and then Pull(pull_clock, begin, n, deadline_ms, done), answered
  // with one copy: when the push is applied on arrival (not aggregated for
  // a BSP round) and the gate already lets the pull through, the reply's
  // snapshot is written by the update itself (Optimizer::ApplyAndCopy), not
  // by a second pass over the shard. On an error `done` is not called.
  Status PushPull(int worker, int64_t clock, uint64_t begin, const float* grads, size_t n,
                  bool new_step, int64_t pull_clock, int64_t deadline_ms, PullReply done);

  // Adds `delta` to keys [begin, begin+n) as is (no optimizer): the change a
  // stateless worker made locally while it could not reach this server.
  // Counts as one update. REQUIRES: CheckRange OK, delta finite.
  Status AddDelta(uint64_t begin, const float* delta, size_t n);

  // Replaces the whole shard with `params` (size() floats) reflecting
  // `clock`: a re-seed under stateless recovery. Optimizer state is reset
  // (zero slots, step 0), except that a momentum table's velocity is set to
  // `velocity` (size() floats) when given; pending BSP rounds are dropped;
  // visible_clock() is at least `clock` from now on. InvalidArgument (and
  // nothing changed) for a size mismatch or a velocity for another optimizer.
  Status Seed(const float* params, size_t n, int64_t clock, const float* velocity = nullptr);
  // The table's optimizer ("sgd", "momentum", "adam", "adagrad").
  const char* optimizer_name() const { return optimizer_->Name(); }

  // Answers now if the gate allows a pull by a worker at `worker_clock`,
  // otherwise queues it until `deadline_ms` (monotonic).
  void Pull(int64_t worker_clock, uint64_t begin, size_t n, int64_t deadline_ms, PullReply done);

  // Whether the state reflects a push of `clock` accepted now: always but
  // under BSP, where only once its round is applied (clock < applied_clock()).
  bool Reflects(int64_t clock) const {
    return !policy_->AggregatesPushes() || clock < applied_clock_;
  }
  // Called with applied_clock() each time BSP rounds were applied (or a
  // re-seed dropped them): the pushes of clocks below it are reflected now.
  void set_on_rounds_applied(std::function<void(int64_t applied_clock)> fn) {
    on_rounds_applied_ = std::move(fn);
  }

  // The coordinator's live worker set changed.
  void SetLiveWorkers(const std::vector<int>& ids, const std::vector<int64_t>& clocks);
  // Holds the clocks of `ids` (see the file comment): each starts at the
  // clock the store loaded the shard at and rises only through its own
  // pushes and AdvanceClock, not through SetLiveWorkers' clocks. REQUIRES:
  // none of `ids` live yet (call before the first live set).
  void HoldWorkerClocks(const std::vector<int>& ids);
  // Ends the hold of `worker`: the clock the coordinator reported for it last
  // applies (rounds it completes are applied). No-op if not held.
  void ReleaseWorkerClock(int worker);
  bool holds_worker_clock(int worker) const { return gate_.holds_worker_clock(worker); }
  // Completed clock of a live worker as this shard sees it (-1: not live).
  int64_t worker_clock(int worker) const { return gate_.worker_clock(worker); }
  // Worker completed `clock` without pushing here.
  void AdvanceClock(int worker, int64_t clock);
  // Fails waiting pulls whose deadline passed.
  void ExpireWaiters(int64_t now_ms);

  // Clock every parameter of this shard reflects.
  int64_t visible_clock() const;
  // Minimum completed clock over the live workers (0 if none).
  int64_t min_worker_clock() const { return gate_.min_clock(); }
  size_t waiting_pulls() const { return gate_.waiting(); }
  size_t num_slots() const { return shard_->slots.size(); }
  // No BSP round pending and no pull waiting at the gate: the whole state is
  // the slots, the step and the clocks (what a range move copies).
  bool Quiescent() const { return rounds_.empty() && gate_.waiting() == 0; }
  // A copy of keys [begin, begin + n) of `slot` (0: parameters, 1..: optimizer
  // state). REQUIRES: CheckRange OK, slot < num_slots().
  FloatBuffer CopySlot(int slot, uint64_t begin, size_t n) const;
  // Keys [begin, begin + n) of `slot` straight out of the store's memory,
  // which the buffer keeps allocated (ParamStore::PinDense), or a copy where
  // the store cannot pin it. Not a snapshot: later writes of those keys show
  // through (a range move holds them back). REQUIRES: as CopySlot.
  FloatBuffer ViewSlot(int slot, uint64_t begin, size_t n) const;
  // ViewSlot for a payload that leaves while the shard goes on being written
  // (a range move's copy phase): the keys are lent (lent_spans()) until the
  // buffer and every slice of it are dropped (ZeroMQ sent it), and a write
  // of any of them, in any slot, waits until then, at most `wait_ms`
  // (LentSpans::WaitUntilReturned: past it the write proceeds and the span
  // is recorded as torn). A copy where the store cannot pin its memory.
  // REQUIRES: as CopySlot, n > 0.
  FloatBuffer LendSlot(int slot, uint64_t begin, size_t n, int64_t wait_ms);
  // The keys lent by LendSlot (offsets in the shard), or nullptr if none
  // ever was.
  LentSpans* lent_spans() { return lent_.get(); }
  // Makes this the range [spec().begin, end) named `store_name` in the store
  // (ParamStore::ReshapeDense), in place: a range move's cut keeps its head
  // so, and its take-back grows it again. Pending BSP rounds grow with it
  // (no worker pushed the new keys for them yet); FailedPrecondition for a
  // shrink while a round is pending. On an error nothing changed.
  Status Reshape(const std::string& store_name, uint64_t end);
  // How many keys a worker's pushes for a clock must cover to complete that
  // clock here (0: size(), the default). A range cut for a move keeps its
  // old size until the move is published or taken back: its rounds then
  // close only with each worker's CLOCK, which follows the worker's pushes
  // of the cut keys (held meanwhile), so a taken-back range's rounds hold
  // both parts' pushes as if nothing had been cut. Completes the rounds the
  // new target completes. A lower target forgets the async push counts.
  void set_coverage_keys(uint64_t keys);
  // Gives the store's memory of the keys past end() back (after a Reshape
  // that shrank the range; it cannot grow back past end() any more).
  // Waits for the lent keys past end() first (ZeroMQ may still be sending
  // them).
  void ReleaseTail();
  uint64_t updates_applied() const { return updates_applied_; }
  // A range move's copy phase: from now on every write to the shard's
  // offsets [begin, end) marks its chunks of `chunk_keys` keys in
  // write_tracker() (Apply, AddDelta, Seed, state loads), until
  // StopTrackingWrites or a Reshape (which ends it: the offsets change).
  // Replaces a tracker that was running.
  //
  // With `observer`, each write is also told to it as it is applied (before
  // the optimizer runs, after the step is counted): a range move's copy phase
  // forwards the updates of the moved keys to the destination.
  struct Write {
    // kStep: an optimizer step of `values` (gradients) at `step` with
    // `lr_scale`; kDelta: `values` added as is; kReset: the keys were
    // replaced (a re-seed, a state load), not an update one can forward.
    enum Kind { kStep, kDelta, kReset };
    Kind kind;
    uint64_t offset;  // In the shard's keys.
    size_t n;
    const float* values;
    int64_t step;
    float lr_scale;
  };
  void TrackWrites(uint64_t begin, uint64_t end, uint64_t chunk_keys,
                   std::function<void(const Write&)> observer = nullptr) {
    tracker_ = std::make_unique<WriteTracker>(begin, end, chunk_keys);
    write_observer_ = std::move(observer);
  }
  void StopTrackingWrites() {
    tracker_.reset();
    write_observer_ = nullptr;
  }
  // Applies an update forwarded by a range move's source (a Write of kind
  // kStep) to keys [begin, begin + n): the same optimizer step on the same
  // state, at the source's `step` and `lr_scale`. REQUIRES: CheckRange OK.
  Status ApplyForwardedStep(uint64_t begin, const float* grads, size_t n, int64_t step,
                            float lr_scale);
  // nullptr when not tracking.
  WriteTracker* write_tracker() { return tracker_.get(); }

  // ---- Chain replication ----
  // A follower (a chain replica that is not the head) applies what its
  // predecessor forwards and never closes a BSP round on its own: the head
  // decides when a round is complete (it depends on the live set, which
  // reaches each server at a different time) and how many workers it is
  // averaged over, and forwards both (DescribeRoundsApplied,
  // CompleteRoundsBelow), so every replica takes the very same steps.
  // Turning a follower into the head (promotion) closes the rounds the live
  // set allows.
  void SetFollower(bool follower);
  bool follower() const { return follower_; }
  // BSP rounds below this clock are applied.
  int64_t applied_clock() const { return applied_clock_; }
  // Head: the rounds applied at or after clock `from` (the newest
  // kRoundHistory of them), each with the number of workers it was averaged
  // over, into `out` (appended), for the CHAIN_COMPLETE that replicates them.
  void DescribeRoundsApplied(int64_t from, wire::RoundsApplied* out) const;
  // Follower: applies every pending round below `clock` as the head did,
  // averaged over the number of workers `applied` gives for it (a round it
  // does not name: over this replica's own count, RoundWorkers).
  Status CompleteRoundsBelow(int64_t clock,
                             const wire::RoundsApplied& applied = wire::RoundsApplied());
  // The replicated state (parameters, optimizer slots, step, clocks, pending
  // BSP rounds) into `snap` and `frames` (slots, then for each round one
  // gradient per contributing worker, in ascending worker order).
  // The step, clocks and applied clock of SaveState, without the slots and
  // rounds (a quiescent range's state is those plus its slots).
  void SaveMeta(wire::ChainSnapshot* snap) const;
  void SaveState(wire::ChainSnapshot* snap, std::vector<FloatBuffer>* frames) const;
  // Replaces the state with a snapshot from SaveState. InvalidArgument when
  // the frames do not fit this shard.
  Status LoadState(const wire::ChainSnapshot& snap, const std::vector<const float*>& frames,
                   const std::vector<size_t>& sizes);
  // The same in pieces (a streamed state transfer): LoadSlotPiece writes
  // floats [offset, offset + n) of `slot` in place; LoadMeta then replaces
  // the rest of the state (step, clocks, pending rounds with their workers'
  // gradients `round_grads`, of size() floats each, in SaveState's order).
  // InvalidArgument when they do not fit this shard.
  Status LoadSlotPiece(size_t slot, uint64_t offset, const float* values, size_t n);
  Status LoadMeta(const wire::ChainSnapshot& snap, const std::vector<const float*>& round_grads);

  // How many applied rounds DescribeRoundsApplied remembers: far more than
  // close between two forwarded completions (at most --max_clocks_ahead + 1).
  static constexpr size_t kRoundHistory = 256;

 private:
  // Keys (offsets in the shard) one worker pushed for one clock, as
  // disjoint intervals begin -> end.
  struct Coverage {
    std::map<uint64_t, uint64_t> intervals;
    uint64_t keys = 0;
    // Adds [begin, end); false (and nothing added) if it overlaps.
    bool Add(uint64_t begin, uint64_t end);
  };
  // One worker's part of a pending BSP round.
  struct Contribution {
    FloatBuffer grads;  // size() floats (from pool_): what it pushed, zero elsewhere.
    Coverage covered;   // The keys it pushed.
  };
  // A pending BSP round: each contributing worker's gradient apart, so that
  // they are summed in worker-id order, not in arrival order.
  struct Round {
    std::map<int, Contribution> workers;  // By worker id.
  };
  // Applies the optimizer to keys [offset, offset + n) of the shard; with
  // `copy`, also writes the updated parameters there.
  Status Apply(uint64_t offset, const float* grads, size_t n, float lr_scale,
               bool new_step = true, float* copy = nullptr);
  // Push() of a gradient applied on arrival (async, SSP, or a BSP round
  // already closed); `copy` as for Apply.
  Status ApplyOnArrival(int worker, int64_t clock, uint64_t offset, const float* grads, size_t n,
                        bool new_step, float* copy);
  bool AppliesOnArrival(int64_t clock) const {
    return !policy_->AggregatesPushes() || clock < applied_clock_;
  }
  // Sums the round's gradients in worker-id order, multiplies by 1/`workers`
  // and applies the result as one step; remembers `workers` for
  // DescribeRoundsApplied.
  Status ApplyRound(Round* round, int64_t clock, size_t workers);
  // The head's divisor of `round`: ConsistencyGate::RoundWorkers.
  size_t RoundWorkers(const Round& round) const;
  // Frames of pending rounds' gradients a snapshot carries (SaveState): one
  // per contributor named in snap.rounds().
  static size_t RoundFrames(const wire::ChainSnapshot& snap);
  float LrScale(int64_t clock) const { return static_cast<float>(rates_.LrScaleAt(clock)); }
  // Not BSP: records a push of n keys; true once `worker`'s pushes for
  // `clock` cover the shard.
  bool CoveredByPushes(int worker, int64_t clock, size_t n);
  // Applies the rounds every live worker completed; tells on_rounds_applied_.
  Status CompleteRounds();
  Status ApplyCompleteRounds();
  void NotifyRoundsApplied();
  FloatBuffer Copy(uint64_t begin, size_t n) const;
  uint64_t CoverageKeys() const { return coverage_keys_ > 0 ? coverage_keys_ : shard_->size(); }
  // An uninitialized buffer of n floats (from pool_ if any): a pull's answer,
  // or a worker's part of a BSP round.
  FloatBuffer NewSnapshot(size_t n) const;

  // Constant after construction.
  DenseShard* const shard_;
  const std::unique_ptr<kernels::Optimizer> optimizer_;
  const ConsistencyPolicy* const policy_;
  kernels::Device* const device_;
  ParamStore* const store_;
  BufferPool* const pool_;

  int64_t applied_clock_ = 0;  // BSP: rounds < applied_clock_ are applied.
  int64_t loaded_clock_ = 0;   // The clock of the state the store loaded (0 if new).
  std::map<int64_t, Round> rounds_;  // BSP: clock -> the workers' gradients.
  // BSP: clock -> workers of the newest kRoundHistory applied rounds.
  std::map<int64_t, uint32_t> round_workers_;
  // SSP / async: worker -> (clock, keys it pushed at that clock so far).
  std::map<int, std::pair<int64_t, uint64_t>> pushed_keys_;
  uint64_t coverage_keys_ = 0;  // set_coverage_keys (0: size()).
  std::vector<float*> state_scratch_;
  uint64_t updates_applied_ = 0;
  bool follower_ = false;
  std::unique_ptr<WriteTracker> tracker_;  // TrackWrites (nullptr: none).
  std::function<void(const Write&)> write_observer_;  // TrackWrites (may be null).
  // LendSlot (nullptr: never lent) and its writers' wait bound.
  std::unique_ptr<LentSpans> lent_;
  int64_t lend_wait_ms_ = 0;
  // Before keys [offset, offset + n) are written: waits until none of them
  // is lent, marks them in tracker_ and tells write_observer_.
  void NoteWrite(Write::Kind kind, uint64_t offset, size_t n, const float* values,
                 float lr_scale = 0.0f) {
    if (lent_ != nullptr) lent_->WaitUntilReturned(offset, n, lend_wait_ms_);
    if (tracker_ != nullptr) tracker_->Mark(offset, n);
    if (write_observer_) write_observer_(Write{kind, offset, n, values, shard_->step, lr_scale});
  }
  TableOptions rates_;  // Learning rate by clock (LrScaleAt).
  std::function<void(int64_t)> on_rounds_applied_;
  // Live workers' clocks, held clocks, waiting pulls. Its hooks and parked
  // answers use the members above (visible_clock, CompleteRounds, Copy /
  // Read): constructed after them, destroyed before them.
  ConsistencyGate gate_;
};

}  // namespace server_internal
}  // namespace relaxps

#endif  // RELAXPS_SERVER_INTERNAL_DENSE_SHARD_H_
