// LeaderElection: one coordinator's candidacy in the job's ZooKeeper
// election.
//
// Each candidate creates an ephemeral sequential znode PATH/election/n_...
// holding its endpoint; the lowest one leads. The others each watch their
// predecessor only (no herd when the leader goes), and re-check when it is
// gone. A leader's node disappears with its session: ZooKeeper deletes it
// session_timeout after a crash, at once on a clean close.
//
// Leading here is only the right to Claim() the state store; the store's
// conditional writes are what fences a deposed leader. `on_elected` runs at
// most once per LeaderElection: a coordinator that lost its session joins
// again with a new session and a new LeaderElection (coordinator.h).
// Servers follow the leader with LeaderWatch (coordinator/leader_watch.h),
// which reads the same nodes.
//
// Thread-safety: all methods are safe to call from multiple threads;
// `on_elected` runs on the election's own thread.
#ifndef RELAXPS_COORDINATOR_LEADER_ELECTION_H_
#define RELAXPS_COORDINATOR_LEADER_ELECTION_H_

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "common/thread_annotations.h"
#include "coordinator/zk_session.h"

namespace relaxps {

class LeaderElection {
 public:
  // Joins the election under `path` (the job's znode) as `endpoint`.
  // `on_elected` runs once, when this candidate becomes the leader.
  // `session` must outlive the election.
  static StatusOr<std::unique_ptr<LeaderElection>> Start(ZkSession* session,
                                                         const std::string& path,
                                                         const std::string& endpoint,
                                                         std::function<void()> on_elected);
  // Leaves the election (deletes this candidate's node) and joins the thread.
  ~LeaderElection();
  LeaderElection(const LeaderElection&) = delete;
  LeaderElection& operator=(const LeaderElection&) = delete;

  // The endpoint of the leader as last seen ("" while unknown).
  std::string leader_endpoint() const;
  // Every candidate's endpoint as last seen, the leader first (refreshed at
  // least every second).
  std::vector<std::string> candidates() const;

 private:
  LeaderElection(ZkSession* session, std::string path, std::string endpoint,
                 std::function<void()> on_elected);
  void Loop();
  // One round: true once this candidate leads (`elected`: it already does;
  // the round only refreshes the leader and the candidates).
  StatusOr<bool> Check(bool elected);

  // Constant after construction.
  ZkSession* const session_;
  const std::string dir_;  // PATH/election
  const std::string endpoint_;
  const std::function<void()> on_elected_;
  std::string node_;  // This candidate's znode name (set before the thread starts).

  // The session's watch context (ZkSession::WatchContext) of every watch
  // this election sets. Set before the thread starts.
  void* watch_ctx_ = nullptr;
  // Shared with ZooKeeper's watches, which may fire after this object is
  // gone (they hold a weak_ptr).
  struct Signal {
    Mutex mu;
    std::condition_variable_any cv;
    bool stop GUARDED_BY(mu) = false;
    bool woken GUARDED_BY(mu) = false;
    std::string leader GUARDED_BY(mu);
    std::vector<std::string> candidates GUARDED_BY(mu);
  };
  const std::shared_ptr<Signal> signal_ = std::make_shared<Signal>();
  std::thread thread_;
};

}  // namespace relaxps

#endif  // RELAXPS_COORDINATOR_LEADER_ELECTION_H_
