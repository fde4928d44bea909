// Range plans: which dense key ranges and sparse hash buckets move where
// when a server joins a running job or one is drained (docs/elastic.md).
// A move of a sparse table moves every bucket in [begin, end) that its source
// holds (bucket indices), so one cut-over carries all that one server gives
// another. Pure functions on shard-map protos; the
// coordinator (coordinator_moves.cc) runs the moves they plan.
//
// Thread-safety: stateless functions.
#ifndef RELAXPS_COORDINATOR_RANGE_PLAN_H_
#define RELAXPS_COORDINATOR_RANGE_PLAN_H_

#include <set>
#include <vector>

#include "common/status.h"
#include "proto/relaxps.pb.h"

namespace relaxps {
namespace coordinator_internal {

// The moves that give server `dest` about its share (size / serving servers,
// `serving` including `dest`) of every dense table of `map` (unreplicated
// ranges: DenseRange.server). Each takes the tail of a range of the server
// holding the most keys above its own share, cut on a multiple of
// kDenseChunk (or the whole range); a server keeps at least its share. In
// order: each move is planned on the map the earlier ones left. Sparse
// tables (unreplicated buckets): while `dest` holds fewer than its share
// (buckets / serving servers, rounded down) the server holding the most
// buckets above that share gives its last bucket, so the bucket counts even
// out as far as the table's number of buckets allows (--sparse_buckets;
// the map knows no row counts); one move per giving server, [its lowest
// bucket given, number of buckets). Replicated tables stay. Fields set: table,
// begin, end, source, destination.
// Chained tables (ranges on chains of R servers): the share is
// size * R / serving replica keys; whole ranges move one replica each (a
// chained range is never cut), from the server holding the most replica
// keys above its share, while that brings `dest` closer to its share
// (its replica keys plus half the range stay below the share).
std::vector<wire::RangeMove> PlanMovesTo(const wire::ShardMap& map, int dest,
                                         const std::set<int>& serving);

// The moves that take every dense range and sparse bucket of server
// `source` to the other `serving` servers (`source` not among them): each
// range cut into consecutive pieces, one per server still below its share
// of the table (size / others), as large as it lacks, on kDenseChunk, the
// first to the server holding the range before it and the last to the one
// holding the range after it (moved tail first), each
// bucket to the one holding the fewest buckets of its table then (the
// source's buckets in order, a consecutive run of them per destination: one
// move each). A chained range moves `source`'s replica to the server outside
// its chain holding the fewest replica keys of the table.
// FailedPrecondition if no other server serves, every other server is in a
// chain of `source`'s, `source` holds buckets of a replicated sparse table,
// or rows of a sparse table without buckets (a map of an older version).
StatusOr<std::vector<wire::RangeMove>> PlanMovesFrom(const wire::ShardMap& map, int source,
                                                     const std::set<int>& serving);

// Whether `server` holds any range or bucket in `map`.
bool HoldsAnything(const wire::ShardMap& map, int server);

// Edits `map`'s ranges (not its version) as move `m` does: the range of
// m.source ending at m.end is cut at m.begin and [m.begin, m.end) given to
// m.destination (the whole range when m.begin is its first key); of a sparse
// table, every bucket in [m.begin, m.end) that m.source holds goes to
// m.destination.
// FailedPrecondition if the map has no such range or bucket (it is then
// unchanged).
Status ApplyMove(wire::ShardMap* map, const wire::RangeMove& m);

// Whether `map` already gives [m.begin, m.end) of m.table to m.destination
// (of a sparse table: m.source holds no bucket in it, m.destination one).
bool MoveApplied(const wire::ShardMap& map, const wire::RangeMove& m);

// ---- Moves of replicated ranges (chains; docs/elastic.md "Chains") ----
// A move of a range replicated on a chain moves one replica: the whole range
// [m.begin, m.end), m.source leaves its chain and m.destination joins it as
// tail (the other members keep their order). It runs in two map edits:
// ExtendChain (the destination joins as tail and receives the state from its
// predecessor), then SpliceSource (the source leaves).

// Whether `m` is a move of a chained range of `map` (a dense range with a
// chain whose keys are exactly [m.begin, m.end)).
bool IsChainMove(const wire::ShardMap& map, const wire::RangeMove& m);
// Appends m.destination to the chain of [m.begin, m.end) (nothing if it is
// a member already). FailedPrecondition if no such chained range exists.
Status ExtendChain(wire::ShardMap* map, const wire::RangeMove& m);
// Removes m.source from that chain (nothing if it is no member); the next
// member heads it if the source did. FailedPrecondition if no such chained
// range exists or the chain would hold no other member.
Status SpliceSource(wire::ShardMap* map, const wire::RangeMove& m);
// Removes m.destination from that chain (a failed move taken back).
Status RetractDestination(wire::ShardMap* map, const wire::RangeMove& m);
// The chain of [m.begin, m.end) of m.table (empty if there is none).
std::vector<int> ChainOf(const wire::ShardMap& map, const wire::RangeMove& m);

}  // namespace coordinator_internal
}  // namespace relaxps

#endif  // RELAXPS_COORDINATOR_RANGE_PLAN_H_
