// Disk faults in checkpoint restore, listing and pruning, injected through
// the `fs` argument of storage/checkpoint.h (a FaultInjectingFileSystem):
// a failed copy or an interrupted restore leaves data_dir intact and a rerun
// completes it, an unreadable manifest is skipped by the listing, a failed
// delete stops the pruning with an error naming the directory. Each fault
// exists only in the injected file system, so every test fails if a
// function bypassed it.
#include <filesystem>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <rocksdb/file_system.h>

#include "storage/checkpoint.h"
#include "storage/fault_injecting_fs.h"
#include "storage/param_store.h"
#include "tests/storage/rocksdb_store_test_util.h"
#include "tests/storage/storage_test_util.h"

namespace relaxps {
namespace {

using namespace testing_storage;  // NOLINT: the shared store fixtures.
#define ASSERT_OK RELAXPS_STORAGE_ASSERT_OK
using WriteError = FaultInjectingFileSystem::WriteError;
namespace stdfs = std::filesystem;

class CheckpointFaultTest : public ::testing::Test {
 protected:
  // Checkpoints each of `clocks` (dense values = that version) under root_,
  // then leaves data_ flushed at version `last`. The store writes through
  // the real file system: only the functions under test meet fs_.
  void MakeCheckpoints(const std::vector<int>& clocks, int last) {
    auto store = OpenStore(data_);
    ASSERT_NE(store, nullptr);
    StatusOr<DenseShard*> shard = store->CreateDense(DenseSpec());
    ASSERT_TRUE(shard.ok()) << shard.status();
    for (int clock : clocks) {
      SetDense(store.get(), *shard, clock);
      ASSERT_OK(store->Checkpoint(Ckpt(clock), clock));
    }
    SetDense(store.get(), *shard, last);
    ASSERT_OK(store->Flush(last));
    ASSERT_OK(store->WaitForFlush());
  }

  // Opens `dir` (real file system) and checks its dense values.
  void ExpectVersion(const std::string& dir, int version) {
    auto store = OpenStore(dir);
    ASSERT_NE(store, nullptr) << dir;
    StatusOr<DenseShard*> shard = store->CreateDense(DenseSpec());
    ASSERT_TRUE(shard.ok()) << shard.status();
    ExpectDense(*shard, version);
  }

  void ExpectNoRestoreLeftovers() {
    EXPECT_FALSE(stdfs::exists(data_ + ".restoring"));
    EXPECT_FALSE(stdfs::exists(data_ + ".replaced"));
  }

  std::string Ckpt(int clock) const { return root_ + "/" + CheckpointDirName(clock); }

