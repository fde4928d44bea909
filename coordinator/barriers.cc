#include "coordinator/barriers.h"

#include <algorithm>
#include <string>

namespace relaxps {

void Barriers::WaitStart(int64_t deadline_ms, Release release) {
  if (start_open_) {
    release(Status::OK());
    return;
  }
  start_waiters_.push_back(Held{deadline_ms, std::move(release)});
}

void Barriers::Arrive(int worker, int64_t generation, int64_t deadline_ms, Release release) {
  if (generation < generation_) {
    release(Status::OK());
    return;
  }
  if (generation > generation_) {
    release(InvalidArgumentError("worker " + std::to_string(worker) + " arrived at barrier " +
                                 std::to_string(generation) + " but the job is at barrier " +
                                 std::to_string(generation_)));
    return;
  }
  auto it = arrived_.find(worker);
  if (it != arrived_.end()) {  // A retry replaces the earlier request.
    it->second.release(AbortedError("superseded by a repeated barrier request"));
    it->second = Held{deadline_ms, std::move(release)};
    return;
  }
  arrived_.emplace(worker, Held{deadline_ms, std::move(release)});
}

void Barriers::Update(const std::vector<int>& live_workers, int64_t now_ms) {
  live_ = live_workers;
  if (!start_open_ && static_cast<int>(live_.size()) >= start_workers_) {
    start_open_ = true;
    for (Held& h : start_waiters_) h.release(Status::OK());
    start_waiters_.clear();
  }
  std::vector<Held> expired;
  auto keep = std::remove_if(start_waiters_.begin(), start_waiters_.end(), [&](Held& h) {
    if (h.deadline_ms > now_ms) return false;
    expired.push_back(std::move(h));
    return true;
  });
  start_waiters_.erase(keep, start_waiters_.end());
  for (Held& h : expired) {
    h.release(DeadlineExceededError(
        "start barrier: " + std::to_string(live_.size()) + " of " +
        std::to_string(start_workers_) + " workers (--num_workers) registered; start the "
        "missing workers or lower --num_workers"));
  }
  if (arrived_.empty()) return;
  std::string missing;
  for (int w : live_) {
    if (!arrived_.count(w)) missing += (missing.empty() ? "" : ", ") + std::to_string(w);
  }
  if (missing.empty()) {
    std::map<int, Held> passed;
    passed.swap(arrived_);
    ++generation_;
    for (auto& [w, h] : passed) h.release(Status::OK());
    return;
  }
  for (auto it = arrived_.begin(); it != arrived_.end();) {
    if (it->second.deadline_ms > now_ms) {
      ++it;
      continue;
    }
    it->second.release(DeadlineExceededError("barrier " + std::to_string(generation_) +
                                             ": still waiting for worker(s) " + missing));
    it = arrived_.erase(it);
  }
}

}  // namespace relaxps
