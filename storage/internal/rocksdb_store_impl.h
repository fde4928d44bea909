// RocksDbStore: the durable ParamStore (declaration shared by the .cc files
// that implement it; see rocksdb_store.cc for the design). Internal: users
// get one through NewParamStore.
//
// Thread-safety: not internally synchronized; a server serializes calls per
// store (param_store.h). The store owns one background thread that runs
// dense flush jobs; what it touches is listed under "Flush job" below.
#ifndef RELAXPS_STORAGE_INTERNAL_ROCKSDB_STORE_IMPL_H_
#define RELAXPS_STORAGE_INTERNAL_ROCKSDB_STORE_IMPL_H_

#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/write_batch.h>

#include "common/metrics.h"
#include "common/thread_annotations.h"
#include "storage/internal/aligned_floats.h"
#include "storage/internal/dense_arrays.h"
#include "storage/internal/dense_log.h"
#include "storage/internal/rocksdb_store.h"
#include "storage/internal/rocksdb_util.h"
#include "storage/internal/row_cache.h"
#include "storage/internal/store_format.h"
#include "storage/param_store.h"

namespace relaxps {
namespace storage_internal {

// Write batches of staged or moved rows are cut at this size to bound memory.
inline constexpr size_t kBatchBytes = 4 << 20;
// A flush writes a new base generation (every chunk) instead of a delta when
// the deltas since the base would hold more chunks than the table, or when
// there would be more than this many of them: the disk holds at most about
// twice the table, and a restore reads at most this many extra files.
inline constexpr int kMaxDenseDeltas = 16;
// With wal_per_update and group commit, a dense log record at least this
// large starts its sync as soon as it is written (DenseLog::StartSync): an
// optimizer step over it (0.1-0.3 ms for 800 KB with momentum) hides part of
// the sync. Smaller ones share the group's one sync: a started sync would
// make the group's later records wait for a second.
inline constexpr size_t kDenseLogEarlySyncBytes = 256 << 10;

// Runs fn, turning any exception (std::bad_alloc, std::system_error, ...) into
// an Internal status: nothing thrown below escapes the module.
template <typename Fn>
auto Guarded(const char* what, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const std::exception& e) {
    return InternalError(std::string(what) + ": " + e.what());
  } catch (...) {
    return InternalError(std::string(what) + ": unknown exception");
  }
}

class RocksDbStore final : public ParamStore {
 public:
  static StatusOr<std::unique_ptr<ParamStore>> Open(const ParamStoreOptions& options);
  ~RocksDbStore() override;

