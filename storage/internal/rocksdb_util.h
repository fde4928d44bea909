// Glue between RocksDB and relaxps: Status conversion and the RocksDB
// options of a param store, sized from ParamStoreOptions::cache_mb.
#ifndef RELAXPS_STORAGE_INTERNAL_ROCKSDB_UTIL_H_
#define RELAXPS_STORAGE_INTERNAL_ROCKSDB_UTIL_H_

#include <memory>
#include <string>

#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/options.h>
#include <rocksdb/status.h>

#include "common/status.h"
#include "storage/param_store.h"

namespace relaxps {
namespace storage_internal {

// OK stays OK; otherwise "<context>: <rocksdb message>" with the closest code
// (Corruption, NotFound, IOError, InvalidArgument, Unavailable, Aborted).
Status FromRocks(const rocksdb::Status& s, const std::string& context);

// Options of a param store's database. Memory is bounded relative to
// cache_mb: block cache and each of the two memtables get cache_mb / 8
// (clamped to [4, 256] MiB and [4, 64] MiB), index and filter blocks are
// charged to the block cache, and at most 256 files are kept open.
// `env` (nullptr: rocksdb's default) carries the file system of every file
// the database reads and writes.
rocksdb::Options MakeDbOptions(const ParamStoreOptions& options, rocksdb::Env* env = nullptr);

// An Env over `fs` whose writable files skip Sync, Fsync and RangeSync: for
// the SST files a flush writes and hands to IngestExternalFile(move_files),
// which hard-links each into the store, reopens it and syncs it before the
// MANIFEST edit that commits it (ExternalSstFileIngestionJob::Prepare; where
// the link fails it copies and syncs the copy). A sync of the file before
// that would be the same work a second time: one more journal commit and
// device cache flush per file. Nothing else may write through this Env, and
// only where CanReopenWritableFiles(fs): RocksDB 7.8 skips that sync when the
// file system cannot reopen the linked file.
std::unique_ptr<rocksdb::Env> NewIngestedFilesEnv(std::shared_ptr<rocksdb::FileSystem> fs);

// Whether `fs` reopens a file for appending (tried on a scratch file in
// `dir`, which must exist; false on any error).
bool CanReopenWritableFiles(rocksdb::FileSystem* fs, const std::string& dir);

// `options` with its env replaced.
rocksdb::Options WithEnv(rocksdb::Options options, rocksdb::Env* env);

}  // namespace storage_internal
}  // namespace relaxps

#endif  // RELAXPS_STORAGE_INTERNAL_ROCKSDB_UTIL_H_
