// RocksDbStore: the durable ParamStore.
//
// Dense shards are served from aligned in-memory arrays and written to RocksDB
// at Flush() as 64 KiB chunk keys plus a table record with spec, step, clock
// and generations. Only the chunks written since the last flush (DenseUpdated
// marks them in a bitmap) are written, under a new delta generation; once the
// deltas would add up to the table, the flush writes every chunk under a new
// base generation instead. A delta holding every chunk of the older deltas (the
// same part of the model trained again) replaces them instead of adding up:
// they are dropped once it is committed. The flush record, the store metadata
// and every table record go to a second SST file, and both are ingested in one
// atomic IngestExternalFile. The new generation's key range overlaps nothing,
// so its file lands in the bottom level and is never compacted; once a new base
// is in, the older generations are dropped as whole files (see store_format.h).
// Dense data is thus written once per flush, with no WriteBatch, memtable, WAL
// or compaction copy. A table nobody wrote is not written again, so a
// Checkpoint right after a Flush writes no dense data. Sparse rows live in
// RocksDB behind a byte-bounded LRU cache (RowCache), so a table may be much
// larger than cache_mb.
//
// Durability, without wal_per_update: the store on disk is exactly the state
// of the last Flush. Dirty rows evicted between flushes go to "staged" keys
// (see internal/store_format.h) that are not yet committed. Flush stages the
// remaining dirty rows and flushes the memtable, then commits. When there are
// no rows to stage (and no wal_per_update), the commit runs on the store's
// flush thread so the caller's event loop is not stalled: Flush captures the
// table records and returns; the job copies the dirty tables' arrays into
// reused snapshot buffers (writers wait in BeforeDenseWrite until their shard
// is copied), then writes and ingests the snapshot. A Flush while a job runs
// is coalesced into the next one; WaitForFlush, Checkpoint and the destructor
// wait for the job and complete a coalesced Flush synchronously. If rows were
// staged, the flush record says "apply pending" and Flush then moves the
// staged rows to their committed keys; a crash during that move is finished
// on the next open, and staged rows without a pending flush record are
// discarded on open.
//
// With wal_per_update: WriteRows writes the rows to their committed keys
// through the RocksDB WAL with sync=true before returning. Dense updates go
// to the store's own dense log (internal/dense_log.h), never to RocksDB's
// memtable: DenseStepped logs the gradient of an optimizer step (with its
// learning-rate scale, step and clock), DenseUpdated the values a write left
// in every slot, and both mark the chunks dirty as without the WAL; a Flush
// writes the dirty chunks and its table records name the last log record they
// reflect, after which the log starts over from offset 0. Once the log holds
// dense_log_mb, SyncWal flushes on its own. On open, each dense table replays
// its records past its table record's log_seq when it loads, steps through
// the caller's DenseReplay (CreateDenseReplaying), in log order: the state
// that was acknowledged, bit for bit. Cost per update: the gradient once
// (params + momentum: half the bytes of the values they leave) and one
// fdatasync. Rows created by ReadRows are written through the WAL without sync
// (a lost one is recreated identically by the initializer). With
// wal_group_commit nothing is synced per call: the rows (and created rows) are
// queued in one pending WriteBatch and the dense records written to the log
// (the page cache), and SyncWal writes the batch and syncs each log that has
// something new once; until then the cache holds the rows, and an eviction,
// Flush, Checkpoint or close writes the pending batch first.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <glog/logging.h>
#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include "storage/internal/file_util.h"
#include "storage/internal/rocksdb_store_impl.h"
#include "storage/internal/rocksdb_util.h"
#include "storage/internal/spec_util.h"
#include "storage/internal/store_format.h"

