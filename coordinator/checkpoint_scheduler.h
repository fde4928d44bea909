// CheckpointScheduler: when the coordinator takes a coordinated checkpoint,
// and the record of the ones every server completed.
//
// A checkpoint is due when the minimum live worker clock crosses a multiple
// of `every_clocks`, or `every_s` seconds after the previous one started; a
// manual request (relaxps-ctl checkpoint) asks for one at once. At most one
// checkpoint is in flight; manual requests that arrive meanwhile are queued
// here (Queue) and answered by the next round (TakeQueued). Each round gets
// the next seq (CheckpointRecord.seq: one more than any started or
// restored). The coordinator sends CHECKPOINT to every server and reports
// the outcome with Finish(). Only a checkpoint that every server completed
// becomes `latest()`. The record lives in memory; the coordinator stores
// history() and failed() with its durable state and a new leader Restore()s
// them (the servers' checkpoint directories remain).
//
// Time is passed in (monotonic ms) so tests can drive it.
//
// Thread-safety: not synchronized; owned by the coordinator's loop.
#ifndef RELAXPS_COORDINATOR_CHECKPOINT_SCHEDULER_H_
#define RELAXPS_COORDINATOR_CHECKPOINT_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "common/rpc_server.h"
#include "common/status.h"
#include "common/wire.h"

namespace relaxps {

struct CheckpointSchedulerOptions {
  // Checkpoint when the min worker clock reaches a multiple of this (0: off).
  // Smaller loses fewer clocks on a failure; each checkpoint pauses every
  // server for a flush plus a hard-linked snapshot.
  int64_t every_clocks = 0;
  // Checkpoint this often in seconds (0: off).
  double every_s = 0;
  // Complete checkpoints remembered for status / listing.
  size_t history = 16;
};

class CheckpointScheduler {
 public:
  CheckpointScheduler(const CheckpointSchedulerOptions& options, int64_t now_ms);

  CheckpointScheduler(const CheckpointScheduler&) = delete;
  CheckpointScheduler& operator=(const CheckpointScheduler&) = delete;

  bool enabled() const { return options_.every_clocks > 0 || options_.every_s > 0; }
  bool in_flight() const { return in_flight_; }

  // True if a periodic checkpoint should start now (never while one is in
  // flight).
  bool Due(int64_t min_worker_clock, int64_t now_ms) const;
  // A checkpoint tagged `clock` is sent to the servers; returns its seq.
  // REQUIRES: !in_flight().
  uint64_t Start(int64_t clock, int64_t now_ms);
  // Manual requests that arrived while a checkpoint is in flight: the next
  // round answers them. TakeQueued() empties the queue (arrival order).
  void Queue(std::vector<std::shared_ptr<Request>> waiters);
  std::vector<std::shared_ptr<Request>> TakeQueued();
  size_t queued() const { return queued_.size(); }
  // The seq the next Start() returns.
  uint64_t next_seq() const { return next_seq_; }
  // The in-flight checkpoint finished: OK with the record of every server's
  // part, or the first error. REQUIRES: in_flight().
  void Finish(const Status& status, wire::CheckpointRecord record, int64_t now_ms);

  // The newest complete checkpoint, if any.
  const std::optional<wire::CheckpointRecord>& latest() const { return latest_; }
  // Complete checkpoints, oldest first (at most options.history).
  const std::deque<wire::CheckpointRecord>& history() const { return history_; }
  uint64_t failed() const { return failed_; }
  // A restarted coordinator resumes the registry: `history` oldest first
  // (the next seq follows the newest of them).
  void Restore(const std::vector<wire::CheckpointRecord>& history, uint64_t failed);

 private:
  // Constant after construction.
  const CheckpointSchedulerOptions options_;

  bool in_flight_ = false;
  int64_t last_start_ms_;
  // every_clocks: the multiple of every_clocks last checkpointed.
  int64_t last_clock_mark_ = 0;
  std::optional<wire::CheckpointRecord> latest_;
  std::deque<wire::CheckpointRecord> history_;
  uint64_t failed_ = 0;
  uint64_t next_seq_ = 1;
  std::vector<std::shared_ptr<Request>> queued_;
};

}  // namespace relaxps

#endif  // RELAXPS_COORDINATOR_CHECKPOINT_SCHEDULER_H_
