// ControlLimiter: how many control changes (a learning-rate change, a
// checkpoint asked for, a new table) the coordinator accepts per minute, per
// peer (connection) and in total.
//
// Each change rewrites the shard map every member holds, or makes every
// server write a checkpoint; before the limit one peer could send them as
// fast as the loop took them. A token bucket per peer and one for all peers,
// each refilled continuously at its rate per minute and holding at most that
// many: a burst of one minute's worth goes through at once.
//
// Thread-safety: not synchronized; the coordinator's loop thread only.
#ifndef RELAXPS_COORDINATOR_CONTROL_LIMITER_H_
#define RELAXPS_COORDINATOR_CONTROL_LIMITER_H_

#include <cstdint>
#include <string>
#include <unordered_map>

#include "common/status.h"

namespace relaxps {

class ControlLimiter {
 public:
  // Changes per minute; <= 0: unlimited.
  ControlLimiter(int64_t per_peer_per_min, int64_t total_per_min)
      : per_peer_per_min_(per_peer_per_min), total_per_min_(total_per_min) {
    total_.tokens = static_cast<double>(total_per_min);
  }

  // Takes one change of `what` (e.g. "SET_LEARNING_RATE") from `peer` at
  // `now_ms` (monotonic): OK, or FailedPrecondition naming the limit, and
  // then nothing is taken.
  Status Take(const std::string& peer, const std::string& what, int64_t now_ms);

  // Peers with a bucket (those not full after a minute are dropped).
  size_t tracked_peers() const { return peers_.size(); }

 private:
  struct Bucket {
    double tokens = 0;
    int64_t last_ms = -1;
  };
  // Refills `b` at `per_min` up to `per_min`.
  static void Refill(Bucket* b, int64_t per_min, int64_t now_ms);
  void Sweep(int64_t now_ms);

  // Constant after construction.
  const int64_t per_peer_per_min_;
  const int64_t total_per_min_;

  Bucket total_;
  std::unordered_map<std::string, Bucket> peers_;
  int64_t last_sweep_ms_ = 0;
};

}  // namespace relaxps

#endif  // RELAXPS_COORDINATOR_CONTROL_LIMITER_H_
