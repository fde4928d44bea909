// Placeholder until the RocksDB store lands.
#include "storage/internal/rocksdb_store.h"

namespace relaxps {
namespace storage_internal {

StatusOr<std::unique_ptr<ParamStore>> NewRocksDbStore(const ParamStoreOptions& options) {
  return UnavailableError("rocksdb store is not implemented yet; use kind=memory");
}

}  // namespace storage_internal
}  // namespace relaxps
