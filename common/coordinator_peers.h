// CoordinatorPeers: the connections of a server or worker to every
// coordinator of its job, and which one it talks to now.
//
// --coordinator takes one endpoint or a comma-separated list
// ("tcp://a:1,tcp://b:2": the coordinators of a ZooKeeper-coordinated job,
// coordinator/coordinator.h). Only the leader serves; a standby answers
// Unavailable, a dead one not at all. A caller whose call failed with
// Unavailable or DeadlineExceeded calls Rotate() and tries the next one, so it
// finds the leader within one round of the list; registration, clocks and
// in-flight work are untouched (the new leader resumes from the stored state).
//
// Thread-safety: all methods are safe to call from multiple threads after
// Connect().
#ifndef RELAXPS_COMMON_COORDINATOR_PEERS_H_
#define RELAXPS_COMMON_COORDINATOR_PEERS_H_

#include <atomic>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/transport.h"

namespace relaxps {

class CoordinatorPeers {
 public:
  CoordinatorPeers() = default;
  CoordinatorPeers(const CoordinatorPeers&) = delete;
  CoordinatorPeers& operator=(const CoordinatorPeers&) = delete;

  // Splits `endpoints` at commas (InvalidArgument for an empty item).
  static StatusOr<std::vector<std::string>> Split(const std::string& endpoints);
  // Connects `transport` to every endpoint. REQUIRES: called once, first.
  Status Connect(Transport* transport, const std::string& endpoints);

  // The peer to call now.
  int current() const { return peers_[index_.load() % peers_.size()]; }
  // The endpoint of current(), for messages.
  const std::string& current_endpoint() const {
    return endpoints_[index_.load() % endpoints_.size()];
  }
  size_t size() const { return peers_.size(); }
  // `failed_peer` did not answer or is not the leader: moves to the next
  // coordinator unless another caller already did. No-op with one endpoint.
  void Rotate(int failed_peer);
  // True for the errors after which the next coordinator should be tried.
  static bool ShouldRotate(const Status& s);

 private:
  // Constant after Connect().
  std::vector<int> peers_;
  std::vector<std::string> endpoints_;
  std::atomic<size_t> index_{0};
};

}  // namespace relaxps

#endif  // RELAXPS_COMMON_COORDINATOR_PEERS_H_
