// Disk faults through the store's file-system seam (FaultInjectingFileSystem):
// ENOSPC and EIO during a flush and during a checkpoint leave the last good
// state readable and the previous checkpoint valid, and a crash that loses
// every unsynced write keeps exactly what the store had made durable. The
// read, delete and directory faults hit only the paths they name.
#include "storage/fault_injecting_fs.h"

#include <filesystem>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <rocksdb/file_system.h>

#include "storage/checkpoint.h"
#include "storage/param_store.h"
#include "tests/storage/rocksdb_store_test_util.h"
#include "tests/storage/storage_test_util.h"

namespace relaxps {
namespace {

using namespace testing_storage;  // NOLINT: the shared store fixtures.
#define ASSERT_OK RELAXPS_STORAGE_ASSERT_OK
using WriteError = FaultInjectingFileSystem::WriteError;

class DiskFaultTest : public ::testing::TestWithParam<WriteError> {
 protected:
  // The message each kind of fault carries up to the caller.
  std::string Expected() const {
    return GetParam() == WriteError::kNoSpace ? "No space left on device" : "Input/output error";
  }

  ScopedTempDir tmp_{"fault_fs_test"};
  std::string dir_ = tmp_.path() + "/db";
  std::shared_ptr<FaultInjectingFileSystem> fs_ = std::make_shared<FaultInjectingFileSystem>();
};

TEST_P(DiskFaultTest, FailedFlushReportsTheErrorAndTheLastFlushStaysReadable) {
  {
    auto store = OpenStore(dir_, 64, false, fs_);
    StatusOr<DenseShard*> shard = store->CreateDense(DenseSpec());
    ASSERT_TRUE(shard.ok()) << shard.status();
    SetDense(store.get(), *shard, 1);
    ASSERT_OK(store->Flush(1));
    ASSERT_OK(store->WaitForFlush());

    // Every file the flush writes fails (its SST files are relaxps-flush-*).
    fs_->SetWriteError(GetParam(), "relaxps-flush-");
    SetDense(store.get(), *shard, 2);
    ASSERT_OK(store->Flush(2));  // Starts the background job.
    Status s = store->WaitForFlush();
    EXPECT_EQ(s.code(), StatusCode::kIOError) << s;
    EXPECT_NE(s.ToString().find(Expected()), std::string::npos) << s;
    EXPECT_NE(s.ToString().find("relaxps-flush-"), std::string::npos) << s;
    // The store keeps serving from memory.
    ExpectDense(*shard, 2);
  }  // Closing with the fault still on: its final flush fails too (logged).
  fs_->SetWriteError(WriteError::kNone);
  auto store = OpenStore(dir_, 64, false, fs_);
  ASSERT_NE(store, nullptr);
  StatusOr<DenseShard*> shard = store->CreateDense(DenseSpec());
  ASSERT_TRUE(shard.ok()) << shard.status();
  ExpectDense(*shard, 1);  // The last completed flush, intact.
}

TEST_P(DiskFaultTest, FailedCheckpointLeavesThePreviousOneValidAndARetryWorks) {
  const std::string ckpt1 = tmp_.path() + "/ckpt/" + CheckpointDirName(1);
  const std::string ckpt2 = tmp_.path() + "/ckpt/" + CheckpointDirName(2);
  auto store = OpenStore(dir_, 64, false, fs_);
  StatusOr<DenseShard*> shard = store->CreateDense(DenseSpec());
  ASSERT_TRUE(shard.ok()) << shard.status();
  SetDense(store.get(), *shard, 1);
  ASSERT_OK(store->Checkpoint(ckpt1, 1));

  // The second checkpoint's files fail: links, manifest, everything under it.
  fs_->SetWriteError(GetParam(), CheckpointDirName(2));
  SetDense(store.get(), *shard, 2);
  std::promise<Status> result;
  store->CheckpointAsync(ckpt2, 2, [&result](Status s) { result.set_value(s); });
  Status s = result.get_future().get();
  EXPECT_EQ(s.code(), StatusCode::kIOError) << s;
  EXPECT_NE(s.ToString().find(Expected()), std::string::npos) << s;
  EXPECT_GT(fs_->injected_errors(), 0u);
  // Nothing half-written is left where a restore would look.
  EXPECT_FALSE(std::filesystem::exists(ckpt2));
  EXPECT_FALSE(std::filesystem::exists(ckpt2 + ".partial"));
  StatusOr<CheckpointInfo> first = ReadCheckpointInfo(ckpt1);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->clock, 1);
  const std::vector<CheckpointInfo> listed = ListCheckpoints(tmp_.path() + "/ckpt");
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].clock, 1);

  // The disk recovers: the same checkpoint succeeds, and restores clock 2.
  fs_->SetWriteError(WriteError::kNone);
  ASSERT_OK(store->Checkpoint(ckpt2, 2));
  store.reset();
  const std::string restored = tmp_.path() + "/restored";
  ASSERT_OK(RestoreCheckpoint(ckpt2, restored));
  auto back = OpenStore(restored);
  StatusOr<DenseShard*> back_shard = back->CreateDense(DenseSpec());
  ASSERT_TRUE(back_shard.ok()) << back_shard.status();
  ExpectDense(*back_shard, 2);
}

