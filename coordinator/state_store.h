// CoordinatorStateStore: where the coordinator keeps the job's durable state.
//
// The state is a handful of named records (coordinator/durable_state.h
// writes "job", "map", "members", "recovery" and "checkpoints", each a
// serialized protobuf). A coordinator first Claim()s the store: that bumps
// the store's term, which fences every earlier holder, and returns every
// record as of the claim. Each later Write() replaces a batch of records
// atomically, and only while no one else claimed the store since: a deposed
// holder's Write() fails with Aborted and must stop serving (it must never
// act on a state it could not store).
//
// Implementations:
//   NewMemoryStateStore()         nothing survives the process (the default
//                                 without --data_dir or --coordination).
//   NewRocksDbStateStore(dir, fs) a local RocksDB (--data_dir): a coordinator
//                                 restarted with the same dir resumes the job.
//                                 RocksDB's LOCK file keeps a second process out.
//                                 Every file access goes through `fs`, so tests
//                                 inject disk faults (storage/fault_injecting_fs.h).
//   NewZkStateStore(session, path) ZooKeeper (--coordination=zk://...): the
//                                 records are znodes under PATH/state, the term
//                                 is PATH/epoch, and every write is one
//                                 zoo_multi that checks PATH/epoch's version.
//
// Thread-safety: not synchronized; one thread (the coordinator's loop) uses
// a store at a time.
#ifndef RELAXPS_COORDINATOR_STATE_STORE_H_
#define RELAXPS_COORDINATOR_STATE_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "common/status.h"

namespace relaxps {

class ZkSession;

}  // namespace relaxps

namespace rocksdb {
class FileSystem;
}  // namespace rocksdb

namespace relaxps {

// Record name -> serialized record.
using StateRecords = std::map<std::string, std::string>;

struct ClaimedState {
  // This holder's term: 1 for a store never claimed before, then +1 per
  // claim. Servers use it to tell a newer coordinator from a deposed one.
  uint64_t term = 0;
  StateRecords records;  // Empty for a new job.
};

class CoordinatorStateStore {
 public:
  CoordinatorStateStore() = default;
  CoordinatorStateStore(const CoordinatorStateStore&) = delete;
  CoordinatorStateStore& operator=(const CoordinatorStateStore&) = delete;
  virtual ~CoordinatorStateStore() = default;

  // "memory", "rocksdb:DIR" or "zk:PATH", for logs.
  virtual std::string Name() const = 0;
  // Takes the store over (term + 1) and reads every record.
  virtual StatusOr<ClaimedState> Claim() = 0;
  // Replaces `records` atomically. REQUIRES: Claim() succeeded.
  // Aborted if another holder claimed the store since (this one is deposed);
  // Unavailable or IOError if the write could not be made (the caller must
  // treat it as lost leadership too: the write may or may not have landed).
  [[nodiscard]] virtual Status Write(const StateRecords& records) = 0;
};

std::unique_ptr<CoordinatorStateStore> NewMemoryStateStore();
// The database in `dir` (created if missing), opened through `fs` (nullptr:
// the real file system); the store shares `fs`. IOError naming dir if it
// cannot be opened (e.g. another coordinator holds it); a failed Write()
// (ENOSPC, EIO) is IOError naming dir and the disk error.
StatusOr<std::unique_ptr<CoordinatorStateStore>> NewRocksDbStateStore(
    const std::string& dir, std::shared_ptr<rocksdb::FileSystem> fs = nullptr);
// `session` must outlive the store; `path` is the job's znode ("/relaxps/job1").
StatusOr<std::unique_ptr<CoordinatorStateStore>> NewZkStateStore(ZkSession* session,
                                                                 const std::string& path);

}  // namespace relaxps

#endif  // RELAXPS_COORDINATOR_STATE_STORE_H_