  const char* Name() const override { return "rocksdb"; }
  StatusOr<DenseShard*> CreateDense(const DenseShardSpec& spec) override {
    return Guarded("CreateDense", [&] { return DoCreateDense(spec, nullptr); });
  }
  StatusOr<DenseShard*> CreateDenseReplaying(const DenseShardSpec& spec,
                                             const DenseReplay& replay) override {
    return Guarded("CreateDense", [&] { return DoCreateDense(spec, replay); });
  }
  DenseShard* GetDense(const std::string& table) override;
  bool HasDense(const std::string& table) override {
    return dense_.count(table) > 0 || unloaded_dense_.count(table) > 0;
  }
  Status DenseUpdated(DenseShard* shard, size_t offset, size_t n) override {
    return Guarded("DenseUpdated", [&] { return DoDenseUpdated(shard, offset, n, nullptr); });
  }
  Status DenseStepped(DenseShard* shard, const DenseStep& step) override {
    return Guarded("DenseStepped",
                   [&] { return DoDenseUpdated(shard, step.offset, step.n, &step); });
  }
  void BeforeDenseWrite(DenseShard* shard) override;
  // Waits for a running flush job (which reads the table), then takes the
  // new name and range; the next flush writes a new base generation under
  // the new record and deletes the old one in the same commit.
  // FailedPrecondition with wal_per_update (the dense log's records are
  // ranges of the committed record's shape).
  Status ReshapeDense(DenseShard* shard, const std::string& name, uint64_t end) override {
    return Guarded("ReshapeDense", [&] { return DoReshapeDense(shard, name, end); });
  }
  void ReleaseDenseTail(DenseShard* shard) override;
  std::shared_ptr<const void> PinDense(DenseShard* shard) override;
  Status CreateSparse(const SparseTableSpec& spec) override {
    return Guarded("CreateSparse", [&] { return DoCreateSparse(spec); });
  }
  const SparseTableSpec* GetSparse(const std::string& table) const override {
    auto it = sparse_.find(table);
    return it == sparse_.end() ? nullptr : &it->second->spec;
  }
  Status ReadRows(const std::string& table, const uint64_t* ids, size_t n,
                  float* out) override {
    return Guarded("ReadRows", [&] { return DoReadRows(table, ids, n, out); });
  }
  Status PeekRows(const std::string& table, const uint64_t* ids, size_t n,
                  float* out) override {
    return Guarded("PeekRows", [&] { return DoPeekRows(table, ids, n, out); });
  }
  Status WriteRows(const std::string& table, const uint64_t* ids, size_t n,
                   const float* rows) override {
    return Guarded("WriteRows", [&] { return DoWriteRows(table, ids, n, rows); });
  }
  int64_t* SparseStep(const std::string& table) override {
    auto it = sparse_.find(table);
    return it == sparse_.end() ? nullptr : &it->second->step;
  }
  StatusOr<uint64_t> NumRows(const std::string& table) override {
    auto it = sparse_.find(table);
    if (it == sparse_.end()) return NotFoundError("no sparse table '" + table + "'");
    return it->second->num_rows;
  }
  Status SparseRowIds(const std::string& table, std::vector<uint64_t>* ids) override {
    return Guarded("SparseRowIds", [&] { return DoSparseRowIds(table, ids); });
  }
  bool HasUnsyncedUpdates() const override {
    return wal_unsynced_ ||
           (dense_log_ != nullptr && (dense_log_->unsynced() || dense_log_->broken()));
  }
  uint64_t CommittedFlushes() const override {
    return committed_flushes_.load(std::memory_order_acquire);
  }
  Status SyncWal() override {
    return Guarded("SyncWal", [&] { return DoSyncWal(); });
  }
  bool UnsyncedUpdatesWritten() const override {
    // Rows of a group wait in wal_pending_rows_ until SyncWal.
    return !wal_unsynced_ && dense_log_ != nullptr && !dense_log_->broken();
  }
  Status PollWalSync(bool* durable) override {
    return Guarded("PollWalSync", [&] { return DoPollWalSync(durable); });
  }
  void SetWalSyncListener(std::function<void()> listener) override {
    if (dense_log_ != nullptr) dense_log_->SetSyncListener(std::move(listener));
  }
  Status Flush(int64_t clock) override {
    return Guarded("Flush", [&] { return DoFlush(clock); });
  }
  Status WaitForFlush() override {
    return Guarded("WaitForFlush", [&] { return DoWaitForFlush(); });
  }
  Status Checkpoint(const std::string& dir, int64_t clock) override {
    return Guarded("Checkpoint", [&] { return DoCheckpoint(dir, clock); });
  }
  void CheckpointAsync(const std::string& dir, int64_t clock,
                       std::function<void(Status)> done) override;
  std::vector<std::string> Tables() const override;

  RowCacheStats CacheStats() const {
    return {cache_.bytes(), cache_.budget_bytes(), cache_.size(), cache_.evictions()};
  }

