// ParamStore: where a server keeps the parameters and optimizer state of its
// shards.
//
// Two kinds of table live in a store:
//  - dense shards: the keys [begin, end) of a dense table, held in memory as
//    `num_slots` float arrays (slot 0: parameters; slots 1..: optimizer
//    state). The store owns the arrays; the server updates them in place and
//    calls Flush() at its flush points so that a durable store persists them.
//  - sparse tables: rows of `width` floats per slot addressed by 64-bit ids,
//    created on first touch by the table's Initializer. A row record is the
//    concatenation of its slots: [params(width) | state1(width) | ...].
//
// Implementations: MemoryStore (nothing survives the process) and
// RocksDbStore (rows in RocksDB behind a bounded LRU cache, dense shards
// written at flush points, optional WAL per update, hard-linked checkpoints).
//
// Thread-safety: implementations are not internally synchronized; a server
// serializes calls per store (its shard event loop). A store may run its own
// background thread (RocksDbStore's flush job); it synchronizes with the
// caller through Flush, WaitForFlush, Checkpoint, BeforeDenseWrite and the
// destructor.
#ifndef RELAXPS_STORAGE_PARAM_STORE_H_
#define RELAXPS_STORAGE_PARAM_STORE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/initializer.h"

namespace rocksdb {
class FileSystem;
}  // namespace rocksdb

namespace relaxps {

namespace metrics {
class Registry;
}  // namespace metrics


struct DenseShardSpec {
  std::string table;
  uint64_t begin = 0;  // First global key of this shard.
  uint64_t end = 0;    // One past the last key.
  int num_slots = 1;   // 1 + optimizer state slots.
  Initializer init;    // For slot 0; state slots start at slot_init.
  float slot_init = 0.0f;
  // false: the caller writes every key of every slot before anything reads
  // them (a range a move fills, docs/elastic.md), so a store may leave a new
  // shard's memory as allocated instead of running the initializer.
  // MemoryStore does; RocksDbStore initializes (its never-flushed chunks
  // load as the initial values).
  bool initialize = true;
};

// A dense shard's in-memory arrays. Owned by the store; valid until the store
// is destroyed.
struct DenseShard {
  DenseShardSpec spec;
  size_t size() const { return spec.end - spec.begin; }
  // slots[s] points at size() floats.
  std::vector<float*> slots;
  // Optimizer steps applied to this shard (Adam's bias correction).
  int64_t step = 0;
  // Clock of the last update applied (for checkpoints and metrics).
  int64_t clock = 0;
};

// One optimizer step applied to a dense shard (ParamStore::DenseStepped):
// what a store that logs updates records instead of the values it left.
struct DenseStep {
  size_t offset = 0;             // Shard-relative first key.
  size_t n = 0;                  // Keys.
  const float* grads = nullptr;  // The n floats the optimizer applied.
  float lr_scale = 1.0f;         // Its learning-rate scale.
};

// Applies a logged step to `shard` while a store loads it: the optimizer
// the update ran with, on keys [step.offset, +n) of the slots, with
// shard->step (set to the step's number before the call) and step.lr_scale.
// The same code as the update gives the same floats, bit for bit.
using DenseReplay = std::function<Status(DenseShard* shard, const DenseStep& step)>;

struct SparseTableSpec {
  std::string table;
  uint32_t width = 0;  // Floats per slot per row.
  int num_slots = 1;
  Initializer init;    // Row initializer for slot 0 (columns [0, width)).
  float slot_init = 0.0f;
  size_t row_floats() const { return static_cast<size_t>(width) * num_slots; }
};

struct ParamStoreOptions {
  // "memory", "rocksdb", or "" (the default): rocksdb when data_dir is set,
  // memory otherwise (the rule of relaxps-server's --store).
  std::string kind;
  // Directory of the RocksDB database (rocksdb only). Created if missing.
  std::string data_dir;
  // Budget of the sparse-row LRU cache in MiB (rocksdb only). Larger keeps
  // more hot rows in memory; smaller bounds RSS for tables larger than RAM.
  size_t cache_mb = 256;
  // true: every WriteRows / dense update is logged and synced before it is
  // acknowledged (nothing acknowledged is ever lost, at the cost of one
  // fsync per update or group): rows through the RocksDB WAL, dense updates
  // through the store's dense log (an optimizer step as its gradient). false:
  // data is persisted at Flush().
  bool wal_per_update = false;
  // With wal_per_update: once the dense log holds this many MiB, the store
  // flushes the dense shards it changed and starts the log over (bounds the
  // disk it takes and the replay on open). Larger: fewer flushes (each writes
  // the changed chunks) and a longer replay after a crash.
  size_t dense_log_mb = 64;
  // With wal_per_update: group commit. WriteRows and DenseUpdated write
  // through the WAL without syncing it, and SyncWal() makes everything
  // written so far durable with one sync; the caller acknowledges an update
  // only after the SyncWal() that follows it returned OK. Many updates then
  // share one fsync (a server syncs once per batch of requests it received).
  // false: every WriteRows / DenseUpdated syncs before it returns.
  bool wal_group_commit = false;
  // The file system the rocksdb store writes through (nullptr: the real
  // one). Tests pass a FaultInjectingFileSystem (storage/fault_injecting_fs.h)
  // to fail, delay or lose writes.
  std::shared_ptr<rocksdb::FileSystem> file_system;
  // Where the rocksdb store records its flush and checkpoint durations
  // (relaxps_store_*_seconds); nullptr: nowhere. Borrowed; must outlive the
  // store.
  metrics::Registry* metrics = nullptr;

