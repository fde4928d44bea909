// FaultInjectingFileSystem: the disk seam of the stores, for failure tests.
//
// A rocksdb::FileSystemWrapper (Debian's RocksDB ships no
// FaultInjectionTestFS) that forwards to a real file system and, on demand:
//  - fails writes with ENOSPC ("no space left") or EIO, for every file or
//    only files whose path contains a given substring: creating a writable
//    file or a directory, Append, Sync/Fsync, Close, and renames/links onto
//    such a path;
//  - fails reads with EIO by path, the same way: opening a file for reading
//    and listing a directory (SetReadError);
//  - fails deletes of files and directories with EIO by path
//    (SetDeleteError), independently of the write errors, so a failed write
//    can still clean up after itself;
//  - delays every Append and Sync by a fixed time (a slow disk);
//  - tracks, per file written through it, how many bytes were synced, and on
//    SimulateCrash() drops what was not: files never synced are deleted,
//    others truncated to their last synced size (a file is followed through
//    renames of it and of its directories, and a hard link made of it starts
//    with its state); until Reactivate() every write
//    and delete then fails, so the dying process cannot change anything.
// RocksDbStore uses it through ParamStoreOptions::file_system for its
// database, its SST writer (the O_DIRECT generation files) and its
// checkpoint directories and manifests, and the checkpoint functions
// (storage/checkpoint.h: read, restore, list, prune) take it as their `fs`
// argument, so a test reaches every disk access of the store and of its
// checkpoints through one seam. Deterministic: no randomness, no clock.
//
// Thread-safety: all methods are safe from any thread.
#ifndef RELAXPS_STORAGE_FAULT_INJECTING_FS_H_
#define RELAXPS_STORAGE_FAULT_INJECTING_FS_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <rocksdb/file_system.h>

#include "common/thread_annotations.h"

namespace relaxps {

class FaultInjectingFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  enum class WriteError { kNone, kNoSpace, kIO };

  // Wraps `target` (nullptr: rocksdb::FileSystem::Default()).
  explicit FaultInjectingFileSystem(std::shared_ptr<rocksdb::FileSystem> target = nullptr);

  static const char* kClassName() { return "RelaxpsFaultInjectingFileSystem"; }
  const char* Name() const override { return kClassName(); }

  // From now on, writes to paths containing `path_part` ("" : every path)
  // fail with `error` (kNone: stop failing).
  void SetWriteError(WriteError error, const std::string& path_part = "");
  // From now on, opening files for reading (sequential or random access) and
  // listing directories whose path contains `path_part` ("" : every path)
  // fail with EIO (false: stop failing).
  void SetReadError(bool fail, const std::string& path_part = "");
  // From now on, deleting files and directories whose path contains
  // `path_part` ("" : every path) fails with EIO (false: stop failing).
  void SetDeleteError(bool fail, const std::string& path_part = "");
  // Every Append and Sync waits this long first (0: no delay).
  void SetWriteDelayMs(int ms) { delay_ms_.store(ms); }
  // From now on, a Sync (or Fsync) of a path containing `path_part` waits
  // until HoldSyncs(false) before it runs: what happens while the disk has
  // not confirmed a sync. Appends go on.
  void HoldSyncs(bool hold, const std::string& path_part = "");
  // Syncs waiting in HoldSyncs now.
  int held_syncs() const;
  // Drops every write not covered by a Sync (see the header comment) and
  // deactivates the file system until Reactivate().
  void SimulateCrash();
  void Reactivate();
  // Writes failed on purpose so far.
  uint64_t injected_errors() const { return injected_errors_.load(); }

  // Internal, for the wrapped files: the error to return for a write to
  // `path` now (OK if none), counting it.
  rocksdb::IOStatus WriteFault(const std::string& path);
  // The same for a read of, and a delete of, `path`.
  rocksdb::IOStatus ReadFault(const std::string& path);
  rocksdb::IOStatus DeleteFault(const std::string& path);
  void Delay() const;
  // Waits while syncs of `path` are held (HoldSyncs).
  void WaitIfSyncHeld(const std::string& path);
  void Appended(const std::string& path, uint64_t bytes);
  // Bytes appended to `path` so far; Synced(path, size) then records a sync
  // that covers them (taken before the sync: an append another thread makes
  // while it runs is not counted as synced).
  uint64_t AppendedSize(const std::string& path);
  void Synced(const std::string& path, uint64_t size);

  // ---- rocksdb::FileSystem ----
  rocksdb::IOStatus NewWritableFile(const std::string& fname, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus ReopenWritableFile(const std::string& fname,
                                       const rocksdb::FileOptions& options,
                                       std::unique_ptr<rocksdb::FSWritableFile>* result,
                                       rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus ReuseWritableFile(const std::string& fname, const std::string& old_fname,
                                      const rocksdb::FileOptions& options,
                                      std::unique_ptr<rocksdb::FSWritableFile>* result,
                                      rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus RenameFile(const std::string& src, const std::string& target,
                               const rocksdb::IOOptions& options,
                               rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus LinkFile(const std::string& src, const std::string& target,
                             const rocksdb::IOOptions& options,
                             rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus DeleteFile(const std::string& fname, const rocksdb::IOOptions& options,
                               rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus DeleteDir(const std::string& dirname, const rocksdb::IOOptions& options,
                              rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus CreateDir(const std::string& dirname, const rocksdb::IOOptions& options,
                              rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus CreateDirIfMissing(const std::string& dirname,
                                       const rocksdb::IOOptions& options,
                                       rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus NewSequentialFile(const std::string& fname,
                                      const rocksdb::FileOptions& options,
                                      std::unique_ptr<rocksdb::FSSequentialFile>* result,
                                      rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus NewRandomAccessFile(const std::string& fname,
                                        const rocksdb::FileOptions& options,
                                        std::unique_ptr<rocksdb::FSRandomAccessFile>* result,
                                        rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus GetChildren(const std::string& dir, const rocksdb::IOOptions& options,
                                std::vector<std::string>* result,
                                rocksdb::IODebugContext* dbg) override;

 private:
  struct FileState {
    uint64_t size = 0;    // Bytes appended through us.
    uint64_t synced = 0;  // Bytes covered by the last Sync.
    bool ever_synced = false;
  };
  rocksdb::IOStatus Wrap(const std::string& fname, rocksdb::IOStatus opened,
                         std::unique_ptr<rocksdb::FSWritableFile>* result, bool truncated);

  std::atomic<int> delay_ms_{0};
  std::atomic<uint64_t> injected_errors_{0};
  mutable Mutex mu_;
  WriteError error_ GUARDED_BY(mu_) = WriteError::kNone;
  std::string error_path_part_ GUARDED_BY(mu_);
  bool read_error_ GUARDED_BY(mu_) = false;
  std::string read_error_path_part_ GUARDED_BY(mu_);
  bool delete_error_ GUARDED_BY(mu_) = false;
  std::string delete_error_path_part_ GUARDED_BY(mu_);
  bool active_ GUARDED_BY(mu_) = true;
  bool hold_syncs_ GUARDED_BY(mu_) = false;
  std::string hold_path_part_ GUARDED_BY(mu_);
  int held_syncs_ GUARDED_BY(mu_) = 0;
  std::condition_variable_any sync_released_;
  std::map<std::string, FileState> files_ GUARDED_BY(mu_);
};

}  // namespace relaxps

#endif  // RELAXPS_STORAGE_FAULT_INJECTING_FS_H_
