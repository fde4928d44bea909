// Helpers of the coordinator high-availability tests: a throw-away ZooKeeper
// (scripts/zk.sh), coordinators and servers as real processes (SIGKILLed by
// the tests), and a map-version probe.
//
// Thread-safety: use from the test's thread only, except MapVersion().
#ifndef RELAXPS_TESTS_COORDINATOR_HA_CLUSTER_H_
#define RELAXPS_TESTS_COORDINATOR_HA_CLUSTER_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/wire.h"
#include "tests/test_util.h"

namespace relaxps {
namespace test {

// A local ZooKeeper for one test; stopped (and nothing left running) by the
// destructor.
class LocalZooKeeper {
 public:
  // Unavailable with scripts/zk.sh's reason when java or zookeeper is
  // missing (`missing` set), another error if it failed to start.
  static StatusOr<std::unique_ptr<LocalZooKeeper>> Start(const std::string& dir, bool* missing);
  ~LocalZooKeeper();
  const std::string& hostport() const { return hostport_; }

 private:
  LocalZooKeeper() = default;
  std::string dir_;
  std::string hostport_;
};

class HaCluster {
 public:
  HaCluster(std::string dir, int num_servers, std::vector<std::string> coordinator_flags)
      : dir_(std::move(dir)), num_servers_(num_servers), flags_(std::move(coordinator_flags)) {}

  // Starts coordinator `i` (bind: its previous endpoint if it had one) and
  // waits until it listens.
  Status StartCoordinator(int i);
  void KillCoordinator(int i);
  // The coordinator that answers GET_SHARD_MAP (leads) first, polling every
  // coordinator started so far; -1 if none does within Scaled(timeout_ms).
  int Leader(int timeout_ms) const;
  Subprocess* coordinator(int i) { return coordinators_.at(i).get(); }
  const std::string& coordinator_endpoint(int i) const { return coordinator_endpoints_.at(i); }
  // Every coordinator endpoint, comma-separated (--coordinator).
  std::string coordinator_list() const;

  // --coordinator=coordinator_list() unless `flags` has --coordinator or
  // --coordination (the server then finds the leader itself).
  Status StartServer(int id, const std::vector<std::string>& flags);
  Subprocess* server(int id) { return servers_.at(id).get(); }
  const std::string& server_endpoint(int id) const { return server_endpoints_.at(id); }

  const std::string& dir() const { return dir_; }

 private:
  const std::string dir_;
  const int num_servers_;
  const std::vector<std::string> flags_;
  std::map<int, std::unique_ptr<Subprocess>> coordinators_;
  std::map<int, std::string> coordinator_endpoints_;
  std::map<int, int> coordinator_starts_;
  std::map<int, std::unique_ptr<Subprocess>> servers_;
  std::map<int, std::string> server_endpoints_;
};

// The shard map version `endpoint` answers GET_SHARD_MAP with, or its error
// (Unavailable from a standby, DeadlineExceeded from a dead one).
StatusOr<uint64_t> MapVersion(const std::string& endpoint, int timeout_ms);
// The whole shard map `endpoint` answers with.
StatusOr<wire::ShardMap> GetShardMap(const std::string& endpoint, int timeout_ms);

}  // namespace test
}  // namespace relaxps

#endif  // RELAXPS_TESTS_COORDINATOR_HA_CLUSTER_H_