  // kind, or what "" stands for.
  std::string ResolvedKind() const {
    return !kind.empty() ? kind : data_dir.empty() ? "memory" : "rocksdb";
  }
};

class ParamStore {
 public:
  ParamStore() = default;
  ParamStore(const ParamStore&) = delete;
  ParamStore& operator=(const ParamStore&) = delete;
  virtual ~ParamStore() = default;

  virtual const char* Name() const = 0;

  // Creates a dense shard, or returns the existing one if a shard with the
  // same table, range and slot count exists (loaded from disk for a durable
  // store). InvalidArgument if the table exists with a different shape.
  virtual StatusOr<DenseShard*> CreateDense(const DenseShardSpec& spec) = 0;
  // CreateDense for a shard whose logged optimizer steps (DenseStepped)
  // the store replays on load through `replay`. RocksDbStore with
  // wal_per_update logs steps; loading a shard that has some without a
  // replay (CreateDense, GetDense) fails with FailedPrecondition.
  virtual StatusOr<DenseShard*> CreateDenseReplaying(const DenseShardSpec& spec,
                                                     const DenseReplay& replay) {
    (void)replay;
    return CreateDense(spec);
  }
  // nullptr if the table has no dense shard here. Loads a shard on disk.
  virtual DenseShard* GetDense(const std::string& table) = 0;
  // Whether the table has a dense shard here (loaded or on disk), without
  // loading it.
  virtual bool HasDense(const std::string& table) { return GetDense(table) != nullptr; }
  // Marks keys [offset, offset + n) (shard-relative) of a dense shard as
  // modified by the latest update (the write announced by BeforeDenseWrite).
  // A store with wal_per_update persists them before returning; RocksDbStore
  // otherwise writes just the chunks holding them at the next Flush.
  virtual Status DenseUpdated(DenseShard* shard, size_t offset, size_t n) = 0;
  // DenseUpdated for a write that was one optimizer step (shard->step and
  // shard->clock already those after it): a store with wal_per_update may
  // log the step (the gradient) instead of the values it left, and replays
  // it on load (CreateDenseReplaying). Default: DenseUpdated. It may also
  // come after BeforeDenseWrite and before the optimizer writes the range
  // (the step's number set), REQUIRES the write to follow before any other
  // call on the store: RocksDbStore then syncs a large record while the
  // optimizer runs. The update is acknowledged after the next SyncWal as
  // always.
  virtual Status DenseStepped(DenseShard* shard, const DenseStep& step) {
    return DenseUpdated(shard, step.offset, step.n);
  }
  // Must be called before anything writes a dense shard's slot arrays in
  // place (the optimizer step), and DenseUpdated with the range written
  // after it: a write announced here whose range never comes (the next
  // BeforeDenseWrite or Flush arrives first) makes the next Flush persist
  // the whole shard. A store whose Flush copies the arrays in the
  // background also blocks here until its copy of this shard is complete, so
  // a flush persists the values as of its Flush call; usually the copy is
  // long done and this returns at once. Reads (pulls) need no call. MemoryStore:
  // no-op. REQUIRES: called on the thread that calls Flush.
  virtual void BeforeDenseWrite(DenseShard* shard) { (void)shard; }

