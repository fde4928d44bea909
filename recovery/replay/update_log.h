// UpdateLog: a worker's log of its own acknowledged updates since the last
// complete checkpoint (upstream backup, --recovery=replay).
//
// Every push part a server acknowledged is appended (a copy of its
// gradients and row ids, with its exactly-once key and clock). An entry is
// "contained" in the checkpoints whose seq is larger than the snapshot_seq
// its server reported when the state reflected it; Trim(seq) drops what a
// complete checkpoint `seq` contains. A BSP push acknowledged before its
// round was applied (pending) is not contained anywhere yet: a later
// reflected push of the same worker to the same server with a clock at
// least its clock vouches for it (rounds are applied in clock order).
//
// The log holds at most max_bytes of payload: appending beyond it drops the
// oldest entries (dropped_entries, dropped_bytes). A dropped entry keeps its
// marker (a few bytes) until a complete checkpoint contains it: until then
// it is "uncovered" (an update a restart would lose). When its server
// restarts, TakeLost() counts the uncovered ones the restored checkpoint
// does not contain as lost (lost_entries): reported, never silent.
//
// Range moves (docs/elastic.md "Replay"): an entry belongs to the server
// whose state reflects it, which a move changes (the moved range's state,
// exactly-once record included, now lives on the destination). Reroute()
// gives every entry, and every later one, to the server that holds its keys
// in the newest map, splitting an entry that now spans servers.
//
// Thread-safety: all methods are safe from any thread.
#ifndef RELAXPS_RECOVERY_REPLAY_UPDATE_LOG_H_
#define RELAXPS_RECOVERY_REPLAY_UPDATE_LOG_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "common/shard_map.h"
#include "common/thread_annotations.h"
#include "recovery/client_recovery.h"

namespace relaxps {
namespace recovery {

class UpdateLog {
 public:
  // An entry: the push, its buffers owned by the log, and its marker
  // (snapshot_seq, pending) saying from which checkpoint on it is contained.
  struct Entry {
    AckedPush push;
  };

  explicit UpdateLog(int64_t max_bytes) : max_bytes_(max_bytes) {}
  UpdateLog(const UpdateLog&) = delete;
  UpdateLog& operator=(const UpdateLog&) = delete;

  // Appends a copy of `push` and drops the oldest entries while the log is
  // over max_bytes (an entry larger than max_bytes on its own is dropped
  // instead, and counted). A reflected push first vouches for the pending
  // entries of its server with a clock <= its own.
  void Append(const AckedPush& push);
  // The server answered a replay of the entry keyed `push_id` (`server`):
  // its marker becomes the answer's (snapshot_seq, pending).
  void Replayed(int server, uint64_t push_id, uint64_t snapshot_seq, bool pending);
  // Checkpoint `seq` is complete: drops the entries it contains (and the
  // markers of dropped entries it covers).
  void Trim(uint64_t seq);
  // `server` restarted from the checkpoint `restored_seq` (0: none known):
  // the dropped entries of that server it does not contain are lost.
  // Returns how many; they are added to lost_entries().
  uint64_t TakeLost(int server, uint64_t restored_seq);
  // The shard map changed: each entry goes to the server holding its keys
  // (dense) or rows (sparse) in `map`, split into one entry per server
  // (each with the part's exactly-once key, clock and marker) where they
  // now lie on several; Append() routes by `map` from now on. Entries of a
  // table `map` lacks keep their server. Returns how many entries changed
  // server (counted in rerouted_entries()).
  uint64_t Reroute(std::shared_ptr<const ShardMap> map);
  // The entries routed to `server`, oldest first (shared: the log may drop
  // them meanwhile, the caller's copies stay valid).
  std::vector<std::shared_ptr<const Entry>> EntriesFor(int server) const;

  int64_t bytes() const;
  uint64_t entries() const;
  uint64_t dropped_entries() const;
  uint64_t dropped_bytes() const;
  uint64_t trimmed_entries() const;
  // Dropped entries no complete checkpoint is known to contain yet.
  uint64_t uncovered_entries() const;
  uint64_t lost_entries() const;
  uint64_t rerouted_entries() const;

 private:
  // `e` as it goes by map_: itself, or its pieces by server in key order.
  std::vector<std::shared_ptr<const Entry>> Route(std::shared_ptr<const Entry> e) const
      REQUIRES(mu_);
  // Entries are replaced, never changed in place: EntriesFor's copies stay
  // consistent.
  void SetMarker(std::shared_ptr<const Entry>* e, uint64_t snapshot_seq, bool pending)
      REQUIRES(mu_);
  // The marker of a dropped entry.
  struct Dropped {
    int server;
    int64_t clock;
    uint64_t snapshot_seq;
    bool pending;
  };
  // At most this many markers of dropped entries are kept; an older one
  // beyond it is counted as lost at once (a job without checkpoints).
  static constexpr size_t kMaxDroppedMarkers = size_t{1} << 20;
  static bool Contained(uint64_t snapshot_seq, bool pending, uint64_t seq) {
    return !pending && snapshot_seq < seq;
  }

  const int64_t max_bytes_;

  mutable Mutex mu_;
  std::deque<std::shared_ptr<const Entry>> log_ GUARDED_BY(mu_);  // Append order.
  int64_t bytes_ GUARDED_BY(mu_) = 0;
  uint64_t dropped_entries_ GUARDED_BY(mu_) = 0;
  uint64_t dropped_bytes_ GUARDED_BY(mu_) = 0;
  uint64_t trimmed_entries_ GUARDED_BY(mu_) = 0;
  std::deque<Dropped> dropped_ GUARDED_BY(mu_);  // Uncovered, oldest first.
  uint64_t lost_entries_ GUARDED_BY(mu_) = 0;
  uint64_t rerouted_entries_ GUARDED_BY(mu_) = 0;
  std::shared_ptr<const ShardMap> map_ GUARDED_BY(mu_);  // Newest Reroute(); null: none.
};

}  // namespace recovery
}  // namespace relaxps

#endif  // RELAXPS_RECOVERY_REPLAY_UPDATE_LOG_H_
