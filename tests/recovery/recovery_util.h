// Helpers of the recovery tests: a coordinator and servers as real processes
// (started and SIGKILLed by the test), raw reads of parameter and optimizer
// state slots, relaxps-ctl, and the peak RSS of a process.
//
// Thread-safety: use a RecoveryCluster from the test's thread only.
#ifndef RELAXPS_TESTS_RECOVERY_RECOVERY_UTIL_H_
#define RELAXPS_TESTS_RECOVERY_RECOVERY_UTIL_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "client/client.h"
#include "common/status.h"
#include "common/wire.h"
#include "tests/test_util.h"

namespace relaxps {
namespace test {

class RecoveryCluster {
 public:
  // Starts a coordinator for `num_servers` with `flags` in `dir`.
  static StatusOr<std::unique_ptr<RecoveryCluster>> Start(const std::string& dir,
                                                          int num_servers,
                                                          std::vector<std::string> flags);

  // Starts server `id` (--server_id=id, --data_dir=<dir>/data/server-<id>,
  // log <dir>/server-<id>.<n>.log) with extra flags and waits until it
  // listens. Replaces (without killing) a previous process of that id.
  Status StartServer(int id, const std::vector<std::string>& flags);
  // Starts server `id` (same flags as StartServer, no endpoint file) and waits
  // for it to exit; returns its exit status and its stderr alone (for servers
  // that must refuse to start).
  StatusOr<CommandResult> RunServerToExit(int id, const std::vector<std::string>& flags);

  // Waits for server `id`'s endpoint file (written again by a server that
  // restarted in place: delete it first) and takes the endpoint from it.
  Status ReloadServerEndpoint(int id, Millis timeout);

  Subprocess* server(int id) { return servers_.at(id).get(); }
  Subprocess* coordinator() { return coordinator_.get(); }
  const std::string& server_endpoint(int id) { return server_endpoints_.at(id); }
  std::string data_dir(int id) const { return dir_ + "/data/server-" + std::to_string(id); }
  std::string checkpoint_root(int id) const {
    return dir_ + "/data/checkpoints/server-" + std::to_string(id);
  }
  const std::string& coordinator_endpoint() const { return coordinator_endpoint_; }
  const std::string& dir() const { return dir_; }

  // A client of the job (role "worker" or "observer"); `tweak` may change
  // its options before it connects.
  StatusOr<std::unique_ptr<Client>> Connect(
      const std::string& role = "worker",
      const std::function<void(ClientOptions*)>& tweak = nullptr);
  // Push parts of worker `worker`'s incarnation `incarnation` that the
  // servers' states reflect, summed over the servers (relaxps-ctl --json
  // stats: ServerStats.applied_parts).
  StatusOr<uint64_t> AppliedParts(int worker, uint64_t incarnation);
  // relaxps-ctl --coordinator=... <args>.
  StatusOr<CommandResult> Ctl(const std::vector<std::string>& args);

 private:
  RecoveryCluster() = default;
  std::string dir_;
  std::string coordinator_endpoint_;
  std::unique_ptr<Subprocess> coordinator_;
  std::map<int, std::unique_ptr<Subprocess>> servers_;
  std::map<int, std::string> server_endpoints_;
  std::map<int, int> starts_;
};

// Reads keys [begin, begin + n) of `slot` (0: parameters, 1..: optimizer
// state) of a dense table straight from the server at `endpoint`.
StatusOr<std::vector<float>> ReadDenseSlot(const std::string& endpoint, const std::string& table,
                                           uint64_t begin, uint64_t n, int slot);
// The server's counters (SERVER_STATS) at `endpoint`.
StatusOr<wire::ServerStats> TryServerStats(const std::string& endpoint);
// The requests that server `ids` of `cluster` received, summed, less the
// updates they forwarded down their chains (each forwarded update is a
// request of its successor): the requests of clients, this call's
// SERVER_STATS included (the difference of two calls counts the earlier
// call's once per server).
StatusOr<uint64_t> ClientRequests(RecoveryCluster* cluster, const std::vector<int>& ids);

// Reads `slot` of sparse rows `ids` from the server at `endpoint`; under
// chain replication every id must lie in hash bucket `bucket`, and the rows
// are that replica's copy.
StatusOr<std::vector<float>> ReadRowsSlot(const std::string& endpoint, const std::string& table,
                                          const std::vector<uint64_t>& ids, int slot,
                                          uint64_t bucket = 0);

// A dense table `name` of `size` keys trained with Adam (lr 0.01) from a
// seeded uniform [-1, 1) initialization: state in three slots (params, m, v).
TableOptions DenseAdamTable(const std::string& name, uint64_t size);

// `n` workers connected to `cluster`, each of which created `table`, in
// ascending worker id (the order tests/consistency/dense_bsp_driver.h wants).
StatusOr<std::vector<std::unique_ptr<Client>>> ConnectWorkers(RecoveryCluster* cluster, int n,
                                                              const TableOptions& table);

// VmHWM (peak resident set) of a live process in KiB; -1 if unreadable.
int64_t PeakRssKb(pid_t pid);

}  // namespace test
}  // namespace relaxps

#endif  // RELAXPS_TESTS_RECOVERY_RECOVERY_UTIL_H_
