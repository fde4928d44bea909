// Glue between RocksDB and relaxps: Status conversion and the RocksDB
// options of a param store, sized from ParamStoreOptions::cache_mb.
#ifndef RELAXPS_STORAGE_INTERNAL_ROCKSDB_UTIL_H_
#define RELAXPS_STORAGE_INTERNAL_ROCKSDB_UTIL_H_

#include <string>

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

}  // namespace storage_internal
}  // namespace relaxps

#endif  // RELAXPS_STORAGE_INTERNAL_ROCKSDB_UTIL_H_