namespace relaxps {
namespace storage_internal {

StatusOr<std::unique_ptr<ParamStore>> RocksDbStore::Open(const ParamStoreOptions& options) {
  if (options.data_dir.empty()) {
    return InvalidArgumentError("rocksdb param store needs a data_dir");
  }
  Status created = CreateDirs(DefaultFileSystem(options.file_system.get()), options.data_dir);
  if (!created.ok()) return IOError("cannot create data_dir: " + created.message());

  std::unique_ptr<RocksDbStore> store(new RocksDbStore(options));
  store->ingest_syncs_ = CanReopenWritableFiles(store->fs(), options.data_dir);
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(store->db_options_, options.data_dir, &db);
  RETURN_IF_ERROR(FromRocks(s, "cannot open param store " + options.data_dir));
  store->db_.reset(db);
  RETURN_IF_ERROR(store->Recover());
  return std::unique_ptr<ParamStore>(std::move(store));
}

RocksDbStore::~RocksDbStore() {
  if (db_ != nullptr) {
    // Group commit: updates nobody acknowledged yet may be lost, but a
    // clean close keeps them (and the rows ReadRows created).
    Status pending = Guarded("close", [&] { return WritePendingWal(); });
    if (!pending.ok()) LOG(WARNING) << "closing " << Where() << ": " << pending;
    Status s = WaitForFlush();  // Also completes a coalesced Flush.
    if (!s.ok()) {
      LOG(WARNING) << "background flush of " << Where() << ": " << s;
      if (deferred_flush_clock_.has_value()) s = WaitForFlush();
      if (!s.ok()) LOG(WARNING) << "flush at close of " << Where() << ": " << s;
    }
  }
  {
    MutexLock l(&flush_mu_);
    flush_stop_ = true;
  }
  flush_cv_.notify_all();
  if (flush_thread_.joinable()) flush_thread_.join();
  if (db_ != nullptr) {
    rocksdb::Status s = db_->Close();
    if (!s.ok()) LOG(WARNING) << "closing " << Where() << ": " << s.ToString();
  }
}

Status RocksDbStore::Recover() {
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), kStoreMetaKey, &value);
  if (s.IsNotFound()) {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    it->SeekToFirst();
    if (it->Valid()) {
      return CorruptionError(Where() + " is a RocksDB database without relaxps metadata");
    }
    RETURN_IF_ERROR(FromRocks(it->status(), "cannot scan " + Where()));
    rocksdb::WriteBatch batch;
    batch.Put(kStoreMetaKey, EncodeStoreMeta(meta_));
    batch.Put(kFlushKey, EncodeFlushRecord(FlushRecord{}));
    RETURN_IF_ERROR(Write(&batch, /*wal=*/false, /*sync=*/false, "initialize"));
    RETURN_IF_ERROR(FlushMemtables("initialize"));
    return OpenDenseLog();
  }
  RETURN_IF_ERROR(FromRocks(s, "cannot read metadata of " + Where()));
  RETURN_IF_ERROR(DecodeStoreMeta(value, "'M' of " + Where(), &meta_));

  FlushRecord flush;
  s = db_->Get(rocksdb::ReadOptions(), kFlushKey, &value);
  RETURN_IF_ERROR(FromRocks(s, "cannot read flush record of " + Where()));
  RETURN_IF_ERROR(DecodeFlushRecord(value, "'F' of " + Where(), &flush));
  flush_clock_ = flush.clock;
  if (flush.apply_pending) {
    LOG(INFO) << Where() << ": finishing the interrupted flush of clock " << flush.clock;
    RETURN_IF_ERROR(ApplyStagedRows(flush.clock));
  } else {
    RETURN_IF_ERROR(DiscardStagedRows());
  }

  const std::string lo(1, kTablePrefix), hi(1, kTablePrefix + 1);
  rocksdb::Slice upper(hi);
  rocksdb::ReadOptions ro;
  ro.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
  for (it->Seek(lo); it->Valid(); it->Next()) {
    const std::string what = "table record '" + it->key().ToString().substr(1) + "' of " + Where();
    TableMeta meta;
    RETURN_IF_ERROR(DecodeTableMeta(it->value().ToString(), what, &meta));
    if (meta.id == 0 || meta.id >= meta_.next_table_id) {
      return CorruptionError(what + ": table id " + std::to_string(meta.id) + " out of range");
    }
    if (meta.kind == TableKind::kDense) {
      unloaded_dense_.emplace(meta.dense.table, std::move(meta));
    } else {
      auto t = std::make_unique<SparseTable>();
      t->id = meta.id;
      t->spec = meta.sparse;
      t->num_rows = meta.num_rows;
      t->step = meta.step;
      sparse_.emplace(t->spec.table, std::move(t));
    }
  }
  RETURN_IF_ERROR(FromRocks(it->status(), "cannot scan tables of " + Where()));
  return OpenDenseLog();
}