  ScopedTempDir tmp_{"checkpoint_fault_test"};
  std::string data_ = tmp_.path() + "/data";
  std::string root_ = tmp_.path() + "/ckpts";
  std::shared_ptr<FaultInjectingFileSystem> fs_ = std::make_shared<FaultInjectingFileSystem>();
};

class RestoreCopyFaultTest : public CheckpointFaultTest,
                             public ::testing::WithParamInterface<WriteError> {
 protected:
  std::string Expected() const {
    return GetParam() == WriteError::kNoSpace ? "No space left on device" : "Input/output error";
  }
};

// The copy of the MANIFEST (copied, not linked) fails after the SSTs were
// linked into the scratch copy: the error names the file, data_dir keeps its
// state, the scratch copy is gone and the checkpoint itself is intact.
TEST_P(RestoreCopyFaultTest, FailedCopyLeavesDataDirUntouchedAndNamesThePath) {
  MakeCheckpoints({1}, 2);
  const std::string failing = data_ + ".restoring/MANIFEST-";
  fs_->SetWriteError(GetParam(), failing);
  Status s = RestoreCheckpoint(Ckpt(1), data_, fs_.get());
  EXPECT_EQ(s.code(), StatusCode::kIOError) << s;
  EXPECT_NE(s.message().find(failing), std::string::npos) << s;
  EXPECT_NE(s.message().find(Expected()), std::string::npos) << s;
  EXPECT_GT(fs_->injected_errors(), 0u);
  ExpectNoRestoreLeftovers();
  ExpectVersion(data_, 2);
  ASSERT_TRUE(ReadCheckpointInfo(Ckpt(1), fs_.get()).ok());

  // The disk recovers: the same restore goes through.
  fs_->SetWriteError(WriteError::kNone);
  ASSERT_OK(RestoreCheckpoint(Ckpt(1), data_, fs_.get()));
  ExpectNoRestoreLeftovers();
  ExpectVersion(data_, 1);
}

// Every write into the scratch copy fails, the hard links of the SSTs
// included (a link failing with EIO falls back to a copy, which fails too).
TEST_P(RestoreCopyFaultTest, EveryWriteIntoTheCopyFailingLeavesDataDirUntouched) {
  MakeCheckpoints({1}, 2);
  const std::string failing = data_ + ".restoring/";
  fs_->SetWriteError(GetParam(), failing);
  Status s = RestoreCheckpoint(Ckpt(1), data_, fs_.get());
  EXPECT_EQ(s.code(), StatusCode::kIOError) << s;
  EXPECT_NE(s.message().find(failing), std::string::npos) << s;
  EXPECT_NE(s.message().find(Expected()), std::string::npos) << s;
  ExpectNoRestoreLeftovers();
  ExpectVersion(data_, 2);
}

INSTANTIATE_TEST_SUITE_P(Errors, RestoreCopyFaultTest,
                         ::testing::Values(WriteError::kNoSpace, WriteError::kIO),
                         [](const ::testing::TestParamInfo<WriteError>& info) {
                           return info.param == WriteError::kNoSpace ? std::string("ENOSPC")
                                                                     : std::string("EIO");
                         });

TEST_F(CheckpointFaultTest, RestoreThatCannotCreateTheScratchDirFails) {
  MakeCheckpoints({1}, 2);
  fs_->SetWriteError(WriteError::kNoSpace, data_ + ".restoring");
  Status s = RestoreCheckpoint(Ckpt(1), data_, fs_.get());
  EXPECT_EQ(s.code(), StatusCode::kIOError) << s;
  EXPECT_NE(s.message().find("cannot create " + data_ + ".restoring"), std::string::npos) << s;
  ExpectNoRestoreLeftovers();
  ExpectVersion(data_, 2);
}

// Listing reads each manifest through fs: one that cannot be read is
// skipped, the others are listed, and reading or restoring it reports the
// I/O error (not Corruption: the manifest itself is fine).
TEST_F(CheckpointFaultTest, ListingSkipsAnUnreadableManifest) {
  MakeCheckpoints({1, 2, 3}, 4);
  const std::string manifest = Ckpt(2) + "/" + kCheckpointManifestName;
  fs_->SetReadError(true, manifest);

  std::vector<CheckpointInfo> listed = ListCheckpoints(root_, fs_.get());
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[0].clock, 1);
  EXPECT_EQ(listed[1].clock, 3);
  EXPECT_EQ(ListCheckpoints(root_).size(), 3u);  // Only the injected fs fails.

  StatusOr<CheckpointInfo> info = ReadCheckpointInfo(Ckpt(2), fs_.get());
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), StatusCode::kIOError) << info.status();
  EXPECT_NE(info.status().message().find(manifest), std::string::npos) << info.status();

  Status s = RestoreCheckpoint(Ckpt(2), data_, fs_.get());
  EXPECT_EQ(s.code(), StatusCode::kIOError) << s;
  EXPECT_NE(s.message().find(manifest), std::string::npos) << s;
  ExpectVersion(data_, 4);

  fs_->SetReadError(false);
  EXPECT_EQ(ListCheckpoints(root_, fs_.get()).size(), 3u);
}

