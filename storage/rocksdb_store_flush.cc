// RocksDbStore: Flush, Checkpoint and the low-level write helpers (see
// rocksdb_store.cc for the durability design).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include <pthread.h>

#include <glog/logging.h>
#include <rocksdb/convenience.h>
#include <rocksdb/db.h>
#include <rocksdb/sst_file_writer.h>
#include <rocksdb/metadata.h>
#include <rocksdb/write_batch.h>

#include "storage/internal/checkpoint_manifest.h"
#include "storage/internal/file_util.h"
#include "storage/internal/rocksdb_store_impl.h"
#include "storage/internal/rocksdb_util.h"

namespace relaxps {
namespace storage_internal {
namespace {

// Before IngestExternalFile commits a file it reads the file's index block
// and its first and last data blocks (the smallest and largest key). A dense
// generation written with O_DIRECT has none of them in the page cache: three
// disk reads one after the other (strace: 1-3.6 ms each on a busy disk).
// Started here, as readahead of the file's head and tail (a chunk's block,
// and a block plus index, filter, properties and footer: about 36 bytes per
// key of index and filter, measured), they run while the records file is
// written and the ingestion syncs the MANIFEST first. Best effort: a file
// system without readahead just reads later.
void StartIngestionReadahead(rocksdb::FileSystem* fs, const std::string& path, uint64_t keys) {
  constexpr uint64_t kHeadBytes = 80 << 10;
  const uint64_t tail_bytes = kHeadBytes + 48 * keys;
  const rocksdb::IOOptions io;
  uint64_t size = 0;
  std::unique_ptr<rocksdb::FSRandomAccessFile> file;
  if (!fs->GetFileSize(path, io, &size, nullptr).ok() ||
      !fs->NewRandomAccessFile(path, rocksdb::FileOptions(), &file, nullptr).ok()) {
    return;
  }
  const uint64_t head = std::min(size, kHeadBytes);
  const uint64_t tail = std::min(size - head, tail_bytes);
  file->Prefetch(0, head, io, nullptr).PermitUncheckedError();
  if (tail > 0) file->Prefetch(size - tail, tail, io, nullptr).PermitUncheckedError();
}

}  // namespace

std::string RocksDbStore::DenseMetaValue(const DenseTable& t) const {
  TableMeta m;
  m.kind = TableKind::kDense;
  m.id = t.id;
  m.dense = t.shard.spec;
  m.step = t.shard.step;
  m.clock = t.shard.clock;
  m.generation = t.generation;
  m.base_generation = t.base_generation;
  m.log_seq = t.log_seq;
  return EncodeTableMeta(m);
}

std::string RocksDbStore::SparseMetaValue(const SparseTable& t, uint64_t num_rows) const {
  TableMeta m;
  m.kind = TableKind::kSparse;
  m.id = t.id;
  m.sparse = t.spec;
  m.num_rows = num_rows;
  m.step = t.step;
  return EncodeTableMeta(m);
}

void RocksDbStore::PutDenseMeta(const DenseTable& t, rocksdb::WriteBatch* batch) const {
  batch->Put(TableMetaKey(t.shard.spec.table), DenseMetaValue(t));
  batch->Put(kStoreMetaKey, EncodeStoreMeta(meta_));
}

void RocksDbStore::PutSparseMeta(const SparseTable& t, uint64_t num_rows,
                                 rocksdb::WriteBatch* batch) const {
  batch->Put(TableMetaKey(t.spec.table), SparseMetaValue(t, num_rows));
  batch->Put(kStoreMetaKey, EncodeStoreMeta(meta_));
}

Status RocksDbStore::Write(rocksdb::WriteBatch* batch, bool wal, bool sync, const char* what) {
  rocksdb::WriteOptions wo;
  wo.disableWAL = !wal;
  wo.sync = wal && sync;
  return FromRocks(db_->Write(wo, batch), std::string(what) + " in " + Where());
}

Status RocksDbStore::WritePendingWal() {
  if (wal_pending_rows_.Count() == 0 && wal_pending_sparse_.empty() &&
      wal_created_rows_.empty()) {
    return Status::OK();
  }
  // Rows ReadRows created that no WriteRows has queued since.
  for (const auto& [table_id, row] : wal_created_rows_) {
    RowCache::Entry* e = cache_.Lookup(table_id, row);
    if (e == nullptr || !e->dirty) continue;
    wal_pending_rows_.Put(RowKey(kRowPrefix, table_id, row),
                          rocksdb::Slice(reinterpret_cast<const char*>(e->data.get()),
                                         e->floats * sizeof(float)));
    e->dirty = false;
  }
  wal_created_rows_.clear();
  // One batch for the whole group: the rows as queued and the records.
  // (Dense updates are in the dense log already.)
  rocksdb::WriteBatch& batch = wal_pending_rows_;
  for (SparseTable* t : wal_pending_sparse_) {
    PutSparseMeta(*t, t->num_rows, &batch);
    t->record_pending = false;
  }
  wal_pending_sparse_.clear();
  const Status s = Write(&batch, /*wal=*/true, /*sync=*/false, "group of updates");
  batch.Clear();
  return s;
}

Status RocksDbStore::DoSyncWal() {
  if (wal_unsynced_) {
    RETURN_IF_ERROR(WritePendingWal());
    RETURN_IF_ERROR(FromRocks(db_->FlushWAL(/*sync=*/true), "sync WAL of " + Where()));
    wal_unsynced_ = false;
  }
  if (dense_log_ == nullptr) return Status::OK();
  if (dense_log_->broken()) {
    // A write error cut a record short: a flush makes every update durable
    // without the log, then starts it over.
    return SyncFlush(flush_clock_);
  }
  if (!dense_log_->unsynced()) return Status::OK();
  // One fdatasync for the group's dense records, written as they came.
  RETURN_IF_ERROR(dense_log_->Sync());
  // Durable now. A failed flush of the bound is returned (a disk that
  // cannot flush is reported as the WAL's failure) and retried next time.
  return BoundDenseLog();
}

Status RocksDbStore::DoPollWalSync(bool* durable) {
  *durable = false;
  if (!UnsyncedUpdatesWritten()) {
    return FailedPreconditionError("PollWalSync with updates not written to the dense log (" +
                                   Where() + "): SyncWal them");
  }
  bool running = false;
  RETURN_IF_ERROR(dense_log_->CollectStartedSync(&running));
  if (running) return Status::OK();
  if (dense_log_->unsynced()) {
    // For the records appended since the last one started; one that cannot
    // start (the file refused its buffered writes) is synced here, which
    // reports why.
    if (dense_log_->StartSync()) return Status::OK();
    RETURN_IF_ERROR(dense_log_->Sync());
  }
  *durable = true;
  // As after SyncWal: a log past its bound is flushed and started over (on
  // this thread; once per dense_log_mb of records).
  return BoundDenseLog();
}

Status RocksDbStore::BoundDenseLog() {
  if (dense_log_ == nullptr || dense_log_->bytes() < (options_.dense_log_mb << 20) ||
      !unreplayed_.empty()) {
    return Status::OK();
  }
  return SyncFlush(flush_clock_);  // Starts the log over.
}

Status RocksDbStore::RestartDenseLog() {
  if (dense_log_ == nullptr || !unreplayed_.empty()) return Status::OK();
  for (const auto& [name, t] : dense_) {
    if (t->log_seq != dense_log_->last_seq()) return Status::OK();  // Not captured by the flush.
  }
  return dense_log_->Restart();
}

Status RocksDbStore::FlushMemtables(const char* what) {
  rocksdb::FlushOptions fo;
  fo.wait = true;
  fo.allow_write_stall = true;
  return FromRocks(db_->Flush(fo), std::string(what) + ": cannot flush " + Where());
}

Status RocksDbStore::DoFlush(int64_t clock) {
  if (FlushJobRunning()) {
    // Coalesce: the next Flush (or Checkpoint / the destructor) supersedes it.
    deferred_flush_clock_ = clock;
    return TakeFlushError();
  }
  deferred_flush_clock_.reset();
  RETURN_IF_ERROR(TakeFlushError());
  RETURN_IF_ERROR(WritePendingWal());  // The flush's table records count them.
  RETURN_IF_ERROR(StageDirtyRows());
  // Staged rows are committed by the flush record and then moved; the loop
  // keeps staging rows meanwhile, so that stays on this thread. So does the
  // per-update WAL, whose DenseUpdated writes chunks of the committed
  // generation (a running job has already moved t->generation on).
  if (staged_rows_ || options_.wal_per_update) return SyncFlush(clock);
  StartFlushJob(CaptureFlush(clock));
  return Status::OK();
}

RocksDbStore::FlushCapture RocksDbStore::CaptureFlush(int64_t clock) {
  FlushCapture cap;
  cap.clock = clock;
  cap.apply_pending = staged_rows_;
  cap.store_meta = EncodeStoreMeta(meta_);
  for (const auto& [name, t] : dense_) {
    if (t->dirty()) {
      CaptureDirtyChunks(t.get());
      cap.tables.push_back(t.get());
    }
    cap.table_records.emplace(TableMetaKey(name), DenseMetaValue(*t));
  }
  std::sort(cap.tables.begin(), cap.tables.end(),
            [](const DenseTable* a, const DenseTable* b) { return a->id < b->id; });
  for (const auto& [name, t] : sparse_) {
    cap.table_records.emplace(TableMetaKey(name), SparseMetaValue(*t, t->num_rows));
  }
  {
    MutexLock l(&flush_mu_);
    for (const std::string& key : dropped_records_) {
      // A name renamed away and back (a move taken back) has its record again.
      if (cap.table_records.count(key) == 0 &&
          unloaded_dense_.count(key.substr(1)) == 0) {
        cap.dropped_records.insert(key);
      }
    }
    dropped_records_.clear();
  }
  return cap;
}

void RocksDbStore::CaptureDirtyChunks(DenseTable* t) {
  const uint64_t chunks = t->num_chunks();
  t->before_capture = {t->generation, t->base_generation, t->delta_chunks, t->num_deltas};
  const bool all = t->rewrite_all.exchange(false) || t->write_announced;
  t->write_announced = false;
  const uint64_t dirty = all ? chunks : t->num_dirty;
  ++t->generation;
  t->flush_chunks.clear();
  // A delta with every chunk of the older deltas replaces them.
  const bool supersedes = !all && t->num_deltas > 0 &&
                          t->delta_bits.size() == t->dirty_bits.size() &&
                          std::equal(t->delta_bits.begin(), t->delta_bits.end(),
                                     t->dirty_bits.begin(), [](uint64_t older, uint64_t now) {
                                       return (older & ~now) == 0;
                                     });
  const uint64_t delta_chunks = supersedes ? dirty : t->delta_chunks + dirty;
  const int num_deltas = supersedes ? 1 : t->num_deltas + 1;
  t->drop_superseded = false;
  if (dirty == chunks || delta_chunks > chunks || num_deltas > kMaxDenseDeltas) {
    // A new base: every chunk.
    t->base_generation = t->generation;
    t->delta_chunks = 0;
    t->num_deltas = 0;
    t->delta_bits.clear();
    t->flush_chunks.resize(chunks);
    for (uint64_t c = 0; c < chunks; ++c) t->flush_chunks[c] = c;
  } else {
    t->delta_chunks = delta_chunks;
    t->num_deltas = num_deltas;
    t->drop_superseded = supersedes;
    if (supersedes || t->delta_bits.empty()) {
      t->delta_bits = t->dirty_bits;
    } else {
      for (size_t w = 0; w < t->delta_bits.size(); ++w) t->delta_bits[w] |= t->dirty_bits[w];
    }
    t->flush_chunks.reserve(dirty);
    for (size_t w = 0; w < t->dirty_bits.size(); ++w) {
      for (uint64_t bits = t->dirty_bits[w]; bits != 0; bits &= bits - 1) {
        t->flush_chunks.push_back(w * 64 + static_cast<uint64_t>(__builtin_ctzll(bits)));
      }
    }
  }
  std::fill(t->dirty_bits.begin(), t->dirty_bits.end(), 0);
  t->num_dirty = 0;
}

Status RocksDbStore::SyncFlush(int64_t clock) {
  // Staged rows must be durable before the commit that refers to them.
  RETURN_IF_ERROR(StageDirtyRows());
  if (staged_rows_) RETURN_IF_ERROR(FlushMemtables("flush staged rows"));
  // The dense log's records of the loaded tables are in what this commits.
  if (dense_log_ != nullptr) {
    for (auto& [name, t] : dense_) t->log_seq = dense_log_->last_seq();
  }
  const FlushCapture cap = CaptureFlush(clock);
  Status s = CommitFlush(cap, /*from_snapshot=*/false);
  if (!s.ok()) {
    // Nothing landed: back to the committed generation; the next flush
    // retries with every chunk (and the dense log keeps its records).
    for (DenseTable* t : cap.tables) {
      const DenseTable::Layout& b = t->before_capture;
      t->generation = b.generation;
      t->base_generation = b.base_generation;
      t->delta_chunks = b.delta_chunks;
      t->num_deltas = b.num_deltas;
      t->rewrite_all.store(true);
    }
    return s;
  }
  flush_clock_ = clock;
  if (staged_rows_) {
    RETURN_IF_ERROR(ApplyStagedRows(clock));
    staged_rows_ = false;
  }
  return RestartDenseLog();
}

Status RocksDbStore::CommitFlush(const FlushCapture& cap, bool from_snapshot) {
  // One SST file per written table (its new generation) and one with the
  // flush record, the store metadata and every table record, ingested by one
  // IngestExternalFile call: one MANIFEST edit, so all or nothing lands. The
  // files are written straight from the arrays (no WriteBatch or memtable
  // copy) and synced once, by the ingestion that hard-links them into the
  // store (sst_writer_options: the writer's own sync would be a second one).
  std::vector<std::string> paths;
  Status s = [&]() -> Status {
    for (DenseTable* t : cap.tables) {
      paths.push_back(options_.data_dir + "/relaxps-flush-" + std::to_string(t->id) + ".sst.tmp");
      RETURN_IF_ERROR(WriteDenseGeneration(
          *t, from_snapshot ? t->snapshot_slots : t->shard.slots, paths.back()));
      StartIngestionReadahead(fs(), paths.back(), t->flush_chunks.size() * t->shard.slots.size());
    }
    paths.push_back(options_.data_dir + "/relaxps-flush-meta.sst.tmp");
    rocksdb::SstFileWriter writer(rocksdb::EnvOptions(), sst_writer_options());
    const std::string what = "cannot write " + paths.back();
    RETURN_IF_ERROR(FromRocks(writer.Open(paths.back()), what));
    // Keys in order: "F" < "M" < "t" + name.
    RETURN_IF_ERROR(FromRocks(
        writer.Put(kFlushKey, EncodeFlushRecord(FlushRecord{cap.clock, cap.apply_pending})),
        what));
    RETURN_IF_ERROR(FromRocks(writer.Put(kStoreMetaKey, cap.store_meta), what));
    // Records and the deletions of renamed tables' old records, merged in
    // key order (an SST file takes its keys sorted).
    auto dropped = cap.dropped_records.begin();
    for (const auto& [key, value] : cap.table_records) {
      for (; dropped != cap.dropped_records.end() && *dropped < key; ++dropped) {
        RETURN_IF_ERROR(FromRocks(writer.Delete(*dropped), what));
      }
      RETURN_IF_ERROR(FromRocks(writer.Put(key, value), what));
    }
    for (; dropped != cap.dropped_records.end(); ++dropped) {
      RETURN_IF_ERROR(FromRocks(writer.Delete(*dropped), what));
    }
    RETURN_IF_ERROR(FromRocks(writer.Finish(), what));
    rocksdb::IngestExternalFileOptions ingest;
    ingest.move_files = true;           // Hard link, no copy.
    ingest.allow_blocking_flush = true;  // Older records may sit in the memtable.
    // The sequence number of an overlapping file (the records) lives in the
    // MANIFEST; writing it into the file too costs a write and a sync of the
    // file, and only RocksDB < 5.16 needs it (options.h).
    ingest.write_global_seqno = false;
    return FromRocks(db_->IngestExternalFile(paths, ingest), "cannot commit flush of " + Where());
  }();
  for (const std::string& path : paths) RemoveAll(fs(), path).IgnoreError();
  if (!s.ok() && !cap.dropped_records.empty()) {
    MutexLock l(&flush_mu_);  // The next commit deletes them.
    dropped_records_.insert(cap.dropped_records.begin(), cap.dropped_records.end());
  }
  RETURN_IF_ERROR(s);
  committed_flushes_.fetch_add(1, std::memory_order_release);
  for (const DenseTable* t : cap.tables) {
    // A delta: older ones still count, unless it superseded them.
    if (t->base_generation != t->generation && !t->drop_superseded) continue;
    // Only space is at stake: the commit no longer refers to these keys.
    Status d = DropOldGenerations(*t);
    if (!d.ok()) LOG(WARNING) << "flush of " << Where() << ": " << d;
  }
  return Status::OK();
}

Status RocksDbStore::WriteDenseGeneration(const DenseTable& t, const std::vector<float*>& slots,
                                          const std::string& path) {
  // O_DIRECT: a generation is written once and read back only on open, so
  // the page cache gains nothing from it, while buffering it costs a kernel
  // copy and per-page bookkeeping (measured: about 40% of the flush thread's
  // CPU at 16 MiB) and evicts hot sparse-row blocks. Filesystems without
  // O_DIRECT (tmpfs) get buffered writes.
  rocksdb::EnvOptions env_options;
  env_options.use_direct_writes = direct_writes_;
  std::unique_ptr<rocksdb::SstFileWriter> writer =
      std::make_unique<rocksdb::SstFileWriter>(env_options, sst_writer_options());
  const std::string what = "cannot write " + path;
  rocksdb::Status opened = writer->Open(path);
  if (!opened.ok() && direct_writes_) {
    LOG(INFO) << Where() << ": no O_DIRECT writes here (" << opened.ToString()
              << "); dense flushes use buffered writes";
    direct_writes_ = false;
    env_options.use_direct_writes = false;
    writer = std::make_unique<rocksdb::SstFileWriter>(env_options, sst_writer_options());
    opened = writer->Open(path);
  }
  RETURN_IF_ERROR(FromRocks(opened, what));
  const size_t n = t.shard.size();
  for (size_t slot = 0; slot < slots.size(); ++slot) {
    for (uint64_t c : t.flush_chunks) {
      const uint64_t first = c * kDenseChunkFloats;
      const size_t len = std::min<uint64_t>(kDenseChunkFloats, n - first);
      RETURN_IF_ERROR(FromRocks(
          writer->Put(DenseChunkKey(t.id, t.generation, static_cast<int>(slot), c),
                     rocksdb::Slice(reinterpret_cast<const char*>(slots[slot] + first),
                                    len * sizeof(float))),
          what));
    }
  }
  return FromRocks(writer->Finish(), what);
}

Status RocksDbStore::DropOldGenerations(const DenseTable& t) {
  const bool deltas = t.base_generation != t.generation;  // Superseded ones.
  const std::string lo = DensePrefix(t.id, deltas ? t.base_generation + 1 : 0);
  const std::string hi = DensePrefix(t.id, deltas ? t.generation : t.base_generation);
  const rocksdb::Slice begin(lo), end(hi);
  // Files still referenced by a running compaction's version are removed
  // from disk when it ends.
  RETURN_IF_ERROR(FromRocks(
      rocksdb::DeleteFilesInRange(db_.get(), db_->DefaultColumnFamily(), &begin, &end,
                                  /*include_end=*/false),
      "cannot drop old generations of dense table " + t.shard.spec.table));
  // A generation's keys only ever live in its own file (the per-update WAL
  // logs dense updates in the dense log, not in RocksDB), so no tombstone: it
  // would do harm, flushed to L0 and compacted down, dragging the current
  // generation's file into a compaction.
  return Status::OK();
}

void RocksDbStore::StartFlushJob(FlushCapture cap) {
  {
    MutexLock l(&flush_mu_);
    CHECK(!flush_running_) << "StartFlushJob while a flush job runs";
    for (DenseTable* t : cap.tables) t->copy_pending = true;
    copies_pending_.fetch_add(static_cast<int>(cap.tables.size()));
    flush_job_ = std::make_unique<FlushCapture>(std::move(cap));
    flush_running_ = true;
  }
  if (!flush_thread_.joinable()) flush_thread_ = std::thread([this] { FlushThreadMain(); });
  flush_cv_.notify_all();
}

Status RocksDbStore::DoWaitForFlush() {
  WaitForFlushJob();
  RETURN_IF_ERROR(TakeFlushError());
  if (!deferred_flush_clock_.has_value()) return Status::OK();
  const int64_t clock = *deferred_flush_clock_;
  deferred_flush_clock_.reset();
  return SyncFlush(clock);
}

bool RocksDbStore::FlushJobRunning() {
  MutexLock l(&flush_mu_);
  return flush_running_;
}

void RocksDbStore::WaitForFlushJob() {
  MutexLock l(&flush_mu_);
  while (flush_running_) flush_cv_.wait(flush_mu_);
}

Status RocksDbStore::TakeFlushError() {
  MutexLock l(&flush_mu_);
  Status s = std::move(flush_error_);
  flush_error_ = Status::OK();
  return s;
}

void RocksDbStore::BeforeDenseWrite(DenseShard* shard) {
  auto it = dense_.find(shard->spec.table);
  if (it == dense_.end() || &it->second->shard != shard) return;
  DenseTable* t = it->second.get();
  // The range comes with DenseUpdated; a write announced twice without it
  // may have touched anything.
  if (t->write_announced) t->rewrite_all.store(true);
  t->write_announced = true;
  if (copies_pending_.load() == 0) return;  // Pairs with the job's decrement.
  MutexLock l(&flush_mu_);
  while (t->copy_pending) flush_cv_.wait(flush_mu_);
}

void RocksDbStore::FlushThreadMain() {
  pthread_setname_np(pthread_self(), "relaxps-flush");  // Shows in top -H and perf.
  while (true) {
    std::unique_ptr<FlushCapture> job;
    {
      MutexLock l(&flush_mu_);
      while (!flush_stop_ && flush_job_ == nullptr) flush_cv_.wait(flush_mu_);
      if (flush_job_ == nullptr) return;  // Stopping, nothing queued.
      job = std::move(flush_job_);
    }
    const auto started = std::chrono::steady_clock::now();
    const auto seconds_since = [](std::chrono::steady_clock::time_point t) {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
    };
    Status s = Guarded("background flush", [&] { return RunFlushJob(*job); });
    if (flush_seconds_ != nullptr) flush_seconds_->Observe(seconds_since(started));
    Status checkpointed = s;
    if (s.ok() && !job->checkpoint_dir.empty()) {
      const auto checkpoint_started = std::chrono::steady_clock::now();
      checkpointed = Guarded("background checkpoint", [&] {
        return WriteCheckpointDir(job->checkpoint_dir, job->clock, job->checkpoint_tables);
      });
      if (checkpoint_seconds_ != nullptr) {
        checkpoint_seconds_->Observe(seconds_since(checkpoint_started));
      }
    }
    if (flush_errors_ != nullptr && !checkpointed.ok()) flush_errors_->Increment();
    {
      MutexLock l(&flush_mu_);
      for (DenseTable* t : job->tables) {  // Copies an exception left pending.
        if (t->copy_pending) {
          t->copy_pending = false;
          copies_pending_.fetch_sub(1);
        }
        if (!s.ok()) t->rewrite_all.store(true);  // Not committed: the next flush retries.
      }
      if (!s.ok()) flush_error_ = s;
      flush_running_ = false;
      flush_cv_.notify_all();
    }
    if (job->checkpoint_done) job->checkpoint_done(checkpointed);
  }
}

Status RocksDbStore::RunFlushJob(const FlushCapture& cap) {
  // 1. Copy each table's slots, releasing its writers as soon as it is done.
  for (DenseTable* t : cap.tables) {
    const size_t n = t->shard.size();
    if (t->snapshot.size() != t->shard.slots.size()) {
      t->snapshot.clear();
      t->snapshot_slots.clear();
      for (size_t s = 0; s < t->shard.slots.size(); ++s) {
        t->snapshot.emplace_back(n);
        t->snapshot_slots.push_back(t->snapshot.back().data());
      }
    }
    // One memcpy per run of consecutive chunks, not per chunk: glibc copies
    // a large block with non-temporal stores, and 64 KiB ones with ordinary
    // stores that first read every destination line (256 MiB: 32 ms whole,
    // 47 ms in chunks). Writers wait for this copy.
    const std::vector<uint64_t>& chunks = t->flush_chunks;
    for (size_t i = 0; i < chunks.size();) {
      size_t j = i + 1;
      while (j < chunks.size() && chunks[j] == chunks[j - 1] + 1) ++j;
      const uint64_t first = chunks[i] * kDenseChunkFloats;
      const size_t len = std::min<uint64_t>((j - i) * kDenseChunkFloats, n - first);
      for (size_t s = 0; s < t->shard.slots.size(); ++s) {
        std::memcpy(t->snapshot_slots[s] + first, t->shard.slots[s] + first, len * sizeof(float));
      }
      i = j;
    }
    MutexLock l(&flush_mu_);
    t->copy_pending = false;
    copies_pending_.fetch_sub(1);
    flush_cv_.notify_all();
  }
  // 2. Write and ingest the snapshot.
  return CommitFlush(cap, /*from_snapshot=*/true);
}

Status RocksDbStore::CheckCheckpointDir(const std::string& dir) const {
  if (dir.empty()) return InvalidArgumentError("checkpoint needs a directory");
  if (PathExists(fs(), dir)) {
    return InvalidArgumentError("checkpoint directory " + dir + " already exists");
  }
  return Status::OK();
}

Status RocksDbStore::PrepareCheckpoint(const std::string& dir) {
  RETURN_IF_ERROR(CheckCheckpointDir(dir));
  WaitForFlushJob();  // One job at a time: a running flush finishes first.
  deferred_flush_clock_.reset();  // Superseded by the checkpoint's own flush.
  RETURN_IF_ERROR(TakeFlushError());
  return WritePendingWal();  // The checkpoint holds every update applied.
}

Status RocksDbStore::DoCheckpoint(const std::string& dir, int64_t clock) {
  RETURN_IF_ERROR(PrepareCheckpoint(dir));
  RETURN_IF_ERROR(SyncFlush(clock));
  return WriteCheckpointDir(dir, clock, Tables());
}

void RocksDbStore::CheckpointAsync(const std::string& dir, int64_t clock,
                                   std::function<void(Status)> done) {
  bool started = false;
  Status s = Guarded("CheckpointAsync", [&]() -> Status {
    RETURN_IF_ERROR(PrepareCheckpoint(dir));
    RETURN_IF_ERROR(StageDirtyRows());
    // Staged rows and the per-update WAL keep flushes on this thread (DoFlush).
    if (staged_rows_ || options_.wal_per_update) {
      RETURN_IF_ERROR(SyncFlush(clock));
      return WriteCheckpointDir(dir, clock, Tables());
    }
    FlushCapture cap = CaptureFlush(clock);
    cap.checkpoint_dir = dir;
    cap.checkpoint_tables = Tables();
    cap.checkpoint_done = done;
    StartFlushJob(std::move(cap));
    started = true;
    return Status::OK();
  });
  if (!started) done(s);
}

Status RocksDbStore::WriteCheckpointDir(const std::string& dir, int64_t clock,
                                        const std::vector<std::string>& tables) {
  RETURN_IF_ERROR(CreateDirs(fs(), ParentDir(dir)));
  // Built under a temporary name and renamed, so `dir` is complete or absent.
  // Syncs: the manifest (which carries the small mutable files), the
  // directory (the links and the manifest's entry), its parent (the rename).
  // The hard-linked SST files were synced when the store wrote them.
  const std::string partial = dir + ".partial";
  RETURN_IF_ERROR(RemoveAll(fs(), partial));
  Status s = [&]() -> Status {
    RETURN_IF_ERROR(CreateDirs(fs(), partial));
    RETURN_IF_ERROR(FromRocks(db_->DisableFileDeletions(), "cannot checkpoint " + Where()));
    // Files are read and linked while RocksDB may not delete them.
    const Status written = [&]() -> Status {
      rocksdb::LiveFilesStorageInfoOptions live_options;
      live_options.wal_size_for_flush = 0;  // Flush the memtable: no WAL to replay.
      std::vector<rocksdb::LiveFileStorageInfo> live;
      RETURN_IF_ERROR(FromRocks(db_->GetLiveFilesStorageInfo(live_options, &live),
                                "cannot list the files of " + Where()));
      std::vector<PackedSource> packed;
      for (const rocksdb::LiveFileStorageInfo& f : live) {
        const std::string src = JoinPath(f.directory, f.relative_filename);
        if (f.file_type == rocksdb::kTableFile || f.file_type == rocksdb::kBlobFile) {
          RETURN_IF_ERROR(LinkOrCopyFile(fs(), src, JoinPath(partial, f.relative_filename)));
          continue;
        }
        PackedSource p;
        p.name = f.relative_filename;
        p.size = f.size;
        if (!f.replacement_contents.empty()) {
          p.contents = f.replacement_contents;  // CURRENT as of the listing.
        } else {
          p.path = src;  // The first f.size bytes: MANIFEST and WAL grow.
        }
        packed.push_back(std::move(p));
      }
      return WriteCheckpointManifest(fs(), partial, clock, Name(), tables, packed);
    }();
    const Status enabled =
        FromRocks(db_->EnableFileDeletions(/*force=*/false), "checkpoint of " + Where());
    RETURN_IF_ERROR(written);
    RETURN_IF_ERROR(enabled);
    RETURN_IF_ERROR(SyncDir(fs(), partial));
    RETURN_IF_ERROR(FromRocks(fs()->RenameFile(partial, dir, rocksdb::IOOptions(), nullptr),
                              "cannot rename " + partial + " to " + dir));
    return SyncDir(fs(), ParentDir(dir));
  }();
  if (!s.ok()) RemoveAll(fs(), partial).IgnoreError();
  return s;
}

}  // namespace storage_internal
}  // namespace relaxps