Status RocksDbStore::OpenDenseLog() {
  // Read in every mode: a store a --wal_per_update server crashed with and
  // that is opened without it still replays what was acknowledged.
  std::vector<DenseLogRecord> records;
  uint64_t valid_bytes = 0;
  RETURN_IF_ERROR(DenseLog::Read(fs(), DenseLogPath(), &records, &valid_bytes));
  // The records past each table's log_seq wait for its load; the rest are
  // reflected by a flush already.
  std::map<uint32_t, uint64_t> table_seq;
  uint64_t next_seq = 1;
  for (const auto& [name, meta] : unloaded_dense_) {
    table_seq[meta.id] = meta.log_seq;
    next_seq = std::max(next_seq, meta.log_seq + 1);
  }
  size_t pending = 0;
  for (DenseLogRecord& r : records) {
    next_seq = std::max(next_seq, r.seq + 1);
    auto t = table_seq.find(r.table_id);
    if (t == table_seq.end()) {
      return CorruptionError("dense log " + DenseLogPath() + ": record " + std::to_string(r.seq) +
                             " is of table id " + std::to_string(r.table_id) + ", which " +
                             Where() + " does not have");
    }
    if (r.seq <= t->second) continue;
    unreplayed_[r.table_id].push_back(std::move(r));
    ++pending;
  }
  if (!options_.wal_per_update) return Status::OK();  // Read, never written.
  std::string keep;
  if (pending > 0) {
    LOG(INFO) << Where() << ": " << pending << " dense log records to replay";
    // The log goes on after them (written again from offset 0, as they are).
    RETURN_IF_ERROR(ReadFile(fs(), DenseLogPath(), &keep));
    keep.resize(valid_bytes);
  }
  ASSIGN_OR_RETURN(dense_log_, DenseLog::Open(fs(), DenseLogPath(), keep, next_seq));
  return Status::OK();
}

Status RocksDbStore::ApplyStagedRows(int64_t clock) {
  const std::string lo(1, kStagedPrefix), hi(1, kStagedPrefix + 1);
  rocksdb::Slice upper(hi);
  rocksdb::ReadOptions ro;
  ro.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
  rocksdb::WriteBatch batch;
  for (it->Seek(lo); it->Valid(); it->Next()) {
    std::string key = it->key().ToString();
    batch.Delete(key);
    key[0] = kRowPrefix;
    batch.Put(key, it->value());
    if (batch.GetDataSize() >= kBatchBytes) {
      RETURN_IF_ERROR(Write(&batch, false, false, "apply staged rows"));
      batch.Clear();
    }
  }
  RETURN_IF_ERROR(FromRocks(it->status(), "cannot scan staged rows of " + Where()));
  batch.Put(kFlushKey, EncodeFlushRecord(FlushRecord{clock, false}));
  RETURN_IF_ERROR(Write(&batch, false, false, "apply staged rows"));
  return FlushMemtables("apply staged rows");
}

Status RocksDbStore::DiscardStagedRows() {
  const std::string lo(1, kStagedPrefix), hi(1, kStagedPrefix + 1);
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  it->Seek(lo);
  if (!it->Valid() || it->key().compare(hi) >= 0) return FromRocks(it->status(), Where());
  rocksdb::WriteBatch batch;
  batch.DeleteRange(lo, hi);
  RETURN_IF_ERROR(Write(&batch, false, false, "discard unflushed rows"));
  return FlushMemtables("discard unflushed rows");
}

