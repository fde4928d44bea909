// Hybrid fallback: the shard-map side of --recovery=hybrid (coordinator).
//
// Under hybrid every dense range and every sparse bucket is a chain of
// replicas, as under chain replication (common/shard_map.h). A lost server is
// spliced out of every chain it shares with another replica; a range or
// bucket it held alone (every other replica was lost before) cannot be
// spliced: it stays with the lost server as a chain of one, "stranded", and
// the map shows that server dead. Workers train on their own copies of a
// stranded range, and on their own copies of the rows of a stranded bucket
// (the client goes local when a chain's head is dead); the server that takes
// the stranded holder's place is seeded from those copies
// (coordinator/reseeder.h): dense ranges from the merged copies, or, if no
// worker holds one, what it loaded from its latest checkpoint; sparse rows
// from its latest checkpoint or the initializer with the workers' merged row
// changes on top. Other servers join a stranded chain only after it was
// seeded.
//
// Thread-safety: pure functions on the caller's map.
#ifndef RELAXPS_RECOVERY_HYBRID_HYBRID_FALLBACK_H_
#define RELAXPS_RECOVERY_HYBRID_HYBRID_FALLBACK_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "proto/relaxps.pb.h"

namespace relaxps {

// A dense range, or a sparse bucket, whose every replica is lost.
struct StrandedRange {
  std::string table;
  uint64_t begin = 0, end = 0;  // Dense: the key range.
  int bucket = -1;              // Sparse: the bucket (begin, end unused).
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

// The ranges and buckets `server` holds alone in `map`.
std::vector<StrandedRange> RangesHeldAlone(const wire::ShardMap& map, int server);

// Spare takeover: moves every range and bucket held alone by `holder` to
// `spare` (a chain of one on `spare`). Returns what moved.
std::vector<StrandedRange> MoveStranded(wire::ShardMap* map, int holder, int spare);

// Removes `server` from every chain headed by a server in `stranded_holders`
// (other than itself): a chain that awaits its seed takes no tail yet.
// Returns how many chains it left. Used after JoinChains.
int LeaveStrandedChains(wire::ShardMap* map, int server, const std::set<int>& stranded_holders);

// Spare takeover rule: the stranded holder whose ranges a server `spare`
// registering at `now_ms` takes over, or -1. `stranded_at`: each stranded
// holder and when it was stranded; `busy`: holders being seeded already. A
// holder qualifies once it has been stranded for at least `grace_ms` (0: at
// once); the longest stranded (then lowest id) is taken. The spare never
// takes its own id (that is the holder's own restart).
int PickStrandedForSpare(const std::map<int, int64_t>& stranded_at, const std::set<int>& busy,
                         int spare, int64_t now_ms, int64_t grace_ms);

// "table[begin,end);table#bucket;..." for logs.
std::string DescribeRanges(const std::vector<StrandedRange>& ranges);

}  // namespace relaxps

#endif  // RELAXPS_RECOVERY_HYBRID_HYBRID_FALLBACK_H_
