// DenseLog: the log of dense updates of a RocksDbStore with wal_per_update.
//
// A dense update is logged as what it applied, not as the values it left:
// an optimizer step (the gradient, the learning-rate scale, the shard's step
// and clock after it) or, for writes that are not optimizer steps (a seed, a
// state transfer, the exactly-once record), the values of the range written
// in every slot. A step record holds one float per key where the values it
// replaces hold one per key and slot (params + momentum: half the bytes;
// Adam: a third). On open the store replays each table's records past its
// last flush in order through the same optimizer code (DenseReplay), which
// gives back, bit for bit, the state that was acknowledged.
//
// File: one file, written sequentially and reused from offset 0 once a
// flush made every record in it obsolete (blocks already allocated: a sync
// then writes data, not file-system metadata). Record:
//   u32 magic | u32 crc32c(everything after it) | u64 seq | u32 table id |
//   u8 kind | 3 x u8 zero | u64 offset | u64 n | u32 arrays | f32 lr_scale |
//   i64 step | i64 clock | arrays x n floats
// Sequence numbers rise by one from record to record of one use of the file,
// so a record left over from an older use (lower seq) ends the read. A record
// whose checksum fails ends the read as a torn tail (never acknowledged: the
// sync of its group did not return) unless a valid record continues the
// sequence after it: then an acknowledged record is damaged, and Read returns
// Corruption naming the offset.
//
// Sync: Sync() makes every record appended so far durable (one fdatasync).
// StartSync() starts that fdatasync on the log's sync thread and returns at
// once, so the caller applies the update a record logs while the disk
// writes it; the next Sync() waits for that sync and syncs again only if
// records were appended after it started. CollectStartedSync() is the
// non-blocking form of that wait (a caller that must not block polls it, and
// a listener (SetSyncListener) tells it when to).
//
// Thread-safety: not synchronized; the store's caller thread owns it (the
// sync thread only syncs the file, under the log's own mutex).
#ifndef RELAXPS_STORAGE_INTERNAL_DENSE_LOG_H_
#define RELAXPS_STORAGE_INTERNAL_DENSE_LOG_H_

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "common/thread_annotations.h"

namespace rocksdb {
class FileSystem;
class FSWritableFile;
}  // namespace rocksdb

namespace relaxps {
namespace storage_internal {

enum class DenseLogKind : uint8_t {
  kValues = 1,  // `arrays` = the table's slots: the values of [offset, +n) after the write.
  kStep = 2,    // `arrays` = 1: the gradient one optimizer step applied to [offset, +n).
};

struct DenseLogRecord {
  uint64_t seq = 0;
  uint32_t table_id = 0;
  DenseLogKind kind = DenseLogKind::kValues;
  uint64_t offset = 0;  // Shard-relative first key.
  uint64_t n = 0;       // Keys.
  uint32_t arrays = 0;  // Float arrays of n floats in `floats`, one after the other.
  float lr_scale = 1.0f;
  int64_t step = 0;   // The shard's step after the update.
  int64_t clock = 0;  // The shard's clock after the update.
  std::vector<float> floats;
};

class DenseLog {
 public:
  // Bytes of a record's fixed part.
  static constexpr size_t kHeaderBytes = 64;

  // The records of the file at `path` in order (none if it does not exist)
  // into *records, and the bytes they take into *valid_bytes. Corruption
  // (naming the file and offset) for a damaged record that later records
  // continue; IOError if it cannot be read.
  static Status Read(rocksdb::FileSystem* fs, const std::string& path,
                     std::vector<DenseLogRecord>* records, uint64_t* valid_bytes);

  // Opens `path` for appending. `keep` (the valid records Read found, as
  // bytes) is written again from offset 0, so the log goes on after them;
  // the next record gets sequence number `next_seq`.
  static StatusOr<std::unique_ptr<DenseLog>> Open(rocksdb::FileSystem* fs,
                                                  const std::string& path,
                                                  const std::string& keep, uint64_t next_seq);
  ~DenseLog();
  DenseLog(const DenseLog&) = delete;
  DenseLog& operator=(const DenseLog&) = delete;

