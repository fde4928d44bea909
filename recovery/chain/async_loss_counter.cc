#include "recovery/chain/async_loss_counter.h"

namespace relaxps {
namespace recovery {

AsyncLossCounter::Loss AsyncLossCounter::OnAcked(const std::string& table, uint64_t key,
                                                 uint64_t seq, uint64_t head_since,
                                                 uint64_t head_epoch) {
  Loss out;
  if (seq == 0) return out;
  std::lock_guard<std::mutex> lock(mu_);
  Range& r = ranges_[{table, key}];
  if (head_epoch < r.head_epoch) {
    // A late acknowledgement of an older head: on the current head only if
    // that head had it when it took over.
    if (seq > r.head_since) out.lost = 1;
  } else {
    if (head_epoch > r.head_epoch) {
      // A new head: what the old one acknowledged above its head_since is gone.
      for (auto it = r.unreplicated.upper_bound(head_since); it != r.unreplicated.end(); ++it) {
        ++out.lost;
      }
      r.unreplicated.clear();
      r.head_epoch = head_epoch;
      r.head_since = head_since;
      r.max_seq = 0;
    }
    r.unreplicated.insert(seq);
    if (seq > r.max_seq) r.max_seq = seq;
    // Update max_seq - max_lag was on every replica before max_seq was acknowledged.
    if (r.max_seq > max_lag_) {
      r.unreplicated.erase(r.unreplicated.begin(), r.unreplicated.upper_bound(r.max_seq - max_lag_));
    }
  }
  lost_ += out.lost;
  out.head_since = r.head_since;
  out.head_epoch = r.head_epoch;
  return out;
}

uint64_t AsyncLossCounter::lost() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lost_;
}

}  // namespace recovery
}  // namespace relaxps