// A root that cannot be listed gives an empty list.
TEST_F(CheckpointFaultTest, UnlistableRootGivesAnEmptyList) {
  MakeCheckpoints({1}, 2);
  fs_->SetReadError(true, root_);
  EXPECT_TRUE(ListCheckpoints(root_, fs_.get()).empty());
  EXPECT_EQ(ListCheckpoints(root_).size(), 1u);
}

// The oldest checkpoint's files cannot be deleted: the prune stops with an
// IOError naming that directory, which stays valid, and the newer ones are
// all kept; once the disk recovers the prune completes.
TEST_F(CheckpointFaultTest, PruneWhoseDeleteFailsNamesTheDirectory) {
  MakeCheckpoints({1, 2, 3}, 4);
  fs_->SetDeleteError(true, Ckpt(1));
  Status s = PruneCheckpoints(root_, 1, fs_.get());
  EXPECT_EQ(s.code(), StatusCode::kIOError) << s;
  EXPECT_NE(s.message().find("cannot remove " + Ckpt(1)), std::string::npos) << s;
  EXPECT_NE(s.message().find("injected EIO"), std::string::npos) << s;
  std::vector<CheckpointInfo> left = ListCheckpoints(root_);
  ASSERT_EQ(left.size(), 3u);
  EXPECT_EQ(left[0].clock, 1);

  fs_->SetDeleteError(false);
  ASSERT_OK(PruneCheckpoints(root_, 1, fs_.get()));
  left = ListCheckpoints(root_);
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].clock, 3);
  EXPECT_FALSE(stdfs::exists(Ckpt(1)));
  EXPECT_FALSE(stdfs::exists(Ckpt(2)));
}

// RemoveCheckpoint (a server replacing a checkpoint of the same clock) goes
// through the file system: a failed delete is an IOError naming the
// directory, which is left valid; a missing directory is no error.
TEST_F(CheckpointFaultTest, RemoveCheckpointWhoseDeleteFailsNamesTheDirectory) {
  MakeCheckpoints({1}, 2);
  fs_->SetDeleteError(true, Ckpt(1));
  Status s = RemoveCheckpoint(Ckpt(1), fs_.get());
  EXPECT_EQ(s.code(), StatusCode::kIOError) << s;
  EXPECT_NE(s.message().find("cannot remove " + Ckpt(1)), std::string::npos) << s;
  EXPECT_NE(s.message().find("injected EIO"), std::string::npos) << s;
  ASSERT_EQ(ListCheckpoints(root_).size(), 1u);

  fs_->SetDeleteError(false);
  ASSERT_OK(RemoveCheckpoint(Ckpt(1), fs_.get()));
  EXPECT_FALSE(stdfs::exists(Ckpt(1)));
  ASSERT_OK(RemoveCheckpoint(Ckpt(1), fs_.get()));  // Already gone.
}

// Simulates the death of the restoring process at one operation: the first
// time an operation of kind `op_` matches `trigger_` (a substring of the
// created file's path, or of "<src> -> <dst>" for a rename), the wrapped
// FaultInjectingFileSystem crashes (unsynced writes dropped, every later
// write and delete failing), so the dying restore can neither finish nor
// clean up.
class CrashingFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  enum class Op { kCreate, kRename };

  CrashingFileSystem(std::shared_ptr<FaultInjectingFileSystem> fault, Op op, std::string trigger)
      : FileSystemWrapper(fault), fault_(fault.get()), op_(op), trigger_(std::move(trigger)) {}
  const char* Name() const override { return "CrashingFileSystem"; }

  rocksdb::IOStatus NewWritableFile(const std::string& fname, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* dbg) override {
    MaybeCrash(Op::kCreate, fname);
    return target()->NewWritableFile(fname, options, result, dbg);
  }
  rocksdb::IOStatus RenameFile(const std::string& src, const std::string& dst,
                               const rocksdb::IOOptions& options,
                               rocksdb::IODebugContext* dbg) override {
    MaybeCrash(Op::kRename, src + " -> " + dst);
    return target()->RenameFile(src, dst, options, dbg);
  }

  bool crashed() const { return crashed_; }
  // Whether a matching operation crashes (initially true).
  void set_armed(bool armed) { armed_ = armed; }

 private:
  void MaybeCrash(Op op, const std::string& path) {
    if (!armed_ || crashed_ || op != op_ || path.find(trigger_) == std::string::npos) return;
    crashed_ = true;
    fault_->SimulateCrash();
  }

  FaultInjectingFileSystem* const fault_;
  const Op op_;
  const std::string trigger_;
  bool armed_ = true;
  bool crashed_ = false;  // Single-threaded: the restore (checkpoint) runs on the caller.
};

