#include "server/internal/applied_ledger.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <vector>

#include <glog/logging.h>

namespace relaxps {
namespace server_internal {

uint64_t AppliedLedger::Find(int worker, uint64_t incarnation, uint64_t push_id) const {
  if (push_id == 0) return 0;
  auto it = entries_.find({worker, incarnation});
  if (it == entries_.end()) return 0;
  const Entry& e = it->second;
  auto found = e.ids.find(push_id);
  if (found != e.ids.end()) return std::max<uint64_t>(found->second, 1);
  auto pending = e.pending.find(push_id);
  if (pending != e.pending.end()) return std::max<uint64_t>(pending->second, 1);
  if (push_id < e.applied_below) return 1;
  if (e.ids.size() >= window_ && push_id < e.ids.begin()->first) return 1;
  return 0;
}

void AppliedLedger::RecordId(int worker, uint64_t incarnation, uint64_t push_id, uint64_t seq) {
  Entry& e = entries_[{worker, incarnation}];
  if (push_id == 0) return;
  e.ids[push_id] = seq;
  while (e.ids.size() > window_) e.ids.erase(e.ids.begin());
}

void AppliedLedger::Record(int worker, uint64_t incarnation, uint64_t push_id, uint64_t seq) {
  RecordId(worker, incarnation, push_id, seq);
  ++entries_[{worker, incarnation}].parts;
}

void AppliedLedger::RecordPending(int worker, uint64_t incarnation, uint64_t push_id,
                                  uint64_t seq, int64_t clock, bool counted) {
  Entry& e = entries_[{worker, incarnation}];
  if (push_id != 0) e.pending[push_id] = seq;
  // Nothing to settle for an uncounted part without a key.
  if (!counted && push_id == 0) return;
  pending_.emplace(clock, PendingPart{worker, incarnation, push_id, seq, counted});
}

void AppliedLedger::SettleBelow(int64_t clock) {
  while (!pending_.empty() && pending_.begin()->first < clock) {
    const PendingPart p = pending_.begin()->second;
    pending_.erase(pending_.begin());
    if (p.push_id != 0) entries_[{p.worker, p.incarnation}].pending.erase(p.push_id);
    if (p.counted) {
      Record(p.worker, p.incarnation, p.push_id, p.seq);
    } else {
      RecordId(p.worker, p.incarnation, p.push_id, p.seq);
    }
  }
}

bool AppliedLedger::IsPending(int worker, uint64_t incarnation, uint64_t push_id) const {
  if (push_id == 0) return false;
  auto it = entries_.find({worker, incarnation});
  return it != entries_.end() && it->second.pending.count(push_id) > 0;
}

size_t AppliedLedger::pending_parts() const {
  return static_cast<size_t>(std::count_if(pending_.begin(), pending_.end(),
                                           [](const auto& p) { return p.second.counted; }));
}

void AppliedLedger::Save(google::protobuf::RepeatedPtrField<wire::DedupEntry>* out,
                         size_t max_ids, bool with_seqs, bool include_pending) const {
  // Pending parts counted per incarnation (include_pending).
  std::map<std::pair<int, uint64_t>, uint64_t> pending_parts;
  if (include_pending) {
    for (const auto& [clock, p] : pending_) {
      if (p.counted) ++pending_parts[{p.worker, p.incarnation}];
    }
  }
  for (const auto& [key, entry] : entries_) {
    std::map<uint64_t, uint64_t> merged;
    const std::map<uint64_t, uint64_t>* ids = &entry.ids;
    if (include_pending && !entry.pending.empty()) {
      merged = entry.ids;
      merged.insert(entry.pending.begin(), entry.pending.end());
      ids = &merged;
    }
    auto counted = pending_parts.find(key);
    const uint64_t parts = entry.parts + (counted == pending_parts.end() ? 0 : counted->second);
    // An incarnation with only pending parts: nothing the state reflects.
    if (ids->empty() && parts == 0 && entry.applied_below == 0) continue;
    wire::DedupEntry* d = out->Add();
    d->set_worker(key.first);
    d->set_incarnation(key.second);
    d->set_parts(parts);
    uint64_t below = entry.applied_below;
    auto from = ids->begin();
    if (max_ids > 0 && ids->size() > max_ids) {
      std::advance(from, ids->size() - max_ids);
      below = std::max(below, from->first);
    } else if (ids->size() >= window_ && !ids->empty()) {
      // A full window: what is older counts as applied, after a load too.
      below = std::max(below, ids->begin()->first);
    }
    d->set_applied_below(below);
    for (auto it = from; it != ids->end(); ++it) {
      d->add_push_ids(it->first);
      if (with_seqs) d->add_seqs(it->second);
    }
  }
}

void AppliedLedger::Load(const google::protobuf::RepeatedPtrField<wire::DedupEntry>& in) {
  entries_.clear();
  pending_.clear();
  Merge(in, /*with_parts=*/true);
}

void AppliedLedger::Merge(const google::protobuf::RepeatedPtrField<wire::DedupEntry>& in,
                          bool with_parts) {
  for (const wire::DedupEntry& d : in) {
    Entry& e = entries_[{d.worker(), d.incarnation()}];
    if (with_parts) e.parts += d.parts();
    e.applied_below = std::max(e.applied_below, d.applied_below());
    for (int i = 0; i < d.push_ids_size(); ++i) {
      e.ids[d.push_ids(i)] = i < d.seqs_size() ? d.seqs(i) : 0;
    }
    while (e.ids.size() > window_) e.ids.erase(e.ids.begin());
  }
}

void AppliedLedger::MergeMoved(const google::protobuf::RepeatedPtrField<wire::DedupEntry>& in) {
  for (const wire::DedupEntry& d : in) {
    Entry& e = entries_[{d.worker(), d.incarnation()}];
    e.parts += d.parts();
    for (int i = 0; i < d.push_ids_size(); ++i) {
      e.ids[d.push_ids(i)] = i < d.seqs_size() ? d.seqs(i) : 0;
    }
    while (e.ids.size() > window_) e.ids.erase(e.ids.begin());
  }
}

void AppliedLedger::ClearCounts() {
  for (auto& [key, e] : entries_) e.parts = 0;
}

void AppliedLedger::AddCounts(std::map<std::pair<int, uint64_t>, uint64_t>* counts) const {
  for (const auto& [key, e] : entries_) (*counts)[key] += e.parts;
}

StatusOr<DenseShard*> OpenAppliedRecord(ParamStore* store) {
  DenseShardSpec spec;
  spec.table = kAppliedRecordTable;
  spec.begin = 0;
  spec.end = kAppliedRecordFloats;
  spec.num_slots = 1;  // Zeros: an empty record.
  return store->CreateDense(spec);
}

Status SaveAppliedRecord(ParamStore* store, DenseShard* table, wire::AppliedRecord record) {
  const size_t capacity = kAppliedRecordFloats * sizeof(float) - sizeof(uint64_t);
  std::string bytes = record.SerializeAsString();
  for (int cut = 512; bytes.size() > capacity && cut >= 1; cut /= 2) {
    // Keep the newest `cut` ids of every incarnation; older ones count as
    // applied (applied_below).
    for (wire::AppliedRecord::Unit& u : *record.mutable_units()) {
      for (wire::DedupEntry& d : *u.mutable_entries()) {
        const int n = d.push_ids_size();
        if (n <= cut) continue;
        std::vector<uint64_t> keep(d.push_ids().begin() + (n - cut), d.push_ids().end());
        d.set_applied_below(std::max(d.applied_below(), keep.front()));
        d.clear_push_ids();
        d.clear_seqs();
        for (uint64_t id : keep) d.add_push_ids(id);
      }
    }
    bytes = record.SerializeAsString();
  }
  if (bytes.size() > capacity) {
    return FailedPreconditionError("the applied record (" + std::to_string(bytes.size()) +
                                  " bytes) does not fit its store table");
  }
  store->BeforeDenseWrite(table);
  char* out = reinterpret_cast<char*>(table->slots[0]);
  const uint64_t size = bytes.size();
  // The old record's tail may stay: the length says where this one ends.
  std::memcpy(out, &size, sizeof(size));
  std::memcpy(out + sizeof(size), bytes.data(), bytes.size());
  const size_t floats = (sizeof(size) + bytes.size() + sizeof(float) - 1) / sizeof(float);
  return store->DenseUpdated(table, 0, floats);
}

StatusOr<wire::AppliedRecord> LoadAppliedRecord(const DenseShard& table) {
  wire::AppliedRecord record;
  if (table.slots.empty() || table.size() * sizeof(float) < sizeof(uint64_t)) return record;
  const char* in = reinterpret_cast<const char*>(table.slots[0]);
  uint64_t size = 0;
  std::memcpy(&size, in, sizeof(size));
  if (size == 0) return record;
  if (size > table.size() * sizeof(float) - sizeof(size) ||
      !record.ParseFromArray(in + sizeof(size), static_cast<int>(size))) {
    return CorruptionError(std::string("table '") + kAppliedRecordTable +
                           "' holds no applied record");
  }
  return record;
}

}  // namespace server_internal
}  // namespace relaxps
