#include "common/unread_replies.h"

#include <algorithm>
#include <utility>

namespace relaxps {
namespace {

std::string Mib(int64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

// Gives `bytes` back to both counters when the last frame holding it goes.
struct Charge {
  std::shared_ptr<std::atomic<int64_t>> peer, total;
  int64_t bytes;
  ~Charge() {
    peer->fetch_sub(bytes, std::memory_order_relaxed);
    total->fetch_sub(bytes, std::memory_order_relaxed);
  }
};

}  // namespace

UnreadReplies::UnreadReplies(int64_t per_peer_limit, int64_t total_limit)
    : per_peer_limit_(per_peer_limit),
      total_limit_(total_limit),
      total_(std::make_shared<Counter>(0)) {}

StatusOr<std::shared_ptr<void>> UnreadReplies::Admit(const std::string& peer, int64_t bytes) {
  if (bytes <= 0) return std::shared_ptr<void>();
  // Short messages: a refused request is answered with one, and a peer that
  // never reads may be sent many.
  const int64_t total = total_bytes();
  if (total_limit_ > 0 && total >= total_limit_) {
    return ResourceExhaustedError("unread replies at " + Mib(total) +
                                  " in all (--max_unread_reply_mb); retry later");
  }
  auto [it, inserted] = peers_.try_emplace(peer);
  if (inserted) it->second = std::make_shared<Counter>(0);
  const int64_t queued = it->second->load(std::memory_order_relaxed);
  if (queued > 0) {
    if (per_peer_limit_ > 0 && queued + bytes > per_peer_limit_) {
      return ResourceExhaustedError("unread replies at " + Mib(queued) +
                                    " for this peer (--max_unread_reply_mb_per_peer); retry later");
    }
    if (total_limit_ > 0 && total + bytes > total_limit_) {
      return ResourceExhaustedError("unread replies at " + Mib(total) +
                                    " in all (--max_unread_reply_mb); retry later");
    }
  }
  it->second->fetch_add(bytes, std::memory_order_relaxed);
  total_->fetch_add(bytes, std::memory_order_relaxed);
  // Not make_shared of a temporary: its destructor would give the bytes back.
  std::shared_ptr<Charge> token(new Charge{it->second, total_, bytes});
  if (peers_.size() >= sweep_at_) Sweep();
  return std::shared_ptr<void>(std::move(token));
}

int64_t UnreadReplies::peer_bytes(const std::string& peer) const {
  auto it = peers_.find(peer);
  return it == peers_.end() ? 0 : it->second->load(std::memory_order_relaxed);
}

void UnreadReplies::Sweep() {
  for (auto it = peers_.begin(); it != peers_.end();) {
    // use_count 1: no token refers to it, so nothing can add to it but Admit.
    if (it->second.use_count() == 1 && it->second->load(std::memory_order_relaxed) == 0) {
      it = peers_.erase(it);
    } else {
      ++it;
    }
  }
  sweep_at_ = std::max<size_t>(1024, 2 * peers_.size());
}

}  // namespace relaxps