struct CrashPoint {
  const char* name;
  CrashingFileSystem::Op op;
  const char* trigger;   // See CrashingFileSystem.
  bool data_dir_absent;  // Between the two renames: data_dir moved aside.
};

void PrintTo(const CrashPoint& point, std::ostream* os) { *os << point.name; }

class RestoreCrashTest : public CheckpointFaultTest,
                         public ::testing::WithParamInterface<CrashPoint> {};

// The process dies during a restore: data_dir holds the old state (or,
// between the renames, is absent with the old state in ".replaced"), never a
// partial copy; after the restart the same restore completes, leaves no
// scratch directories, and its result survives a further crash (every copy
// was synced through fs).
TEST_P(RestoreCrashTest, RestoreAfterACrashCompletesIt) {
  MakeCheckpoints({1}, 2);
  const CrashPoint& point = GetParam();
  CrashingFileSystem crashing(fs_, point.op, point.trigger);
  Status s = RestoreCheckpoint(Ckpt(1), data_, &crashing);
  ASSERT_TRUE(crashing.crashed());
  EXPECT_EQ(s.code(), StatusCode::kIOError) << s;
  EXPECT_NE(s.message().find("simulated crash"), std::string::npos) << s;

  // What the restarted process finds.
  fs_->Reactivate();
  if (point.data_dir_absent) {
    EXPECT_FALSE(stdfs::exists(data_));
    ExpectVersion(data_ + ".replaced", 2);
  } else {
    ExpectVersion(data_, 2);
  }
  ASSERT_TRUE(ReadCheckpointInfo(Ckpt(1), fs_.get()).ok());

  ASSERT_OK(RestoreCheckpoint(Ckpt(1), data_, fs_.get()));
  ExpectNoRestoreLeftovers();
  fs_->SimulateCrash();  // Loses whatever the restore did not sync.
  fs_->Reactivate();
  ExpectVersion(data_, 1);
}

INSTANTIATE_TEST_SUITE_P(
    Points, RestoreCrashTest,
    ::testing::Values(
        CrashPoint{"WhileCopying", CrashingFileSystem::Op::kCreate, ".restoring/MANIFEST-", false},
        CrashPoint{"BeforeMovingDataAside", CrashingFileSystem::Op::kRename, ".replaced", false},
        CrashPoint{"BetweenTheRenames", CrashingFileSystem::Op::kRename, ".restoring -> ", true}),
    [](const ::testing::TestParamInfo<CrashPoint>& info) { return std::string(info.param.name); });


// ---- Crashes while a checkpoint is written ----

// Where the store's process dies during Checkpoint(ckpt-2): the first time
// an operation of kind `op` matches `trigger` (see CrashingFileSystem);
// `trigger` empty: right after Checkpoint returned.
struct CheckpointCrashPoint {
  const char* name;
  CrashingFileSystem::Op op;
  const char* trigger;
  bool checkpoint_survives;  // ckpt-2 is listed after the restart.
  bool flush_survives;       // The store reopens with the checkpoint's values.
};

void PrintTo(const CheckpointCrashPoint& point, std::ostream* os) { *os << point.name; }

