// Sparse table logic of a server: the rows of one sparse table that hash to
// this server, read and updated through the ParamStore, under the job's
// consistency model.
//
//  - async: a push is applied on arrival; pulls never wait.
//  - SSP: a push is applied on arrival; a pull by a worker at clock c waits
//    until every live worker has completed clock c - s - 1 (its CLOCK, sent
//    to every server at the end of each clock, has arrived).
//  - BSP: pushes of clock c are kept per worker and applied together once
//    every live worker has completed clock c, as one optimizer step per row
//    that any worker pushed, with (the workers' gradients of the row summed
//    in worker-id order) * (1 / W), W the round's workers
//    (ConsistencyGate::RoundWorkers: the live workers when it closes, plus
//    contributors that left), not the pushers of the row: a worker that did
//    not push a row contributes a zero gradient, so N workers of batch b take
//    the step of one process with batch N*b, bit for bit, whatever order the
//    pushes arrived in. A pull at clock c waits for the rounds below c.
// A worker's pushes to this table within one clock are summed (duplicate ids
// within one push too, in the order it sent them), so each row gets one
// optimizer step per push (async, SSP) or per round (BSP). Memory: a pending
// round holds each worker's rows apart (what it pushed, summed per row)
// until it is applied; pushes more than --max_clocks_ahead clocks ahead are
// refused, so at most (max_clocks_ahead + 1) rounds of them are pending.
// Pending BSP rounds are not checkpointed: a
// restarted server applies what the workers send again (the server's
// exactly-once record counts a BSP push only once its round is applied:
// Reflects, set_on_rounds_applied). Rounds re-formed from a replay
// (HoldWorkerClocks) work as for dense shards (dense_shard.h), except that a
// row push completes no clock: a held worker's clock rises through its
// CLOCKs only, so the replayed rounds are applied, in clock order, once the
// held workers are released.
//
// The live workers' clocks, held clocks and the pulls waiting for a clock
// live in this table's ConsistencyGate (consistency_gate.h); this object owns
// the rows' rounds and answers the gate's hooks (visible clock, how rounds
// complete, how a waiting pull is answered).
//
// Thread-safety: not synchronized; used only on the server's loop thread.
#ifndef RELAXPS_SERVER_INTERNAL_SPARSE_SHARD_H_
#define RELAXPS_SERVER_INTERNAL_SPARSE_SHARD_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "common/buffer.h"
#include "common/buffer_pool.h"
#include "common/status.h"
#include "common/table.h"
#include "consistency/consistency_policy.h"
#include "kernels/device.h"
#include "kernels/optimizer.h"
#include "server/internal/consistency_gate.h"
#include "server/internal/row_index.h"
#include "storage/param_store.h"

namespace relaxps {
namespace server_internal {

// Answers a pull of rows: the rows (slot 0) or the error.
using RowsReply = std::function<void(StatusOr<FloatBuffer> rows)>;

class SparseShardState {
 public:
  // REQUIRES: store has the table `spec.table`; pointers outlive this.
  // `policy` null: every push is applied on arrival and pulls never wait
  // (the chain-replicated buckets of server/internal/sparse_bucket.h). Pull
  // replies come from `pool` (nullptr: plain allocations).
  SparseShardState(SparseTableSpec spec, std::unique_ptr<kernels::Optimizer> optimizer,
                   const ConsistencyPolicy* policy, kernels::Device* device, ParamStore* store,
                   BufferPool* pool = nullptr);

  uint32_t width() const { return spec_.width; }
  // As DenseShardState::set_rates.
  void set_rates(const TableOptions& table) { rates_ = table; }
  int num_slots() const { return spec_.num_slots; }

  // Reads `slot` (0: parameters, 1..: optimizer state) of n rows now, without
  // the consistency gate. REQUIRES: 0 <= slot < num_slots().
  StatusOr<FloatBuffer> Read(const uint64_t* ids, size_t n, int slot = 0);
  // Reads the parameters of `ids` for a worker at `worker_clock` once the
  // gate allows it (at once, or when the clocks move), or fails at
  // `deadline_ms` (monotonic).
  void Pull(int64_t worker_clock, std::vector<uint64_t> ids, int64_t deadline_ms,
            RowsReply done);
  // A gradient for n rows (n * width floats) from `worker` at `clock`.
  // REQUIRES: grads finite.
  Status Push(int worker, int64_t clock, const uint64_t* ids, size_t n, const float* grads);
  // Whether Push() of a validated request cannot fail: the store updates the
  // rows in place (in memory, nothing to log or write) and holds the table.
  // The server then acknowledges a row push before applying it.
  bool PushCannotFail();
  // Adds `deltas` (n * width floats) to the rows' parameters at once, without
  // an optimizer step or the gate (stateless recovery: a worker's row changes).
  Status AddDelta(const uint64_t* ids, size_t n, const float* deltas);

