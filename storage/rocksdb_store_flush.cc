// RocksDbStore: Flush, Checkpoint and the low-level write helpers (see
// rocksdb_store.cc for the durability design).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include <rocksdb/db.h>
#include <rocksdb/utilities/checkpoint.h>
#include <rocksdb/write_batch.h>

#include "storage/internal/checkpoint_manifest.h"
#include "storage/internal/file_util.h"
#include "storage/internal/rocksdb_store_impl.h"
#include "storage/internal/rocksdb_util.h"

namespace relaxps {
namespace storage_internal {

void RocksDbStore::PutDenseChunks(const DenseTable& t, int slot, uint64_t first_chunk,
                                  uint64_t end_chunk, rocksdb::WriteBatch* batch) const {
  const size_t n = t.shard.size();
  for (uint64_t c = first_chunk; c < end_chunk; ++c) {
    const uint64_t first = c * kDenseChunkFloats;
    const size_t len = std::min<uint64_t>(kDenseChunkFloats, n - first);
    batch->Put(DenseChunkKey(t.id, slot, c),
               rocksdb::Slice(reinterpret_cast<const char*>(t.shard.slots[slot] + first),
                              len * sizeof(float)));
  }
}

void RocksDbStore::PutDenseMeta(const DenseTable& t, rocksdb::WriteBatch* batch) const {
  TableMeta m;
  m.kind = TableKind::kDense;
  m.id = t.id;
  m.dense = t.shard.spec;
  m.step = t.shard.step;
  m.clock = t.shard.clock;
  batch->Put(TableMetaKey(m.dense.table), EncodeTableMeta(m));
  batch->Put(kStoreMetaKey, EncodeStoreMeta(meta_));
}

void RocksDbStore::PutSparseMeta(const SparseTable& t, uint64_t num_rows,
                                 rocksdb::WriteBatch* batch) const {
  TableMeta m;
  m.kind = TableKind::kSparse;
  m.id = t.id;
  m.sparse = t.spec;
  m.num_rows = num_rows;
  batch->Put(TableMetaKey(m.sparse.table), EncodeTableMeta(m));
  batch->Put(kStoreMetaKey, EncodeStoreMeta(meta_));
}

Status RocksDbStore::Write(rocksdb::WriteBatch* batch, bool wal, bool sync, const char* what) {
  rocksdb::WriteOptions wo;
  wo.disableWAL = !wal;
  wo.sync = wal && sync;
  return FromRocks(db_->Write(wo, batch), std::string(what) + " in " + Where());
}

Status RocksDbStore::FlushMemtables(const char* what) {
  rocksdb::FlushOptions fo;
  fo.wait = true;
  fo.allow_write_stall = true;
  return FromRocks(db_->Flush(fo), std::string(what) + ": cannot flush " + Where());
}

Status RocksDbStore::DoFlush(int64_t clock) {
  RETURN_IF_ERROR(StageDirtyRows());
  // Dense chunks whose contents changed since they were last committed.
  struct Changed {
    DenseTable* table;
    std::vector<uint64_t> hashes;
    std::vector<size_t> chunks;  // Indexes into hashes (slot * num_chunks + chunk).
  };
  std::vector<Changed> changed;
  size_t reserve = 4096;
  for (auto& [name, t] : dense_) {
    Changed c{t.get(), t->HashChunks(), {}};
    for (size_t i = 0; i < c.hashes.size(); ++i) {
      if (c.hashes[i] != t->committed_hash[i]) c.chunks.push_back(i);
    }
    reserve += c.chunks.size() * (kDenseChunkFloats * sizeof(float) + 32) + 512;
    changed.push_back(std::move(c));
  }
  {
    // The commit: changed dense chunks, every table record and the flush
    // record in one batch, made durable by the memtable flush below.
    rocksdb::WriteBatch batch(reserve);
    for (const Changed& c : changed) {
      const uint64_t chunks = c.table->num_chunks();
      for (size_t i : c.chunks) {
        PutDenseChunks(*c.table, static_cast<int>(i / chunks), i % chunks, i % chunks + 1, &batch);
      }
      PutDenseMeta(*c.table, &batch);
    }
    for (const auto& [name, t] : sparse_) PutSparseMeta(*t, t->num_rows, &batch);
    batch.Put(kStoreMetaKey, EncodeStoreMeta(meta_));
    batch.Put(kFlushKey, EncodeFlushRecord(FlushRecord{clock, staged_rows_}));
    RETURN_IF_ERROR(Write(&batch, /*wal=*/false, /*sync=*/false, "flush"));
  }
  RETURN_IF_ERROR(FlushMemtables("flush"));
  for (Changed& c : changed) c.table->committed_hash = std::move(c.hashes);
  if (staged_rows_) {
    RETURN_IF_ERROR(ApplyStagedRows(clock));
    staged_rows_ = false;
  }
  return Status::OK();
}

Status RocksDbStore::DoCheckpoint(const std::string& dir, int64_t clock) {
  if (dir.empty()) return InvalidArgumentError("checkpoint needs a directory");
  if (PathExists(dir)) return InvalidArgumentError("checkpoint directory " + dir + " already exists");
  RETURN_IF_ERROR(DoFlush(clock));

  std::error_code ec;
  std::filesystem::create_directories(ParentDir(dir), ec);
  if (ec) return IOError("cannot create " + ParentDir(dir) + ": " + ec.message());
  // Built under a temporary name and renamed, so `dir` is complete or absent.
  const std::string partial = dir + ".partial";
  RETURN_IF_ERROR(RemoveAll(partial));
  Status s = [&]() -> Status {
    rocksdb::Checkpoint* raw = nullptr;
    RETURN_IF_ERROR(FromRocks(rocksdb::Checkpoint::Create(db_.get(), &raw),
                              "cannot checkpoint " + Where()));
    std::unique_ptr<rocksdb::Checkpoint> cp(raw);
    RETURN_IF_ERROR(FromRocks(cp->CreateCheckpoint(partial, /*log_size_for_flush=*/0),
                              "cannot write checkpoint " + dir));
    RETURN_IF_ERROR(WriteCheckpointManifest(partial, clock, Name(), Tables()));
    if (std::rename(partial.c_str(), dir.c_str()) != 0) {
      return IOError("cannot rename " + partial + " to " + dir);
    }
    return SyncPath(ParentDir(dir));
  }();
  if (!s.ok()) RemoveAll(partial).IgnoreError();
  return s;
}

}  // namespace storage_internal
}  // namespace relaxps