class CheckpointCrashTest : public CheckpointFaultTest,
                            public ::testing::WithParamInterface<CheckpointCrashPoint> {
 protected:
  // Version 1 everywhere, then version 2 in the first chunk only (an
  // incremental checkpoint: a delta generation of one chunk).
  static void WriteFirstChunk(ParamStore* store, DenseShard* shard) {
    store->BeforeDenseWrite(shard);
    for (size_t s = 0; s < shard->slots.size(); ++s) {
      for (size_t i = 0; i < kChunk; ++i) shard->slots[s][i] = RowValue(i, s, 2);
    }
    ASSERT_OK(store->DenseUpdated(shard, 0, kChunk));
  }
  static void ExpectMixed(const DenseShard* shard, bool first_chunk_new) {
    for (size_t s = 0; s < shard->slots.size(); ++s) {
      for (size_t i = 0; i < shard->size(); ++i) {
        const int version = i < kChunk && first_chunk_new ? 2 : 1;
        ASSERT_EQ(shard->slots[s][i], RowValue(i, s, version)) << "slot " << s << " key " << i;
      }
    }
  }
  // Restores `ckpt` into a new directory (through fs_) and checks it.
  void ExpectRestored(const std::string& ckpt, bool first_chunk_new) {
    const std::string dir = tmp_.path() + "/restored-" + stdfs::path(ckpt).filename().string();
    ASSERT_OK(RestoreCheckpoint(ckpt, dir, fs_.get()));
    auto store = OpenStore(dir);
    ASSERT_NE(store, nullptr);
    StatusOr<DenseShard*> shard = store->CreateDense(DenseSpec());
    ASSERT_TRUE(shard.ok()) << shard.status();
    ExpectMixed(*shard, first_chunk_new);
  }

  static constexpr size_t kChunk = 16384;  // The store's dense chunk, in floats.
};

// The store's process dies while it writes an incremental checkpoint. After
// the restart the new checkpoint is complete and restores exactly, or is not
// listed at all (never half there); the older one still restores; the store
// reopens at the last flush that completed; a new checkpoint and the pruning
// of the old ones work. A write the checkpoint relied on but never synced
// (its manifest, or an SST file that RocksDB's ingestion did not sync) is
// dropped by the crash, so a missing sync fails the test.
TEST_P(CheckpointCrashTest, ACheckpointIsCompleteOrInvisibleAfterACrash) {
  const CheckpointCrashPoint& point = GetParam();
  const bool after_return = point.trigger[0] == '\0';
  auto crashing = std::make_shared<CrashingFileSystem>(fs_, point.op, point.trigger);
  crashing->set_armed(false);
  {
    auto store = OpenStore(data_, 64, false, crashing);
    ASSERT_NE(store, nullptr);
    StatusOr<DenseShard*> shard = store->CreateDense(DenseSpec());
    ASSERT_TRUE(shard.ok()) << shard.status();
    SetDense(store.get(), *shard, 1);
    ASSERT_OK(store->Checkpoint(Ckpt(1), 1));
    WriteFirstChunk(store.get(), *shard);
    crashing->set_armed(!after_return);
    Status s = store->Checkpoint(Ckpt(2), 2);
    if (after_return) {
      ASSERT_OK(s);
      fs_->SimulateCrash();
    } else {
      ASSERT_TRUE(crashing->crashed());
      EXPECT_FALSE(s.ok());
    }
  }  // The dying store's own writes fail: the file system is inactive.
  fs_->Reactivate();

  std::vector<CheckpointInfo> all = ListCheckpoints(root_, fs_.get());
  ASSERT_EQ(all.size(), point.checkpoint_survives ? 2u : 1u);
  EXPECT_EQ(all[0].dir, Ckpt(1));
  ExpectRestored(Ckpt(1), false);
  if (point.checkpoint_survives) {
    EXPECT_EQ(all[1].dir, Ckpt(2));
    EXPECT_FALSE(all[1].packed.empty());  // MANIFEST, CURRENT, OPTIONS.
    ExpectRestored(Ckpt(2), true);
  } else {
    EXPECT_FALSE(stdfs::exists(Ckpt(2)));
  }

  // The restarted store: the last completed flush, then a new checkpoint
  // (the crashed one's leftovers in the way of nothing) and the pruning.
  {
    auto store = OpenStore(data_, 64, false, fs_);
    ASSERT_NE(store, nullptr);
    StatusOr<DenseShard*> shard = store->CreateDense(DenseSpec());
    ASSERT_TRUE(shard.ok()) << shard.status();
    ExpectMixed(*shard, point.flush_survives);
    if (!point.flush_survives) WriteFirstChunk(store.get(), *shard);
    ASSERT_OK(store->Checkpoint(Ckpt(3), 3));
  }
  ASSERT_OK(PruneCheckpoints(root_, 1, fs_.get()));
  all = ListCheckpoints(root_, fs_.get());
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].dir, Ckpt(3));
  EXPECT_FALSE(stdfs::exists(Ckpt(1)));
  ExpectRestored(Ckpt(3), true);
}

