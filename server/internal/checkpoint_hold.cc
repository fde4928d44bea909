#include "server/internal/checkpoint_hold.h"

#include <utility>

#include <glog/logging.h>

namespace relaxps {
namespace server_internal {

bool CheckpointHold::Holds(const wire::Header& h) const {
  if (writing_ == 0) return false;
  const bool write = h.type() != wire::PULL && h.type() != wire::PULL_ROWS;
  return write || senders_.count(h.sender()) > 0;
}

void CheckpointHold::Add(Request&& req, int64_t now_ms) {
  DCHECK(Holds(req.msg.header));
  if (held_.empty()) held_since_ms_ = now_ms;
  senders_.insert(req.msg.header.sender());
  held_.push_back(std::move(req));
}

CheckpointHold::Released CheckpointHold::End(int64_t now_ms) {
  CHECK_GT(writing_, 0) << "a checkpoint ended that did not begin";
  Released released;
  if (--writing_ > 0 || held_.empty()) return released;
  released.requests.swap(held_);
  senders_.clear();
  released.waited_ms = now_ms - held_since_ms_;
  return released;
}

}  // namespace server_internal
}  // namespace relaxps
