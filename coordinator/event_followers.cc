#include "coordinator/event_followers.h"

#include <algorithm>
#include <utility>

namespace relaxps {

void EventFollowers::Add(Request req, int64_t now_ms) {
  const wire::EventsRequest& r = req.msg.header.events_request();
  Held h;
  h.after = r.after_seq();
  h.max = r.max_events() == 0 ? kMaxPerReply : std::min<size_t>(r.max_events(), kMaxPerReply);
  h.deadline_ms = now_ms + std::clamp(r.wait_ms(), 0, kMaxWaitMs);
  h.req = std::make_shared<Request>(std::move(req));
  held_.push_back(std::move(h));
}

std::vector<EventFollowers::Due> EventFollowers::TakeDue(const EventRing& ring, int64_t now_ms) {
  const uint64_t last = ring.last_seq();
  std::vector<Due> due;
  std::vector<Held> still;
  for (Held& h : held_) {
    if (last <= h.after && now_ms < h.deadline_ms) {  // No news yet, still waiting.
      still.push_back(std::move(h));
      continue;
    }
    due.push_back({std::move(h.req), ring.Since(h.after, h.max)});
  }
  held_ = std::move(still);
  return due;
}

}  // namespace relaxps