StatusOr<RocksDbStore::DenseTable*> RocksDbStore::LoadDense(const TableMeta& meta,
                                                            const DenseReplay& replay) {
  auto t = std::make_unique<DenseTable>();
  t->id = meta.id;
  t->log_seq = meta.log_seq;
  t->shard.spec = meta.dense;
  t->shard.step = meta.step;
  t->shard.clock = meta.clock;
  t->generation = meta.generation;
  t->base_generation = meta.base_generation;
  // Unknown delta sizes: the next flush writes a new base.
  if (meta.base_generation != meta.generation) t->rewrite_all.store(true);
  const DenseShardSpec& spec = t->shard.spec;
  const size_t n = spec.end - spec.begin;
  const uint64_t chunks = (n + kDenseChunkFloats - 1) / kDenseChunkFloats;
  t->arrays = DenseArrays(spec.num_slots, n);
  t->shard.slots = t->arrays.slots();
  // Generations [base, newest], oldest first: a delta's chunk overrides the
  // base's and older deltas'. The base must hold every chunk.
  std::vector<bool> loaded(chunks * spec.num_slots, false);  // Any generation.
  std::vector<bool> in_base(chunks * spec.num_slots, false);
  const std::string lo = DensePrefix(meta.id, meta.base_generation);
  const std::string hi = DensePrefix(meta.id, meta.generation + 1);
  rocksdb::Slice upper(hi);
  rocksdb::ReadOptions ro;
  ro.iterate_upper_bound = &upper;
  ro.fill_cache = false;        // A one-off scan: keep the block cache for rows.
  ro.readahead_size = 8 << 20;  // Large sequential reads of 64 KiB chunks.
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
  const std::string what = "dense table '" + spec.table + "' in " + Where();
  for (it->Seek(lo); it->Valid(); it->Next()) {
    uint32_t id;
    uint64_t generation;
    int slot;
    uint64_t chunk;
    if (!ParseDenseChunkKey(it->key().ToString(), &id, &generation, &slot, &chunk) ||
        id != meta.id || generation < meta.base_generation || generation > meta.generation ||
        slot >= spec.num_slots ||
        chunk >= chunks) {
      return CorruptionError(what + ": unexpected chunk key");
    }
    const uint64_t first = chunk * kDenseChunkFloats;
    const size_t len = std::min<uint64_t>(kDenseChunkFloats, n - first);
    if (it->value().size() != len * sizeof(float)) {
      return CorruptionError(what + ": chunk " + std::to_string(chunk) + " of slot " +
                             std::to_string(slot) + " has " + std::to_string(it->value().size()) +
                             " bytes, expected " + std::to_string(len * sizeof(float)));
    }
    std::memcpy(t->shard.slots[slot] + first, it->value().data(), it->value().size());
    loaded[slot * chunks + chunk] = true;
    if (generation == meta.base_generation) in_base[slot * chunks + chunk] = true;
  }
  RETURN_IF_ERROR(FromRocks(it->status(), "cannot read " + what));
  for (int s = 0; s < spec.num_slots; ++s) {
    for (uint64_t c = 0; c < chunks; ++c) {
      if (meta.base_generation == 0 ? loaded[s * chunks + c] : in_base[s * chunks + c]) continue;
      // Base generation 0 was never flushed: its chunks (only those written
      // through the per-update WAL) exist where written, the rest hold their
      // initial values unless a delta has them. A flushed base is complete.
      if (meta.base_generation != 0) {
        return CorruptionError(what + ": chunk " + std::to_string(c) + " of slot " +
                               std::to_string(s) + " of generation " +
                               std::to_string(meta.base_generation) + " is missing");
      }
      const uint64_t first = c * kDenseChunkFloats;
      const size_t len = std::min<uint64_t>(kDenseChunkFloats, n - first);
      InitDenseRange(spec, s, first, len, t->shard.slots[s] + first);
    }
  }
  RETURN_IF_ERROR(ReplayDenseLog(t.get(), meta.log_seq, replay));
  DenseTable* raw = t.get();
  unloaded_dense_.erase(spec.table);
  dense_.emplace(spec.table, std::move(t));
  return raw;
}