 private:
  struct DenseTable {
    uint32_t id = 0;
    DenseShard shard;  // shard.slots point into arrays.
    DenseArrays arrays;
    // Dense generations (store_format.h): the table record names a base
    // generation, which holds every chunk (0: never flushed, chunks absent
    // hold their initial values), and the newest generation; the delta
    // generations in (base, newest] hold the chunks that changed between
    // flushes, newer ones overriding older ones. Both as of the latest
    // captured table record; the committed ones once that flush has landed.
    uint64_t generation = 0;
    uint64_t base_generation = 0;
    // Chunks written to the deltas above base_generation (a full rewrite
    // replaces them once they add up to the table) and their number.
    uint64_t delta_chunks = 0;
    int num_deltas = 0;
    // Bit c: chunk c is in a delta above base_generation. A delta that
    // rewrites all of them supersedes the older deltas: they are dropped
    // once it is committed instead of adding up towards a new base (a model
    // of which the same part is trained at every step writes one delta's
    // worth per flush, not a whole base every few flushes). Loop thread.
    std::vector<uint64_t> delta_bits;
    // The captured flush supersedes the deltas in (base_generation,
    // generation): drop them once it is committed.
    bool drop_superseded = false;
    // Dirty-chunk tracking. Loop thread only. Bit c: chunk c (all slots)
    // was written since the last captured flush (set by DenseUpdated).
    std::vector<uint64_t> dirty_bits;
    uint64_t num_dirty = 0;
    // A BeforeDenseWrite not yet followed by DenseUpdated: the write's range
    // is unknown, so the next capture writes every chunk.
    bool write_announced = false;
    // Every chunk must be written by the next flush: set by a failed flush
    // (from the flush thread too) and by an announced write whose range
    // never came.
    std::atomic<bool> rewrite_all{false};
    bool dirty() const { return num_dirty > 0 || write_announced || rewrite_all.load(); }
    void MarkDirty(uint64_t first_chunk, uint64_t end_chunk) {
      if (dirty_bits.empty()) dirty_bits.assign((num_chunks() + 63) / 64, 0);
      for (uint64_t c = first_chunk; c < end_chunk; ++c) {
        uint64_t& word = dirty_bits[c / 64];
        const uint64_t bit = uint64_t{1} << (c % 64);
        if ((word & bit) == 0) {
          word |= bit;
          ++num_dirty;
        }
      }
    }
    // wal_per_update: the last dense log record the table's committed
    // generations reflect (as of the latest captured table record).
    uint64_t log_seq = 0;
    uint64_t num_chunks() const {
      return (shard.size() + kDenseChunkFloats - 1) / kDenseChunkFloats;
    }

    // The layout above as it was before the latest capture: a failed
    // synchronous flush goes back to it (the per-update WAL keeps writing
    // into the committed generation).
    struct Layout {
      uint64_t generation, base_generation, delta_chunks;
      int num_deltas;
    };
    Layout before_capture{};
    // The chunks the captured flush writes (ascending; every chunk for a
    // new base generation). Set by CaptureFlush, then read by the flush job
    // only (one job at a time).
    std::vector<uint64_t> flush_chunks;
    // Flush job. Copy of the slots taken by the running job (only the
    // chunks in flush_chunks are current); only the job touches it.
    std::vector<AlignedFloats> snapshot;
    std::vector<float*> snapshot_slots;
    // Guarded by the store's flush_mu_ (not expressible as GUARDED_BY from
    // this nested struct).
    bool copy_pending = false;
  };
  // What one flush commits, captured on the caller's thread by Flush.
  struct FlushCapture {
    int64_t clock = 0;
    bool apply_pending = false;  // Staged rows to move after the commit.
    std::string store_meta;
    // The dense tables written since the last capture, by ascending id; each
    // writes its flush_chunks under its (new) generation.
    std::vector<DenseTable*> tables;
    std::map<std::string, std::string> table_records;  // Key -> value, every table.
    // Records of names no table has any more (ReshapeDense renamed it),
    // deleted by this commit; taken from dropped_records_, given back if the
    // commit fails.
    std::set<std::string> dropped_records;
    // A checkpoint to write into this directory once the flush landed, and
    // whom to tell (CheckpointAsync); empty if none.
    std::string checkpoint_dir;
    std::vector<std::string> checkpoint_tables;
    std::function<void(Status)> checkpoint_done;
  };
  struct SparseTable {
    uint32_t id = 0;
    SparseTableSpec spec;
    uint64_t num_rows = 0;
    int64_t step = 0;
    // Group commit: its record (row count, step) is due in the next
    // WritePendingWal.
    bool record_pending = false;
    // Every row of the table is in the cache (a table created by this store
    // none of whose rows was evicted yet): a cache miss means the row does
    // not exist, without a disk lookup.
    bool rows_all_cached = false;
  };

