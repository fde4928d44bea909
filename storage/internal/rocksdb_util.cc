#include "storage/internal/rocksdb_util.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <memory>
#include <mutex>

#include <glog/logging.h>
#include <rocksdb/cache.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/table.h>

#include "common/log_limiter.h"

namespace relaxps {
namespace storage_internal {
namespace {

// A writable file whose syncs are left to a later sync of the same inode.
class SyncLaterFile final : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  using FSWritableFileOwnerWrapper::FSWritableFileOwnerWrapper;
  rocksdb::IOStatus Sync(const rocksdb::IOOptions&, rocksdb::IODebugContext*) override {
    return rocksdb::IOStatus::OK();
  }
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions&, rocksdb::IODebugContext*) override {
    return rocksdb::IOStatus::OK();
  }
  rocksdb::IOStatus RangeSync(uint64_t, uint64_t, const rocksdb::IOOptions&,
                              rocksdb::IODebugContext*) override {
    return rocksdb::IOStatus::OK();
  }
};

class IngestedFilesFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  using FileSystemWrapper::FileSystemWrapper;
  static const char* kClassName() { return "RelaxpsIngestedFilesFileSystem"; }
  const char* Name() const override { return kClassName(); }
  rocksdb::IOStatus NewWritableFile(const std::string& fname, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s = target()->NewWritableFile(fname, options, result, dbg);
    if (s.ok()) *result = std::make_unique<SyncLaterFile>(std::move(*result));
    return s;
  }
};

// RocksDB's info log, into this process's log instead of a LOG file in the
// data directory. On a full disk a failed append to that file leaves its
// writer in error, and the Debian build of RocksDB 7.8 (assertions on)
// aborts the process at the next line logged to it
// (WritableFileWriter::AssertFalseAndGetStatusForPrevError; fixed upstream
// in 9.x): a background compaction's "deleted file" line killed a server
// whose disk filled. Warnings and errors only, at most one line a second per
// level, with the count of those held back.
class GlogLogger final : public rocksdb::Logger {
 public:
  GlogLogger() : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL) {}

  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    Logv(rocksdb::InfoLogLevel::INFO_LEVEL, format, ap);
  }
  void Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) override {
    if (level < GetInfoLogLevel() || level == rocksdb::InfoLogLevel::HEADER_LEVEL) return;
    const bool error = level >= rocksdb::InfoLogLevel::ERROR_LEVEL;
    uint64_t held_back = 0;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (!limiter_.Allow(error ? "error" : "warning", &held_back)) return;
    }
    char line[1024];
    vsnprintf(line, sizeof(line), format, ap);
    google::LogMessage(__FILE__, __LINE__, error ? google::GLOG_ERROR : google::GLOG_WARNING)
            .stream()
        << "rocksdb: " << line << " (" << held_back << " more since the last such line)";
  }

 private:
  std::mutex mu_;
  LogLimiter limiter_;
};

}  // namespace

Status FromRocks(const rocksdb::Status& s, const std::string& context) {
  if (s.ok()) return Status::OK();
  std::string m = context + ": " + s.ToString();
  if (s.IsCorruption()) return CorruptionError(std::move(m));
  if (s.IsNotFound() || s.IsPathNotFound()) return NotFoundError(std::move(m));
  if (s.IsInvalidArgument() || s.IsNotSupported()) return InvalidArgumentError(std::move(m));
  if (s.IsBusy() || s.IsTryAgain() || s.IsTimedOut()) return UnavailableError(std::move(m));
  if (s.IsAborted() || s.IsShutdownInProgress()) return AbortedError(std::move(m));
  return IOError(std::move(m));
}

rocksdb::Options MakeDbOptions(const ParamStoreOptions& options, rocksdb::Env* env) {
  constexpr size_t kMiB = size_t{1} << 20;
  const size_t cache_bytes = std::max<size_t>(options.cache_mb, 1) * kMiB;
  const size_t eighth = cache_bytes / 8;

  rocksdb::Options o;
  if (env != nullptr) o.env = env;
  o.create_if_missing = true;
  // Verify file sizes and checksums at open, so a truncated store fails with
  // Corruption instead of serving garbage.
  o.paranoid_checks = true;
  o.max_open_files = 256;
  o.max_background_jobs = 2;
  o.write_buffer_size = std::clamp(eighth, 4 * kMiB, 64 * kMiB);
  o.max_write_buffer_number = 2;
  o.target_file_size_base = 64 * kMiB;
  o.max_bytes_for_level_base = 256 * kMiB;
  // Trained floats barely compress; spending CPU on it slows every flush.
  o.compression = rocksdb::kNoCompression;
  // Unflushed memtable data is either in the WAL (wal_per_update) or
  // deliberately uncommitted (rows evicted since the last Flush), so closing
  // never needs to flush.
  o.avoid_flush_during_shutdown = true;
  o.info_log = std::make_shared<GlogLogger>();
  if (options.wal_per_update) {
    // Every acknowledged update waits for a WAL sync. Syncing a write that
    // extends a file (or fills a freshly allocated extent) also commits the
    // file system's journal: dd with O_DSYNC here wrote 800 KiB blocks at
    // 115 MB/s appending and 1.2 GB/s over blocks the file already had.
    // Recycled WAL files are rewritten in place (point-in-time recovery, the
    // default, stops at the first record of an older use of the file).
    o.recycle_log_file_num = 4;
  }

  rocksdb::BlockBasedTableOptions t;
  t.block_cache = rocksdb::NewLRUCache(std::clamp(eighth, 4 * kMiB, 256 * kMiB));
  t.cache_index_and_filter_blocks = true;
  t.pin_l0_filter_and_index_blocks_in_cache = true;
  t.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  t.block_size = 16 * 1024;
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
  return o;
}

std::unique_ptr<rocksdb::Env> NewIngestedFilesEnv(std::shared_ptr<rocksdb::FileSystem> fs) {
  return rocksdb::NewCompositeEnv(std::make_shared<IngestedFilesFileSystem>(std::move(fs)));
}

bool CanReopenWritableFiles(rocksdb::FileSystem* fs, const std::string& dir) {
  const std::string path = dir + "/relaxps-reopen-probe.tmp";
  const rocksdb::IOOptions io;
  std::unique_ptr<rocksdb::FSWritableFile> file;
  bool ok = fs->NewWritableFile(path, rocksdb::FileOptions(), &file, nullptr).ok() &&
            file->Close(io, nullptr).ok();
  file.reset();
  ok = ok && fs->ReopenWritableFile(path, rocksdb::FileOptions(), &file, nullptr).ok() &&
       file->Close(io, nullptr).ok();
  fs->DeleteFile(path, io, nullptr).PermitUncheckedError();
  return ok;
}

rocksdb::Options WithEnv(rocksdb::Options options, rocksdb::Env* env) {
  options.env = env;
  return options;
}

}  // namespace storage_internal
}  // namespace relaxps