Status RocksDbStore::ReplayDenseLog(DenseTable* t, uint64_t log_seq, const DenseReplay& replay) {
  auto it = unreplayed_.find(t->id);
  if (it == unreplayed_.end()) return Status::OK();
  const std::vector<DenseLogRecord>& records = it->second;
  DenseShard& shard = t->shard;
  const std::string what = "dense log " + DenseLogPath() + ", table '" + shard.spec.table + "'";
  size_t steps = 0;
  for (const DenseLogRecord& r : records) {
    const uint32_t arrays = r.kind == DenseLogKind::kStep ? 1 : shard.spec.num_slots;
    if (r.offset > shard.size() || r.n > shard.size() - r.offset || r.arrays != arrays) {
      return CorruptionError(what + ": record " + std::to_string(r.seq) + " (keys [" +
                             std::to_string(r.offset) + ", +" + std::to_string(r.n) + "), " +
                             std::to_string(r.arrays) + " arrays) does not fit the table (" +
                             std::to_string(shard.size()) + " keys, " +
                             std::to_string(arrays) + " arrays expected)");
    }
    if (r.kind == DenseLogKind::kStep) ++steps;
  }
  if (steps > 0 && !replay) {
    return FailedPreconditionError(
        what + ": " + std::to_string(steps) +
        " logged optimizer steps to replay, and the table was loaded without its optimizer "
        "(CreateDenseReplaying)");
  }
  for (const DenseLogRecord& r : records) {
    if (r.seq <= log_seq) continue;
    shard.step = r.step;
    if (r.kind == DenseLogKind::kStep) {
      Status s = replay(&shard, DenseStep{r.offset, r.n, r.floats.data(), r.lr_scale});
      if (!s.ok()) {
        return Status(s.code(), what + ": replaying step record " + std::to_string(r.seq) +
                                    ": " + s.message());
      }
    } else {
      for (uint32_t a = 0; a < r.arrays; ++a) {
        std::memcpy(shard.slots[a] + r.offset, r.floats.data() + a * r.n, r.n * sizeof(float));
      }
    }
    shard.clock = r.clock;
    // The next flush writes what the replay changed, naming the records it
    // reflects.
    t->log_seq = std::max(t->log_seq, r.seq);
    if (r.n > 0) {
      t->MarkDirty(r.offset / kDenseChunkFloats, (r.offset + r.n - 1) / kDenseChunkFloats + 1);
    }
  }
  LOG(INFO) << what << ": replayed " << records.size() << " records (" << steps
            << " optimizer steps) onto the flushed state";
  unreplayed_.erase(it);
  return Status::OK();
}

StatusOr<DenseShard*> RocksDbStore::DoCreateDense(const DenseShardSpec& spec,
                                                  const DenseReplay& replay) {
  RETURN_IF_ERROR(ValidateDenseSpec(spec));
  if (sparse_.count(spec.table)) {
    return InvalidArgumentError("table '" + spec.table + "' already exists as a sparse table");
  }
  const DenseShardSpec* existing = nullptr;
  if (auto it = dense_.find(spec.table); it != dense_.end()) existing = &it->second->shard.spec;
  if (auto it = unloaded_dense_.find(spec.table); it != unloaded_dense_.end()) {
    existing = &it->second.dense;
  }
  if (existing != nullptr && !SameDenseShape(*existing, spec)) {
    return InvalidArgumentError("dense shard " + DescribeDense(spec) + " conflicts with existing " +
                                DescribeDense(*existing) + " in " + Where());
  }
  if (auto it = dense_.find(spec.table); it != dense_.end()) return &it->second->shard;
  if (auto it = unloaded_dense_.find(spec.table); it != unloaded_dense_.end()) {
    ASSIGN_OR_RETURN(DenseTable * t, LoadDense(it->second, replay));
    return &t->shard;
  }
  auto t = std::make_unique<DenseTable>();
  t->id = NewTableId();
  t->shard.spec = spec;
  const size_t n = spec.end - spec.begin;
  t->arrays = DenseArrays(spec.num_slots, n);
  t->shard.slots = t->arrays.slots();
  for (int s = 0; s < spec.num_slots; ++s) InitDenseRange(spec, s, 0, n, t->shard.slots[s]);
  // Generation 0 loads as the initial values: nothing to write until a write.
  if (options_.wal_per_update) {
    // The table record (and the store's next table id) before any dense log
    // record names the table.
    rocksdb::WriteBatch batch;
    PutDenseMeta(*t, &batch);
    RETURN_IF_ERROR(Write(&batch, /*wal=*/true, /*sync=*/true, "create dense table"));
  }
  DenseShard* shard = &t->shard;
  dense_.emplace(spec.table, std::move(t));
  return shard;
}

