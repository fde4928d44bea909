// ChainReplica: the replication bookkeeping of one dense range on one server
// under --recovery=chain.
//
// Every update of a range (a push, a CLOCK, a BSP round completion) gets a
// sequence number at the head and is applied by every replica in that order.
// A replica tracks:
//  - applied_seq: the last update it applied;
//  - acked_seq: the last update every replica after it applied too (equal to
//    applied_seq at the tail);
//  - the updates it forwarded that are not acknowledged yet (resent, in
//    order, to a new successor after a reconfiguration; the successor skips
//    the ones it already has);
//  - replies waiting for an acknowledgement (a push is answered only once
//    every live replica applied it; a pull only once everything it reflects
//    is on every live replica);
//  - the exactly-once record (AppliedLedger): for each (worker,
//    incarnation) the recently applied push ids and the sequence numbers
//    they got, so a push resent after a failover is recognized on whichever
//    replica is head by then, and how many push parts the state reflects.
//
// Thread-safety: not synchronized; used only on the server's loop thread.
#ifndef RELAXPS_SERVER_INTERNAL_CHAIN_REPLICA_H_
#define RELAXPS_SERVER_INTERNAL_CHAIN_REPLICA_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "common/buffer.h"
#include "server/internal/applied_ledger.h"

#include "common/wire.h"
#include "proto/relaxps.pb.h"

namespace relaxps {
namespace server_internal {

// A forwarded update kept until the successor acknowledges it: the header
// and the payload frames, shared (not copied) with the message they came in,
// and again with every resend.
struct LoggedOp {
  wire::Header header;
  std::vector<Buffer<uint8_t>> payload;

  // Shares msg's frames (ShareBytes: msg stays valid).
  static LoggedOp From(Message* msg);
  Message ToMessage() const;
};

class ChainReplica {
 public:
  // Push ids kept per worker incarnation; an older id than all of them counts
  // as applied. A worker has at most a few pushes in flight per range, so a
  // resend is always far newer than this window.
  static constexpr size_t kDedupWindow = 1024;

  ChainReplica() = default;
  ChainReplica(const ChainReplica&) = delete;
  ChainReplica& operator=(const ChainReplica&) = delete;

  // Position in the chain of the current map: head / tail, the successor's
  // server id (-1 at the tail), at job epoch `epoch`. Becoming the tail
  // acknowledges everything applied (runs the waiting replies).
  void SetRole(bool head, int successor, uint64_t epoch = 0);
  bool head() const { return head_; }
  // The applied seq when this replica last became the head (0 if it headed
  // the chain from its start): a previous head's updates above it never
  // reached this replica.
  uint64_t head_since_seq() const { return head_since_seq_; }
  // The job epoch at which this replica last became the head.
  uint64_t head_since_epoch() const { return head_since_epoch_; }
  bool tail() const { return successor_ < 0; }
  int successor() const { return successor_; }

  // A server that joined a chain holds no state until its predecessor's
  // snapshot arrives; until then it must not apply forwarded updates.
  bool has_state() const { return has_state_; }
  void set_has_state(bool v) { has_state_ = v; }

  uint64_t applied_seq() const { return applied_seq_; }
  uint64_t acked_seq() const { return acked_seq_; }
  // Head: the sequence number of the next update (also counts it applied).
  uint64_t NextSeq() { return ++applied_seq_; }
  // Follower: the update with this number was applied (or a snapshot up to
  // it was loaded). Acknowledged at once at the tail.
  void SetApplied(uint64_t seq);

  // The chain sequence at which (worker, incarnation, push_id) was applied,
  // or 0 if it was not. Ids older than the kept window count as applied
  // (returns 1: acknowledged long ago).
  uint64_t FindApplied(int worker, uint64_t incarnation, uint64_t push_id) const {
    return ledger_.Find(worker, incarnation, push_id);
  }
  // A push part of the worker incarnation was applied at `seq`: counted, and
  // its id (if not 0) recorded.
  void RecordApplied(int worker, uint64_t incarnation, uint64_t push_id, uint64_t seq) {
    ledger_.Record(worker, incarnation, push_id, seq);
  }
  const AppliedLedger& ledger() const { return ledger_; }
  AppliedLedger* mutable_ledger() { return &ledger_; }

  // Runs `fn` once every replica applied update `seq` (at once if acked).
  void WhenAcked(uint64_t seq, std::function<void()> fn);
  // The successor acknowledged everything up to `seq`.
  void OnAcked(uint64_t seq);

  // The forwarded, unacknowledged updates, oldest first.
  void Logged(uint64_t seq, LoggedOp op, int64_t now_ms);
  // Drops the log (a snapshot replaces it).
  void ClearLog() { unacked_.clear(); }
  const std::deque<std::pair<uint64_t, LoggedOp>>& unacked() const { return unacked_; }
  int64_t last_send_ms() const { return last_send_ms_; }
  void set_last_send_ms(int64_t ms) { last_send_ms_ = ms; }

  void SaveDedup(wire::ChainSnapshot* snap) const;
  void LoadDedup(const wire::ChainSnapshot& snap);

 private:
  bool head_ = false;
  uint64_t head_since_seq_ = 0;
  uint64_t head_since_epoch_ = 0;
  int successor_ = -1;
  bool has_state_ = true;
  uint64_t applied_seq_ = 0;
  uint64_t acked_seq_ = 0;
  std::deque<std::pair<uint64_t, LoggedOp>> unacked_;
  int64_t last_send_ms_ = 0;
  std::multimap<uint64_t, std::function<void()>> waiting_;
  AppliedLedger ledger_{kDedupWindow};
};

}  // namespace server_internal
}  // namespace relaxps

#endif  // RELAXPS_SERVER_INTERNAL_CHAIN_REPLICA_H_