INSTANTIATE_TEST_SUITE_P(Errors, DiskFaultTest,
                         ::testing::Values(WriteError::kNoSpace, WriteError::kIO),
                         [](const ::testing::TestParamInfo<WriteError>& info) {
                           return info.param == WriteError::kNoSpace ? std::string("ENOSPC")
                                                                     : std::string("EIO");
                         });

// A crash that loses every write not covered by a sync: what Flush made
// durable (and, with wal_per_update, every acknowledged update) survives;
// the rest is gone, and the store opens cleanly.
class LostUnsyncedWritesTest : public ::testing::TestWithParam<bool> {
 protected:
  ScopedTempDir tmp_{"fault_fs_crash_test"};
  std::string dir_ = tmp_.path() + "/db";
  std::shared_ptr<FaultInjectingFileSystem> fs_ = std::make_shared<FaultInjectingFileSystem>();
};

TEST_P(LostUnsyncedWritesTest, OnlySyncedStateSurvives) {
  const bool wal = GetParam();
  const std::vector<uint64_t> ids = {10, 20, 30};
  const size_t row_floats = SparseSpec().row_floats();
  {
    auto store = OpenStore(dir_, 64, wal, fs_);
    ASSERT_OK(store->CreateSparse(SparseSpec()));
    StatusOr<DenseShard*> shard = store->CreateDense(DenseSpec());
    ASSERT_TRUE(shard.ok()) << shard.status();
    SetDense(store.get(), *shard, 1);
    std::vector<float> v1 = MakeRows(ids, row_floats, 1);
    ASSERT_OK(store->WriteRows("emb", ids.data(), ids.size(), v1.data()));
    ASSERT_OK(store->Flush(1));
    ASSERT_OK(store->WaitForFlush());
    // Acknowledged after the flush: durable only through the per-update WAL.
    std::vector<float> v2 = MakeRows(ids, row_floats, 2);
    ASSERT_OK(store->WriteRows("emb", ids.data(), ids.size(), v2.data()));
    fs_->SimulateCrash();
  }  // The dying store's own writes fail: the file system is inactive.
  fs_->Reactivate();
  auto store = OpenStore(dir_, 64, wal, fs_);
  ASSERT_NE(store, nullptr);
  ASSERT_OK(store->CreateSparse(SparseSpec()));
  StatusOr<DenseShard*> shard = store->CreateDense(DenseSpec());
  ASSERT_TRUE(shard.ok()) << shard.status();
  ExpectDense(*shard, 1);
  std::vector<float> back(ids.size() * row_floats);
  ASSERT_OK(store->ReadRows("emb", ids.data(), ids.size(), back.data()));
  EXPECT_EQ(back, MakeRows(ids, row_floats, wal ? 2 : 1));
}

INSTANTIATE_TEST_SUITE_P(Wal, LostUnsyncedWritesTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("WalPerUpdate")
                                             : std::string("FlushOnly");
                         });

// Group commit: updates wait in the WAL for SyncWal(); a crash keeps what
// the last SyncWal() covered (everything a server acknowledged) and loses the
// unsynced rest.
class WalGroupCommitTest : public ::testing::Test {
 protected:
  ScopedTempDir tmp_{"wal_group_commit_test"};
  std::string dir_ = tmp_.path() + "/db";
  std::shared_ptr<FaultInjectingFileSystem> fs_ = std::make_shared<FaultInjectingFileSystem>();
};

