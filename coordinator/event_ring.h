// EventRing: the coordinator's bounded memory of the structured events it
// emitted (JSON lines of its EventLog, docs/events.md), numbered 1, 2, ...,
// which `relaxps-ctl events [--follow]` reads (GET_EVENTS). The oldest line
// is dropped when the ring is full; a reader asking from before it learns
// how many it missed.
//
// Thread-safety: all methods are safe to call from multiple threads (lines
// arrive from whichever thread emits).
#ifndef RELAXPS_COORDINATOR_EVENT_RING_H_
#define RELAXPS_COORDINATOR_EVENT_RING_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

namespace relaxps {

class EventRing {
 public:
  // REQUIRES: capacity > 0.
  explicit EventRing(size_t capacity) : capacity_(capacity) {}

  // Appends `line`; returns its seq.
  uint64_t Append(std::string line);

  struct Slice {
    std::vector<std::string> lines;  // Oldest first.
    uint64_t last_seq = 0;           // Of the last line returned, else last_seq().
    uint64_t missed = 0;             // Lines after `after` no longer held.
  };
  // At most `max` lines with seq > `after`.
  Slice Since(uint64_t after, size_t max) const;
  // Seq of the newest line (0: none yet).
  uint64_t last_seq() const;

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::deque<std::string> lines_;  // Guarded by mu_; seq of front: next_seq_ - size.
  uint64_t next_seq_ = 1;          // Guarded by mu_.
};

}  // namespace relaxps

#endif  // RELAXPS_COORDINATOR_EVENT_RING_H_
