#include "coordinator/checkpoint_scheduler.h"

#include <algorithm>

namespace relaxps {

CheckpointScheduler::CheckpointScheduler(const CheckpointSchedulerOptions& options,
                                         int64_t now_ms)
    : options_(options), last_start_ms_(now_ms) {}

bool CheckpointScheduler::Due(int64_t min_worker_clock, int64_t now_ms) const {
  if (in_flight_) return false;
  if (options_.every_clocks > 0 && min_worker_clock > 0 &&
      min_worker_clock / options_.every_clocks > last_clock_mark_) {
    return true;
  }
  return options_.every_s > 0 &&
         static_cast<double>(now_ms - last_start_ms_) >= options_.every_s * 1000.0;
}

uint64_t CheckpointScheduler::Start(int64_t clock, int64_t now_ms) {
  in_flight_ = true;
  last_start_ms_ = now_ms;
  if (options_.every_clocks > 0) {
    last_clock_mark_ = std::max(last_clock_mark_, clock / options_.every_clocks);
  }
  return next_seq_++;
}

void CheckpointScheduler::Queue(std::vector<std::shared_ptr<Request>> waiters) {
  for (std::shared_ptr<Request>& w : waiters) queued_.push_back(std::move(w));
}

std::vector<std::shared_ptr<Request>> CheckpointScheduler::TakeQueued() {
  std::vector<std::shared_ptr<Request>> taken;
  taken.swap(queued_);
  return taken;
}

void CheckpointScheduler::Finish(const Status& status, wire::CheckpointRecord record,
                                 int64_t now_ms) {
  (void)now_ms;
  in_flight_ = false;
  if (!status.ok()) {
    ++failed_;
    return;
  }
  latest_ = record;
  history_.push_back(std::move(record));
  while (history_.size() > std::max<size_t>(1, options_.history)) history_.pop_front();
}

void CheckpointScheduler::Restore(const std::vector<wire::CheckpointRecord>& history,
                                  uint64_t failed) {
  for (const wire::CheckpointRecord& c : history) next_seq_ = std::max(next_seq_, c.seq() + 1);
  history_.assign(history.begin(), history.end());
  while (history_.size() > options_.history) history_.pop_front();
  latest_.reset();
  if (!history_.empty()) latest_ = history_.back();
  if (latest_ && options_.every_clocks > 0) last_clock_mark_ = latest_->clock() / options_.every_clocks;
  failed_ = failed;
}

}  // namespace relaxps
