#include "coordinator/event_ring.h"

#include <algorithm>

namespace relaxps {

uint64_t EventRing::Append(std::string line) {
  std::lock_guard<std::mutex> l(mu_);
  if (lines_.size() == capacity_) lines_.pop_front();
  lines_.push_back(std::move(line));
  return next_seq_++;
}

EventRing::Slice EventRing::Since(uint64_t after, size_t max) const {
  std::lock_guard<std::mutex> l(mu_);
  Slice out;
  const uint64_t first = next_seq_ - lines_.size();  // Seq of lines_.front().
  out.last_seq = std::min(after, next_seq_ - 1);
  uint64_t seq = std::max(after + 1, first);
  if (seq > after + 1) out.missed = seq - (after + 1);
  for (; seq < next_seq_ && out.lines.size() < max; ++seq) {
    out.lines.push_back(lines_[seq - first]);
    out.last_seq = seq;
  }
  if (out.lines.empty()) out.last_seq = next_seq_ - 1;
  return out;
}

uint64_t EventRing::last_seq() const {
  std::lock_guard<std::mutex> l(mu_);
  return next_seq_ - 1;
}

}  // namespace relaxps
