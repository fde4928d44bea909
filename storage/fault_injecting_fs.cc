#include "storage/fault_injecting_fs.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

// Returns the fault (a non-OK IOStatus) from the enclosing function.
#define RETURN_FAULT(expr)               \
  do {                                   \
    ::rocksdb::IOStatus fault_ = (expr); \
    if (!fault_.ok()) return fault_;     \
  } while (0)

namespace relaxps {
namespace {

using rocksdb::IODebugContext;
using rocksdb::IOOptions;
using rocksdb::IOStatus;
using rocksdb::Slice;

// Forwards to the real file, asking the file system first whether a write
// fails, and reporting appends and syncs for SimulateCrash().
class FaultInjectingWritableFile final : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  FaultInjectingWritableFile(std::unique_ptr<rocksdb::FSWritableFile> file, std::string path,
                             FaultInjectingFileSystem* fs)
      : FSWritableFileOwnerWrapper(std::move(file)), path_(std::move(path)), fs_(fs) {}

  IOStatus Append(const Slice& data, const IOOptions& options, IODebugContext* dbg) override {
    return Write(data.size(), [&] { return target()->Append(data, options, dbg); });
  }
  IOStatus Append(const Slice& data, const IOOptions& options,
                  const rocksdb::DataVerificationInfo&, IODebugContext* dbg) override {
    return Append(data, options, dbg);
  }
  IOStatus PositionedAppend(const Slice& data, uint64_t offset, const IOOptions& options,
                            IODebugContext* dbg) override {
    return Write(data.size(),
                 [&] { return target()->PositionedAppend(data, offset, options, dbg); });
  }
  IOStatus PositionedAppend(const Slice& data, uint64_t offset, const IOOptions& options,
                            const rocksdb::DataVerificationInfo&, IODebugContext* dbg) override {
    return PositionedAppend(data, offset, options, dbg);
  }
  IOStatus Sync(const IOOptions& options, IODebugContext* dbg) override {
    return Write(kSync, [&] { return target()->Sync(options, dbg); });
  }
  IOStatus Fsync(const IOOptions& options, IODebugContext* dbg) override {
    return Write(kSync, [&] { return target()->Fsync(options, dbg); });
  }
  IOStatus Close(const IOOptions& options, IODebugContext* dbg) override {
    IOStatus fault = fs_->WriteFault(path_);
    IOStatus s = target()->Close(options, dbg);  // Always release the descriptor.
    return fault.ok() ? s : fault;
  }

 private:
  static constexpr uint64_t kSync = ~uint64_t{0};

  // Delays, asks the file system whether this write fails, else runs `op`
  // on the real file and records an append of `bytes` (kSync: a sync,
  // which covers the bytes appended when it was called: not those another
  // thread appends while it is delayed or runs).
  template <typename Op>
  IOStatus Write(uint64_t bytes, Op op) {
    if (bytes == kSync) fs_->WaitIfSyncHeld(path_);
    const uint64_t size = bytes == kSync ? fs_->AppendedSize(path_) : 0;
    fs_->Delay();
    RETURN_FAULT(fs_->WriteFault(path_));
    IOStatus s = op();
    if (s.ok() && bytes == kSync) fs_->Synced(path_, size);
    if (s.ok() && bytes != kSync) fs_->Appended(path_, bytes);
    return s;
  }

  const std::string path_;
  FaultInjectingFileSystem* const fs_;
};

}  // namespace

FaultInjectingFileSystem::FaultInjectingFileSystem(std::shared_ptr<rocksdb::FileSystem> target)
    : FileSystemWrapper(target ? std::move(target) : rocksdb::FileSystem::Default()) {}

void FaultInjectingFileSystem::SetWriteError(WriteError error, const std::string& path_part) {
  MutexLock l(&mu_);
  error_ = error;
  error_path_part_ = path_part;
}

void FaultInjectingFileSystem::SetReadError(bool fail, const std::string& path_part) {
  MutexLock l(&mu_);
  read_error_ = fail;
  read_error_path_part_ = path_part;
}

void FaultInjectingFileSystem::SetDeleteError(bool fail, const std::string& path_part) {
  MutexLock l(&mu_);
  delete_error_ = fail;
  delete_error_path_part_ = path_part;
}

