#include "coordinator/membership.h"

#include <algorithm>

namespace relaxps {

int Membership::NextId(const std::map<int, MemberInfo>& members, int requested) {
  if (requested >= 0) return requested;
  // Ids are never reused: a dead member's id stays its own (it may rejoin
  // with it).
  return members.empty() ? 0 : members.rbegin()->first + 1;
}

int Membership::AddServer(int requested_id, const std::string& endpoint, int pid,
                          int64_t now_ms) {
  const int id = NextId(servers_, requested_id);
  servers_[id] = MemberInfo{id, endpoint, pid, now_ms, 0, true};
  return id;
}

int Membership::AddWorker(int requested_id, int64_t start_clock, int pid, int64_t now_ms) {
  const int id = NextId(workers_, requested_id);
  workers_[id] = MemberInfo{id, "", pid, now_ms, start_clock, true};
  ++worker_set_version_;
  return id;
}

void Membership::SetServerToken(int id, const std::string& token) {
  if (auto it = servers_.find(id); it != servers_.end()) it->second.token = token;
}

void Membership::SetWorkerToken(int id, const std::string& token) {
  if (auto it = workers_.find(id); it != workers_.end()) it->second.token = token;
}

void Membership::RemoveWorker(int id) {
  auto it = workers_.find(id);
  if (it != workers_.end() && it->second.alive) {
    it->second.alive = false;
    ++worker_set_version_;
  }
}

bool Membership::MarkWorkerFinished(int id, const std::string& failure) {
  auto it = workers_.find(id);
  if (it == workers_.end() || it->second.finished) return false;
  it->second.finished = true;
  it->second.failure = failure;
  return true;
}

std::vector<std::string> Membership::FailedWorkers() const {
  std::vector<std::string> failed;
  for (const auto& [id, m] : workers_) {
    if (!m.failure.empty()) failed.push_back("worker " + std::to_string(id) + ": " + m.failure);
  }
  return failed;
}

int Membership::LostWorkers() const {
  int lost = 0;
  for (const auto& [id, m] : workers_) lost += !m.alive && !m.finished;
  return lost;
}

bool Membership::ServerHeartbeat(int id, int64_t now_ms) {
  auto it = servers_.find(id);
  if (it == servers_.end() || !it->second.alive) return false;
  it->second.last_heartbeat_ms = now_ms;
  return true;
}

bool Membership::WorkerHeartbeat(int id, int64_t clock, int64_t now_ms, uint64_t incarnation,
                                 uint64_t acked_updates) {
  auto it = workers_.find(id);
  if (it == workers_.end() || !it->second.alive) return false;
  it->second.last_heartbeat_ms = now_ms;
  it->second.heard = true;
  it->second.clock = std::max(it->second.clock, clock);
  if (incarnation != it->second.incarnation) it->second.acked_updates = 0;
  it->second.incarnation = incarnation;
  it->second.acked_updates = std::max(it->second.acked_updates, acked_updates);
  return true;
}

std::vector<int> Membership::Expire(std::map<int, MemberInfo>* members, int64_t now_ms) {
  std::vector<int> dead;
  for (auto& [id, m] : *members) {
    if (m.alive && now_ms - m.last_heartbeat_ms > timeout_ms_) {
      m.alive = false;
      dead.push_back(id);
    }
  }
  return dead;
}

int Membership::DropNeverHeardWorkers() {
  int dropped = 0;
  for (auto it = workers_.begin(); it != workers_.end();) {
    const MemberInfo& m = it->second;
    if (!m.alive && !m.heard && !m.finished) {
      it = workers_.erase(it);
      ++dropped;
    } else {
      ++it;
    }
  }
  return dropped;
}

bool Membership::MarkServerDead(int id) {
  auto it = servers_.find(id);
  if (it == servers_.end() || !it->second.alive) return false;
  it->second.alive = false;
  return true;
}

std::vector<int> Membership::ExpireServers(int64_t now_ms) { return Expire(&servers_, now_ms); }
std::vector<int> Membership::ExpireWorkers(int64_t now_ms) {
  std::vector<int> dead = Expire(&workers_, now_ms);
  if (!dead.empty()) ++worker_set_version_;
  return dead;
}

void Membership::ForgiveSilence(int64_t now_ms) {
  for (auto* members : {&servers_, &workers_}) {
    for (auto& [id, m] : *members) {
      if (m.alive) m.last_heartbeat_ms = std::max(m.last_heartbeat_ms, now_ms);
    }
  }
}

int Membership::live_servers() const {
  int n = 0;
  for (const auto& [id, m] : servers_) n += m.alive ? 1 : 0;
  return n;
}

void Membership::LiveWorkers(std::vector<int>* ids, std::vector<int64_t>* clocks) const {
  ids->clear();
  clocks->clear();
  for (const auto& [id, m] : workers_) {
    if (!m.alive) continue;
    ids->push_back(id);
    clocks->push_back(m.clock);
  }
}

int64_t Membership::MinWorkerClock() const {
  bool any = false;
  int64_t min = 0;
  for (const auto& [id, m] : workers_) {
    if (!m.alive) continue;
    min = any ? std::min(min, m.clock) : m.clock;
    any = true;
  }
  return min;
}

}  // namespace relaxps
