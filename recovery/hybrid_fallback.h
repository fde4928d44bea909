// Hybrid fallback: the shard-map side of --recovery=hybrid (coordinator).
//
// Under hybrid every dense range is a chain of replicas, as under chain
// replication (common/shard_map.h). A lost server is spliced out of every
// chain it shares with another replica; a range it held alone (every other
// replica was lost before) cannot be spliced: it stays with the lost server
// as a chain of one, "stranded", and the map shows that server dead. Workers
// train on their own copies of a stranded range (the client goes local when a
// range's head is dead); when a server registers with the lost id it is seeded
// from those copies (coordinator/reseeder.h), or, if no worker holds one, keeps
// what it loaded from its latest checkpoint. Other servers join a stranded
// chain only after it was seeded.
//
// Thread-safety: pure functions on the caller's map.
#ifndef RELAXPS_RECOVERY_HYBRID_FALLBACK_H_
#define RELAXPS_RECOVERY_HYBRID_FALLBACK_H_

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "proto/relaxps.pb.h"

namespace relaxps {

// A dense range whose every replica is lost.
struct StrandedRange {
  std::string table;
  uint64_t begin = 0, end = 0;
};

struct SpliceResult {
  int changed = 0;                      // Chains `server` was removed from.
  std::vector<StrandedRange> stranded;  // Ranges it held alone (left with it).
};

// Removes `server` from every chain that has another replica with state (a
// range it headed gets the next replica as head); a range it held alone, or
// whose other replicas are all in `syncing` (joined, state transfer not
// done: they hold nothing yet), stays with it as a chain of one (the syncing
// replicas leave it; they join again once it is seeded). Does not bump the
// version or epoch.
SpliceResult SpliceOrStrand(wire::ShardMap* map, int server, const std::set<int>& syncing = {});

// The ranges `server` holds alone in `map`.
std::vector<StrandedRange> RangesHeldAlone(const wire::ShardMap& map, int server);

// Removes `server` from every chain headed by a server in `stranded_holders`
// (other than itself): a chain that awaits its seed takes no tail yet.
// Returns how many chains it left. Used after JoinChains.
int LeaveStrandedChains(wire::ShardMap* map, int server, const std::set<int>& stranded_holders);

// "table[begin,end);..." for logs.
std::string DescribeRanges(const std::vector<StrandedRange>& ranges);

}  // namespace relaxps

#endif  // RELAXPS_RECOVERY_HYBRID_FALLBACK_H_