INSTANTIATE_TEST_SUITE_P(
    Points, CheckpointCrashTest,
    ::testing::Values(
        // The flush's SST files are written (not yet synced: the ingestion
        // syncs them), the flush is not committed.
        CheckpointCrashPoint{"WhileFlushing", CrashingFileSystem::Op::kCreate,
                             "relaxps-flush-meta", false, false},
        // The flush is committed, the SST files are linked into the
        // unpublished directory, its manifest is not written yet.
        CheckpointCrashPoint{"BeforeTheManifest", CrashingFileSystem::Op::kCreate,
                             "ckpt-2.partial/" "RELAXPS_CHECKPOINT", false, true},
        // Everything is written and synced but not renamed into place.
        CheckpointCrashPoint{"BeforeTheRename", CrashingFileSystem::Op::kRename,
                             "ckpt-2.partial -> ", false, true},
        // Checkpoint returned: everything it wrote must be durable.
        CheckpointCrashPoint{"AfterItReturned", CrashingFileSystem::Op::kCreate, "", true, true}),
    [](const ::testing::TestParamInfo<CheckpointCrashPoint>& info) {
      return std::string(info.param.name);
    });

// A file system that cannot reopen a file for appending: RocksDB's ingestion
// then links the flush's SST files without syncing them, so the store must
// sync them itself. A crash right after the checkpoint loses nothing.
class NoReopenFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  using FileSystemWrapper::FileSystemWrapper;
  const char* Name() const override { return "NoReopenFileSystem"; }
  rocksdb::IOStatus ReopenWritableFile(const std::string&, const rocksdb::FileOptions&,
                                       std::unique_ptr<rocksdb::FSWritableFile>*,
                                       rocksdb::IODebugContext*) override {
    return rocksdb::IOStatus::NotSupported("no reopen here");
  }
};

TEST_F(CheckpointFaultTest, WithoutReopenTheFlushSyncsItsOwnFiles) {
  {
    auto store = OpenStore(data_, 64, false, std::make_shared<NoReopenFileSystem>(fs_));
    ASSERT_NE(store, nullptr);
    StatusOr<DenseShard*> shard = store->CreateDense(DenseSpec());
    ASSERT_TRUE(shard.ok()) << shard.status();
    SetDense(store.get(), *shard, 1);
    ASSERT_OK(store->Checkpoint(Ckpt(1), 1));
    fs_->SimulateCrash();
  }
  fs_->Reactivate();
  ASSERT_EQ(ListCheckpoints(root_, fs_.get()).size(), 1u);
  ExpectVersion(data_, 1);
  ASSERT_OK(RestoreCheckpoint(Ckpt(1), tmp_.path() + "/restored", fs_.get()));
  ExpectVersion(tmp_.path() + "/restored", 1);
}

}  // namespace
}  // namespace relaxps
