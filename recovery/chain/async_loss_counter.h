// AsyncLossCounter: a worker's count of its pushes that a chain head
// acknowledged under asynchronous replication (--replication=async) and that
// a head failure lost.
//
// Under --replication=async a range's head acknowledges push s (its sequence
// number in the range's chain) once update s - max_lag is on every replica,
// so at most max_lag acknowledged updates per range are not on the tail yet.
// Each acknowledgement names s, the sequence number the head had applied
// when it became head (head_since) and the epoch at which it did. A new head
// (a larger epoch) holds exactly the updates up to its head_since; this
// worker's pushes the previous head acknowledged above that are lost. So
// the counter keeps, per range, the sequence numbers of its acknowledged
// pushes that may not be on the tail yet (those above the largest
// acknowledged one minus max_lag: at most max_lag), and counts the kept ones
// above a new head's head_since as lost. An acknowledgement from an older
// head arriving after a newer head's is lost if its number is above the
// newer head's head_since.
//
// Thread-safety: all methods are safe to call from multiple threads.
#ifndef RELAXPS_RECOVERY_CHAIN_ASYNC_LOSS_COUNTER_H_
#define RELAXPS_RECOVERY_CHAIN_ASYNC_LOSS_COUNTER_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>

namespace relaxps {
namespace recovery {

class AsyncLossCounter {
 public:
  // `max_lag` >= 1: the job's --replication_max_lag.
  explicit AsyncLossCounter(uint64_t max_lag) : max_lag_(max_lag) {}
  AsyncLossCounter(const AsyncLossCounter&) = delete;
  AsyncLossCounter& operator=(const AsyncLossCounter&) = delete;

  // What one acknowledgement revealed.
  struct Loss {
    uint64_t lost = 0;        // This worker's acknowledged pushes now known lost.
    uint64_t head_since = 0;  // The current head's head_since.
    uint64_t head_epoch = 0;  // The current head's epoch.
  };

  // Push `seq` of range (table, key) was acknowledged by a head that became
  // head at `head_epoch` with `head_since` applied. seq 0 (no numbers: a
  // synchronous head) is ignored.
  Loss OnAcked(const std::string& table, uint64_t key, uint64_t seq, uint64_t head_since,
               uint64_t head_epoch);

  // Pushes counted lost so far.
  uint64_t lost() const;

 private:
  struct Range {
    uint64_t head_epoch = 0;
    uint64_t head_since = 0;
    uint64_t max_seq = 0;
    std::set<uint64_t> unreplicated;  // Acknowledged, maybe not on the tail.
  };

  // Constant after construction.
  const uint64_t max_lag_;

  mutable std::mutex mu_;
  // Guarded by mu_.
  std::map<std::pair<std::string, uint64_t>, Range> ranges_;
  uint64_t lost_ = 0;
};

}  // namespace recovery
}  // namespace relaxps

#endif  // RELAXPS_RECOVERY_CHAIN_ASYNC_LOSS_COUNTER_H_
