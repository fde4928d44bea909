// Factory of the RocksDB-backed ParamStore (see rocksdb_store.cc).
#ifndef RELAXPS_STORAGE_INTERNAL_ROCKSDB_STORE_H_
#define RELAXPS_STORAGE_INTERNAL_ROCKSDB_STORE_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/status.h"
#include "storage/param_store.h"

namespace relaxps {
namespace storage_internal {

// InvalidArgument for a missing data_dir; IOError / Corruption naming the
// directory if an existing database cannot be opened.
StatusOr<std::unique_ptr<ParamStore>> NewRocksDbStore(const ParamStoreOptions& options);

// Occupancy of a RocksDB store's sparse-row cache (for tests and metrics).
struct RowCacheStats {
  size_t bytes = 0;         // Charged bytes: row data plus per-entry overhead.
  size_t budget_bytes = 0;  // cache_mb in bytes.
  size_t rows = 0;
  uint64_t evictions = 0;
};
// InvalidArgument if `store` is not a RocksDB store.
StatusOr<RowCacheStats> GetRowCacheStats(const ParamStore* store);

}  // namespace storage_internal
}  // namespace relaxps

#endif  // RELAXPS_STORAGE_INTERNAL_ROCKSDB_STORE_H_
