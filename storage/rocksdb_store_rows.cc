// RocksDbStore: sparse rows behind the LRU RowCache (see rocksdb_store.cc for
// the durability design).
#include <cstring>
#include <memory>
#include <unordered_set>
#include <vector>

#include <glog/logging.h>
#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include "storage/internal/rocksdb_store_impl.h"
#include "storage/internal/rocksdb_util.h"
#include "storage/internal/spec_util.h"

namespace relaxps {
namespace storage_internal {
namespace {

rocksdb::Slice FloatSlice(const float* p, size_t n) {
  return rocksdb::Slice(reinterpret_cast<const char*>(p), n * sizeof(float));
}

}  // namespace

void RocksDbStore::QueueSparseRecord(SparseTable* t) {
  if (t->record_pending) return;
  t->record_pending = true;
  wal_pending_sparse_.push_back(t);
}

StatusOr<RocksDbStore::SparseTable*> RocksDbStore::FindSparse(const std::string& table) {
  auto it = sparse_.find(table);
  if (it == sparse_.end()) return NotFoundError("no sparse table '" + table + "'");
  return it->second.get();
}

StatusOr<RowCache::Entry*> RocksDbStore::FetchRow(const SparseTable& t, uint64_t row) {
  if (RowCache::Entry* e = cache_.Lookup(t.id, row)) return e;
  if (t.rows_all_cached) return nullptr;
  const size_t rf = t.spec.row_floats();
  rocksdb::PinnableSlice value;
  bool found = false;
  // Staged rows are newer than committed ones; only written without WAL mode.
  for (char prefix : {kStagedPrefix, kRowPrefix}) {
    if (prefix == kStagedPrefix && options_.wal_per_update) continue;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), db_->DefaultColumnFamily(),
                                 RowKey(prefix, t.id, row), &value);
    if (s.ok()) {
      found = true;
      break;
    }
    if (!s.IsNotFound()) {
      return FromRocks(s, "cannot read row " + std::to_string(row) + " of '" + t.spec.table +
                              "' in " + Where());
    }
  }
  if (!found) return nullptr;
  if (value.size() != rf * sizeof(float)) {
    return CorruptionError("row " + std::to_string(row) + " of '" + t.spec.table + "' in " +
                           Where() + " has " + std::to_string(value.size()) + " bytes, expected " +
                           std::to_string(rf * sizeof(float)));
  }
  RowCache::Entry* e = cache_.Insert(t.id, row, rf);
  std::memcpy(e->data.get(), value.data(), value.size());
  return e;
}

Status RocksDbStore::EvictIfNeeded() {
  if (!cache_.OverBudget()) return Status::OK();
  // Group commit: rows queued for the WAL reach the disk before their cache
  // entries may go.
  RETURN_IF_ERROR(WritePendingWal());
  const size_t budget = cache_.budget_bytes();
  std::vector<const RowCache::Entry*> victims = cache_.Victims(budget - budget / 16);
  rocksdb::WriteBatch batch;
  for (const RowCache::Entry* e : victims) {
    if (!e->dirty) continue;
    DCHECK(!options_.wal_per_update) << "dirty row in wal_per_update mode";
    batch.Put(RowKey(kStagedPrefix, e->table_id, e->row), FloatSlice(e->data.get(), e->floats));
  }
  if (batch.Count() > 0) {
    RETURN_IF_ERROR(Write(&batch, /*wal=*/false, /*sync=*/false, "write back evicted rows"));
    staged_rows_ = true;
  }
  for (const RowCache::Entry* e : victims) {
    for (auto& [name, t] : sparse_) {
      if (t->id == e->table_id) t->rows_all_cached = false;
    }
  }
  cache_.PopLru(victims.size());
  return Status::OK();
}

Status RocksDbStore::StageDirtyRows() {
  std::vector<RowCache::Entry*> dirty;
  cache_.ForEachDirty([&](RowCache::Entry& e) { dirty.push_back(&e); });
  rocksdb::WriteBatch batch;
  size_t first = 0;
  for (size_t i = 0; i < dirty.size(); ++i) {
    const RowCache::Entry* e = dirty[i];
    batch.Put(RowKey(kStagedPrefix, e->table_id, e->row), FloatSlice(e->data.get(), e->floats));
    if (batch.GetDataSize() >= kBatchBytes || i + 1 == dirty.size()) {
      RETURN_IF_ERROR(Write(&batch, false, false, "stage dirty rows"));
      staged_rows_ = true;
      for (; first <= i; ++first) dirty[first]->dirty = false;
      batch.Clear();
    }
  }
  return Status::OK();
}

