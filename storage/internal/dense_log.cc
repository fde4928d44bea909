#include "storage/internal/dense_log.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include <glog/logging.h>
#include <rocksdb/file_system.h>

#include "storage/internal/crc32c.h"
#include "storage/internal/file_util.h"

namespace relaxps {
namespace storage_internal {
namespace {

constexpr uint32_t kMagic = 0x4c445052;  // "RPDL" little-endian.
// A record larger than this is a damaged length, not a record.
constexpr uint64_t kMaxRecordFloats = uint64_t{1} << 36;

template <typename T>
void PutAt(std::string* out, size_t at, T v) {
  std::memcpy(&(*out)[at], &v, sizeof(T));
}
template <typename T>
T GetAt(const char* p, size_t at) {
  T v;
  std::memcpy(&v, p + at, sizeof(T));
  return v;
}

// Field offsets of the fixed part (dense_log.h).
enum : size_t {
  kMagicAt = 0, kCrcAt = 4, kSeqAt = 8, kTableAt = 16, kKindAt = 20, kOffsetAt = 24,
  kNAt = 32, kArraysAt = 40, kLrAt = 44, kStepAt = 48, kClockAt = 56,
};
static_assert(kClockAt + 8 == DenseLog::kHeaderBytes);

// Parses the record at `at` of `data` (size `size`) into *r (floats
// included when `with_floats`) and its length into *bytes. false if no
// valid record is there.
bool ParseRecord(const char* data, uint64_t size, uint64_t at, bool with_floats,
                 DenseLogRecord* r, uint64_t* bytes) {
  if (size - at < DenseLog::kHeaderBytes) return false;
  const char* p = data + at;
  if (GetAt<uint32_t>(p, kMagicAt) != kMagic) return false;
  const uint64_t n = GetAt<uint64_t>(p, kNAt);
  const uint32_t arrays = GetAt<uint32_t>(p, kArraysAt);
  if (n > kMaxRecordFloats || arrays > 1024 || n * arrays > kMaxRecordFloats) return false;
  const uint64_t payload = n * arrays * sizeof(float);
  if (size - at - DenseLog::kHeaderBytes < payload) return false;
  const uint32_t crc = Crc32c(0, p + kSeqAt, DenseLog::kHeaderBytes - kSeqAt + payload);
  if (crc != GetAt<uint32_t>(p, kCrcAt)) return false;
  const uint8_t kind = GetAt<uint8_t>(p, kKindAt);
  if (kind != static_cast<uint8_t>(DenseLogKind::kValues) &&
      kind != static_cast<uint8_t>(DenseLogKind::kStep)) {
    return false;
  }
  r->seq = GetAt<uint64_t>(p, kSeqAt);
  r->table_id = GetAt<uint32_t>(p, kTableAt);
  r->kind = static_cast<DenseLogKind>(kind);
  r->offset = GetAt<uint64_t>(p, kOffsetAt);
  r->n = n;
  r->arrays = arrays;
  r->lr_scale = GetAt<float>(p, kLrAt);
  r->step = GetAt<int64_t>(p, kStepAt);
  r->clock = GetAt<int64_t>(p, kClockAt);
  if (with_floats) {
    r->floats.resize(n * arrays);
    std::memcpy(r->floats.data(), p + DenseLog::kHeaderBytes, payload);
  }
  *bytes = DenseLog::kHeaderBytes + payload;
  return true;
}

Status FromIo(const rocksdb::IOStatus& s, const std::string& what) {
  if (s.ok()) return Status::OK();
  return IOError(what + ": " + s.ToString());
}

}  // namespace

Status DenseLog::Read(rocksdb::FileSystem* fs, const std::string& path,
                      std::vector<DenseLogRecord>* records, uint64_t* valid_bytes) {
  fs = DefaultFileSystem(fs);
  records->clear();
  *valid_bytes = 0;
  if (!PathExists(fs, path)) return Status::OK();
  std::string data;
  RETURN_IF_ERROR(ReadFile(fs, path, &data));
  uint64_t at = 0;
  while (at < data.size()) {
    DenseLogRecord r;
    uint64_t bytes = 0;
    if (!ParseRecord(data.data(), data.size(), at, /*with_floats=*/true, &r, &bytes)) {
      // A torn tail, unless the record's length (if it is plausible) leads
      // to a record that continues the sequence: then a record that was
      // acknowledged is damaged.
      const uint64_t expected = records->empty() ? 0 : records->back().seq + 2;
      DenseLogRecord next;
      uint64_t next_bytes = 0;
      if (!records->empty() && data.size() - at >= kHeaderBytes) {
        const uint64_t n = GetAt<uint64_t>(data.data() + at, kNAt);
        const uint32_t arrays = GetAt<uint32_t>(data.data() + at, kArraysAt);
        const uint64_t skip = kHeaderBytes + n * arrays * sizeof(float);
        if (n <= kMaxRecordFloats && arrays <= 1024 && skip <= data.size() - at &&
            ParseRecord(data.data(), data.size(), at + skip, false, &next, &next_bytes) &&
            next.seq == expected) {
          return CorruptionError("dense log " + path + ": the record at offset " +
                                 std::to_string(at) + " (after sequence number " +
                                 std::to_string(records->back().seq) +
                                 ") fails its checksum, and record " + std::to_string(next.seq) +
                                 " follows it: an acknowledged update is damaged");
        }
      }
      if (at + kHeaderBytes <= data.size() &&
          GetAt<uint32_t>(data.data() + at, kMagicAt) == kMagic) {
        LOG(WARNING) << "dense log " << path << ": the record at offset " << at
                     << " is incomplete or damaged (a write the crash cut short, never "
                        "acknowledged); replaying the "
                     << records->size() << " records before it";
      }
      break;
    }
    if (!records->empty() && r.seq != records->back().seq + 1) break;  // An older use of the file.
    records->push_back(std::move(r));
    at += bytes;
  }
  *valid_bytes = at;
  return Status::OK();
}

DenseLog::DenseLog(rocksdb::FileSystem* fs, std::string path, uint64_t next_seq)
    : fs_(fs), path_(std::move(path)), next_seq_(next_seq), header_(kHeaderBytes, '\0') {}

DenseLog::~DenseLog() {
  {
    MutexLock l(&mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (sync_thread_.joinable()) sync_thread_.join();  // After the sync it runs, if any.
  if (file_ != nullptr) {
    rocksdb::IOStatus s = file_->Close(rocksdb::IOOptions(), nullptr);
    if (!s.ok()) LOG(WARNING) << "closing dense log " << path_ << ": " << s.ToString();
  }
}

StatusOr<std::unique_ptr<DenseLog>> DenseLog::Open(rocksdb::FileSystem* fs,
                                                   const std::string& path,
                                                   const std::string& keep, uint64_t next_seq) {
  std::unique_ptr<DenseLog> log(new DenseLog(DefaultFileSystem(fs), path, next_seq < 1 ? 1 : next_seq));
  RETURN_IF_ERROR(log->Reopen());
  if (!keep.empty()) {
    RETURN_IF_ERROR(FromIo(log->file_->Append(keep, rocksdb::IOOptions(), nullptr),
                           "cannot write dense log " + path));
    log->bytes_ = keep.size();
    log->unsynced_ = true;
    ++log->appends_;
    RETURN_IF_ERROR(log->Sync());
  }
  return log;
}

Status DenseLog::Reopen() {
  // The records are obsolete (Restart) or there are none (Open): a failed
  // sync of them no longer matters, but the file must not be in use.
  bool covered = false;
  WaitForStartedSync(&covered).IgnoreError();
  if (file_ != nullptr) {
    rocksdb::IOStatus closed = file_->Close(rocksdb::IOOptions(), nullptr);
    file_.reset();
    if (!closed.ok()) {
      broken_ = true;
      return FromIo(closed, "cannot close dense log " + path_);
    }
  }
  rocksdb::FileOptions fo;
  rocksdb::IOStatus s;
  if (PathExists(fs_, path_)) {
    // Writes from offset 0 over the blocks the file has (no truncation):
    // a sync then has no size or allocation to commit.
    s = fs_->ReuseWritableFile(path_, path_, fo, &file_, nullptr);
  } else {
    s = fs_->NewWritableFile(path_, fo, &file_, nullptr);
    if (s.ok()) RETURN_IF_ERROR(SyncDir(fs_, ParentDir(path_)));
  }
  bytes_ = 0;
  unsynced_ = false;
  broken_ = !s.ok();
  return FromIo(s, "cannot open dense log " + path_);
}

StatusOr<uint64_t> DenseLog::Append(const DenseLogRecord& h, const float* const* arrays) {
  RETURN_IF_ERROR(CheckNotBroken());
  const uint64_t seq = next_seq_;
  PutAt<uint32_t>(&header_, kMagicAt, kMagic);
  PutAt<uint64_t>(&header_, kSeqAt, seq);
  PutAt<uint32_t>(&header_, kTableAt, h.table_id);
  PutAt<uint8_t>(&header_, kKindAt, static_cast<uint8_t>(h.kind));
  PutAt<uint64_t>(&header_, kOffsetAt, h.offset);
  PutAt<uint64_t>(&header_, kNAt, h.n);
  PutAt<uint32_t>(&header_, kArraysAt, h.arrays);
  PutAt<float>(&header_, kLrAt, h.lr_scale);
  PutAt<int64_t>(&header_, kStepAt, h.step);
  PutAt<int64_t>(&header_, kClockAt, h.clock);
  const size_t piece = h.n * sizeof(float);
  uint32_t crc = Crc32c(0, header_.data() + kSeqAt, kHeaderBytes - kSeqAt);
  for (uint32_t a = 0; a < h.arrays; ++a) crc = Crc32c(crc, arrays[a], piece);
  PutAt<uint32_t>(&header_, kCrcAt, crc);
  const rocksdb::IOOptions io;
  const std::string what = "cannot write dense log " + path_;
  unsynced_ = true;
  ++appends_;
  // A record written in part would end the log for a reader, so nothing may
  // follow it: the log is broken until Restart.
  broken_ = true;
  RETURN_IF_ERROR(FromIo(file_->Append(header_, io, nullptr), what));
  for (uint32_t a = 0; a < h.arrays; ++a) {
    RETURN_IF_ERROR(FromIo(
        file_->Append(rocksdb::Slice(reinterpret_cast<const char*>(arrays[a]), piece), io,
                      nullptr),
        what));
  }
  broken_ = false;
  bytes_ += kHeaderBytes + piece * h.arrays;
  ++next_seq_;
  return seq;
}

Status DenseLog::CheckNotBroken() const {
  if (!broken_) return Status::OK();
  return IOError("dense log " + path_ +
                 " holds a record an earlier write error cut short; it takes no more records "
                 "until a flush starts it over");
}

Status DenseLog::Sync() {
  RETURN_IF_ERROR(CheckNotBroken());
  if (!unsynced_) return Status::OK();
  bool covered = false;
  // A started sync that failed fails this one too: after a failed
  // fdatasync the kernel may have dropped the pages it could not write, so
  // a second one that succeeds proves nothing about them.
  RETURN_IF_ERROR(WaitForStartedSync(&covered));
  if (covered) {
    unsynced_ = false;
    return Status::OK();
  }
  const rocksdb::IOOptions io;
  RETURN_IF_ERROR(FromIo(file_->Flush(io, nullptr), "cannot write dense log " + path_));
  RETURN_IF_ERROR(FromIo(file_->Sync(io, nullptr), "cannot sync dense log " + path_));
  unsynced_ = false;
  ++syncs_;
  return Status::OK();
}

bool DenseLog::StartSync() {
  if (broken_ || !unsynced_) return false;
  // PosixWritableFile writes at Append (Flush is a no-op); a file system
  // that buffers writes has them handed on here, on this thread.
  if (!file_->Flush(rocksdb::IOOptions(), nullptr).ok()) return false;  // Sync() reports it.
  {
    MutexLock l(&mu_);
    if (started_) return true;
    if (synced_upto_ >= appends_ || !sync_error_.ok()) return false;
    if (!sync_thread_.joinable()) sync_thread_ = std::thread([this] { SyncThread(); });
    started_ = true;
    sync_upto_ = appends_;
  }
  cv_.notify_all();
  return true;
}

Status DenseLog::CollectStartedSync(bool* running) {
  MutexLock l(&mu_);
  *running = started_;
  if (started_) return Status::OK();
  syncs_ += thread_syncs_;
  thread_syncs_ = 0;
  Status s = std::move(sync_error_);
  sync_error_ = Status::OK();
  if (s.ok() && synced_upto_ >= appends_) unsynced_ = false;
  return s;
}

void DenseLog::SetSyncListener(std::function<void()> listener) {
  MutexLock l(&mu_);
  listener_ = std::move(listener);
}

Status DenseLog::WaitForStartedSync(bool* covered_all) {
  MutexLock l(&mu_);
  while (started_) cv_.wait(mu_);
  *covered_all = synced_upto_ >= appends_;
  syncs_ += thread_syncs_;
  thread_syncs_ = 0;
  Status s = std::move(sync_error_);
  sync_error_ = Status::OK();
  return s;
}

void DenseLog::SyncThread() {
  for (;;) {
    uint64_t upto = 0;
    {
      MutexLock l(&mu_);
      while (!started_ && !stop_) cv_.wait(mu_);
      if (!started_) return;  // Stopped.
      upto = sync_upto_;
    }
    // file_ stays as it is while started_ (Reopen and the destructor wait);
    // the caller thread may append meanwhile.
    const rocksdb::IOStatus s = file_->Sync(rocksdb::IOOptions(), nullptr);
    {
      MutexLock l(&mu_);
      if (s.ok()) {
        synced_upto_ = std::max(synced_upto_, upto);
        ++thread_syncs_;
      } else {
        sync_error_ = FromIo(s, "cannot sync dense log " + path_);
      }
      started_ = false;
      if (listener_) listener_();
    }
    cv_.notify_all();
  }
}

Status DenseLog::Restart() { return Reopen(); }

}  // namespace storage_internal
}  // namespace relaxps