  // Changes dense shard `shard` to the keys [spec.begin, end) under the name
  // `name`, in place: the slot arrays keep their memory and the values of
  // the keys it keeps, so a range cut in two keeps its head where it is
  // (docs/elastic.md). Keys past a smaller `end` keep their values in memory
  // until ReleaseDenseTail: until then growing back (up to the size the
  // shard was allocated with) brings them back as they were. A durable
  // store writes the shard whole under its new name with the next Flush and
  // forgets the old name in the same commit (until then a reopened store
  // has the shard as it was at the last flush).
  // InvalidArgument: not a shard of this store, `end` not past its begin or
  // past its memory, or `name` held by another table; FailedPrecondition
  // where the store cannot reshape (the caller copies instead). On an error
  // nothing changed.
  virtual Status ReshapeDense(DenseShard* shard, const std::string& name, uint64_t end) {
    (void)shard;
    (void)end;
    return FailedPreconditionError("the " + std::string(Name()) +
                                   " store cannot reshape dense shard '" + name + "' in place");
  }
  // Gives the memory of the keys past `shard`'s end back to the system
  // (after a ReshapeDense that shrank it; it cannot grow past its end any
  // more). No-op for a store without that memory.
  virtual void ReleaseDenseTail(DenseShard* shard) { (void)shard; }
  // Keeps the memory of `shard`'s slot arrays allocated while the returned
  // handle lives, even after the store dropped, released or destroyed them:
  // a payload handed to ZeroMQ straight out of the shard (a range move)
  // holds one. Writes to the shard still change what the memory holds.
  // nullptr where the store cannot (the caller copies instead).
  virtual std::shared_ptr<const void> PinDense(DenseShard* shard) {
    (void)shard;
    return nullptr;
  }

  // Creates a sparse table (idempotent for the same spec).
  virtual Status CreateSparse(const SparseTableSpec& spec) = 0;
  virtual const SparseTableSpec* GetSparse(const std::string& table) const = 0;
  // Reads n rows into out (n * row_floats floats), creating missing rows from
  // the initializer. NotFound for an unknown table.
  virtual Status ReadRows(const std::string& table, const uint64_t* ids, size_t n,
                          float* out) = 0;
  // Like ReadRows, but a missing row is not created: `out` gets the values
  // the initializer would give it, and the store does not grow (a read of
  // random ids costs no memory or disk). NotFound for an unknown table.
  virtual Status PeekRows(const std::string& table, const uint64_t* ids, size_t n,
                          float* out) = 0;
  // Writes n full rows (n * row_floats floats).
  virtual Status WriteRows(const std::string& table, const uint64_t* ids, size_t n,
                           const float* rows) = 0;
  // Whether UpdateRowsInPlace works: the rows live in memory the store can
  // hand out, and changing them needs no bookkeeping (no WAL, no dirty
  // marks, no eviction).
  virtual bool UpdatesRowsInPlace() const { return false; }
  // Calls update(i, row) for each of n distinct ids, row pointing at the
  // row_floats() floats of row ids[i] (created from the initializer if
  // missing): the same as ReadRows, those updates on what was read, and
  // WriteRows, without the two copies. NotFound for an unknown table;
  // FailedPrecondition where !UpdatesRowsInPlace().
  virtual Status UpdateRowsInPlace(const std::string& table, const uint64_t* ids, size_t n,
                                   const std::function<void(size_t i, float* row)>& update) {
    (void)ids;
    (void)n;
    (void)update;
    return FailedPreconditionError("the store of sparse table '" + table +
                                   "' cannot update rows in place");
  }
  // Optimizer steps applied to a sparse table (Adam's bias correction), owned
  // by the store and persisted with the table (by the next Flush, or with the
  // next WriteRows under wal_per_update). nullptr for an unknown table; valid
  // until the store is destroyed.
  virtual int64_t* SparseStep(const std::string& table) = 0;
  // Number of rows that exist (created or loaded) in a sparse table.
  virtual StatusOr<uint64_t> NumRows(const std::string& table) = 0;
  // Appends to *ids the id of every row that exists in a sparse table
  // (created, written or loaded; the order is unspecified): what a range
  // move of a hash bucket copies (docs/elastic.md). NotFound for an unknown
  // table; FailedPrecondition for a store that cannot list its rows.
  virtual Status SparseRowIds(const std::string& table, std::vector<uint64_t>* ids) {
    (void)ids;
    return FailedPreconditionError(std::string("the ") + Name() +
                                   " store cannot list the rows of '" + table + "'");
  }

