// Helpers of the stateless and hybrid recovery tests: a dense SGD table with
// a constant initializer, and integer gradients (float sums and SGD steps
// with lr 0.5 stay exact, so the tests compare floats exactly).
//
// Thread-safety: pure functions.
#ifndef RELAXPS_TESTS_RECOVERY_STATELESS_UTIL_H_
#define RELAXPS_TESTS_RECOVERY_STATELESS_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include <memory>

#include "common/buffer.h"
#include "common/table.h"
#include "tests/recovery/recovery_util.h"

namespace relaxps {
namespace test {

// Dense table "w" of `size` keys, SGD at `lr`, every key `init`.
TableOptions SgdTable(uint64_t size, float lr, float init);

// A --recovery=stateless coordinator (heartbeat and re-seed timeouts in ms)
// and server 0 with an in-memory store, in `dir`.
StatusOr<std::unique_ptr<RecoveryCluster>> StartStatelessCluster(const std::string& dir,
                                                                 int heartbeat_timeout_ms,
                                                                 int reseed_timeout_ms);
// The flags of its servers (for restarts).
std::vector<std::string> StatelessServerFlags();

// Sparse table "s" of rows of `width`, SGD at `lr`, every value `init`.
TableOptions SparseSgdTable(size_t width, float lr, float init);

// Integer gradient in [-4, 4] of `worker` at step `step`.
FloatBuffer IntegerGradient(uint64_t size, int worker, int step);

}  // namespace test
}  // namespace relaxps

#endif  // RELAXPS_TESTS_RECOVERY_STATELESS_UTIL_H_
