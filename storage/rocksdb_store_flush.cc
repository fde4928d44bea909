// RocksDbStore: Flush, Checkpoint and the low-level write helpers (see
// rocksdb_store.cc for the durability design).
#include <algorithm>
#include <cstdio>
#include <map>
#include <filesystem>
#include <memory>
#include <string>

#include <rocksdb/db.h>
#include <rocksdb/sst_file_writer.h>
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

std::string RocksDbStore::DenseMetaValue(const DenseTable& t) const {
  TableMeta m;
  m.kind = TableKind::kDense;
  m.id = t.id;
  m.dense = t.shard.spec;
  m.step = t.shard.step;
  m.clock = t.shard.clock;
  return EncodeTableMeta(m);
}

std::string RocksDbStore::SparseMetaValue(const SparseTable& t, uint64_t num_rows) const {
  TableMeta m;
  m.kind = TableKind::kSparse;
  m.id = t.id;
  m.sparse = t.spec;
  m.num_rows = num_rows;
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

Status RocksDbStore::FlushMemtables(const char* what) {
  rocksdb::FlushOptions fo;
  fo.wait = true;
  fo.allow_write_stall = true;
  return FromRocks(db_->Flush(fo), std::string(what) + ": cannot flush " + Where());
}

Status RocksDbStore::DoFlush(int64_t clock) {
  // Staged rows must be durable before the commit that refers to them.
  RETURN_IF_ERROR(StageDirtyRows());
  if (staged_rows_) RETURN_IF_ERROR(FlushMemtables("flush staged rows"));

  // The commit is one SST file, ingested atomically: the changed dense chunks
  // (skipping unchanged ones by content hash), every table record, the store
  // metadata and the flush record. Written straight to the file, so dense
  // data is not copied through a WriteBatch and a memtable.
  struct Changed {
    DenseTable* table;
    std::vector<uint64_t> hashes;
    std::vector<size_t> chunks;  // Indexes into hashes (slot * num_chunks + chunk), ascending.
  };
  std::vector<Changed> changed;
  for (auto& [name, t] : dense_) {
    Changed c{t.get(), t->HashChunks(), {}};
    for (size_t i = 0; i < c.hashes.size(); ++i) {
      if (c.hashes[i] != t->committed_hash[i]) c.chunks.push_back(i);
    }
    changed.push_back(std::move(c));
  }
  // SST keys must be added in order: "F" < "M" < "d" + id... < "t" + name.
  std::sort(changed.begin(), changed.end(),
            [](const Changed& a, const Changed& b) { return a.table->id < b.table->id; });
  std::map<std::string, std::string> table_records;
  for (const Changed& c : changed) {
    table_records.emplace(TableMetaKey(c.table->shard.spec.table), DenseMetaValue(*c.table));
  }
  for (const auto& [name, t] : sparse_) {
    table_records.emplace(TableMetaKey(name), SparseMetaValue(*t, t->num_rows));
  }

  const std::string path = options_.data_dir + "/relaxps-flush.sst.tmp";
  Status s = [&]() -> Status {
    rocksdb::SstFileWriter writer(rocksdb::EnvOptions(), db_options_);
    const std::string what = "cannot write " + path;
    RETURN_IF_ERROR(FromRocks(writer.Open(path), what));
    RETURN_IF_ERROR(FromRocks(
        writer.Put(kFlushKey, EncodeFlushRecord(FlushRecord{clock, staged_rows_})), what));
    RETURN_IF_ERROR(FromRocks(writer.Put(kStoreMetaKey, EncodeStoreMeta(meta_)), what));
    for (const Changed& c : changed) {
      const DenseTable& t = *c.table;
      const uint64_t chunks = t.num_chunks();
      for (size_t i : c.chunks) {
        const int slot = static_cast<int>(i / chunks);
        const uint64_t chunk = i % chunks;
        const uint64_t first = chunk * kDenseChunkFloats;
        const size_t len = std::min<uint64_t>(kDenseChunkFloats, t.shard.size() - first);
        RETURN_IF_ERROR(FromRocks(
            writer.Put(DenseChunkKey(t.id, slot, chunk),
                       rocksdb::Slice(reinterpret_cast<const char*>(t.shard.slots[slot] + first),
                                      len * sizeof(float))),
            what));
      }
    }
    for (const auto& [key, value] : table_records) {
      RETURN_IF_ERROR(FromRocks(writer.Put(key, value), what));
    }
    RETURN_IF_ERROR(FromRocks(writer.Finish(), what));  // Also fsyncs the file.
    rocksdb::IngestExternalFileOptions ingest;
    ingest.move_files = true;           // Hard link, no copy.
    ingest.allow_blocking_flush = true;  // Older values of these keys may sit in the memtable.
    return FromRocks(db_->IngestExternalFile({path}, ingest), "cannot commit flush of " + Where());
  }();
  RemoveAll(path).IgnoreError();
  RETURN_IF_ERROR(s);

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