TEST_F(WalGroupCommitTest, CrashKeepsWhatSyncWalCoveredAndLosesTheRest) {
  const std::vector<uint64_t> ids = {10, 20, 30};
  const size_t row_floats = SparseSpec().row_floats();
  ParamStoreOptions o;
  o.kind = "rocksdb";
  o.data_dir = dir_;
  o.wal_per_update = true;
  o.wal_group_commit = true;
  o.file_system = fs_;
  {
    StatusOr<std::unique_ptr<ParamStore>> opened = NewParamStore(o);
    ASSERT_TRUE(opened.ok()) << opened.status();
    std::unique_ptr<ParamStore> store = std::move(opened).value();
    ASSERT_OK(store->CreateSparse(SparseSpec()));
    StatusOr<DenseShard*> created = store->CreateDense(DenseSpec());
    ASSERT_TRUE(created.ok()) << created.status();
    DenseShard* shard = *created;
    EXPECT_FALSE(store->HasUnsyncedUpdates());
    std::vector<float> v1 = MakeRows(ids, row_floats, 1);
    ASSERT_OK(store->WriteRows("emb", ids.data(), ids.size(), v1.data()));
    SetDense(store.get(), shard, 2);
    ASSERT_OK(store->DenseUpdated(shard, 0, shard->size()));
    EXPECT_TRUE(store->HasUnsyncedUpdates());
    ASSERT_OK(store->SyncWal());
    EXPECT_FALSE(store->HasUnsyncedUpdates());
    // Written but never synced: not acknowledged, and lost in the crash.
    std::vector<float> v3 = MakeRows(ids, row_floats, 3);
    ASSERT_OK(store->WriteRows("emb", ids.data(), ids.size(), v3.data()));
    EXPECT_TRUE(store->HasUnsyncedUpdates());
    fs_->SimulateCrash();
  }
  fs_->Reactivate();
  StatusOr<std::unique_ptr<ParamStore>> opened = NewParamStore(o);
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::unique_ptr<ParamStore> store = std::move(opened).value();
  ASSERT_OK(store->CreateSparse(SparseSpec()));
  StatusOr<DenseShard*> shard = store->CreateDense(DenseSpec());
  ASSERT_TRUE(shard.ok()) << shard.status();
  ExpectDense(*shard, 2);
  std::vector<float> back(ids.size() * row_floats);
  ASSERT_OK(store->ReadRows("emb", ids.data(), ids.size(), back.data()));
  EXPECT_EQ(back, MakeRows(ids, row_floats, 1));
}

// Group commit with a cache far smaller than the table: rows ReadRows
// created and rows WriteRows queued are evicted before any SyncWal, so the
// evictions must write the pending batch first; every synced row and the
// row count are back after a crash.
TEST_F(WalGroupCommitTest, EvictionsBeforeTheSyncKeepPendingRows) {
  const SparseTableSpec spec = SparseSpec(/*width=*/64, /*slots=*/2);  // 512 B per row.
  ParamStoreOptions o;
  o.kind = "rocksdb";
  o.data_dir = dir_;
  o.cache_mb = 1;  // About 2000 rows.
  o.wal_per_update = true;
  o.wal_group_commit = true;
  o.file_system = fs_;
  constexpr uint64_t kRows = 12000;
  std::vector<uint64_t> ids(kRows);
  for (uint64_t i = 0; i < kRows; ++i) ids[i] = i * 7919;
  std::vector<uint64_t> written;  // Every third row gets values.
  for (uint64_t i = 0; i < kRows; i += 3) written.push_back(ids[i]);
  {
    StatusOr<std::unique_ptr<ParamStore>> opened = NewParamStore(o);
    ASSERT_TRUE(opened.ok()) << opened.status();
    std::unique_ptr<ParamStore> store = std::move(opened).value();
    ASSERT_OK(store->CreateSparse(spec));
    std::vector<float> out(kRows * spec.row_floats());
    ASSERT_OK(store->ReadRows("emb", ids.data(), kRows, out.data()));  // Creates them all.
    std::vector<float> v = MakeRows(written, spec.row_floats(), 5);
    ASSERT_OK(store->WriteRows("emb", written.data(), written.size(), v.data()));
    ASSERT_OK(store->SyncWal());
    fs_->SimulateCrash();
  }
  fs_->Reactivate();
  StatusOr<std::unique_ptr<ParamStore>> opened = NewParamStore(o);
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::unique_ptr<ParamStore> store = std::move(opened).value();
  ASSERT_OK(store->CreateSparse(spec));
  EXPECT_EQ(*store->NumRows("emb"), kRows);
  std::vector<float> back(written.size() * spec.row_floats());
  ASSERT_OK(store->PeekRows("emb", written.data(), written.size(), back.data()));
  EXPECT_EQ(back, MakeRows(written, spec.row_floats(), 5));
  const uint64_t untouched = ids[1];
  std::vector<float> row(spec.row_floats());
  ASSERT_OK(store->PeekRows("emb", &untouched, 1, row.data()));
  EXPECT_EQ(row, InitialRow(spec, untouched));
}

