// Checkpoints of a durable ParamStore: reading, restoring, listing and
// pruning the directories that ParamStore::Checkpoint writes.
//
// A checkpoint directory holds the SST files of a RocksDB store, hard-linked
// from the live store, plus a manifest file, RELAXPS_CHECKPOINT, that makes
// it self-describing: the clock it was tagged with, the store kind, the
// tables, every data file with its size, copies of the store's small
// mutable files (MANIFEST, CURRENT, OPTIONS, WAL: "packed" inside the
// manifest, so that a checkpoint costs one file write and sync instead of
// one per file), and a CRC-32C over the manifest itself. Checkpoint() builds
// the directory under "<dir>.partial" and renames it into place, so a
// directory named by the caller is either complete or absent. Restore
// unpacks the packed files next to the linked ones: the restored data_dir is
// an ordinary RocksDB directory. Checkpoints written before packing (manifest
// version 1, every file separate) are read and restored as before.
//
// By convention a server keeps its checkpoints under one root as
// "<root>/ckpt-<clock>" (CheckpointDirName); ListCheckpoints and
// PruneCheckpoints work on such a root.
//
// Every file and directory operation (listing, sizes, reads, copies, links,
// renames, deletes, syncs, and the verification of a restored copy) goes
// through the `fs` argument: the store's ParamStoreOptions::file_system, so
// a FaultInjectingFileSystem (storage/fault_injecting_fs.h) reaches restore,
// listing and pruning too. nullptr (the default) is the real file system,
// rocksdb::FileSystem::Default(). `fs` is borrowed for the call only.
//
// Thread-safety: the functions are stateless; callers must not restore into
// a data_dir that an open store is using, nor prune a checkpoint being read.
#ifndef RELAXPS_STORAGE_CHECKPOINT_H_
#define RELAXPS_STORAGE_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace rocksdb {
class FileSystem;
}  // namespace rocksdb

namespace relaxps {

struct CheckpointFile {
  std::string name;  // Relative to the checkpoint directory.
  uint64_t size = 0;
};

struct CheckpointInfo {
  std::string dir;                  // The checkpoint directory.
  int64_t clock = 0;                // Clock passed to ParamStore::Checkpoint.
  std::string store;                // Name() of the store that wrote it.
  std::vector<std::string> tables;  // Sorted table names.
  std::vector<CheckpointFile> files;   // Separate files (hard links of SST files).
  std::vector<CheckpointFile> packed;  // Carried inside the manifest file.
  uint64_t bytes = 0;                  // Sum of the sizes of files and packed.
};

// Name of the manifest file inside a checkpoint directory.
inline constexpr char kCheckpointManifestName[] = "RELAXPS_CHECKPOINT";

// "ckpt-<clock>": the directory name of a checkpoint under a root.
std::string CheckpointDirName(int64_t clock);

// Reads and validates the manifest of `dir`: its checksum, and that every
// listed file exists with its recorded size. NotFound if `dir` does not
// exist; Corruption naming the file if the manifest is missing, truncated or
// garbled, or a data file is missing or has the wrong size; IOError naming
// the path if `fs` fails to read the manifest or a file's size.
StatusOr<CheckpointInfo> ReadCheckpointInfo(const std::string& dir,
                                            rocksdb::FileSystem* fs = nullptr);

// Replaces the contents of `data_dir` with a copy of `checkpoint_dir`
// (immutable SST files are hard-linked when possible, the rest is copied),
// after verifying that the copy opens as a store and that every block
// checksum matches. On any failure data_dir is left untouched and the error
// (Corruption for a bad checkpoint) names the checkpoint and the bad file;
// a disk error (IOError, e.g. an ENOSPC or EIO copy) names the failing path.
// The copy is built and synced in "<data_dir>.restoring", then swapped in
// by renames, so a crash never leaves a partial data_dir (between the two
// renames it is absent, the old one in "<data_dir>.replaced"); rerunning the
// restore removes the leftovers and completes it.
// REQUIRES: no store is open on data_dir.
Status RestoreCheckpoint(const std::string& checkpoint_dir, const std::string& data_dir,
                         rocksdb::FileSystem* fs = nullptr);

// The valid checkpoints "<root>/ckpt-*", sorted by clock (oldest first).
// Directories that fail ReadCheckpointInfo are skipped with a warning; an
// unreadable or missing root gives an empty list.
std::vector<CheckpointInfo> ListCheckpoints(const std::string& root,
                                            rocksdb::FileSystem* fs = nullptr);

// Removes the checkpoint directory `dir` and everything in it (e.g. to
// replace a checkpoint of the same clock); OK if it does not exist. IOError
// naming the entry that could not be removed.
Status RemoveCheckpoint(const std::string& dir, rocksdb::FileSystem* fs = nullptr);

// Moves the complete checkpoint `from` to `to`, replacing a checkpoint
// there: `to` is removed only once `from` is complete, so a failed
// replacement (a full disk) leaves the older checkpoint in place. A crash
// between the removal and the rename leaves `from` (not listed under a root:
// its name does not parse). IOError naming the path that failed.
Status ReplaceCheckpoint(const std::string& from, const std::string& to,
                         rocksdb::FileSystem* fs = nullptr);

// Deletes all but the newest keep_last_k valid checkpoints under root.
// InvalidArgument if keep_last_k < 1; IOError naming the directory that
// could not be removed (the older ones are removed first; a failure stops
// the pruning, leaving the newer ones).
Status PruneCheckpoints(const std::string& root, int keep_last_k,
                        rocksdb::FileSystem* fs = nullptr);

}  // namespace relaxps

#endif  // RELAXPS_STORAGE_CHECKPOINT_H_
