// AppliedRecords: a server's applied record (wire::AppliedRecord) kept with
// its state: which pushes, per worker incarnation, the state reflects.
//
// Owns the store table the record lives in (applied_ledger.h:
// OpenAppliedRecord), the ledgers of the sparse tables held whole (without
// a chain: a dense range's and a chain bucket's ledger live in their
// RangeState), and the seq of the newest checkpoint whose state this server
// captured (push replies carry it, Header.snapshot_seq).
//
// Save writes every unit's ledger into the store before a flush or a
// checkpoint, so the flushed or checkpointed state carries the record of
// what it reflects; Restore loads the record the store opened with (a
// reopened data dir, a restored checkpoint) into the units the first map
// created. The server names its units (it owns them); this object decides
// what the record holds and where each part of it goes.
//
// Invariants: snapshot_seq() only grows after Open(); a record saved for a
// flush keeps snapshot_seq() (a server reopened from its own data dir still
// knows the newest checkpoint it took); a sparse table's ledger, once made,
// lives as long as this object.
//
// Thread-safety: not synchronized; the server's loop thread.
#ifndef RELAXPS_SERVER_INTERNAL_APPLIED_RECORDS_H_
#define RELAXPS_SERVER_INTERNAL_APPLIED_RECORDS_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "server/internal/applied_ledger.h"
#include "storage/param_store.h"

namespace relaxps {
namespace server_internal {

class AppliedRecords {
 public:
  // Push ids a sparse table's ledger keeps per worker incarnation.
  explicit AppliedRecords(size_t sparse_window) : sparse_window_(sparse_window) {}
  AppliedRecords(const AppliedRecords&) = delete;
  AppliedRecords& operator=(const AppliedRecords&) = delete;

  // Opens (or creates) the record's table in `store` (which outlives this)
  // and reads the checkpoint seq the stored record was saved for
  // (snapshot_seq()). Corruption if the table holds no record.
  Status Open(ParamStore* store);
  bool is_open() const { return table_ != nullptr; }

  // The newest checkpoint whose state this server captured (0: none).
  uint64_t snapshot_seq() const { return snapshot_seq_; }
  // Checkpoint `seq` captured the state now.
  void Captured(uint64_t seq) { snapshot_seq_ = std::max(snapshot_seq_, seq); }

  // The ledger of sparse table `name` held whole (made on first use).
  AppliedLedger* SparseLedger(const std::string& name);
  // Same, nullptr if none was made yet.
  AppliedLedger* FindSparseLedger(const std::string& name);
  // Adds the sparse tables' part counts to `counts`, by (worker, incarnation).
  void AddSparseCounts(std::map<std::pair<int, uint64_t>, uint64_t>* counts) const;

  // A unit of the server's state, as the record names it: a dense range
  // (`key` its first key) or a chain's sparse bucket (`bucket`, `key` its
  // number). Sparse tables held whole are this object's own.
  struct Unit {
    std::string table;
    uint64_t key = 0;
    bool bucket = false;
    const AppliedLedger* ledger = nullptr;
  };
  // Writes the ledgers of `units` and of the sparse tables into the record's
  // table, for the store's next flush or checkpoint. `checkpoint_seq`: the
  // checkpoint it is saved for (0: a flush; the record keeps snapshot_seq()).
  // OK without doing anything before Open().
  Status Save(uint64_t checkpoint_seq, const std::vector<Unit>& units);

  // Where a stored unit's entries go. `find_bucket`: the ledger of a chain
  // bucket held here (nullptr: no longer held); a bucket of a table
  // `is_sparse` names goes to that table's own ledger. `find_dense`: the
  // ledgers of the dense ranges held here that overlap keys [begin, end),
  // in key order.
  struct Targets {
    std::function<bool(const std::string& table)> is_sparse;
    std::function<AppliedLedger*(const std::string& table, uint64_t bucket)> find_bucket;
    std::function<std::vector<AppliedLedger*>(const std::string& table, uint64_t begin,
                                              uint64_t end)>
        find_dense;
  };
  // Loads the record the store opened with; returns how many units it
  // restored. A saved dense range's entries go to every range held now
  // that has some of its keys (a checkpoint taken before a range move: the
  // map may give this server part of a saved range, or a range spanning
  // several): each gets its push ids, so a push it reflects is not applied
  // again when resent, and the first its part counts. A saved range counts
  // as reaching up to the next saved range of its table. OK (0) before
  // Open().
  StatusOr<size_t> Restore(const Targets& targets);

 private:
  const size_t sparse_window_;
  ParamStore* store_ = nullptr;
  DenseShard* table_ = nullptr;
  uint64_t snapshot_seq_ = 0;
  std::map<std::string, AppliedLedger> sparse_;
};

}  // namespace server_internal
}  // namespace relaxps

#endif  // RELAXPS_SERVER_INTERNAL_APPLIED_RECORDS_H_
