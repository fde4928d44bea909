#include "server/internal/applied_records.h"

#include <algorithm>
#include <limits>
#include <map>
#include <vector>

namespace relaxps {
namespace server_internal {

Status AppliedRecords::Open(ParamStore* store) {
  ASSIGN_OR_RETURN(DenseShard * table, OpenAppliedRecord(store));
  ASSIGN_OR_RETURN(wire::AppliedRecord record, LoadAppliedRecord(*table));
  store_ = store;
  table_ = table;
  snapshot_seq_ = record.checkpoint_seq();
  return Status::OK();
}

AppliedLedger* AppliedRecords::SparseLedger(const std::string& name) {
  return &sparse_.try_emplace(name, sparse_window_).first->second;
}

AppliedLedger* AppliedRecords::FindSparseLedger(const std::string& name) {
  auto it = sparse_.find(name);
  return it == sparse_.end() ? nullptr : &it->second;
}

void AppliedRecords::AddSparseCounts(std::map<std::pair<int, uint64_t>, uint64_t>* counts) const {
  for (const auto& [name, ledger] : sparse_) ledger.AddCounts(counts);
}

Status AppliedRecords::Save(uint64_t checkpoint_seq, const std::vector<Unit>& units) {
  if (table_ == nullptr) return Status::OK();
  wire::AppliedRecord record;
  // A flush keeps the newest checkpoint's seq (the state it reopens with
  // answers pushes with it).
  record.set_checkpoint_seq(checkpoint_seq > 0 ? checkpoint_seq : snapshot_seq_);
  auto add = [&record](const std::string& table, uint64_t key, bool bucket,
                       const AppliedLedger& ledger) {
    if (ledger.empty()) return;
    wire::AppliedRecord::Unit* u = record.add_units();
    u->set_table(table);
    u->set_key(key);
    u->set_bucket(bucket);
    ledger.Save(u->mutable_entries(), /*max_ids=*/0, /*with_seqs=*/false);
  };
  for (const Unit& unit : units) add(unit.table, unit.key, unit.bucket, *unit.ledger);
  for (const auto& [name, ledger] : sparse_) add(name, 0, true, ledger);
  return SaveAppliedRecord(store_, table_, std::move(record));
}

StatusOr<size_t> AppliedRecords::Restore(const Targets& targets) {
  if (table_ == nullptr) return size_t{0};
  ASSIGN_OR_RETURN(wire::AppliedRecord record, LoadAppliedRecord(*table_));
  // The saved dense ranges' first keys by table: where a range saved without
  // its end stops.
  std::map<std::string, std::vector<uint64_t>> firsts;
  for (const wire::AppliedRecord::Unit& u : record.units()) {
    if (!u.bucket()) firsts[u.table()].push_back(u.key());
  }
  for (auto& [table, keys] : firsts) std::sort(keys.begin(), keys.end());
  size_t restored = 0;
  for (const wire::AppliedRecord::Unit& u : record.units()) {
    if (u.bucket()) {
      AppliedLedger* ledger = targets.is_sparse(u.table()) ? SparseLedger(u.table())
                                                           : targets.find_bucket(u.table(), u.key());
      if (ledger == nullptr) continue;  // A unit this server no longer holds.
      ledger->Load(u.entries());
      ++restored;
      continue;
    }
    // A saved range reaches up to the table's next one: no range held here
    // can have keys of the gap between them from this state (a restored
    // range is assembled from this server's own shards, a replica's record
    // comes with its state transfer), and extra ids only name pushes that
    // never touch those keys.
    const std::vector<uint64_t>& keys = firsts[u.table()];
    auto next = std::upper_bound(keys.begin(), keys.end(), u.key());
    const uint64_t end = next != keys.end() ? *next : std::numeric_limits<uint64_t>::max();
    const std::vector<AppliedLedger*> ledgers = targets.find_dense(u.table(), u.key(), end);
    for (size_t i = 0; i < ledgers.size(); ++i) {
      ledgers[i]->Merge(u.entries(), /*with_parts=*/i == 0);
    }
    if (!ledgers.empty()) ++restored;
  }
  return restored;
}

}  // namespace server_internal
}  // namespace relaxps