RocksDbStore::DenseTable* RocksDbStore::FindDense(const DenseShard* shard) {
  if (shard == nullptr) return nullptr;
  auto it = dense_.find(shard->spec.table);
  return it != dense_.end() && &it->second->shard == shard ? it->second.get() : nullptr;
}

Status RocksDbStore::DoReshapeDense(DenseShard* shard, const std::string& name, uint64_t end) {
  DenseTable* t = FindDense(shard);
  if (t == nullptr) return InvalidArgumentError("ReshapeDense: shard does not belong to this store");
  RETURN_IF_ERROR(CheckReshape(t->shard, t->arrays.capacity(), name, end));
  const std::string old_name = shard->spec.table;
  if (options_.wal_per_update) {
    // Its dense log records are ranges of the committed record's shape
    // until the next flush: a reshaped table would not match them.
    return FailedPreconditionError("the rocksdb store of '" + old_name +
                                   "' writes every update through the WAL and cannot reshape it "
                                   "before its next flush");
  }
  if (name != old_name &&
      (dense_.count(name) > 0 || unloaded_dense_.count(name) > 0 || sparse_.count(name) > 0)) {
    return InvalidArgumentError("cannot rename dense shard '" + old_name + "' to '" + name +
                                "' in " + Where() + ": a table of that name exists");
  }
  // A running job copies and writes this table by its old shape.
  WaitForFlushJob();
  if (name != old_name) {
    auto node = dense_.extract(old_name);
    node.key() = name;
    dense_.insert(std::move(node));
    MutexLock l(&flush_mu_);
    dropped_records_.insert(TableMetaKey(old_name));
  }
  shard->spec.table = name;
  shard->spec.end = end;
  // The next flush writes every chunk of the new shape as a new base; the
  // bitmaps and the job's copy were sized for the old one.
  t->rewrite_all.store(true);
  t->dirty_bits.clear();
  t->num_dirty = 0;
  t->delta_bits.clear();
  t->snapshot.clear();
  t->snapshot_slots.clear();
  return Status::OK();
}

void RocksDbStore::ReleaseDenseTail(DenseShard* shard) {
  if (DenseTable* t = FindDense(shard); t != nullptr) t->arrays.ReleaseBeyond(shard->size());
}

std::shared_ptr<const void> RocksDbStore::PinDense(DenseShard* shard) {
  DenseTable* t = FindDense(shard);
  return t != nullptr ? t->arrays.Pin() : nullptr;
}

DenseShard* RocksDbStore::GetDense(const std::string& table) {
  if (auto it = dense_.find(table); it != dense_.end()) return &it->second->shard;
  auto it = unloaded_dense_.find(table);
  if (it == unloaded_dense_.end()) return nullptr;
  StatusOr<DenseTable*> t = Guarded("GetDense", [&]() -> StatusOr<DenseTable*> {
    return LoadDense(it->second, nullptr);
  });
  if (!t.ok()) {
    LOG(ERROR) << "cannot load dense table '" << table << "': " << t.status();
    return nullptr;
  }
  return &(*t)->shard;
}