  // Appends one record (its seq is assigned: the returned one) whose floats
  // are `arrays` pieces of `n` floats each. Written to the file (the page
  // cache), not synced.
  StatusOr<uint64_t> Append(const DenseLogRecord& header, const float* const* arrays);
  // Makes every record appended so far durable (fdatasync). No-op if none
  // was appended since the last Sync. Waits for a sync StartSync started;
  // if it covered every record, that is the sync (its error, if it failed).
  Status Sync();
  // Starts the fdatasync of every record appended so far on the sync
  // thread (started by the first call) and returns without waiting. No-op
  // if nothing is unsynced or a started sync has not finished yet. True if
  // a sync runs now (this one or one started before).
  bool StartSync();
  // Without waiting: *running if a started sync has not finished; else
  // collects the finished one as Sync() would (the records it covered are
  // durable: unsynced() turns false if it covered every append) and returns
  // its error, if it failed. OK with *running false if none was started.
  Status CollectStartedSync(bool* running);
  // `listener` (may be empty: none) runs on the sync thread after each sync
  // the thread finished, under the log's mutex: it must not call the log
  // (e.g. it posts a task to the caller's thread). Replacing it waits for a
  // running call of the previous one, so the caller can clear it before
  // whatever it uses goes away.
  void SetSyncListener(std::function<void()> listener);
  // Starts over at offset 0 (every record so far is obsolete: REQUIRES a
  // durable flush of what they did). Sequence numbers go on rising. Also
  // what mends a broken log.
  Status Restart();
  // An append failed part-way (or the file could not be reopened): Append
  // and Sync fail with IOError until a Restart succeeds.
  bool broken() const { return broken_; }

  // Sequence number of the last record appended (0: none ever).
  uint64_t last_seq() const { return next_seq_ - 1; }
  // Bytes written since the last Restart (or Open).
  uint64_t bytes() const { return bytes_; }
  bool unsynced() const { return unsynced_; }
  // fdatasync calls that returned OK (on either thread).
  uint64_t syncs() const { return syncs_; }

 private:
  DenseLog(rocksdb::FileSystem* fs, std::string path, uint64_t next_seq);
  Status Reopen();
  Status CheckNotBroken() const;
  // Waits until no started sync runs. The status of the last one that
  // finished, and whether it covered every append so far, come back.
  Status WaitForStartedSync(bool* covered_all);
  void SyncThread();

  // Constant after construction.
  rocksdb::FileSystem* const fs_;
  const std::string path_;

  std::unique_ptr<rocksdb::FSWritableFile> file_;
  uint64_t next_seq_;
  uint64_t bytes_ = 0;
  bool unsynced_ = false;
  bool broken_ = false;
  uint64_t syncs_ = 0;
  std::string header_;  // Reused buffer of one record's fixed part.
  uint64_t appends_ = 0;  // Appends (records, kept bytes) to this log so far.

  // The sync thread. It runs file_->Sync() for the appends up to sync_upto_
  // while started_; file_ is not replaced or closed meanwhile (Reopen and
  // the destructor wait).
  std::thread sync_thread_;
  Mutex mu_;
  std::condition_variable_any cv_;
  bool started_ GUARDED_BY(mu_) = false;  // A sync is requested or running.
  bool stop_ GUARDED_BY(mu_) = false;
  uint64_t sync_upto_ GUARDED_BY(mu_) = 0;    // appends_ when the sync started.
  uint64_t synced_upto_ GUARDED_BY(mu_) = 0;  // Appends the thread made durable.
  Status sync_error_ GUARDED_BY(mu_);         // Of the last started sync.
  uint64_t thread_syncs_ GUARDED_BY(mu_) = 0;
  std::function<void()> listener_ GUARDED_BY(mu_);
};

}  // namespace storage_internal
}  // namespace relaxps

#endif  // RELAXPS_STORAGE_INTERNAL_DENSE_LOG_H_
