// DenseShard logic of a server: one key range of a dense table, with its
// optimizer, consistency gate and waiting pulls.
//
// Owns nothing of the parameter memory (the ParamStore does); owns the BSP
// aggregation buffers and the queue of pulls waiting for their clock.
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
#include "consistency/vector_clock.h"
#include "kernels/device.h"
#include "kernels/optimizer.h"
#include "proto/relaxps.pb.h"
#include "storage/param_store.h"

namespace relaxps {
namespace server_internal {

// Answers a waiting pull: called with the status and, when OK, a copy of the
// requested parameters and the clock they reflect.
using PullReply = std::function<void(const Status&, FloatBuffer params, int64_t params_clock)>;

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
  // (AdvanceClock). Under BSP a round's sum is averaged per key over the
  // workers that pushed that key; InvalidArgument if a worker pushes a key
  // twice for one clock.
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

  // The coordinator's live worker set changed.
  void SetLiveWorkers(const std::vector<int>& ids, const std::vector<int64_t>& clocks);
  // Worker completed `clock` without pushing here.
  void AdvanceClock(int worker, int64_t clock);
  // Fails waiting pulls whose deadline passed.
  void ExpireWaiters(int64_t now_ms);

  // Clock every parameter of this shard reflects.
  int64_t visible_clock() const;
  // Minimum completed clock over the live workers (0 if none).
  int64_t min_worker_clock() const { return clocks_.Min(); }
  size_t waiting_pulls() const { return waiters_.size(); }
  size_t num_slots() const { return shard_->slots.size(); }
  // A copy of keys [begin, begin + n) of `slot` (0: parameters, 1..: optimizer
  // state). REQUIRES: CheckRange OK, slot < num_slots().
  FloatBuffer CopySlot(int slot, uint64_t begin, size_t n) const;
  uint64_t updates_applied() const { return updates_applied_; }

  // ---- Chain replication ----
  // A follower (a chain replica that is not the head) applies what its
  // predecessor forwards and never closes a BSP round on its own: the head
  // decides when a round is complete (it depends on the live set, which
  // reaches each server at a different time) and forwards CompleteRoundsBelow.
  // Turning a follower into the head (promotion) closes the rounds the live
  // set allows.
  void SetFollower(bool follower);
  bool follower() const { return follower_; }
  // BSP rounds below this clock are applied.
  int64_t applied_clock() const { return applied_clock_; }
  // Follower: applies every pending round below `clock`, as the head did.
  Status CompleteRoundsBelow(int64_t clock);
  // The replicated state (parameters, optimizer slots, step, clocks, pending
  // BSP rounds) into `snap` and `frames` (slots, then one sum per round).
  void SaveState(wire::ChainSnapshot* snap, std::vector<FloatBuffer>* frames) const;
  // Replaces the state with a snapshot from SaveState. InvalidArgument when
  // the frames do not fit this shard.
  Status LoadState(const wire::ChainSnapshot& snap, const std::vector<const float*>& frames,
                   const std::vector<size_t>& sizes);
  // The same in pieces (a streamed state transfer): LoadSlotPiece writes
  // floats [offset, offset + n) of `slot` in place; LoadMeta then replaces
  // the rest of the state (step, clocks, pending rounds with their sums
  // `round_sums`, of size() floats each). InvalidArgument when they do not
  // fit this shard.
  Status LoadSlotPiece(size_t slot, uint64_t offset, const float* values, size_t n);
  Status LoadMeta(const wire::ChainSnapshot& snap, const std::vector<const float*>& round_sums);

 private:
  // Keys (offsets in the shard) one worker pushed for one clock, as
  // disjoint intervals begin -> end.
  struct Coverage {
    std::map<uint64_t, uint64_t> intervals;
    uint64_t keys = 0;
    // Adds [begin, end); false (and nothing added) if it overlaps.
    bool Add(uint64_t begin, uint64_t end);
  };
  struct Round {
    std::vector<float> sum;
    std::map<int, Coverage> covered;  // Contributing worker -> its keys.
  };
  struct Waiter {
    int64_t required;
    uint64_t begin;
    size_t n;
    int64_t deadline_ms;
    PullReply done;
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
  // Averages the round's sum (per key, over the workers that pushed the key)
  // and applies it.
  Status ApplyRound(Round* round, int64_t clock);
  float LrScale(int64_t clock) const { return static_cast<float>(rates_.LrScaleAt(clock)); }
  // Not BSP: records a push of n keys; true once `worker`'s pushes for
  // `clock` cover the shard.
  bool CoveredByPushes(int worker, int64_t clock, size_t n);
  Status CompleteRounds();
  void ServeWaiters();
  FloatBuffer Copy(uint64_t begin, size_t n) const;
  // An uninitialized buffer of n floats for a pull's answer.
  FloatBuffer NewSnapshot(size_t n) const;

  // Constant after construction.
  DenseShard* const shard_;
  const std::unique_ptr<kernels::Optimizer> optimizer_;
  const ConsistencyPolicy* const policy_;
  kernels::Device* const device_;
  ParamStore* const store_;
  BufferPool* const pool_;

  VectorClock clocks_;
  int64_t applied_clock_ = 0;  // BSP: rounds < applied_clock_ are applied.
  int64_t loaded_clock_ = 0;   // The clock of the state the store loaded (0 if new).
  std::map<int64_t, Round> rounds_;  // BSP: clock -> aggregated gradients.
  // SSP / async: worker -> (clock, keys it pushed at that clock so far).
  std::map<int, std::pair<int64_t, uint64_t>> pushed_keys_;
  std::vector<Waiter> waiters_;
  std::vector<float*> state_scratch_;
  uint64_t updates_applied_ = 0;
  bool follower_ = false;
  TableOptions rates_;  // Learning rate by clock (LrScaleAt).
};

}  // namespace server_internal
}  // namespace relaxps

#endif  // RELAXPS_SERVER_INTERNAL_DENSE_SHARD_H_
