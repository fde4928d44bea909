#include "coordinator/control_limiter.h"

#include <algorithm>

namespace relaxps {

void ControlLimiter::Refill(Bucket* b, int64_t per_min, int64_t now_ms) {
  if (b->last_ms < 0) {
    b->tokens = static_cast<double>(per_min);
  } else if (now_ms > b->last_ms) {
    b->tokens = std::min<double>(static_cast<double>(per_min),
                                 b->tokens + static_cast<double>(now_ms - b->last_ms) *
                                                 static_cast<double>(per_min) / 60000.0);
  }
  b->last_ms = std::max(b->last_ms, now_ms);
}

Status ControlLimiter::Take(const std::string& peer, const std::string& what, int64_t now_ms) {
  Bucket* mine = nullptr;
  if (per_peer_per_min_ > 0) {
    mine = &peers_[peer];
    Refill(mine, per_peer_per_min_, now_ms);
    if (mine->tokens < 1) {
      return FailedPreconditionError(
          what + " refused: this connection sent more than " +
          std::to_string(per_peer_per_min_) +
          " control changes in the last minute (--max_control_per_min_per_peer)");
    }
  }
  if (total_per_min_ > 0) {
    Refill(&total_, total_per_min_, now_ms);
    if (total_.tokens < 1) {
      return FailedPreconditionError(what + " refused: the job had more than " +
                                     std::to_string(total_per_min_) +
                                     " control changes in the last minute "
                                     "(--max_control_per_min)");
    }
    total_.tokens -= 1;
  }
  if (mine != nullptr) mine->tokens -= 1;
  if (now_ms - last_sweep_ms_ >= 60000) Sweep(now_ms);
  return Status::OK();
}

void ControlLimiter::Sweep(int64_t now_ms) {
  last_sweep_ms_ = now_ms;
  // A bucket untouched for a minute is full again: the same as none.
  for (auto it = peers_.begin(); it != peers_.end();) {
    it = now_ms - it->second.last_ms >= 60000 ? peers_.erase(it) : std::next(it);
  }
}

}  // namespace relaxps