Status RocksDbStore::DoPeekRows(const std::string& table, const uint64_t* ids, size_t n,
                                float* out) {
  ASSIGN_OR_RETURN(SparseTable * t, FindSparse(table));
  if (n > 0 && (ids == nullptr || out == nullptr)) {
    return InvalidArgumentError("PeekRows: null ids or output");
  }
  const size_t rf = t->spec.row_floats();
  for (size_t i = 0; i < n; ++i) {
    ASSIGN_OR_RETURN(RowCache::Entry * e, FetchRow(*t, ids[i]));
    if (e == nullptr) {
      InitRow(t->spec, ids[i], out + i * rf);
      continue;
    }
    std::memcpy(out + i * rf, e->data.get(), rf * sizeof(float));
    RETURN_IF_ERROR(EvictIfNeeded());
  }
  return Status::OK();
}

Status RocksDbStore::DoSparseRowIds(const std::string& table, std::vector<uint64_t>* ids) {
  ASSIGN_OR_RETURN(SparseTable * t, FindSparse(table));
  std::unordered_set<uint64_t> seen;
  cache_.ForEach([&](const RowCache::Entry& e) {
    if (e.table_id == t->id && seen.insert(e.row).second) ids->push_back(e.row);
  });
  for (char prefix : {kRowPrefix, kStagedPrefix}) {
    const std::string lo = RowKey(prefix, t->id, 0);
    const std::string hi = RowKey(prefix, t->id + 1, 0);
    rocksdb::Slice upper(hi);
    rocksdb::ReadOptions ro;
    ro.iterate_upper_bound = &upper;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
    for (it->Seek(lo); it->Valid(); it->Next()) {
      uint32_t table_id = 0;
      uint64_t row = 0;
      if (!ParseRowKey(it->key().ToString(), &table_id, &row) || table_id != t->id) {
        return CorruptionError("malformed row key of '" + table + "' in " + Where());
      }
      if (seen.insert(row).second) ids->push_back(row);
    }
    RETURN_IF_ERROR(
        FromRocks(it->status(), "cannot list the rows of '" + table + "' in " + Where()));
  }
  return Status::OK();
}

Status RocksDbStore::DoReadRows(const std::string& table, const uint64_t* ids, size_t n,
                                float* out) {
  ASSIGN_OR_RETURN(SparseTable * t, FindSparse(table));
  if (n > 0 && (ids == nullptr || out == nullptr)) {
    return InvalidArgumentError("ReadRows: null ids or output");
  }
  const size_t rf = t->spec.row_floats();
  const bool group = options_.wal_per_update && options_.wal_group_commit;
  if (!options_.wal_per_update || group) {
    // First touch creates a row, dirty: without the WAL until the next
    // Flush. Group commit: a created row needs no sync (a lost one is
    // recreated identically); dirty means not in the group's batch yet, and
    // WritePendingWal queues the created rows that no WriteRows rewrote
    // meanwhile (an update right after the read, the usual case, writes the
    // row once).
    for (size_t i = 0; i < n; ++i) {
      ASSIGN_OR_RETURN(RowCache::Entry * e, FetchRow(*t, ids[i]));
      if (e == nullptr) {
        e = cache_.Insert(t->id, ids[i], rf);
        InitRow(t->spec, ids[i], e->data.get());
        e->dirty = true;
        ++t->num_rows;
        if (group) {
          wal_created_rows_.push_back({t->id, ids[i]});
          QueueSparseRecord(t);
        }
      }
      std::memcpy(out + i * rf, e->data.get(), rf * sizeof(float));
      RETURN_IF_ERROR(EvictIfNeeded());
    }
    return Status::OK();
  }
  // wal_per_update: new rows are written through the WAL (no sync) before
  // they are cached, so the cache never holds dirty rows.
  rocksdb::WriteBatch batch;
  std::vector<size_t> created;
  std::unordered_set<uint64_t> created_ids;
  for (size_t i = 0; i < n; ++i) {
    if (created_ids.count(ids[i])) {
      InitRow(t->spec, ids[i], out + i * rf);
      continue;
    }
    ASSIGN_OR_RETURN(RowCache::Entry * e, FetchRow(*t, ids[i]));
    if (e != nullptr) {
      std::memcpy(out + i * rf, e->data.get(), rf * sizeof(float));
      RETURN_IF_ERROR(EvictIfNeeded());
      continue;
    }
    InitRow(t->spec, ids[i], out + i * rf);
    batch.Put(RowKey(kRowPrefix, t->id, ids[i]), FloatSlice(out + i * rf, rf));
    created_ids.insert(ids[i]);
    created.push_back(i);
  }
  if (created.empty()) return Status::OK();
  PutSparseMeta(*t, t->num_rows + created.size(), &batch);
  RETURN_IF_ERROR(Write(&batch, /*wal=*/true, /*sync=*/false, "create rows"));
  t->num_rows += created.size();
  for (size_t i : created) {
    RowCache::Entry* e = cache_.Insert(t->id, ids[i], rf);
    std::memcpy(e->data.get(), out + i * rf, rf * sizeof(float));
    RETURN_IF_ERROR(EvictIfNeeded());
  }
  return Status::OK();
}

