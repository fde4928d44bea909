// EventFollowers: the GET_EVENTS requests (relaxps-ctl events --follow, an
// operator's tooling) the coordinator holds until it has an event newer than
// the one each reader saw, or the reader's wait ends.
//
// Owns the held requests and their deadlines; decides which are due and
// what each gets (a slice of the coordinator's EventRing: at most
// max_events lines, kMaxPerReply at most, after the reader's after_seq).
// It does no I/O: the coordinator answers what Due() returns, on its loop,
// after every event (the EventLog's observer posts there) and from its
// liveness timer.
//
// Invariants: a request is returned by Due() exactly once; a request with
// news is never held; a held one waits kMaxWaitMs at most.
//
// Time is passed in (the coordinator's Clock, ms) so tests drive it.
//
// Thread-safety: not synchronized; the coordinator's loop thread.
#ifndef RELAXPS_COORDINATOR_EVENT_FOLLOWERS_H_
#define RELAXPS_COORDINATOR_EVENT_FOLLOWERS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/rpc_server.h"
#include "coordinator/event_ring.h"

namespace relaxps {

class EventFollowers {
 public:
  // Most lines one reply carries, and longest wait a request may ask for.
  static constexpr size_t kMaxPerReply = 1000;
  static constexpr int kMaxWaitMs = 30000;

  EventFollowers() = default;
  EventFollowers(const EventFollowers&) = delete;
  EventFollowers& operator=(const EventFollowers&) = delete;

  // Holds GET_EVENTS `req` (its events_request: after_seq, max_events,
  // wait_ms, clamped), received at `now_ms`.
  void Add(Request req, int64_t now_ms);

  struct Due {
    std::shared_ptr<Request> req;
    EventRing::Slice slice;  // What to answer it with.
  };
  // The held requests that `ring` has news for or whose wait ended by
  // `now_ms`, each with its slice; they are no longer held.
  std::vector<Due> TakeDue(const EventRing& ring, int64_t now_ms);
  size_t size() const { return held_.size(); }

 private:
  struct Held {
    std::shared_ptr<Request> req;
    uint64_t after = 0;
    size_t max = 0;
    int64_t deadline_ms = 0;
  };
  std::vector<Held> held_;
};

}  // namespace relaxps

#endif  // RELAXPS_COORDINATOR_EVENT_FOLLOWERS_H_
