// Pulls parked at a shard's consistency gate: the one rule for taking out
// those whose deadline has passed, shared by dense and sparse shards.
//
// Thread-safety: none; called on the server's loop thread with the shard.
#ifndef RELAXPS_SERVER_INTERNAL_WAITERS_H_
#define RELAXPS_SERVER_INTERNAL_WAITERS_H_

#include <cstdint>
#include <utility>
#include <vector>

namespace relaxps {
namespace server_internal {

// Removes from `waiters` every one whose deadline_ms is at or before now_ms
// and returns them, in their order; the others keep theirs.
template <typename Waiter>
std::vector<Waiter> TakeExpired(std::vector<Waiter>* waiters, int64_t now_ms) {
  std::vector<Waiter> still;
  std::vector<Waiter> expired;
  for (Waiter& w : *waiters) (w.deadline_ms <= now_ms ? expired : still).push_back(std::move(w));
  waiters->swap(still);
  return expired;
}

}  // namespace server_internal
}  // namespace relaxps

#endif  // RELAXPS_SERVER_INTERNAL_WAITERS_H_