  explicit RocksDbStore(const ParamStoreOptions& options)
      : options_(options),
        env_(options.file_system ? rocksdb::NewCompositeEnv(options.file_system) : nullptr),
        db_options_(MakeDbOptions(options, env_.get())),
        sst_env_(NewIngestedFilesEnv(db_options_.env->GetFileSystem())),
        sst_options_(WithEnv(db_options_, sst_env_.get())),
        cache_(std::max<size_t>(options.cache_mb, 1) << 20) {
    if (options.metrics != nullptr) {
      flush_seconds_ = options.metrics->GetHistogram(
          "relaxps_store_flush_seconds",
          "Background store flushes: copying the changed dense chunks and sparse rows and "
          "committing them to RocksDB.",
          metrics::DurationBuckets());
      checkpoint_seconds_ = options.metrics->GetHistogram(
          "relaxps_store_checkpoint_seconds",
          "Store checkpoints (RocksDB hard-linked checkpoint after the flush).",
          metrics::DurationBuckets());
      flush_errors_ = options.metrics->GetCounter("relaxps_store_flush_errors_total",
                                                  "Failed background flushes and checkpoints.");
    }
  }

  // Opening.
  Status Recover();
  Status ApplyStagedRows(int64_t clock);
  Status DiscardStagedRows();
  // Loads a dense table and replays its dense log records past meta.log_seq
  // (values in place, steps through `replay`).
  StatusOr<DenseTable*> LoadDense(const TableMeta& meta, const DenseReplay& replay);
  Status ReplayDenseLog(DenseTable* t, uint64_t log_seq, const DenseReplay& replay);
  // wal_per_update: reads the dense log (its records wait in unreplayed_
  // until their table loads) and opens it for appending.
  Status OpenDenseLog();
  std::string DenseLogPath() const { return options_.data_dir + "/RELAXPS_DENSE_LOG"; }

  // Table bodies of the public methods (which catch exceptions).
  StatusOr<DenseShard*> DoCreateDense(const DenseShardSpec& spec, const DenseReplay& replay);
  // `step`: the update was that optimizer step (DenseStepped).
  Status DoDenseUpdated(DenseShard* shard, size_t offset, size_t n, const DenseStep* step);
  Status DoReshapeDense(DenseShard* shard, const std::string& name, uint64_t end);
  // The loaded table of a shard of this store, or nullptr.
  DenseTable* FindDense(const DenseShard* shard);
  Status DoCreateSparse(const SparseTableSpec& spec);
  Status DoReadRows(const std::string& table, const uint64_t* ids, size_t n, float* out);
  Status DoPeekRows(const std::string& table, const uint64_t* ids, size_t n, float* out);
  // The rows on disk (committed and staged) and in the cache (created or
  // written, not on disk yet).
  Status DoSparseRowIds(const std::string& table, std::vector<uint64_t>* ids);
  Status DoWriteRows(const std::string& table, const uint64_t* ids, size_t n, const float* rows);
  Status DoFlush(int64_t clock);
  Status DoSyncWal();
  Status DoPollWalSync(bool* durable);
  // Group commit: writes what the updates since the last call left pending
  // (rows, dense chunks, table records) through the WAL as one batch,
  // without syncing. Called by SyncWal, before rows are evicted from the
  // cache (the disk must have them before the cache lets them go), and
  // before flushes and checkpoints.
  Status WritePendingWal();
  // wal_per_update: once the dense log passed options_.dense_log_mb, a
  // synchronous flush (which then starts the log over).
  Status BoundDenseLog();
  // wal_per_update, after a commit that reflects every dense log record of
  // the loaded tables: starts the log over unless records of tables not
  // loaded yet are in it.
  Status RestartDenseLog();
  Status DoCheckpoint(const std::string& dir, int64_t clock);
  // Checks that a checkpoint may be written into dir.
  Status CheckCheckpointDir(const std::string& dir) const;
  // CheckCheckpointDir, then waits for a running flush job (taking its error)
  // and drops a coalesced flush, which the checkpoint's flush supersedes.
  Status PrepareCheckpoint(const std::string& dir);
  // Writes the checkpoint of the last committed flush into dir (built under
  // a temporary name, then renamed).
  Status WriteCheckpointDir(const std::string& dir, int64_t clock,
                            const std::vector<std::string>& tables);

