// Leadership: a coordinator's hold on its job's durable state.
//
// Owns the state store (coordinator/state_store.h) and, under --coordination,
// the ZooKeeper session and the leader election that decide when this
// coordinator may claim it; the term of its claim; the records as last
// written; and where this coordinator stands:
//
//   standby --Claim()+Lead()--> leading <--OnZkEvent--> suspended
//      \                            |                       |
//       `------------------ StepDown() (final) ------------'
//
//   standby    not elected yet (or taking over): answers "not the leader".
//   leading    serves; every change is Write()n before it takes effect.
//   suspended  leading, but its ZooKeeper connection dropped: it serves
//              nothing until it reconnects within its session (same term),
//              or the session expires (then it steps down).
//   stepped down  for good: this object never leads again (a process that
//              rejoins builds a new coordinator, rejoining_coordinator.cc).
//
// It does not know the records' contents (the coordinator's Snapshot and
// Restore) nor what stepping down means for the job (the coordinator stops
// its loop and ends its run): it decides the transitions and keeps the
// store in step with them.
//
// Invariants: term() is 0 until Claim() succeeded, then the store's term of
// this claim; leading() and suspended() are never both true; after
// StepDown() neither is, and nothing makes them true again; Write() only
// writes records that differ from the last written ones.
//
// Thread-safety: leading() may be read from any thread; everything else
// runs on the coordinator's loop thread. Open()'s callbacks run on
// ZooKeeper's threads: they must hand off to the loop (Post), not act.
#ifndef RELAXPS_COORDINATOR_LEADERSHIP_H_
#define RELAXPS_COORDINATOR_LEADERSHIP_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "coordinator/coordinator.h"
#include "coordinator/leader_election.h"
#include "coordinator/state_store.h"
#include "coordinator/zk_session.h"

namespace relaxps {

class Leadership {
 public:
  Leadership() = default;
  Leadership(const Leadership&) = delete;
  Leadership& operator=(const Leadership&) = delete;

  // Opens the store `options` name: under --coordination a ZooKeeper
  // session, its store and the election (`endpoint` is this coordinator's
  // candidate entry), calling `on_elected` once it wins and `on_zk_event`
  // for every session event; with --data_dir a RocksDB, else memory (the
  // caller claims at once: there is no election). At most once.
  Status Open(const CoordinatorOptions& options, const std::string& endpoint,
              std::function<void()> on_elected, std::function<void(ZkEvent)> on_zk_event);
  // Uses `store` as it is (tests; Open() for memory and RocksDB).
  // `coordinated`: as under --coordination (a deposed one may rejoin).
  void OpenWith(std::unique_ptr<CoordinatorStateStore> store, bool coordinated);

  // Claims the store: term() becomes the claim's term. Returns the records
  // to resume from (empty for a new job). The caller restores them, then
  // calls Lead(). REQUIRES: opened, !stepped_down().
  StatusOr<StateRecords> Claim();
  // Serves from now: `written` are the records the claim returned (what the
  // store holds). REQUIRES: Claim() succeeded, !stepped_down().
  void Lead(StateRecords written);
  // Writes the records of `snapshot` that changed since the last write.
  // The store's error if it failed: the caller must step down and must not
  // let the change take effect (another coordinator may have claimed the
  // store). REQUIRES: leading().
  [[nodiscard]] Status Write(StateRecords snapshot);

  // Stops leading for good. `rejoin`: it lost its leadership, not its job
  // (honoured only under coordination). False if it had stepped down already.
  bool StepDown(bool rejoin);

  // What a ZooKeeper session event did.
  enum class ZkChange {
    kNone,       // Nothing (e.g. a drop while standing by).
    kSuspended,  // Leading, connection lost: it stops serving.
    kResumed,    // Reconnected within its session: it serves the same term.
    kExpired,    // The session is gone: the caller steps down (rejoining).
  };
  ZkChange OnZkEvent(ZkEvent e);

  bool leading() const { return leading_.load(); }
  bool suspended() const { return suspended_; }
  bool stepped_down() const { return stepped_down_; }
  // After StepDown(): the process stands by again (see StepDown).
  bool rejoins() const { return rejoin_; }
  bool coordinated() const { return coordinated_; }
  uint64_t term() const { return term_; }
  // "memory", "rocksdb:DIR", "zk:PATH" ("" before Open()).
  std::string store_name() const { return store_ != nullptr ? store_->Name() : ""; }
  // Under coordination: the leader's endpoint ("" when none leads or
  // without coordination) and every candidate, the leader first.
  std::string leader_endpoint() const;
  std::vector<std::string> candidates() const;

 private:
  bool coordinated_ = false;
  uint64_t term_ = 0;
  StateRecords written_;  // Records as last written to store_.
  bool stepped_down_ = false;
  bool rejoin_ = false;
  bool suspended_ = false;
  // Written on the loop thread, read from any thread.
  std::atomic<bool> leading_{false};
  // In this order: destroyed election first, then the store, then the
  // session they both use.
  std::unique_ptr<ZkSession> zk_;
  std::unique_ptr<CoordinatorStateStore> store_;
  std::unique_ptr<LeaderElection> election_;
};

}  // namespace relaxps

#endif  // RELAXPS_COORDINATOR_LEADERSHIP_H_
