// Factory of the RocksDB-backed ParamStore (see rocksdb_store.cc).
#ifndef RELAXPS_STORAGE_INTERNAL_ROCKSDB_STORE_H_
#define RELAXPS_STORAGE_INTERNAL_ROCKSDB_STORE_H_

#include <memory>

#include "common/status.h"
#include "storage/param_store.h"

namespace relaxps {
namespace storage_internal {

// InvalidArgument for a missing data_dir; IOError / Corruption naming the
// directory if an existing database cannot be opened.
StatusOr<std::unique_ptr<ParamStore>> NewRocksDbStore(const ParamStoreOptions& options);

}  // namespace storage_internal
}  // namespace relaxps

#endif  // RELAXPS_STORAGE_INTERNAL_ROCKSDB_STORE_H_
