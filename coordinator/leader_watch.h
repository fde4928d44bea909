// LeaderWatch: how a server finds the job's coordinator without a list of
// endpoints: it reads the leader from ZooKeeper (the lowest candidate under
// PATH/election, coordinator/leader_election.h) and is told when it changes.
//
// It keeps its own ZooKeeper session, with a child watch on PATH/election
// (and a one-second poll, should a watch be lost with a reconnection). A
// session that expires (the server was paused, ZooKeeper was away) is
// replaced by a new one; the server keeps running on its last known leader
// meanwhile. Clients (relaxps::Client) never use this: they follow the
// coordinators' redirects (common/coordinator_peers.h) and link no
// ZooKeeper.
//
// Thread-safety: all methods are safe to call from multiple threads;
// `on_leader` runs on the watch's own thread, one call at a time.
#ifndef RELAXPS_COORDINATOR_LEADER_WATCH_H_
#define RELAXPS_COORDINATOR_LEADER_WATCH_H_

#include <functional>
#include <memory>
#include <string>

#include "common/status.h"

namespace relaxps {

struct LeaderWatchOptions {
  // zk://HOST:PORT[,HOST:PORT...]/PATH, the coordinators' --coordination.
  std::string coordination;
  // The watch's ZooKeeper session timeout (it holds no ephemeral node, so
  // this only bounds how soon a lost session is noticed).
  int session_timeout_ms = 4000;
  // Runs with the new leader's endpoint each time the leader changes (not
  // with "" when none leads: the last leader stays the best guess).
  std::function<void(const std::string& endpoint)> on_leader;
};

class LeaderWatch {
 public:
  // InvalidArgument for a malformed address; Unavailable if no ZooKeeper
  // session could be had within `connect_timeout_ms`.
  static StatusOr<std::unique_ptr<LeaderWatch>> Start(LeaderWatchOptions options,
                                                      int connect_timeout_ms = 10000);
  ~LeaderWatch();
  LeaderWatch(const LeaderWatch&) = delete;
  LeaderWatch& operator=(const LeaderWatch&) = delete;

  // The leader's endpoint as last seen ("" while none is known).
  std::string leader() const;
  // Waits until a leader is known: its endpoint, or DeadlineExceeded naming
  // the ZooKeeper path after `timeout_ms`.
  StatusOr<std::string> WaitForLeader(int timeout_ms) const;

 private:
  class Impl;
  explicit LeaderWatch(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

}  // namespace relaxps

#endif  // RELAXPS_COORDINATOR_LEADER_WATCH_H_
