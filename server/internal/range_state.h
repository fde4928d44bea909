// RangeState: one unit of state a server holds and (under chain
// replication) replicates: a dense key range, or under chain replication one
// sparse hash bucket. The server's data path owns the dense ranges
// (ServerImpl), ChainReplication (chain_replication.h) the sparse buckets and
// the chain fields of every unit.
//
// Thread-safety: none; used on the server's loop thread only.
#ifndef RELAXPS_SERVER_INTERNAL_RANGE_STATE_H_
#define RELAXPS_SERVER_INTERNAL_RANGE_STATE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "server/internal/applied_ledger.h"
#include "server/internal/chain_replica.h"
#include "server/internal/dense_shard.h"
#include "server/internal/sparse_bucket.h"
#include "server/internal/state_transfer.h"

namespace relaxps {
namespace server_internal {

// One dense key range held by this server, or under chain replication one
// sparse hash bucket (a replicated unit either way).
struct RangeState {
  std::unique_ptr<DenseShardState> shard;    // Dense ranges (else null).
  std::unique_ptr<SparseBucketState> bucket;  // Sparse buckets (else null).
  std::string table;
  // Dense: the range's first key; sparse: the bucket index. Chain messages
  // of the unit carry it as key_begin.
  uint64_t key = 0;
  // Chain replication only (null otherwise).
  std::unique_ptr<ChainReplica> chain;
  std::vector<int> members;  // Current chain, head first.
  // State transfer to the successor in progress (updates are held back
  // until it completes), and the one being received from the predecessor.
  std::unique_ptr<OutgoingTransfer> outgoing;
  std::unique_ptr<IncomingTransfer> incoming;
  int64_t forwarded_applied_clock = 0;  // BSP: completion last forwarded/applied.
  // The exactly-once record and counts of an unreplicated range (a chain
  // replica keeps its own, replicated: ChainReplica::ledger()).
  AppliedLedger applied{kUnreplicatedWindow};
  // Push ids kept per worker incarnation without a chain.
  static constexpr size_t kUnreplicatedWindow = 4096;

  // The record and counts of this unit's state.
  AppliedLedger* ledger() { return chain != nullptr ? chain->mutable_ledger() : &applied; }
  const AppliedLedger& ledger() const { return chain != nullptr ? chain->ledger() : applied; }
};

// Records the push part `h` just accepted in `ledger` at chain sequence
// `seq` (0 without a chain): as applied, or with `pending` as waiting for
// the BSP round of h.clock() (counted once the round is applied).
// `counted` false: only its id (a range after the first of a request
// spanning several ranges: the request is one part, counted once). A later
// part of a split push (h.push_continues()) is never counted: the client
// counts the push once per server (its first part), and so does the ledger.
inline void RecordPush(AppliedLedger* ledger, const wire::Header& h, uint64_t seq, bool pending,
                       bool counted = true) {
  counted = counted && !h.push_continues();
  if (pending) {
    ledger->RecordPending(h.sender(), h.incarnation(), h.push_id(), seq, h.clock(), counted);
  } else if (counted) {
    ledger->Record(h.sender(), h.incarnation(), h.push_id(), seq);
  } else {
    ledger->RecordId(h.sender(), h.incarnation(), h.push_id(), seq);
  }
}

// Whether the push `h` accepted on `shard` waits for its BSP round.
inline bool PushPending(const DenseShardState& shard, const wire::Header& h) {
  return !(h.raw_delta() && h.type() == wire::PUSH) && !shard.Reflects(h.clock());
}

}  // namespace server_internal
}  // namespace relaxps

#endif  // RELAXPS_SERVER_INTERNAL_RANGE_STATE_H_
