#include "client/internal/resender.h"

namespace relaxps {
namespace client_internal {

bool Resender::IsServerLoss(const Status& status) {
  return status.code() == StatusCode::kUnavailable ||
         status.code() == StatusCode::kDeadlineExceeded;
}

int64_t Resender::GiveUpTime(int64_t give_up_ms) const {
  return give_up_ms != 0 ? give_up_ms : clock_->NowMs() + recovery_timeout_ms_;
}

bool Resender::Park(Parked part) {
  part.parked_ms = clock_->NowMs();
  MutexLock l(&mu_);
  Outage& outage = announced_[part.server];
  const bool first = outage.endpoint != part.endpoint;
  if (first) outage = Outage{part.endpoint, false};
  parked_.push_back(std::move(part));
  return first;
}

bool Resender::FirstAckAfterPark(int server) {
  MutexLock l(&mu_);
  auto it = announced_.find(server);
  if (it == announced_.end() || it->second.acked) return false;
  it->second.acked = true;
  return true;
}

std::vector<Resender::Parked> Resender::TakeParkedBefore(int64_t ms) {
  std::vector<Parked> taken;
  MutexLock l(&mu_);
  for (auto it = parked_.begin(); it != parked_.end();) {
    if (!it->until_restart && it->parked_ms <= ms) {
      taken.push_back(std::move(*it));
      it = parked_.erase(it);
    } else {
      ++it;
    }
  }
  return taken;
}

std::vector<Resender::Parked> Resender::TakeRestarted(const ShardMap& map) {
  std::vector<Parked> taken;
  MutexLock l(&mu_);
  for (auto it = parked_.begin(); it != parked_.end();) {
    const std::string ep =
        it->server < map.num_servers() ? map.server_endpoint(it->server) : std::string();
    if (!it->until_restart || (!ep.empty() && ep != it->endpoint)) {
      taken.push_back(std::move(*it));
      it = parked_.erase(it);
    } else {
      ++it;
    }
  }
  return taken;
}

std::vector<Resender::Parked> Resender::TakeMoved(
    const std::function<bool(const Parked&)>& moved) {
  std::vector<Parked> taken;
  MutexLock l(&mu_);
  for (auto it = parked_.begin(); it != parked_.end();) {
    if (moved(*it)) {
      taken.push_back(std::move(*it));
      it = parked_.erase(it);
    } else {
      ++it;
    }
  }
  return taken;
}

std::vector<Resender::Parked> Resender::TakeExpired(bool all) {
  std::vector<Parked> taken;
  const int64_t now = clock_->NowMs();
  MutexLock l(&mu_);
  for (auto it = parked_.begin(); it != parked_.end();) {
    if (all || now >= it->give_up_ms) {
      taken.push_back(std::move(*it));
      it = parked_.erase(it);
    } else {
      ++it;
    }
  }
  return taken;
}

void Resender::FailExpired(const Status& all) {
  for (Parked& p : TakeExpired(!all.ok())) {
    p.done(all.ok() ? p.error.WithPrefix("server " + std::to_string(p.server) +
                                         " did not come back within " +
                                         std::to_string(recovery_timeout_ms_) + " ms")
                    : all,
           Message());
  }
}

}  // namespace client_internal
}  // namespace relaxps