  // Flushing (rocksdb_store_flush.cc).
  // Takes the dirty tables (each gets a new generation: a delta with its
  // dirty chunks, or a new base with all of them) and every table record.
  FlushCapture CaptureFlush(int64_t clock);
  // Moves a dirty table to its next generation and fills its flush_chunks
  // (clearing its dirty chunks).
  void CaptureDirtyChunks(DenseTable* t);
  // Flush on the caller's thread (stages dirty rows first).
  // REQUIRES: no flush job running.
  Status SyncFlush(int64_t clock);
  // Writes each captured table (its snapshot if from_snapshot, else the live
  // slots) as one SST file of its new generation and the records as another,
  // ingests them atomically, then drops the tables' older generations. Does
  // not move staged rows.
  Status CommitFlush(const FlushCapture& cap, bool from_snapshot);
  // Writes one table's flush_chunks, under its generation, to an SST file at
  // path.
  Status WriteDenseGeneration(const DenseTable& t, const std::vector<float*>& slots,
                              const std::string& path);
  // Removes generations [0, t.base_generation) of a committed table, or with
  // t.drop_superseded the deltas in (t.base_generation, t.generation): whole
  // files first (no compaction), then a range tombstone for any leftovers.
  Status DropOldGenerations(const DenseTable& t);
  // Hands cap to the flush thread (started on first use).
  // REQUIRES: no flush job running.
  void StartFlushJob(FlushCapture cap);
  Status DoWaitForFlush();
  bool FlushJobRunning();
  void WaitForFlushJob();
  // The error of the last finished job (OK if none), cleared.
  Status TakeFlushError();
  void FlushThreadMain();
  // Body of one job on the flush thread: copy, then commit.
  Status RunFlushJob(const FlushCapture& cap);

  // Rows.
  StatusOr<SparseTable*> FindSparse(const std::string& table);
  // Group commit: t's record goes with the next WritePendingWal.
  void QueueSparseRecord(SparseTable* t);
  // The cached entry of a row, loading it from disk on a miss; nullptr if the
  // row does not exist anywhere.
  StatusOr<RowCache::Entry*> FetchRow(const SparseTable& t, uint64_t row);
  // Writes dirty victims back (staged keys) and evicts down to 15/16 of the
  // budget. REQUIRES: !options_.wal_per_update or no dirty rows.
  Status EvictIfNeeded();
  // Writes all dirty cached rows to staged keys and marks them clean.
  Status StageDirtyRows();

  // Writing.
  std::string DenseMetaValue(const DenseTable& t) const;
  std::string SparseMetaValue(const SparseTable& t, uint64_t num_rows) const;
  // Table record plus store metadata (the next table id).
  void PutDenseMeta(const DenseTable& t, rocksdb::WriteBatch* batch) const;
  void PutSparseMeta(const SparseTable& t, uint64_t num_rows, rocksdb::WriteBatch* batch) const;
  Status Write(rocksdb::WriteBatch* batch, bool wal, bool sync, const char* what);
  Status FlushMemtables(const char* what);
  uint32_t NewTableId() { return meta_.next_table_id++; }
  std::string Where() const { return "param store " + options_.data_dir; }

