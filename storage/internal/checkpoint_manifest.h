// Writing the manifest of a checkpoint directory (see storage/checkpoint.h;
// the reader is ReadCheckpointInfo).
#ifndef RELAXPS_STORAGE_INTERNAL_CHECKPOINT_MANIFEST_H_
#define RELAXPS_STORAGE_INTERNAL_CHECKPOINT_MANIFEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace rocksdb {
class FileSystem;
}  // namespace rocksdb

namespace relaxps {
namespace storage_internal {

// Lists the regular files of `dir` and writes its manifest atomically
// through `fs` (the store's file system: the disk seam tests fail or delay).
Status WriteCheckpointManifest(rocksdb::FileSystem* fs, const std::string& dir, int64_t clock,
                               const std::string& store, const std::vector<std::string>& tables);

}  // namespace storage_internal
}  // namespace relaxps

#endif  // RELAXPS_STORAGE_INTERNAL_CHECKPOINT_MANIFEST_H_
