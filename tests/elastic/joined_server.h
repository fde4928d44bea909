// Test helper of the elastic tests on real processes: starts a server with
// --join next to a RecoveryCluster and waits for the move of a range to it.
//
// Thread-safety: from the test's thread only.
#ifndef RELAXPS_TESTS_ELASTIC_JOINED_SERVER_H_
#define RELAXPS_TESTS_ELASTIC_JOINED_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "tests/recovery/recovery_util.h"
#include "tests/test_util.h"

namespace relaxps {
namespace test {

// Starts relaxps-server --join with `flags` in the data dir StartServer(`id`)
// would use (so that StartServer(id, ...) restarts it in place), where `id`
// is the id the coordinator will give it, and waits until it listens and
// the coordinator's events file `events` shows range_move_done of keys from
// `begin` to it. The process and its endpoint go to *joined and *endpoint.
Status JoinServer(RecoveryCluster* cluster, int id, const std::vector<std::string>& flags,
                  const std::string& events, uint64_t begin, std::unique_ptr<Subprocess>* joined,
                  std::string* endpoint);

}  // namespace test
}  // namespace relaxps

#endif  // RELAXPS_TESTS_ELASTIC_JOINED_SERVER_H_