// Reads, deletes and directory creation fail by path like writes do, each
// knob on its own; after a simulated crash deletes fail too; a file written
// under a directory is followed through the directory's rename, so the crash
// still drops it.
TEST(FaultInjectingFileSystemTest, ReadDeleteAndDirectoryFaultsMatchByPath) {
  ScopedTempDir tmp("fault_fs_paths_test");
  FaultInjectingFileSystem fs;
  const rocksdb::IOOptions io;
  const rocksdb::FileOptions fo;
  const std::string alpha = tmp.path() + "/alpha.file";
  const std::string beta = tmp.path() + "/beta.file";
  ASSERT_TRUE(rocksdb::WriteStringToFile(&fs, "a", alpha, /*should_sync=*/true).ok());
  ASSERT_TRUE(rocksdb::WriteStringToFile(&fs, "b", beta, /*should_sync=*/true).ok());

  fs.SetReadError(true, "alpha");
  std::unique_ptr<rocksdb::FSSequentialFile> seq;
  rocksdb::IOStatus s = fs.NewSequentialFile(alpha, fo, &seq, nullptr);
  EXPECT_TRUE(s.IsIOError()) << s.ToString();
  EXPECT_NE(s.ToString().find("injected EIO"), std::string::npos) << s.ToString();
  std::unique_ptr<rocksdb::FSRandomAccessFile> random;
  EXPECT_TRUE(fs.NewRandomAccessFile(alpha, fo, &random, nullptr).IsIOError());
  EXPECT_TRUE(fs.NewSequentialFile(beta, fo, &seq, nullptr).ok());
  std::vector<std::string> children;
  EXPECT_TRUE(fs.GetChildren(tmp.path(), io, &children, nullptr).ok());
  fs.SetReadError(true, tmp.path());
  EXPECT_TRUE(fs.GetChildren(tmp.path(), io, &children, nullptr).IsIOError());
  fs.SetReadError(false);
  EXPECT_TRUE(fs.NewSequentialFile(alpha, fo, &seq, nullptr).ok());
  EXPECT_EQ(fs.injected_errors(), 3u);

  fs.SetDeleteError(true, "alpha");
  EXPECT_TRUE(fs.DeleteFile(alpha, io, nullptr).IsIOError());
  EXPECT_TRUE(std::filesystem::exists(alpha));
  EXPECT_TRUE(fs.DeleteFile(beta, io, nullptr).ok());
  fs.SetDeleteError(false);
  EXPECT_TRUE(fs.DeleteFile(alpha, io, nullptr).ok());

  // Creating a directory is a write; a write error does not stop deletes.
  const std::string dir = tmp.path() + "/gamma.dir";
  fs.SetWriteError(FaultInjectingFileSystem::WriteError::kNoSpace, "gamma");
  EXPECT_TRUE(fs.CreateDirIfMissing(dir, io, nullptr).IsNoSpace());
  EXPECT_TRUE(fs.CreateDir(dir, io, nullptr).IsNoSpace());
  EXPECT_FALSE(std::filesystem::exists(dir));
  fs.SetWriteError(FaultInjectingFileSystem::WriteError::kNone);
  ASSERT_TRUE(fs.CreateDir(dir, io, nullptr).ok());
  fs.SetWriteError(FaultInjectingFileSystem::WriteError::kIO, "gamma");
  EXPECT_TRUE(fs.DeleteDir(dir, io, nullptr).ok());
  fs.SetWriteError(FaultInjectingFileSystem::WriteError::kNone);

  // Unsynced, then its directory renamed: the crash still drops it, and the
  // dying process can delete nothing.
  ASSERT_TRUE(fs.CreateDir(dir, io, nullptr).ok());
  ASSERT_TRUE(rocksdb::WriteStringToFile(&fs, "lost", dir + "/f", /*should_sync=*/false).ok());
  const std::string moved = tmp.path() + "/delta.dir";
  ASSERT_TRUE(fs.RenameFile(dir, moved, io, nullptr).ok());
  ASSERT_TRUE(std::filesystem::exists(moved + "/f"));
  fs.SimulateCrash();
  EXPECT_FALSE(std::filesystem::exists(moved + "/f"));
  EXPECT_TRUE(fs.DeleteDir(moved, io, nullptr).IsIOError());
  EXPECT_TRUE(std::filesystem::exists(moved));
  fs.Reactivate();
  EXPECT_TRUE(fs.DeleteDir(moved, io, nullptr).ok());
}

}  // namespace
}  // namespace relaxps