  // Persists every dense shard and dirty row, tagged with `clock`. No-op for
  // MemoryStore. A durable store may write only the parts of dense shards
  // written since its last Flush (DenseUpdated, BeforeDenseWrite).
  //
  // RocksDbStore without wal_per_update and without dirty sparse rows to
  // stage: Flush captures the table records and starts a background flush
  // job, then returns; the job copies the written dense arrays (see
  // BeforeDenseWrite), writes them and commits. A Flush while the previous
  // job is still running is coalesced: it starts nothing and is superseded
  // by the next Flush (or completed synchronously by Checkpoint or the
  // destructor). A reopened store thus reflects the state as of its last
  // *completed* flush; a background flush's error is returned by the next
  // Flush, WaitForFlush or Checkpoint (which then starts nothing). With dirty
  // sparse rows or wal_per_update, Flush waits for a running job and is
  // synchronous: the data is durable when it returns OK.
  virtual Status Flush(int64_t clock) = 0;

  // Group commit (ParamStoreOptions::wal_group_commit): true when updates
  // were written to the WAL since the last SyncWal(), i.e. some update is not
  // durable yet. Always false for stores that sync as they write.
  virtual bool HasUnsyncedUpdates() const { return false; }
  // Syncs the WAL: every update written before the call is durable when it
  // returns OK. IOError if the sync failed (then nothing written since the
  // previous successful sync may be acknowledged). No-op when
  // HasUnsyncedUpdates() is false.
  virtual Status SyncWal() { return Status::OK(); }
  // Whether every update not synced yet is written into a log file already,
  // so that a crash of this process keeps it (the kernel holds it) and only a
  // crash of the machine before the sync can lose it. False while some is
  // held in memory (rows of a group are written at SyncWal), and for stores
  // without such a log. A server may then acknowledge before the sync
  // (ServerOptions::wal_reply).
  virtual bool UnsyncedUpdatesWritten() const { return false; }
  // Group commit in the background: without waiting, collects the last
  // background sync that finished (its error if it failed: nothing it
  // covered is durable, as with a failed SyncWal) and starts the next one, on
  // the store's own thread, for what was written since. *durable: every
  // update written so far is durable now. REQUIRES: UnsyncedUpdatesWritten()
  // (otherwise SyncWal is the way).
  virtual Status PollWalSync(bool* durable) {
    *durable = !HasUnsyncedUpdates();
    return Status::OK();
  }
  // `listener` (empty: none) runs on the store's sync thread after each
  // background sync finished: the owner's cue to call PollWalSync on its own
  // thread; it must not call the store. Setting another (or none) waits for
  // a running call of the previous one.
  virtual void SetWalSyncListener(std::function<void()> listener) { (void)listener; }
  // Flushes committed to disk so far (background jobs included, counted
  // when their commit lands, from any thread). A Flush that returned OK may
  // only have started a background job; this count is how a caller learns
  // that one completed (a server reports durability from it). 0 for stores
  // without durable state.
  virtual uint64_t CommittedFlushes() const { return 0; }
  // Blocks until every Flush so far is durable: waits for a running
  // background flush and completes a coalesced one. Returns a background
  // flush's error (once). No-op for stores that flush synchronously.
  virtual Status WaitForFlush() { return Status::OK(); }
  // Writes a consistent snapshot of the whole store, tagged with `clock`, into
  // `dir` (which must not exist). Unavailable for stores without durable state.
  // Waits for a running background flush, then flushes synchronously.
  virtual Status Checkpoint(const std::string& dir, int64_t clock) = 0;
  // Checkpoint that returns once the state to checkpoint is captured and
  // writes it in the background where the store can: the caller's writes
  // then wait only for the in-memory copy (BeforeDenseWrite), not for the
  // disk. `done` runs exactly once with the result, on the caller's thread
  // before CheckpointAsync returns or later on a store thread; it must not
  // call into the store. A Flush while it runs is coalesced as with a
  // background flush. Default: Checkpoint, then done.
  virtual void CheckpointAsync(const std::string& dir, int64_t clock,
                               std::function<void(Status)> done) {
    done(Checkpoint(dir, clock));
  }

  // Names of all tables (dense and sparse).
  virtual std::vector<std::string> Tables() const = 0;
};

// Creates a store. InvalidArgument for an unknown kind or a missing data_dir;
// IOError / Corruption (naming the file) if an existing store cannot be opened.
StatusOr<std::unique_ptr<ParamStore>> NewParamStore(const ParamStoreOptions& options);

// The in-memory store (no durability).
std::unique_ptr<ParamStore> NewMemoryStore();

}  // namespace relaxps

#endif  // RELAXPS_STORAGE_PARAM_STORE_H_
