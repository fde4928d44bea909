// AppliedLedger: the exactly-once record and the counts of one replicated
// unit's state (a dense range, a sparse table or a chain's sparse bucket).
//
// Per worker incarnation it keeps the push ids of the newest `window` push
// parts applied to the unit (with the chain sequence each got; 0 without a
// chain) and how many push parts the unit's state reflects. A push resent
// with the same key (worker, incarnation, push id): after a failover to a new
// head, by a stateless worker switching back, or replayed from a worker's log
// into a server restored from a checkpoint, is recognized and acknowledged
// without being applied again. The ledger is part of the unit's state: it
// travels with a chain state transfer (ChainSnapshot.dedup) and is saved in
// the server's store, so in its checkpoints, with every flush and checkpoint
// (SaveAppliedRecord), so a restored server reports and dedupes against the
// state it restored, not the one it lost.
//
// Thread-safety: not synchronized; the server's loop thread only.
#ifndef RELAXPS_SERVER_INTERNAL_APPLIED_LEDGER_H_
#define RELAXPS_SERVER_INTERNAL_APPLIED_LEDGER_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "common/status.h"
#include "proto/relaxps.pb.h"
#include "storage/param_store.h"

namespace relaxps {
namespace server_internal {

class AppliedLedger {
 public:
  // Push ids kept per worker incarnation (the newest `window`).
  explicit AppliedLedger(size_t window) : window_(window) {}

  // The chain sequence at which (worker, incarnation, push_id) was applied
  // (1 without a chain), or 0 if it was not. Ids older than every kept one
  // of a full window, or below a restored record's cut, count as applied
  // (returns 1: applied long ago). push_id 0 (no key): 0.
  uint64_t Find(int worker, uint64_t incarnation, uint64_t push_id) const;
  // A push part of the worker incarnation was applied (at chain sequence
  // `seq`; 0 without a chain): counts it and, with a push id, records it.
  void Record(int worker, uint64_t incarnation, uint64_t push_id, uint64_t seq);
  // Records an id (at `seq`) without counting a part (ChainReplica's record).
  void RecordId(int worker, uint64_t incarnation, uint64_t push_id, uint64_t seq);
  // A push part of the worker incarnation was accepted (at chain sequence
  // `seq`) into the BSP round of `clock`, which is not applied yet: Find
  // knows it (a resend is a duplicate) and IsPending says so; it is counted
  // and recorded as applied by the first SettleBelow above `clock`.
  // `counted` false: the id only (RecordId at settle), for a range that is
  // not the first of a request spanning several ranges of this server (the
  // request is one part, counted once).
  void RecordPending(int worker, uint64_t incarnation, uint64_t push_id, uint64_t seq,
                     int64_t clock, bool counted = true);
  // The rounds below `clock` are applied: their pending parts are recorded
  // (Record) in round order.
  void SettleBelow(int64_t clock);
  // Whether (worker, incarnation, push_id) is pending (RecordPending, not
  // settled). push_id 0: false.
  bool IsPending(int worker, uint64_t incarnation, uint64_t push_id) const;
  // Pending counted parts (all worker incarnations).
  size_t pending_parts() const;

  // Appends one entry per worker incarnation (ids ascending, each with its
  // seq when `with_seqs`; at most `max_ids` newest ids each, the cut noted
  // in applied_below; 0: all). Pending parts are left out, unless
  // `include_pending` (a chain state transfer, whose snapshot carries the
  // pending rounds): then they are saved as applied (ids and counts).
  void Save(google::protobuf::RepeatedPtrField<wire::DedupEntry>* out, size_t max_ids,
            bool with_seqs, bool include_pending = false) const;
  // Replaces the ledger with saved entries (nothing pending).
  void Load(const google::protobuf::RepeatedPtrField<wire::DedupEntry>& in);
  // Adds saved entries to the ledger: their push ids (a cut record's
  // applied_below too) and, with `with_parts`, their part counts. A range
  // restored from several saved ranges, or from part of one, takes each's
  // ids, and its counts from only one range (they must not count twice).
  void Merge(const google::protobuf::RepeatedPtrField<wire::DedupEntry>& in, bool with_parts);
  // Adds a range move's record to a ledger that may hold other pushes: their
  // ids are recorded (at their seqs) and their part counts added; their
  // applied_below is not (it would cover this ledger's other pushes).
  void MergeMoved(const google::protobuf::RepeatedPtrField<wire::DedupEntry>& in);
  // Sets every part count to 0, ids kept (a range move took the counts along).
  void ClearCounts();
  // Adds this ledger's part counts to `counts`, by (worker, incarnation).
  void AddCounts(std::map<std::pair<int, uint64_t>, uint64_t>* counts) const;
  bool empty() const { return entries_.empty(); }

 private:
  struct Entry {
    std::map<uint64_t, uint64_t> ids;  // push id -> seq, the newest window_.
    uint64_t parts = 0;
    uint64_t applied_below = 0;  // From a cut record: ids below count as applied.
    std::map<uint64_t, uint64_t> pending;  // Pending push id -> seq.
  };
  struct PendingPart {
    int worker;
    uint64_t incarnation;
    uint64_t push_id;  // 0: none (counted only).
    uint64_t seq;
    bool counted;  // Counted as a part at settle (else only its id recorded).
  };
  size_t window_;
  std::map<std::pair<int, uint64_t>, Entry> entries_;  // (worker, incarnation).
  std::multimap<int64_t, PendingPart> pending_;  // Round clock -> its pending parts.
};

// The store table holding a server's AppliedRecord (one per server, in every
// flush and checkpoint of its store): a dense table of this many floats, the
// serialized record's length (8 bytes) and bytes packed into them.
inline constexpr const char* kAppliedRecordTable = "relaxps#applied";
inline constexpr uint64_t kAppliedRecordFloats = uint64_t{1} << 18;  // 1 MiB.

// Creates (or opens: a restored or reopened store) the record's table.
StatusOr<DenseShard*> OpenAppliedRecord(ParamStore* store);
// Writes `record` into the table (BeforeDenseWrite / DenseUpdated), so the
// next Flush or Checkpoint of the store persists it with the state. A record
// too big for the table is cut (fewer ids per incarnation; applied_below
// notes each cut) until it fits.
Status SaveAppliedRecord(ParamStore* store, DenseShard* table, wire::AppliedRecord record);
// The record the table holds (empty for a new table). Corruption if it is
// not a record.
StatusOr<wire::AppliedRecord> LoadAppliedRecord(const DenseShard& table);

}  // namespace server_internal
}  // namespace relaxps

#endif  // RELAXPS_SERVER_INTERNAL_APPLIED_LEDGER_H_