  // Constant after construction.
  const ParamStoreOptions options_;
  // The Env over options_.file_system (nullptr: rocksdb's default).
  const std::unique_ptr<rocksdb::Env> env_;
  const rocksdb::Options db_options_;  // What db_ was opened with.
  // For the SstFileWriter of a flush: db_options_ over the same file system,
  // whose syncs IngestExternalFile does (see NewIngestedFilesEnv), where the
  // file system lets it (ingest_syncs_, set by Open).
  const std::unique_ptr<rocksdb::Env> sst_env_;
  const rocksdb::Options sst_options_;
  bool ingest_syncs_ = false;
  const rocksdb::Options& sst_writer_options() const {
    return ingest_syncs_ ? sst_options_ : db_options_;
  }
  // Every disk write of the store goes through this file system: the
  // database, the SST writer and checkpoint directories and manifests.
  rocksdb::FileSystem* fs() const { return db_options_.env->GetFileSystem().get(); }
  std::unique_ptr<rocksdb::DB> db_;

  // Not synchronized: the server serializes calls per store (param_store.h).
  StoreMeta meta_;
  std::map<std::string, std::unique_ptr<DenseTable>> dense_;
  // Dense shards on disk that nobody has asked for yet (loaded lazily).
  std::map<std::string, TableMeta> unloaded_dense_;
  std::map<std::string, std::unique_ptr<SparseTable>> sparse_;
  RowCache cache_;
  // Rows were written to staged keys since the last Flush.
  bool staged_rows_ = false;
  bool wal_unsynced_ = false;  // Group commit: updates made since SyncWal().
  // Group commit: row records of the updates since the last
  // WritePendingWal (their values are in the cache meanwhile), and the
  // sparse tables whose record is due.
  rocksdb::WriteBatch wal_pending_rows_;
  // Group commit: rows ReadRows created since the last WritePendingWal
  // (table id, row); cached and marked dirty until queued.
  std::vector<std::pair<uint32_t, uint64_t>> wal_created_rows_;
  std::vector<SparseTable*> wal_pending_sparse_;
  // wal_per_update: the dense log (dense_log.h); null otherwise.
  std::unique_ptr<DenseLog> dense_log_;
  // Dense log records found on open whose table is not loaded yet, by table
  // id (replayed by LoadDense).
  std::map<uint32_t, std::vector<DenseLogRecord>> unreplayed_;
  // The clock of the latest flush record (a flush the dense log's bound
  // starts keeps it).
  int64_t flush_clock_ = 0;
  // A Flush coalesced while a job ran; completed by Checkpoint / destructor
  // unless a later Flush supersedes it.
  std::optional<int64_t> deferred_flush_clock_;

  // Flush job.
  std::thread flush_thread_;  // Started by the first StartFlushJob.
  // Durations of background flushes and checkpoints (null: metrics off).
  // Constant after construction.
  metrics::Histogram* flush_seconds_ = nullptr;
  metrics::Histogram* checkpoint_seconds_ = nullptr;
  metrics::Counter* flush_errors_ = nullptr;
  // Whether dense generations are written with O_DIRECT (cleared when the
  // filesystem refuses it). Touched only by the one commit in progress.
  bool direct_writes_ = true;
  // Number of captured tables whose copy_pending is set: lets
  // BeforeDenseWrite return without locking when no copy is in progress.
  std::atomic<int> copies_pending_{0};
  // Flushes (background, synchronous, checkpoints') whose commit landed.
  std::atomic<uint64_t> committed_flushes_{0};
  Mutex flush_mu_;
  std::condition_variable_any flush_cv_;
  std::unique_ptr<FlushCapture> flush_job_ GUARDED_BY(flush_mu_);  // Queued, not yet taken.
  bool flush_running_ GUARDED_BY(flush_mu_) = false;               // Queued or running.
  bool flush_stop_ GUARDED_BY(flush_mu_) = false;
  Status flush_error_ GUARDED_BY(flush_mu_);
  // Keys of table records to delete with the next commit (renamed tables).
  std::set<std::string> dropped_records_ GUARDED_BY(flush_mu_);
};

}  // namespace storage_internal
}  // namespace relaxps

#endif  // RELAXPS_STORAGE_INTERNAL_ROCKSDB_STORE_IMPL_H_
