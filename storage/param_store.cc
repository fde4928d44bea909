// NewParamStore: picks the implementation named by ParamStoreOptions::kind.
#include "storage/param_store.h"

#include "storage/internal/rocksdb_store.h"

namespace relaxps {

StatusOr<std::unique_ptr<ParamStore>> NewParamStore(const ParamStoreOptions& options) {
  const std::string kind = options.ResolvedKind();
  if (kind == "memory") return NewMemoryStore();
  if (kind == "rocksdb") {
    if (options.data_dir.empty()) return InvalidArgumentError("store 'rocksdb' needs a data_dir");
    return storage_internal::NewRocksDbStore(options);
  }
  return InvalidArgumentError("unknown param store kind '" + kind +
                              "' (expected 'memory' or 'rocksdb')");
}

}  // namespace relaxps
