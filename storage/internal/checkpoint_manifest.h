// The manifest of a checkpoint directory (see storage/checkpoint.h; the
// public reader is ReadCheckpointInfo, which also checks the listed files).
// Pure functions apart from the file system access of the writer.
#ifndef RELAXPS_STORAGE_INTERNAL_CHECKPOINT_MANIFEST_H_
#define RELAXPS_STORAGE_INTERNAL_CHECKPOINT_MANIFEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "storage/checkpoint.h"

namespace rocksdb {
class FileSystem;
}  // namespace rocksdb

namespace relaxps {
namespace storage_internal {

// Lists the regular files of `dir` and writes its manifest atomically
// through `fs` (the store's file system: the disk seam tests fail or delay).
Status WriteCheckpointManifest(rocksdb::FileSystem* fs, const std::string& dir, int64_t clock,
                               const std::string& store, const std::vector<std::string>& tables);

// Parses the manifest `text` (read from `path`, named in errors) into
// `info`'s clock, store, tables, files and bytes. Corruption unless the
// checksum matches and every record is well formed.
Status ParseCheckpointManifest(const std::string& path, const std::string& text,
                               CheckpointInfo* info);

}  // namespace storage_internal
}  // namespace relaxps

#endif  // RELAXPS_STORAGE_INTERNAL_CHECKPOINT_MANIFEST_H_