IOStatus FaultInjectingFileSystem::ReadFault(const std::string& path) {
  MutexLock l(&mu_);
  if (!read_error_ || path.find(read_error_path_part_) == std::string::npos) return IOStatus::OK();
  injected_errors_.fetch_add(1);
  return IOStatus::IOError("injected EIO: Input/output error (read)", path);
}

IOStatus FaultInjectingFileSystem::DeleteFault(const std::string& path) {
  MutexLock l(&mu_);
  if (!active_) {
    injected_errors_.fetch_add(1);
    return IOStatus::IOError("injected: file system inactive after a simulated crash", path);
  }
  if (!delete_error_ || path.find(delete_error_path_part_) == std::string::npos) {
    return IOStatus::OK();
  }
  injected_errors_.fetch_add(1);
  return IOStatus::IOError("injected EIO: Input/output error (delete)", path);
}

IOStatus FaultInjectingFileSystem::WriteFault(const std::string& path) {
  MutexLock l(&mu_);
  if (!active_) {
    injected_errors_.fetch_add(1);
    return IOStatus::IOError("injected: file system inactive after a simulated crash", path);
  }
  if (error_ == WriteError::kNone || path.find(error_path_part_) == std::string::npos) {
    return IOStatus::OK();
  }
  injected_errors_.fetch_add(1);
  if (error_ == WriteError::kNoSpace) {
    return IOStatus::NoSpace("injected ENOSPC: No space left on device", path);
  }
  return IOStatus::IOError("injected EIO: Input/output error", path);
}

