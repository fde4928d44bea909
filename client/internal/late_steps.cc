// LateSteps (late_steps.h): local steps by clock until they reach a server.
#include "client/internal/late_steps.h"

namespace relaxps {
namespace client_internal {

void LateSteps::Record(int server, int64_t clock) {
  MutexLock l(&mu_);
  std::vector<std::pair<int64_t, int64_t>>& runs = servers_[server].runs;
  if (!runs.empty() && runs.back().first <= clock && clock <= runs.back().second) return;
  if (!runs.empty() && runs.back().second + 1 == clock) {
    runs.back().second = clock;
  } else {
    runs.emplace_back(clock, clock);
  }
}

void LateSteps::HandBackLocked(PerServer* s, int64_t clock) {
  for (const auto& [first, last] : s->runs) {
    for (int64_t c = first; c <= last; ++c) s->handed.Add(clock - c);
  }
  s->runs.clear();
}

void LateSteps::HandBack(int server, int64_t clock) {
  MutexLock l(&mu_);
  auto it = servers_.find(server);
  if (it != servers_.end()) HandBackLocked(&it->second, clock);
}

void LateSteps::Move(int holder, int spare) {
  MutexLock l(&mu_);
  auto it = servers_.find(holder);
  if (it == servers_.end() || holder == spare) return;
  PerServer& to = servers_[spare];
  to.runs.insert(to.runs.end(), it->second.runs.begin(), it->second.runs.end());
  to.handed.Merge(it->second.handed);
  servers_.erase(it);
}

StalenessHistogram LateSteps::Take(int server, int64_t clock) {
  MutexLock l(&mu_);
  auto it = servers_.find(server);
  if (it == servers_.end()) return StalenessHistogram();
  HandBackLocked(&it->second, clock);
  StalenessHistogram out = it->second.handed;
  servers_.erase(it);
  return out;
}

}  // namespace client_internal
}  // namespace relaxps
