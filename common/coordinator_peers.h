// CoordinatorPeers: the connections of a server or worker to the
// coordinators of its job, and which one it talks to now.
//
// --coordinator takes one endpoint or a comma-separated list. Under
// ZooKeeper coordination (coordinator/coordinator.h) only the leader serves;
// any other coordinator, standby or deposed, answers Unavailable with the
// leader's endpoint (Header.leader_endpoint), and the leader lists every
// coordinator of the job on its REGISTER and HEARTBEAT replies
// (Header.coordinator_endpoints). Call()/CallSync() follow both: a redirect
// moves to the leader (connecting to it if it is new), a listed coordinator
// is connected to and tried in turn when the current one is silent or
// answers Unavailable without naming a leader. So one endpoint of any
// coordinator is enough, and the client needs no ZooKeeper; registration,
// clocks and in-flight work are untouched by a move (the new leader resumes
// from the stored state). Servers started with --coordination also Follow()
// the leader they read from ZooKeeper (coordinator/leader_watch.h).
//
// Thread-safety: all methods are safe to call from multiple threads after
// Connect().
#ifndef RELAXPS_COMMON_COORDINATOR_PEERS_H_
#define RELAXPS_COMMON_COORDINATOR_PEERS_H_

#include <string>
#include <vector>

#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/transport.h"

namespace relaxps {

class CoordinatorPeers {
 public:
  // Coordinators learned from replies beyond this many are ignored (a
  // hostile reply cannot make a client open unbounded connections).
  static constexpr size_t kMaxCoordinators = 64;

  CoordinatorPeers() = default;
  CoordinatorPeers(const CoordinatorPeers&) = delete;
  CoordinatorPeers& operator=(const CoordinatorPeers&) = delete;

  // Splits `endpoints` at commas (InvalidArgument for an empty item).
  static StatusOr<std::vector<std::string>> Split(const std::string& endpoints);
  // Connects `transport` (borrowed; must outlive this) to every endpoint.
  // REQUIRES: called once, first.
  Status Connect(Transport* transport, const std::string& endpoints);

  // The peer to call now, and its endpoint.
  int current() const;
  std::string current_endpoint() const;
  // Coordinators known (given and learned).
  size_t size() const;
  // `failed_peer` did not answer or is not the leader: moves to the next
  // coordinator unless another caller already did. No-op with one endpoint.
  void Rotate(int failed_peer);
  // True for the errors after which another coordinator should be tried.
  static bool ShouldRotate(const Status& s);

  // Makes `endpoint` the current coordinator, connecting to it if it is
  // new. No-op before Connect().
  void Follow(const std::string& endpoint);
  // What a reply of `peer` says about where the leader is: learns the
  // coordinators it lists, follows its redirect, or rotates past a silent or
  // leaderless one (ShouldRotate). True if the current coordinator changed
  // because of it: the call is worth retrying at once.
  bool Observe(int peer, const Status& status, const Message& reply);

  // Calls the current coordinator; `done` runs after Observe() saw the reply.
  void Call(Message msg, int timeout_ms, Transport::ReplyCallback done);
  // The same, waiting; `*moved` (if given) is Observe()'s answer.
  StatusOr<Message> CallSync(Message msg, int timeout_ms, bool* moved = nullptr);
  // CallSync() of a request without payload frames, sent again while the
  // reply moved the current coordinator (a standby's redirect to the
  // leader, a silent or leaderless one rotated past), at most once per
  // coordinator it may know: for one-shot callers such as relaxps-ctl. Each
  // attempt may take `timeout_ms`. Returns the last answer.
  StatusOr<Message> CallFollowing(const wire::Header& header, int timeout_ms);

 private:
  // Connects to `endpoint` unless known: its index. REQUIRES: mu_ held.
  size_t AddLocked(const std::string& endpoint) REQUIRES(mu_);

  Transport* transport() const {
    MutexLock l(&mu_);
    return transport_;
  }

  mutable Mutex mu_;
  Transport* transport_ GUARDED_BY(mu_) = nullptr;  // Set by Connect().

  std::vector<int> peers_ GUARDED_BY(mu_);
  std::vector<std::string> endpoints_ GUARDED_BY(mu_);
  size_t index_ GUARDED_BY(mu_) = 0;
};

}  // namespace relaxps

#endif  // RELAXPS_COMMON_COORDINATOR_PEERS_H_
