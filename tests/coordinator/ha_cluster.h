// Helpers of the coordinator high-availability tests: a throw-away ZooKeeper
// (scripts/zk.sh), coordinators and servers as real processes (SIGKILLed by
// the tests), and a map-version probe.
//
// Thread-safety: use from the test's thread only, except MapVersion().
#ifndef RELAXPS_TESTS_COORDINATOR_HA_CLUSTER_H_
#define RELAXPS_TESTS_COORDINATOR_HA_CLUSTER_H_

#include <atomic>
#include <map>
#include <memory>
#include <thread>
#include <string>
#include <vector>

#include "client/client.h"
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

// Dense table `name` of `size` keys, SGD with lr 1, zeros at the start: a
// push of ones moves every key by -1.
TableOptions OnesTable(const std::string& name, uint64_t size);

// A worker pushing ones to table "w" of `size` keys and advancing its clock,
// on its own thread, counting acknowledged and failed steps.
class PushTrainer {
 public:
  PushTrainer(std::unique_ptr<Client> client, uint64_t size);
  ~PushTrainer() { Stop(); }
  PushTrainer(const PushTrainer&) = delete;
  PushTrainer& operator=(const PushTrainer&) = delete;
  void Stop();
  Client* client() { return client_.get(); }
  // After Stop(): the client, e.g. to leave the job in order.
  std::unique_ptr<Client> TakeClient() { return std::move(client_); }
  int64_t acked() const { return acked_.load(); }
  int64_t failed() const { return failed_.load(); }
  // Waits until `n` more pushes were acknowledged; false after
  // Scaled(timeout_ms).
  bool AckedMore(int64_t n, int timeout_ms);

 private:
  std::unique_ptr<Client> client_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> acked_{0}, failed_{0};
  std::thread thread_;
};

// The shard map version `endpoint` answers GET_SHARD_MAP with, or its error
// (Unavailable from a standby, DeadlineExceeded from a dead one).
StatusOr<uint64_t> MapVersion(const std::string& endpoint, int timeout_ms);
// The whole shard map `endpoint` answers with.
StatusOr<wire::ShardMap> GetShardMap(const std::string& endpoint, int timeout_ms);

}  // namespace test
}  // namespace relaxps

#endif  // RELAXPS_TESTS_COORDINATOR_HA_CLUSTER_H_
