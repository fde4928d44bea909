// CheckpointHold: the writes a server holds while a synchronous checkpoint
// of its state is being written (ServerRecovery::HoldsWritesDuringCheckpoint).
//
// Owns the count of checkpoints whose state was captured but whose snapshot
// is not durable yet, the data requests held meanwhile (arrival order),
// their senders, and when the first of them arrived.
//
// Rules: while a checkpoint is being written, a write (any data request but
// PULL and PULL_ROWS) waits, neither applied nor acknowledged, and so does
// whatever its sender sends after it (a sender's pull must see its own
// writes, and its requests stay in order). The held requests go on, in
// arrival order, once the last checkpoint in progress ended (written or
// failed, and answered): so an acknowledged write is never missing from a
// checkpoint that a later one does not replace.
//
// The server decides whether its policy holds writes at all (it calls
// Begin only then); this object has no I/O: End hands the requests back.
//
// Invariants: held() > 0 only while writing(); every request Add()ed is
// returned by exactly one End(), in the order added.
//
// Time is passed in (the server's Clock, ms) so tests drive it.
//
// Thread-safety: not synchronized; the server's loop thread.
#ifndef RELAXPS_SERVER_INTERNAL_CHECKPOINT_HOLD_H_
#define RELAXPS_SERVER_INTERNAL_CHECKPOINT_HOLD_H_

#include <cstdint>
#include <deque>
#include <set>

#include "common/rpc_server.h"

namespace relaxps {
namespace server_internal {

class CheckpointHold {
 public:
  CheckpointHold() = default;
  CheckpointHold(const CheckpointHold&) = delete;
  CheckpointHold& operator=(const CheckpointHold&) = delete;

  // A checkpoint captured the state; its snapshot is being written.
  void Begin() { ++writing_; }
  // True if a request with header `h` must wait now (then Add it).
  bool Holds(const wire::Header& h) const;
  // Holds `req` (REQUIRES: Holds(req.msg.header)), received at `now_ms`.
  void Add(Request&& req, int64_t now_ms);

  // The requests a checkpoint's end lets go.
  struct Released {
    std::deque<Request> requests;  // Arrival order; empty if none go yet.
    int64_t waited_ms = 0;         // Since the first of them arrived.
  };
  // A checkpoint ended (written or failed, its answer sent). Returns the
  // held requests once no other checkpoint is being written.
  // REQUIRES: writing().
  Released End(int64_t now_ms);

  bool writing() const { return writing_ > 0; }
  size_t held() const { return held_.size(); }

 private:
  int writing_ = 0;
  std::deque<Request> held_;
  std::set<int> senders_;  // Senders of held_.
  int64_t held_since_ms_ = 0;
};

}  // namespace server_internal
}  // namespace relaxps

#endif  // RELAXPS_SERVER_INTERNAL_CHECKPOINT_HOLD_H_
