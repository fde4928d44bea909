#include "consistency/vector_clock.h"

#include <algorithm>

namespace relaxps {

int64_t VectorClock::Min() const {
  if (clocks_.empty()) return 0;
  int64_t m = clocks_.begin()->second;
  for (const auto& [id, c] : clocks_) m = std::min(m, c);
  return m;
}

int64_t VectorClock::Get(int worker) const {
  auto it = clocks_.find(worker);
  return it == clocks_.end() ? -1 : it->second;
}

bool VectorClock::SetLive(const std::vector<int>& ids, const std::vector<int64_t>& clocks) {
  const int64_t before = Min();
  const bool was_empty = clocks_.empty();
  std::map<int, int64_t> next;
  for (size_t i = 0; i < ids.size(); ++i) {
    auto it = clocks_.find(ids[i]);
    int64_t reported = i < clocks.size() ? clocks[i] : 0;
    if (auto held = held_.find(ids[i]); held != held_.end()) {
      // Rises only through Advance: the reported clock waits for Release.
      held->second.second = std::max(held->second.second, reported);
      int64_t start = held->second.first;
      if (auto early = outside_.find(ids[i]); early != outside_.end()) {
        start = std::max(start, early->second);
        outside_.erase(early);
      }
      next[ids[i]] = it != clocks_.end() ? it->second : start;
      continue;
    }
    auto early = outside_.find(ids[i]);
    if (early != outside_.end()) {
      reported = std::max(reported, early->second);
      outside_.erase(early);
    }
    if (it != clocks_.end()) {
      next[ids[i]] = std::max(it->second, reported);
    } else {
      next[ids[i]] = was_empty ? reported : std::max(reported, before);
    }
  }
  clocks_.swap(next);
  return Min() != before;
}

void VectorClock::Hold(const std::vector<int>& ids, int64_t start) {
  for (int id : ids) held_[id] = {start, 0};
}

bool VectorClock::Release(int worker) {
  auto held = held_.find(worker);
  if (held == held_.end()) return false;
  const int64_t reported = held->second.second;
  held_.erase(held);
  const int64_t before = Min();
  auto it = clocks_.find(worker);
  if (it == clocks_.end()) {
    int64_t& c = outside_[worker];
    c = std::max(c, reported);
    return false;
  }
  it->second = std::max(it->second, reported);
  return Min() != before;
}

bool VectorClock::Advance(int worker, int64_t clock) {
  const int64_t before = Min();
  auto it = clocks_.find(worker);
  if (it == clocks_.end()) {
    // Not live (yet): cannot hold anyone back, but remember its progress in
    // case the live-set update that adds it arrives after its pushes.
    int64_t& c = outside_[worker];
    c = std::max(c, clock + 1);
    return false;
  }
  it->second = std::max(it->second, clock + 1);
  return Min() != before;
}

}  // namespace relaxps
