// The memory and RocksDB coordinator state stores (the ZooKeeper one is
// coordinator/zk_state_store.cc).
#include "coordinator/state_store.h"

#include <cstring>

#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/write_batch.h>

namespace relaxps {
namespace {

class MemoryStateStore final : public CoordinatorStateStore {
 public:
  std::string Name() const override { return "memory"; }
  StatusOr<ClaimedState> Claim() override {
    ClaimedState c;
    c.term = ++term_;
    c.records = records_;
    return c;
  }
  Status Write(const StateRecords& records) override {
    for (const auto& [k, v] : records) records_[k] = v;
    return Status::OK();
  }

 private:
  uint64_t term_ = 0;
  StateRecords records_;
};

constexpr char kTermKey[] = "term";
constexpr char kRecordPrefix[] = "record/";

Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return Status::OK();
  if (s.IsCorruption()) return CorruptionError(what + ": " + s.ToString());
  return IOError(what + ": " + s.ToString());
}

class RocksDbStateStore final : public CoordinatorStateStore {
 public:
  // `env` (null: the default) is the one `db` was opened with.
  RocksDbStateStore(std::string dir, std::shared_ptr<rocksdb::FileSystem> fs,
                    std::unique_ptr<rocksdb::Env> env, std::unique_ptr<rocksdb::DB> db)
      : dir_(std::move(dir)), fs_(std::move(fs)), env_(std::move(env)), db_(std::move(db)) {}

  std::string Name() const override { return "rocksdb:" + dir_; }

  StatusOr<ClaimedState> Claim() override {
    std::string value;
    uint64_t term = 0;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), kTermKey, &value);
    if (s.ok()) {
      if (value.size() != sizeof(term)) {
        return CorruptionError("coordinator state in " + dir_ + ": bad term record");
      }
      std::memcpy(&term, value.data(), sizeof(term));
    } else if (!s.IsNotFound()) {
      return FromRocks(s, "reading the coordinator state in " + dir_);
    }
    ClaimedState c;
    c.term = term + 1;
    std::string encoded(sizeof(c.term), '\0');
    std::memcpy(encoded.data(), &c.term, sizeof(c.term));
    rocksdb::WriteOptions wo;
    wo.sync = true;
    RETURN_IF_ERROR(FromRocks(db_->Put(wo, kTermKey, encoded), "claiming " + dir_));
    term_ = c.term;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    const std::string prefix = kRecordPrefix;
    for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
      c.records[it->key().ToString().substr(prefix.size())] = it->value().ToString();
    }
    RETURN_IF_ERROR(FromRocks(it->status(), "reading the coordinator state in " + dir_));
    return c;
  }

  Status Write(const StateRecords& records) override {
    if (term_ == 0) return FailedPreconditionError("Write() before Claim()");
    rocksdb::WriteBatch batch;
    for (const auto& [k, v] : records) batch.Put(kRecordPrefix + k, v);
    rocksdb::WriteOptions wo;
    wo.sync = true;  // Written before it takes effect: durable before any reply.
    return FromRocks(db_->Write(wo, &batch), "writing the coordinator state in " + dir_);
  }

 private:
  // Constant after construction. db_ is declared last: it is closed before
  // the Env and FileSystem it uses go.
  const std::string dir_;
  const std::shared_ptr<rocksdb::FileSystem> fs_;
  const std::unique_ptr<rocksdb::Env> env_;
  const std::unique_ptr<rocksdb::DB> db_;
  uint64_t term_ = 0;
};

}  // namespace

std::unique_ptr<CoordinatorStateStore> NewMemoryStateStore() {
  return std::make_unique<MemoryStateStore>();
}

StatusOr<std::unique_ptr<CoordinatorStateStore>> NewRocksDbStateStore(
    const std::string& dir, std::shared_ptr<rocksdb::FileSystem> fs) {
  if (dir.empty()) return InvalidArgumentError("coordinator --data_dir is empty");
  std::unique_ptr<rocksdb::Env> env = fs ? rocksdb::NewCompositeEnv(fs) : nullptr;
  rocksdb::Options options;
  if (env != nullptr) options.env = env.get();
  options.create_if_missing = true;
  options.max_open_files = 64;
  options.keep_log_file_num = 2;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, dir, &raw);
  if (!s.ok()) {
    // The usual cause: another coordinator holds the LOCK of this directory.
    return FromRocks(s, "opening the coordinator state in --data_dir=" + dir +
                            " (is another coordinator using it?)");
  }
  return std::unique_ptr<CoordinatorStateStore>(std::make_unique<RocksDbStateStore>(
      dir, std::move(fs), std::move(env), std::unique_ptr<rocksdb::DB>(raw)));
}

}  // namespace relaxps
