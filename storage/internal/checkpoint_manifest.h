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

// A file of a checkpoint that travels inside its manifest file ("packed")
// instead of as a file of its own: RocksDB's MANIFEST, CURRENT, OPTIONS and
// WAL copies. Their bytes need a sync each as separate files; inside the
// manifest they share its one write and sync (see WriteCheckpointManifest).
struct PackedSource {
  std::string name;      // Name in the checkpoint and in a restored data_dir.
  std::string path;      // Read the first `size` bytes from here; empty: `contents`.
  std::string contents;  // The bytes, when `path` is empty.
  uint64_t size = 0;     // Bytes to take (a live MANIFEST or WAL grows past it).
};

// Where a packed file's bytes lie within the manifest file.
struct PackedFile {
  std::string name;
  uint64_t offset = 0;
  uint64_t size = 0;
};

// Writes the manifest of the unpublished checkpoint directory `dir`: the
// regular files already in it (hard links of the store's immutable files)
// with their sizes, and `packed` carried inside it (format version 2; see
// checkpoint.cc). One file, written and synced once through `fs` (the
// store's file system: the disk seam tests fail, delay or lose); no rename,
// since `dir` itself is renamed into place by the caller. IOError naming the
// file that could not be read or written (a packed source shorter than its
// size is one).
Status WriteCheckpointManifest(rocksdb::FileSystem* fs, const std::string& dir, int64_t clock,
                               const std::string& store, const std::vector<std::string>& tables,
                               const std::vector<PackedSource>& packed);

// Parses the manifest `text` (read from `path`, named in errors) into
// `info`'s clock, store, tables, files, packed files and bytes, and, if
// `packed` is not null, where each packed file's bytes lie in `text`.
// Corruption unless the checksum matches and every record is well formed.
// Reads version 1 (every file separate) and version 2 (packed files).
Status ParseCheckpointManifest(const std::string& path, const std::string& text,
                               CheckpointInfo* info, std::vector<PackedFile>* packed = nullptr);

}  // namespace storage_internal
}  // namespace relaxps

#endif  // RELAXPS_STORAGE_INTERNAL_CHECKPOINT_MANIFEST_H_
