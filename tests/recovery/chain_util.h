// Helpers of the chain replication tests: the chains of a table as
// relaxps-ctl prints them, waiting for a reconfiguration, pushing threads that
// are always joined.
//
// Thread-safety: call from the test's thread; Pushers::threads run pushes.
#ifndef RELAXPS_TESTS_RECOVERY_CHAIN_UTIL_H_
#define RELAXPS_TESTS_RECOVERY_CHAIN_UTIL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "tests/recovery/recovery_util.h"

namespace relaxps {
namespace test {

struct ChainRange {
  uint64_t begin = 0, end = 0;
  std::vector<int> chain;  // Head first.
};

// The chains of dense table `table` from `relaxps-ctl status` (empty on error).
std::vector<ChainRange> Chains(RecoveryCluster* cluster, const std::string& table);
// The chains of the buckets of sparse table `table`: begin is the bucket,
// end the number of buckets.
std::vector<ChainRange> BucketChains(RecoveryCluster* cluster, const std::string& table);

// Waits until no chain of `table` holds server `gone` (gone >= 0), or until
// every chain has `replicas` replicas (gone < 0). False on timeout
// (timeout_ms times the sanitizer TimeScale()).
bool WaitForChains(RecoveryCluster* cluster, const std::string& table, int gone,
                   size_t replicas, int timeout_ms);

// Runs `read` (a read of one replica's copy) again while the replica is
// still awaiting its state transfer (Unavailable), for up to 10 s times TimeScale().
StatusOr<std::vector<float>> WhenInSync(const std::function<StatusOr<std::vector<float>>()>& read);

// Pushing threads, stopped and joined however the test ends.
class Pushers {
 public:
  ~Pushers() { Join(); }
  void Join() {
    stop = true;
    for (auto& t : threads) {
      if (t.joinable()) t.join();
    }
    threads.clear();
  }
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
};

}  // namespace test
}  // namespace relaxps

#endif  // RELAXPS_TESTS_RECOVERY_CHAIN_UTIL_H_
