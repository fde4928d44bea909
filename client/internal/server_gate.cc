#include "client/internal/server_gate.h"

namespace relaxps {
namespace client_internal {

bool ServerGate::Admit(int server, const std::string& endpoint, Held* part) {
  if (!enabled_) return true;
  MutexLock l(&mu_);
  auto it = open_at_.find(server);
  if (it != open_at_.end() && it->second == endpoint) return true;
  held_.push_back(std::move(*part));
  return false;
}

std::vector<ServerGate::Held> ServerGate::OpenIfNew(int server, const std::string& endpoint) {
  if (!enabled_ || endpoint.empty()) return {};
  MutexLock l(&mu_);
  if (!open_at_.emplace(server, endpoint).second) return {};
  return TakeLocked(server);
}

std::vector<ServerGate::Held> ServerGate::Release(int server, const std::string& endpoint) {
  if (!enabled_) return {};
  MutexLock l(&mu_);
  open_at_[server] = endpoint;
  return TakeLocked(server);
}

std::vector<ServerGate::Held> ServerGate::TakeLocked(int server) {
  std::vector<Held> taken;
  for (auto it = held_.begin(); it != held_.end();) {
    if (it->server == server) {
      taken.push_back(std::move(*it));
      it = held_.erase(it);
    } else {
      ++it;
    }
  }
  return taken;
}

std::vector<ServerGate::Held> ServerGate::TakeAll() {
  MutexLock l(&mu_);
  std::vector<Held> taken = std::move(held_);
  held_.clear();
  return taken;
}

}  // namespace client_internal
}  // namespace relaxps
