// Dense ranges of a restored checkpoint that no longer match the map
// (docs/elastic.md, "Restoring a checkpoint taken before a move").
//
// A server's store shards are named by the range they hold (the table's
// name for the range of the job's first placement, "t@begin-end" for any
// other), and each keeps its spec, step and clock. A checkpoint taken before
// a range move holds the ranges of that time: restored after the move, the
// range the map now gives the server may be a part of one of them (the head
// a split left on its source) or span several. AssembleRestoredRange builds
// the store shard of the range the map gives from the restored shards that
// cover its keys, so that the server serves it with the checkpoint's state.
//
// Thread-safety: a function of the store; the caller serializes use of it
// (the server's loop thread, or Init()).
#ifndef RELAXPS_SERVER_INTERNAL_RESTORED_RANGES_H_
#define RELAXPS_SERVER_INTERNAL_RESTORED_RANGES_H_

#include <string>

#include "common/status.h"
#include "storage/param_store.h"

namespace relaxps {
namespace server_internal {

// `target` (table `target.table` is its store name) is a range of dense
// table `table` that `store` (opened on a restored checkpoint) has no shard
// of. Creates it from the restored shards of `table` overlapping its keys,
// the newest (highest clock) first where two overlap, each key's every slot
// copied, with their common step and clock, and marks it written (the next
// flush persists it).
//
// Returns OK having created nothing if the store holds no shard of `table`
// (a table created after the checkpoint starts from its initializer).
// FailedPrecondition, naming the keys, if the shards leave keys of the
// target uncovered (they were on another server when the checkpoint was
// taken: that server's part has them, which this server does not read), or
// if the shards it would combine disagree on their step or clock (an
// optimizer's bias correction cannot be split), or have another slot count.
Status AssembleRestoredRange(ParamStore* store, const std::string& table,
                             const DenseShardSpec& target);

}  // namespace server_internal
}  // namespace relaxps

#endif  // RELAXPS_SERVER_INTERNAL_RESTORED_RANGES_H_
