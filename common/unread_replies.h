// UnreadReplies: the bytes of messages a ROUTER socket has handed to ZeroMQ
// that ZeroMQ has not yet written to their peer's connection, per peer and in
// total, and the limits on them.
//
// A peer that stops reading makes its replies pile up in the sender's memory.
// ZMQ_SNDHWM bounds them per peer in messages, not bytes, and not over all
// peers: ten peers that never read each held 128 replies of 400 KB (+552 MB)
// before these limits. A server reserves the bytes of a data reply when it
// admits the request (RpcServer::ReserveReply, before anything is applied): a
// request that does not fit is refused with ResourceExhausted, and the client
// retries it. The token travels with the request (also while it waits at a
// consistency gate) and then with the reply's zero-copy frames (wire.h
// SendMessage); it gives the bytes back when ZeroMQ frees the last of them:
// written to the connection, or dropped because the peer went away. Other
// messages are admitted when they are sent (RpcServer::Send), and dropped if
// they do not fit.
//
// Only frames ZeroMQ sends without a copy (larger than
// Frame::kCopyFramesUpToBytes) are counted: those are the payloads. Smaller
// messages are bounded by ZMQ_SNDHWM (RpcServerOptions::max_queued_messages).
//
// Admission: a message is refused when the total is at its limit, or when it
// would take its peer past the per-peer limit or the total past its limit,
// unless its peer has nothing queued (so a reply larger than a limit still
// goes to a peer that reads, one at a time).
//
// Thread-safety: Admit(), peer_bytes() and tracked_peers() on one thread (the
// loop); total_bytes() and the tokens' release on any thread.
#ifndef RELAXPS_COMMON_UNREAD_REPLIES_H_
#define RELAXPS_COMMON_UNREAD_REPLIES_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "common/status.h"

namespace relaxps {

class UnreadReplies {
 public:
  // Limits in bytes; <= 0: unlimited.
  UnreadReplies(int64_t per_peer_limit, int64_t total_limit);
  UnreadReplies(const UnreadReplies&) = delete;
  UnreadReplies& operator=(const UnreadReplies&) = delete;

  // Admits `bytes` more for `peer`: a token whose destruction (on any thread,
  // after this object is gone too) gives them back, or ResourceExhausted
  // naming the limit and its flag. `bytes` 0: OK and a null token.
  StatusOr<std::shared_ptr<void>> Admit(const std::string& peer, int64_t bytes);

  int64_t total_bytes() const { return total_->load(std::memory_order_relaxed); }
  int64_t peer_bytes(const std::string& peer) const;
  // Peers with an entry (some of them may have nothing queued any more).
  size_t tracked_peers() const { return peers_.size(); }

 private:
  using Counter = std::atomic<int64_t>;
  // Drops the entries of peers with nothing queued (their tokens are gone).
  void Sweep();

  // Constant after construction.
  const int64_t per_peer_limit_;
  const int64_t total_limit_;
  const std::shared_ptr<Counter> total_;

  // Loop thread (the counters themselves are atomic).
  std::unordered_map<std::string, std::shared_ptr<Counter>> peers_;
  size_t sweep_at_ = 1024;
};

}  // namespace relaxps

#endif  // RELAXPS_COMMON_UNREAD_REPLIES_H_
