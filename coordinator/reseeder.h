// Reseeder: the coordinator's bookkeeping of stateless re-seeding rounds.
//
// Under --recovery=stateless a server that registers in place of a lost one
// starts empty. The coordinator begins a round for it, asks every live
// worker (through its heartbeat replies) for its copies of the server's
// dense ranges, collects the SEED_COPY messages, and once every expected
// worker that is still live has answered (or the round timed out: a worker
// that died meanwhile loses only its own unmerged changes) builds the SEED
// message with the ranges merged by recovery/seed_merge.h.
//
// No network here: the coordinator sends and receives; tests drive it
// directly.
//
// Thread-safety: not synchronized; owned by the coordinator's loop.
#ifndef RELAXPS_COORDINATOR_RESEEDER_H_
#define RELAXPS_COORDINATOR_RESEEDER_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/wire.h"
#include "recovery/seed_merge.h"

namespace relaxps {

struct ReseedOptions {
  SeedRule seed_rule = SeedRule::kFreshest;
  MergeRule merge_rule = MergeRule::kStaleness;
  // How long a round waits for the workers' copies. Longer waits out slow
  // workers; shorter resumes serving sooner (late copies are not merged).
  int64_t timeout_ms = 3000;
};

// What a finished round did, for logs and events.csv.
struct ReseedSummary {
  int server = -1;
  int64_t clock = 0;        // The clock the merged ranges reflect.
  int seed_worker = -1;     // The freshest copy's worker (-1: no copy at all).
  std::string source;       // "worker:<id>", "average", or "initializer".
  // Per contributing worker: local steps and the weight its change got.
  std::map<int, std::pair<int64_t, double>> contributions;
  int missing_workers = 0;  // Expected but never answered.
  int64_t rows = 0;         // Sparse rows whose merged changes were sent.
  int64_t buckets = 0;      // Hybrid: sparse buckets seeded (rows: their base + changes).
  // Hybrid: dense ranges no worker had a real copy of, seeded with the
  // merged changes of workers that trained on the initializer's values.
  int64_t changes_only = 0;
  // Dense ranges whose momentum slot was rebuilt from the workers' local
  // velocities (the others are reset).
  int64_t velocities = 0;
  std::string ToString() const;
};

class Reseeder {
 public:
  explicit Reseeder(const ReseedOptions& options) : options_(options) {}

  // Begins (or restarts) the round of `server` at `map_version`, expecting a
  // copy from each of `workers`.
  void Begin(int server, uint64_t map_version, const std::vector<int>& workers, int64_t now_ms);
  bool Active(int server) const { return rounds_.count(server) > 0; }
  bool empty() const { return rounds_.empty(); }

  // The rounds `worker` is expected in and has not answered.
  std::vector<wire::ReseedRequest> RequestsFor(int worker) const;

  // Records a SEED_COPY. InvalidArgument for a malformed one,
  // FailedPrecondition for an unknown or finished round.
  Status AddCopy(Message msg);

  // Servers whose round can finish: every expected worker in `live` answered,
  // or the round is older than the timeout.
  std::vector<int> Ready(const std::vector<int>& live, int64_t now_ms) const;

  // Builds the SEED message for `server`'s dense ranges in `map` and ends
  // the round. REQUIRES: Active(server).
  StatusOr<Message> Finish(int server, const wire::ShardMap& map, ReseedSummary* summary);

 private:
  struct Round {
    uint64_t map_version = 0;
    int64_t started_ms = 0;
    std::set<int> expected;
    std::map<int, Message> copies;  // worker -> its SEED_COPY.
  };

  // Appends to `seed` the merged row changes of every sparse table: the sum
  // of each worker's pending changes weighted by ChangeWeights.
  Status MergeRows(const Round& round, const wire::ShardMap& map, Message* seed,
                   ReseedSummary* summary) const;

  const ReseedOptions options_;
  std::map<int, Round> rounds_;  // server -> round.
};

}  // namespace relaxps

#endif  // RELAXPS_COORDINATOR_RESEEDER_H_