Status RocksDbStore::DoDenseUpdated(DenseShard* shard, size_t offset, size_t n,
                                    const DenseStep* step) {
  auto it = shard == nullptr ? dense_.end() : dense_.find(shard->spec.table);
  if (it == dense_.end() || &it->second->shard != shard) {
    return InvalidArgumentError("DenseUpdated: shard does not belong to " + Where());
  }
  if (offset > shard->size() || n > shard->size() - offset) {
    return InvalidArgumentError("DenseUpdated: range [" + std::to_string(offset) + ", +" +
                                std::to_string(n) + ") exceeds shard size " +
                                std::to_string(shard->size()));
  }
  DenseTable& t = *it->second;
  t.write_announced = false;  // The announced write's range is known now.
  // The next Flush writes these chunks.
  if (n > 0) t.MarkDirty(offset / kDenseChunkFloats, (offset + n - 1) / kDenseChunkFloats + 1);
  if (!options_.wal_per_update) return Status::OK();
  // wal_per_update: the dense log makes the update durable until then.
  DenseLogRecord r;
  r.table_id = t.id;
  r.offset = offset;
  r.n = n;
  r.step = shard->step;
  r.clock = shard->clock;
  std::vector<const float*> arrays;
  if (step != nullptr) {
    r.kind = DenseLogKind::kStep;
    r.lr_scale = step->lr_scale;
    arrays.push_back(step->grads);
  } else {
    r.kind = DenseLogKind::kValues;
    for (float* slot : shard->slots) arrays.push_back(slot + offset);
  }
  r.arrays = static_cast<uint32_t>(arrays.size());
  RETURN_IF_ERROR(dense_log_->Append(r, arrays.data()).status());
  if (options_.wal_group_commit) {
    // SyncWal syncs the group. A large record's sync starts now: a step
    // logged before its optimizer runs (DenseStepped) is written to disk
    // meanwhile, and SyncWal waits for it (and syncs again only for records
    // that came after). Small records wait for the group's one sync.
    if (r.n * r.arrays * sizeof(float) >= kDenseLogEarlySyncBytes) dense_log_->StartSync();
    return Status::OK();
  }
  RETURN_IF_ERROR(dense_log_->Sync());
  return BoundDenseLog();
}

Status RocksDbStore::DoCreateSparse(const SparseTableSpec& spec) {
  RETURN_IF_ERROR(ValidateSparseSpec(spec));
  if (dense_.count(spec.table) || unloaded_dense_.count(spec.table)) {
    return InvalidArgumentError("table '" + spec.table + "' already exists as a dense shard");
  }
  if (auto it = sparse_.find(spec.table); it != sparse_.end()) {
    if (!SameSparseSpec(it->second->spec, spec)) {
      return InvalidArgumentError("sparse table " + DescribeSparse(spec) +
                                  " conflicts with the existing spec " +
                                  DescribeSparse(it->second->spec) + " in " + Where());
    }
    return Status::OK();
  }
  auto t = std::make_unique<SparseTable>();
  t->id = NewTableId();
  t->spec = spec;
  t->rows_all_cached = true;  // New: no row exists anywhere yet.
  if (options_.wal_per_update) {
    rocksdb::WriteBatch batch;
    PutSparseMeta(*t, 0, &batch);
    RETURN_IF_ERROR(Write(&batch, true, true, "create sparse table"));
  }
  sparse_.emplace(spec.table, std::move(t));
  return Status::OK();
}

std::vector<std::string> RocksDbStore::Tables() const {
  std::vector<std::string> names;
  for (const auto& [name, t] : dense_) names.push_back(name);
  for (const auto& [name, t] : unloaded_dense_) names.push_back(name);
  for (const auto& [name, t] : sparse_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

StatusOr<std::unique_ptr<ParamStore>> NewRocksDbStore(const ParamStoreOptions& options) {
  return Guarded("NewParamStore", [&] { return RocksDbStore::Open(options); });
}

StatusOr<RowCacheStats> GetRowCacheStats(const ParamStore* store) {
  const auto* rocks = dynamic_cast<const RocksDbStore*>(store);
  if (rocks == nullptr) return InvalidArgumentError("not a rocksdb param store");
  return rocks->CacheStats();
}

}  // namespace storage_internal
}  // namespace relaxps
