// NewParamStore: picks the implementation named by ParamStoreOptions::kind.
#include "storage/param_store.h"

#include "storage/internal/rocksdb_store.h"

namespace relaxps {

StatusOr<std::unique_ptr<ParamStore>> NewParamStore(const ParamStoreOptions& options) {
  if (options.kind == "memory") return NewMemoryStore();
  if (options.kind == "rocksdb") return storage_internal::NewRocksDbStore(options);
  return InvalidArgumentError("unknown param store kind '" + options.kind +
                              "' (expected 'memory' or 'rocksdb')");
}

}  // namespace relaxps