Status RocksDbStore::DoWriteRows(const std::string& table, const uint64_t* ids, size_t n,
                                 const float* rows) {
  ASSIGN_OR_RETURN(SparseTable * t, FindSparse(table));
  if (n > 0 && (ids == nullptr || rows == nullptr)) {
    return InvalidArgumentError("WriteRows: null ids or rows");
  }
  const size_t rf = t->spec.row_floats();
  const bool group = options_.wal_per_update && options_.wal_group_commit;
  if (!options_.wal_per_update || group) {
    // Without the WAL the rows stay dirty in the cache until the next Flush.
    // Group commit: they join the group's batch, written and synced by
    // SyncWal (the caller acknowledges after it); meanwhile the cache holds
    // them.
    for (size_t i = 0; i < n; ++i) {
      ASSIGN_OR_RETURN(RowCache::Entry * e, FetchRow(*t, ids[i]));
      if (e == nullptr) {
        e = cache_.Insert(t->id, ids[i], rf);
        ++t->num_rows;
      }
      std::memcpy(e->data.get(), rows + i * rf, rf * sizeof(float));
      if (group) {
        wal_pending_rows_.Put(RowKey(kRowPrefix, t->id, ids[i]), FloatSlice(rows + i * rf, rf));
        wal_unsynced_ = true;
      }
      e->dirty = !group;  // Group commit: in the batch, so no longer a created row to queue.
      RETURN_IF_ERROR(EvictIfNeeded());
    }
    if (group) QueueSparseRecord(t);
    return Status::OK();
  }
  // wal_per_update: one synced batch with every row and the row count; the
  // cache is updated only once the batch is durable.
  rocksdb::WriteBatch batch;
  std::unordered_set<uint64_t> new_ids;
  for (size_t i = 0; i < n; ++i) {
    if (!new_ids.count(ids[i])) {
      ASSIGN_OR_RETURN(RowCache::Entry * e, FetchRow(*t, ids[i]));
      if (e == nullptr) new_ids.insert(ids[i]);
      RETURN_IF_ERROR(EvictIfNeeded());
    }
    batch.Put(RowKey(kRowPrefix, t->id, ids[i]), FloatSlice(rows + i * rf, rf));
  }
  PutSparseMeta(*t, t->num_rows + new_ids.size(), &batch);
  RETURN_IF_ERROR(Write(&batch, /*wal=*/true, /*sync=*/true, "write rows"));
  t->num_rows += new_ids.size();
  for (size_t i = 0; i < n; ++i) {
    RowCache::Entry* e = cache_.Lookup(t->id, ids[i]);
    if (e == nullptr) e = cache_.Insert(t->id, ids[i], rf);
    std::memcpy(e->data.get(), rows + i * rf, rf * sizeof(float));
    RETURN_IF_ERROR(EvictIfNeeded());
  }
  return Status::OK();
}

}  // namespace storage_internal
}  // namespace relaxps
