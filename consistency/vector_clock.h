// VectorClock: completed clocks of the live workers, as seen by one shard.
//
// A worker's entry is the number of clocks it has completed: a push (or a
// clock tick) for clock c means it completed clock c, so its entry becomes at
// least c + 1. Entries only grow. The live set comes from the coordinator; a
// worker that leaves is removed, so waits never depend on a dead worker, and a
// worker that joins starts at the current minimum.
//
// Held workers (Hold): a server restored from a checkpoint re-forms its BSP
// rounds from the pushes the workers replay. A held worker's entry starts at
// the restored clock and rises only through Advance (its own pushes and
// CLOCKs, replayed or not), never through the clocks SetLive reports (the
// coordinator's view of the worker, far ahead of what this state reflects);
// the newest reported clock is kept and applies at Release (the worker's
// replay is done).
//
// Thread-safety: not synchronized; owned by one shard's loop.
#ifndef RELAXPS_CONSISTENCY_VECTOR_CLOCK_H_
#define RELAXPS_CONSISTENCY_VECTOR_CLOCK_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace relaxps {

class VectorClock {
 public:
  // Replaces the live set. New workers start at max(their given clock, the
  // current minimum); missing ones are dropped. Returns true if the minimum
  // changed.
  bool SetLive(const std::vector<int>& ids, const std::vector<int64_t>& clocks);
  // Holds `ids` (see above): each starts at `start` (or its progress so far
  // through Advance, if higher) when it is (or becomes) live. REQUIRES: no
  // id of `ids` is live yet.
  void Hold(const std::vector<int>& ids, int64_t start);
  // Ends the hold of `worker`: its entry becomes at least the newest clock
  // SetLive reported for it. Returns true if the minimum changed. No-op for
  // a worker not held.
  bool Release(int worker);
  bool IsHeld(int worker) const { return held_.count(worker) > 0; }
  size_t held() const { return held_.size(); }
  // Records that `worker` completed `clock`. A worker outside the live set
  // holds nobody back; its progress is remembered for when it is added.
  // Returns true if the minimum changed.
  bool Advance(int worker, int64_t clock);

  // Minimum completed clock over live workers (0 if none).
  int64_t Min() const;
  // Completed clock of a worker, or -1 if not live.
  int64_t Get(int worker) const;
  bool IsLive(int worker) const { return clocks_.count(worker) > 0; }
  size_t size() const { return clocks_.size(); }
  const std::map<int, int64_t>& entries() const { return clocks_; }

 private:
  std::map<int, int64_t> clocks_;   // Live worker id -> completed clocks.
  std::map<int, int64_t> outside_;  // Progress of workers not (yet) live.
  // Held worker -> (start, newest reported clock).
  std::map<int, std::pair<int64_t, int64_t>> held_;
};

}  // namespace relaxps

#endif  // RELAXPS_CONSISTENCY_VECTOR_CLOCK_H_