void FaultInjectingFileSystem::Delay() const {
  const int ms = delay_ms_.load();
  if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

void FaultInjectingFileSystem::HoldSyncs(bool hold, const std::string& path_part) {
  {
    MutexLock l(&mu_);
    hold_syncs_ = hold;
    hold_path_part_ = path_part;
  }
  sync_released_.notify_all();
}

int FaultInjectingFileSystem::held_syncs() const {
  MutexLock l(&mu_);
  return held_syncs_;
}

void FaultInjectingFileSystem::WaitIfSyncHeld(const std::string& path) {
  MutexLock l(&mu_);
  if (!hold_syncs_ || path.find(hold_path_part_) == std::string::npos) return;
  ++held_syncs_;
  while (hold_syncs_ && path.find(hold_path_part_) != std::string::npos) sync_released_.wait(mu_);
  --held_syncs_;
}

void FaultInjectingFileSystem::Appended(const std::string& path, uint64_t bytes) {
  MutexLock l(&mu_);
  files_[path].size += bytes;
}

uint64_t FaultInjectingFileSystem::AppendedSize(const std::string& path) {
  MutexLock l(&mu_);
  return files_[path].size;
}

void FaultInjectingFileSystem::Synced(const std::string& path, uint64_t size) {
  MutexLock l(&mu_);
  FileState& f = files_[path];
  f.synced = std::max(f.synced, size);
  f.ever_synced = true;
}

IOStatus FaultInjectingFileSystem::Wrap(const std::string& fname, IOStatus opened,
                                        std::unique_ptr<rocksdb::FSWritableFile>* result,
                                        bool truncated) {
  if (!opened.ok()) return opened;
  {
    MutexLock l(&mu_);
    FileState& f = files_[fname];
    if (truncated) f = FileState();
  }
  result->reset(new FaultInjectingWritableFile(std::move(*result), fname, this));
  return IOStatus::OK();
}

IOStatus FaultInjectingFileSystem::NewWritableFile(const std::string& fname,
                                                   const rocksdb::FileOptions& options,
                                                   std::unique_ptr<rocksdb::FSWritableFile>* result,
                                                   IODebugContext* dbg) {
  RETURN_FAULT(WriteFault(fname));
  return Wrap(fname, target()->NewWritableFile(fname, options, result, dbg), result, true);
}

IOStatus FaultInjectingFileSystem::ReopenWritableFile(
    const std::string& fname, const rocksdb::FileOptions& options,
    std::unique_ptr<rocksdb::FSWritableFile>* result, IODebugContext* dbg) {
  RETURN_FAULT(WriteFault(fname));
  return Wrap(fname, target()->ReopenWritableFile(fname, options, result, dbg), result, false);
}

IOStatus FaultInjectingFileSystem::ReuseWritableFile(
    const std::string& fname, const std::string& old_fname, const rocksdb::FileOptions& options,
    std::unique_ptr<rocksdb::FSWritableFile>* result, IODebugContext* dbg) {
  RETURN_FAULT(WriteFault(fname));
  return Wrap(fname, target()->ReuseWritableFile(fname, old_fname, options, result, dbg), result,
              true);
}

IOStatus FaultInjectingFileSystem::RenameFile(const std::string& src, const std::string& dst,
                                              const IOOptions& options, IODebugContext* dbg) {
  RETURN_FAULT(WriteFault(dst));
  IOStatus s = target()->RenameFile(src, dst, options, dbg);
  if (s.ok()) {
    MutexLock l(&mu_);
    auto it = files_.find(src);
    if (it != files_.end()) {
      files_[dst] = it->second;
      files_.erase(it);
    } else {
      files_.erase(dst);
    }
    // A renamed directory takes the files written under it along.
    const std::string prefix = src + "/";
    for (it = files_.lower_bound(prefix);
         it != files_.end() && it->first.compare(0, prefix.size(), prefix) == 0;) {
      files_[dst + it->first.substr(src.size())] = it->second;
      it = files_.erase(it);
    }
  }
  return s;
}

IOStatus FaultInjectingFileSystem::LinkFile(const std::string& src, const std::string& dst,
                                            const IOOptions& options, IODebugContext* dbg) {
  RETURN_FAULT(WriteFault(dst));
  IOStatus s = target()->LinkFile(src, dst, options, dbg);
  if (s.ok()) {
    // The new name has the file's unsynced bytes too (until a sync through
    // either name; tracked per name, so sync the name that must survive).
    MutexLock l(&mu_);
    auto it = files_.find(src);
    if (it != files_.end()) files_[dst] = it->second;
  }
  return s;
}

IOStatus FaultInjectingFileSystem::DeleteFile(const std::string& fname, const IOOptions& options,
                                              IODebugContext* dbg) {
  RETURN_FAULT(DeleteFault(fname));
  {
    MutexLock l(&mu_);
    files_.erase(fname);
  }
  return target()->DeleteFile(fname, options, dbg);
}

IOStatus FaultInjectingFileSystem::DeleteDir(const std::string& dirname, const IOOptions& options,
                                             IODebugContext* dbg) {
  RETURN_FAULT(DeleteFault(dirname));
  return target()->DeleteDir(dirname, options, dbg);
}

IOStatus FaultInjectingFileSystem::CreateDir(const std::string& dirname, const IOOptions& options,
                                             IODebugContext* dbg) {
  RETURN_FAULT(WriteFault(dirname));
  return target()->CreateDir(dirname, options, dbg);
}

IOStatus FaultInjectingFileSystem::CreateDirIfMissing(const std::string& dirname,
                                                      const IOOptions& options,
                                                      IODebugContext* dbg) {
  RETURN_FAULT(WriteFault(dirname));
  return target()->CreateDirIfMissing(dirname, options, dbg);
}

IOStatus FaultInjectingFileSystem::NewSequentialFile(
    const std::string& fname, const rocksdb::FileOptions& options,
    std::unique_ptr<rocksdb::FSSequentialFile>* result, IODebugContext* dbg) {
  RETURN_FAULT(ReadFault(fname));
  return target()->NewSequentialFile(fname, options, result, dbg);
}

IOStatus FaultInjectingFileSystem::NewRandomAccessFile(
    const std::string& fname, const rocksdb::FileOptions& options,
    std::unique_ptr<rocksdb::FSRandomAccessFile>* result, IODebugContext* dbg) {
  RETURN_FAULT(ReadFault(fname));
  return target()->NewRandomAccessFile(fname, options, result, dbg);
}

IOStatus FaultInjectingFileSystem::GetChildren(const std::string& dir, const IOOptions& options,
                                               std::vector<std::string>* result,
                                               IODebugContext* dbg) {
  RETURN_FAULT(ReadFault(dir));
  return target()->GetChildren(dir, options, result, dbg);
}

void FaultInjectingFileSystem::SimulateCrash() {
  MutexLock l(&mu_);
  active_ = false;
  for (const auto& [path, f] : files_) {
    if (!f.ever_synced) {
      ::unlink(path.c_str());
    } else if (f.synced < f.size) {
      if (::truncate(path.c_str(), static_cast<off_t>(f.synced)) != 0) {
        // Deleted meanwhile; nothing to drop.
      }
    }
  }
  files_.clear();
}

void FaultInjectingFileSystem::Reactivate() {
  MutexLock l(&mu_);
  active_ = true;
}

}  // namespace relaxps