  // Whether the rows reflect a push of `clock` accepted now: always but under
  // BSP, where only once its round is applied.
  bool Reflects(int64_t clock) const { return !aggregates() || clock < applied_clock_; }
  // As DenseShardState::set_on_rounds_applied.
  void set_on_rounds_applied(std::function<void(int64_t applied_clock)> fn) {
    on_rounds_applied_ = std::move(fn);
  }

  // The coordinator's live worker set changed.
  void SetLiveWorkers(const std::vector<int>& ids, const std::vector<int64_t>& clocks);
  // As DenseShardState::HoldWorkerClocks, starting at `start` (a sparse
  // table stores no clock: the restored checkpoint's; lower is safe, as the
  // exactly-once record skips replayed pushes the rows reflect).
  void HoldWorkerClocks(const std::vector<int>& ids, int64_t start);
  void ReleaseWorkerClock(int worker);
  bool holds_worker_clock(int worker) const { return gate_.holds_worker_clock(worker); }
  // `worker` completed `clock` (its CLOCK message).
  void AdvanceClock(int worker, int64_t clock);
  // Fails waiting pulls whose deadline passed.
  void ExpireWaiters(int64_t now_ms);

  // No BSP round pending and no pull waiting at the gate: the rows change
  // only by requests that arrive from now on (a range move may cut a
  // bucket out, docs/elastic.md).
  bool Quiescent() const { return rounds_.empty() && gate_.waiting() == 0; }

  // Clock every row of this table reflects.
  int64_t visible_clock() const;
  uint64_t updates_applied() const { return updates_applied_; }

 private:
  // BSP: the rows one worker pushed for one clock, its pushes summed per row.
  struct Rows {
    std::unordered_map<uint64_t, size_t> index;  // Row id -> position.
    std::vector<uint64_t> ids;
    std::vector<float> sum;                      // ids.size() * width.
  };
  // BSP: one clock's pushes, apart per worker so that they are summed in
  // worker-id order, not in arrival order.
  struct Round {
    std::map<int, Rows> workers;  // By worker id.
  };
  // Sums `round`'s rows in worker-id order into `out` (ids in order of first
  // appearance) and multiplies them by 1/W (ConsistencyGate::RoundWorkers).
  void ReduceRound(const Round& round, Rows* out) const;
  bool aggregates() const { return policy_ != nullptr && policy_->AggregatesPushes(); }
  // One optimizer step on each of the u distinct rows `ids` with `grads`.
  Status ApplyRows(const uint64_t* ids, size_t u, const float* grads, int64_t clock);
  // Applies the rounds every live worker completed; tells on_rounds_applied_.
  Status CompleteRounds();
  Status ApplyCompleteRounds();

  // Constant after construction.
  const SparseTableSpec spec_;
  const std::unique_ptr<kernels::Optimizer> optimizer_;
  const ConsistencyPolicy* const policy_;
  kernels::Device* const device_;
  ParamStore* const store_;
  BufferPool* const pool_;

  int64_t applied_clock_ = 0;  // BSP: rounds below it are applied.
  std::map<int64_t, Round> rounds_;
  uint64_t updates_applied_ = 0;
  TableOptions rates_;  // Learning rate by clock (LrScaleAt).
  std::function<void(int64_t)> on_rounds_applied_;
  // Scratch, reused by every call.
  std::vector<float> rows_;  // Full row records.
  std::vector<float*> state_;  // Optimizer state slots of one row.
  RowIndex index_;  // Duplicate ids of one push.
  std::vector<uint64_t> unique_ids_;
  std::vector<float> summed_;
  // Live workers' clocks, held clocks, waiting pulls. Its hooks and parked
  // answers use the members above (visible_clock, CompleteRounds, Copy /
  // Read): constructed after them, destroyed before them.
  ConsistencyGate gate_;
};

}  // namespace server_internal
}  // namespace relaxps

#endif  // RELAXPS_SERVER_INTERNAL_SPARSE_SHARD_H_
