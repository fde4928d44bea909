// Tests of the RocksDB-backed ParamStore: round trips, initialization,
// durability at Flush, per-update WAL under SIGKILL, the bounded row cache,
// and opening damaged stores.
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include "storage/fault_injecting_fs.h"
#include "storage/internal/rocksdb_store.h"
#include "storage/internal/store_format.h"
#include "storage/param_store.h"
#include "tests/storage/rocksdb_store_test_util.h"
#include "tests/storage/storage_test_util.h"
#include "tests/test_util.h"

namespace relaxps {
namespace {

using namespace testing_storage;  // NOLINT: the shared store fixtures.

class RocksDbStoreTest : public ::testing::Test {
 protected:
  ScopedTempDir tmp_{"rocksdb_store_test"};
  std::string dir_ = tmp_.path() + "/db";
};

TEST_F(RocksDbStoreTest, DenseAndSparseRoundTrip) {
  auto store = OpenStore(dir_);
  ASSERT_NE(store, nullptr);
  EXPECT_STREQ(store->Name(), "rocksdb");
  StatusOr<DenseShard*> shard = store->CreateDense(DenseSpec());
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*shard)->slots[0]) % 64, 0u);
  SetDense(store.get(), *shard, 1);
  ASSERT_OK(store->DenseUpdated(*shard, 0, (*shard)->size()));
  EXPECT_EQ(store->DenseUpdated(*shard, 39999, 2).code(), StatusCode::kInvalidArgument);

  const SparseTableSpec spec = SparseSpec();
  ASSERT_OK(store->CreateSparse(spec));
  std::vector<uint64_t> ids = {1, 7, 1ull << 50};
  std::vector<float> rows = MakeRows(ids, spec.row_floats(), 1);
  ASSERT_OK(store->WriteRows("emb", ids.data(), ids.size(), rows.data()));
  std::vector<float> back(rows.size());
  ASSERT_OK(store->ReadRows("emb", ids.data(), ids.size(), back.data()));
  EXPECT_EQ(back, rows);
  EXPECT_EQ(*store->NumRows("emb"), 3u);
  EXPECT_EQ(store->Tables(), (std::vector<std::string>{"emb", "w"}));
  EXPECT_EQ(store->ReadRows("nope", ids.data(), 1, back.data()).code(), StatusCode::kNotFound);
  EXPECT_EQ(store->CreateSparse({"w", 4, 1, {}, 0.0f}).code(), StatusCode::kInvalidArgument);
  // Its rows need WAL, dirty marks and eviction: updated through copies.
  EXPECT_FALSE(store->UpdatesRowsInPlace());
  EXPECT_EQ(store->UpdateRowsInPlace("emb", ids.data(), 1, [](size_t, float*) {}).code(),
            StatusCode::kFailedPrecondition);
}

// RocksDB's info log goes to this process's log, not to a LOG file in the
// data directory: on a full disk a failed append to that file made the next
// line logged to it abort the process (RocksDB 7.8 built with assertions,
// as Debian ships it; tests/e2e/disk_full_test.sh).
TEST_F(RocksDbStoreTest, WritesNoInfoLogFileIntoTheDataDirectory) {
  {
    auto store = OpenStore(dir_);
    ASSERT_NE(store, nullptr);
    StatusOr<DenseShard*> shard = store->CreateDense(DenseSpec());
    ASSERT_TRUE(shard.ok()) << shard.status();
    SetDense(store.get(), *shard, 1);
    ASSERT_OK(store->Flush(1));
    ASSERT_OK(store->WaitForFlush());
  }
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    const std::string name = entry.path().filename().string();
    EXPECT_NE(name.rfind("LOG", 0), 0u) << "RocksDB wrote its info log to " << entry.path();
  }
}

TEST_F(RocksDbStoreTest, InitializationIsIndependentOfSharding) {
  // One shard [0, 40000) against two shards [0, 15000) + [15000, 40000) in
  // different stores, and against the memory store.
  auto whole = OpenStore(dir_ + "-whole");
  auto left = OpenStore(dir_ + "-left");
  auto right = OpenStore(dir_ + "-right");
  auto memory = NewMemoryStore();
  StatusOr<DenseShard*> w = whole->CreateDense(DenseSpec(0, 40000));
  StatusOr<DenseShard*> l = left->CreateDense(DenseSpec(0, 15000));
  StatusOr<DenseShard*> r = right->CreateDense(DenseSpec(15000, 40000));
  StatusOr<DenseShard*> m = memory->CreateDense(DenseSpec(0, 40000));
  ASSERT_TRUE(w.ok() && l.ok() && r.ok() && m.ok());
  for (int s = 0; s < 3; ++s) {
    for (size_t i = 0; i < 40000; ++i) {
      const float expect = i < 15000 ? (*l)->slots[s][i] : (*r)->slots[s][i - 15000];
      ASSERT_EQ((*w)->slots[s][i], expect) << s << "/" << i;
      ASSERT_EQ((*m)->slots[s][i], expect) << s << "/" << i;
    }
  }
  EXPECT_NE((*w)->slots[0][0], (*w)->slots[0][1]);  // Really initialized.
  EXPECT_EQ((*w)->slots[1][5], 0.125f);

  const SparseTableSpec spec = SparseSpec();
  ASSERT_OK(left->CreateSparse(spec));
  ASSERT_OK(memory->CreateSparse(spec));
  std::vector<uint64_t> ids = {3, 99, 123456789};
  std::vector<float> a(ids.size() * spec.row_floats()), b(a.size());
  ASSERT_OK(left->ReadRows("emb", ids.data(), ids.size(), a.data()));
  ASSERT_OK(memory->ReadRows("emb", ids.data(), ids.size(), b.data()));
  EXPECT_EQ(a, b);
  std::vector<float> expect = InitialRow(spec, 99);
  EXPECT_EQ(std::vector<float>(a.begin() + 16, a.begin() + 32), expect);
  for (const char* suffix : {"-whole", "-left", "-right"}) {
    std::filesystem::remove_all(dir_ + suffix);
  }
}

TEST_F(RocksDbStoreTest, ReopenAfterFlushRestoresDataStateStepAndClock) {
  const SparseTableSpec spec = SparseSpec();
  std::vector<uint64_t> ids = {2, 4, 8, 16, 1ull << 40};
  {
    auto store = OpenStore(dir_);
    StatusOr<DenseShard*> shard = store->CreateDense(DenseSpec());
    ASSERT_TRUE(shard.ok());
    SetDense(store.get(), *shard, 2);
    (*shard)->step = 17;
    (*shard)->clock = 9;
    ASSERT_OK(store->CreateSparse(spec));
    std::vector<float> rows = MakeRows(ids, spec.row_floats(), 2);
    ASSERT_OK(store->WriteRows("emb", ids.data(), ids.size(), rows.data()));
    std::vector<float> scratch(spec.row_floats());
    const uint64_t untouched = 77;  // Created by a read: must exist after reopen too.
    ASSERT_OK(store->ReadRows("emb", &untouched, 1, scratch.data()));
    ASSERT_OK(store->Flush(9));
  }
  auto store = OpenStore(dir_);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->Tables(), (std::vector<std::string>{"emb", "w"}));
  // Sparse tables are back without CreateSparse.
  ASSERT_NE(store->GetSparse("emb"), nullptr);
  EXPECT_EQ(store->GetSparse("emb")->width, spec.width);
  EXPECT_EQ(*store->NumRows("emb"), 6u);
  std::vector<float> back(ids.size() * spec.row_floats());
  ASSERT_OK(store->ReadRows("emb", ids.data(), ids.size(), back.data()));
  EXPECT_EQ(back, MakeRows(ids, spec.row_floats(), 2));  // Params and optimizer slot.
  EXPECT_EQ(*store->NumRows("emb"), 6u);

  // A different shape is refused; the same one returns the persisted data.
  EXPECT_EQ(store->CreateDense(DenseSpec(0, 40001)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store->CreateSparse(SparseSpec(9)).code(), StatusCode::kInvalidArgument);
  StatusOr<DenseShard*> shard = store->CreateDense(DenseSpec());
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_EQ((*shard)->step, 17);
  EXPECT_EQ((*shard)->clock, 9);
  ExpectDense(*shard, 2);
}

TEST_F(RocksDbStoreTest, GetDenseLoadsPersistedShardLazily) {
  {
    auto store = OpenStore(dir_);
    StatusOr<DenseShard*> shard = store->CreateDense(DenseSpec());
    ASSERT_TRUE(shard.ok());
    SetDense(store.get(), *shard, 4);
    ASSERT_OK(store->Flush(1));
  }
  auto store = OpenStore(dir_);
  DenseShard* shard = store->GetDense("w");
  ASSERT_NE(shard, nullptr);
  ExpectDense(shard, 4);
  EXPECT_EQ(store->GetDense("other"), nullptr);
}

TEST_F(RocksDbStoreTest, UnflushedDataIsAbsentAfterReopenWithoutWal) {
  const SparseTableSpec spec = SparseSpec(64, 2);
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < 4000; ++i) ids.push_back(i * 3);  // 2 MiB of rows: 2x the cache.
  {
    auto store = OpenStore(dir_, /*cache_mb=*/1);
    StatusOr<DenseShard*> shard = store->CreateDense(DenseSpec());
    ASSERT_TRUE(shard.ok());
    SetDense(store.get(), *shard, 1);
    ASSERT_OK(store->CreateSparse(spec));
    std::vector<float> v1 = MakeRows(ids, spec.row_floats(), 1);
    ASSERT_OK(store->WriteRows("emb", ids.data(), ids.size(), v1.data()));
    ASSERT_OK(store->Flush(1));

    // Version 2 everywhere, plus new rows; evictions stage some of it on disk.
    SetDense(store.get(), *shard, 2);
    (*shard)->step = 5;
    ASSERT_OK(store->DenseUpdated(*shard, 0, (*shard)->size()));
    std::vector<float> v2 = MakeRows(ids, spec.row_floats(), 2);
    ASSERT_OK(store->WriteRows("emb", ids.data(), ids.size(), v2.data()));
    std::vector<uint64_t> fresh = {1, 2, 4};
    std::vector<float> scratch(fresh.size() * spec.row_floats());
    ASSERT_OK(store->ReadRows("emb", fresh.data(), fresh.size(), scratch.data()));
    EXPECT_EQ(*store->NumRows("emb"), ids.size() + 3);
    auto stats = storage_internal::GetRowCacheStats(store.get());
    ASSERT_TRUE(stats.ok());
    EXPECT_GT(stats->evictions, 0u);  // Some version-2 rows did reach the disk.
  }
  auto store = OpenStore(dir_, 1);
  StatusOr<DenseShard*> shard = store->CreateDense(DenseSpec());
  ASSERT_TRUE(shard.ok());
  ExpectDense(*shard, 1);
  EXPECT_EQ((*shard)->step, 0);
  EXPECT_EQ(*store->NumRows("emb"), ids.size());
  std::vector<float> back(ids.size() * spec.row_floats());
  ASSERT_OK(store->ReadRows("emb", ids.data(), ids.size(), back.data()));
  EXPECT_EQ(back, MakeRows(ids, spec.row_floats(), 1));
}

TEST_F(RocksDbStoreTest, LruCacheEvictsAndKeepsEveryRowOfATable8xTheCache) {
  const SparseTableSpec spec = SparseSpec(64, 2);  // 512 bytes per row.
  const size_t num_rows = 16384;                     // 8 MiB of rows, cache 1 MiB.
  std::vector<uint64_t> ids(num_rows);
  for (size_t i = 0; i < num_rows; ++i) ids[i] = i * 7919 + 13;
  {
    auto store = OpenStore(dir_, /*cache_mb=*/1);
    ASSERT_OK(store->CreateSparse(spec));
    // Write in batches of 256 rows, then rewrite every other batch (dirty rows
    // that were evicted are read back from staged keys, changed, evicted again).
    for (size_t b = 0; b < num_rows; b += 256) {
      std::vector<uint64_t> part(ids.begin() + b, ids.begin() + b + 256);
      std::vector<float> rows = MakeRows(part, spec.row_floats(), 1);
      ASSERT_OK(store->WriteRows("emb", part.data(), part.size(), rows.data()));
    }
    for (size_t b = 0; b < num_rows; b += 512) {
      std::vector<uint64_t> part(ids.begin() + b, ids.begin() + b + 256);
      std::vector<float> rows = MakeRows(part, spec.row_floats(), 2);
      ASSERT_OK(store->WriteRows("emb", part.data(), part.size(), rows.data()));
    }
    auto stats = storage_internal::GetRowCacheStats(store.get());
    ASSERT_TRUE(stats.ok());
    EXPECT_LE(stats->bytes, stats->budget_bytes);
    EXPECT_EQ(stats->budget_bytes, size_t{1} << 20);
    EXPECT_LT(stats->rows, num_rows / 6);
    EXPECT_GT(stats->evictions, num_rows);
    EXPECT_EQ(*store->NumRows("emb"), num_rows);

    std::vector<float> back(256 * spec.row_floats());
    for (size_t b = 0; b < num_rows; b += 256) {
      std::vector<uint64_t> part(ids.begin() + b, ids.begin() + b + 256);
      ASSERT_OK(store->ReadRows("emb", part.data(), part.size(), back.data()));
      ASSERT_EQ(back, MakeRows(part, spec.row_floats(), (b / 256) % 2 == 0 ? 2 : 1)) << b;
    }
    ASSERT_OK(store->Flush(3));
  }
  auto store = OpenStore(dir_, 1);
  EXPECT_EQ(*store->NumRows("emb"), num_rows);
  std::vector<float> back(256 * spec.row_floats());
  for (size_t b = 0; b < num_rows; b += 256) {
    std::vector<uint64_t> part(ids.begin() + b, ids.begin() + b + 256);
    ASSERT_OK(store->ReadRows("emb", part.data(), part.size(), back.data()));
    ASSERT_EQ(back, MakeRows(part, spec.row_floats(), (b / 256) % 2 == 0 ? 2 : 1)) << b;
  }
}

// SparseRowIds (a range move of a hash bucket copies those rows) lists every
// row once wherever it is: created or written and only cached, evicted to
// staged keys, committed by a flush, and after a reopen; of its table only.
TEST_F(RocksDbStoreTest, SparseRowIdsListsEveryRowOnceInCacheStagedAndCommitted) {
  const SparseTableSpec spec = SparseSpec(64, 2);
  SparseTableSpec other = spec;
  other.table = "other";
  std::vector<uint64_t> ids(4096);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = i * 7919 + 13;
  auto sorted = [](std::vector<uint64_t> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  {
    auto store = OpenStore(dir_, /*cache_mb=*/1);  // 2048 rows fit.
    ASSERT_OK(store->CreateSparse(spec));
    ASSERT_OK(store->CreateSparse(other));
    const uint64_t not_listed = 5;
    std::vector<float> row(spec.row_floats());
    ASSERT_OK(store->ReadRows("other", &not_listed, 1, row.data()));
    ASSERT_OK(store->PeekRows("emb", &not_listed, 1, row.data()));  // Creates nothing.
    std::vector<float> rows = MakeRows(ids, spec.row_floats(), 1);
    ASSERT_OK(store->WriteRows("emb", ids.data(), 3000, rows.data()));
    // A created row that was only read (ReadRows creates it).
    std::vector<float> back((ids.size() - 3000) * spec.row_floats());
    ASSERT_OK(store->ReadRows("emb", ids.data() + 3000, ids.size() - 3000, back.data()));
    std::vector<uint64_t> listed;
    ASSERT_OK(store->SparseRowIds("emb", &listed));
    EXPECT_EQ(sorted(listed), sorted(ids));
    ASSERT_OK(store->Flush(1));
    listed.clear();
    ASSERT_OK(store->SparseRowIds("emb", &listed));
    EXPECT_EQ(sorted(listed), sorted(ids));
    EXPECT_EQ(store->SparseRowIds("nope", &listed).code(), StatusCode::kNotFound);
  }
  auto store = OpenStore(dir_, 1);
  std::vector<uint64_t> listed;
  ASSERT_OK(store->SparseRowIds("emb", &listed));
  EXPECT_EQ(sorted(listed), sorted(ids));
  listed.clear();
  ASSERT_OK(store->SparseRowIds("other", &listed));
  EXPECT_EQ(listed, std::vector<uint64_t>{5});
}

TEST_F(RocksDbStoreTest, FlushWritesTablesAnnouncedByBeforeDenseWrite) {
  {
    auto store = OpenStore(dir_);
    StatusOr<DenseShard*> shard = store->CreateDense(DenseSpec());
    ASSERT_TRUE(shard.ok());
    SetDense(store.get(), *shard, 1);
    ASSERT_OK(store->Flush(1));
    // Change one key in the partial last chunk and one in slot 1, without
    // DenseUpdated: BeforeDenseWrite is enough for Flush to write the table.
    store->BeforeDenseWrite(*shard);
    (*shard)->slots[0][39999] = -7.0f;
    (*shard)->slots[1][16384] = -8.0f;
    (*shard)->step = 2;
    ASSERT_OK(store->Flush(2));
  }
  auto store = OpenStore(dir_);
  StatusOr<DenseShard*> shard = store->CreateDense(DenseSpec());
  ASSERT_TRUE(shard.ok());
  EXPECT_EQ((*shard)->slots[0][39999], -7.0f);
  EXPECT_EQ((*shard)->slots[1][16384], -8.0f);
  EXPECT_EQ((*shard)->step, 2);
  (*shard)->slots[0][39999] = RowValue(39999, 0, 1);
  (*shard)->slots[1][16384] = RowValue(16384, 1, 1);
  ExpectDense(*shard, 1);
}

// ---- Background dense flush -------------------------------------------------

// 4M keys x 3 slots (48 MiB): the background copy takes long enough that the
// writes below would race it without BeforeDenseWrite.
DenseShardSpec BigDenseSpec() { return {"big", 0, 4 << 20, 3, Uniform(3, 4 << 20), 0.0f}; }

TEST_F(RocksDbStoreTest, BackgroundFlushPersistsTheValuesAsOfTheFlushCall) {
  {
    auto store = OpenStore(dir_);
    StatusOr<DenseShard*> shard = store->CreateDense(BigDenseSpec());
    ASSERT_TRUE(shard.ok()) << shard.status();
    SetDense(store.get(), *shard, 1);
    (*shard)->step = 5;
    (*shard)->clock = 1;
    ASSERT_OK(store->Flush(1));
    // Updated right away, as the server does with the next gradient.
    SetDense(store.get(), *shard, 2);
    (*shard)->step = 6;
    (*shard)->clock = 2;
    ASSERT_OK(store->WaitForFlush());
  }  // Nothing flushed version 2: the reopened store must hold version 1.
  auto store = OpenStore(dir_);
  StatusOr<DenseShard*> shard = store->CreateDense(BigDenseSpec());
  ASSERT_TRUE(shard.ok()) << shard.status();
  ExpectDense(*shard, 1);
  EXPECT_EQ((*shard)->step, 5);
  EXPECT_EQ((*shard)->clock, 1);
}

TEST_F(RocksDbStoreTest, ReopenAfterCompletedBackgroundFlushesRestoresTheLastOne) {
  {
    auto store = OpenStore(dir_);
    StatusOr<DenseShard*> shard = store->CreateDense(BigDenseSpec());
    ASSERT_TRUE(shard.ok()) << shard.status();
    ASSERT_OK(store->CreateSparse(SparseSpec()));
    // Back-to-back flushes: some are coalesced while the previous one runs;
    // the last one is still completed by WaitForFlush.
    for (int v = 1; v <= 4; ++v) {
      SetDense(store.get(), *shard, v);
      (*shard)->step = v;
      (*shard)->clock = v;
      ASSERT_OK(store->Flush(v));
    }
    ASSERT_OK(store->WaitForFlush());
  }
  auto store = OpenStore(dir_);
  EXPECT_EQ(store->Tables(), (std::vector<std::string>{"big", "emb"}));
  StatusOr<DenseShard*> shard = store->CreateDense(BigDenseSpec());
  ASSERT_TRUE(shard.ok()) << shard.status();
  ExpectDense(*shard, 4);
  EXPECT_EQ((*shard)->step, 4);
  EXPECT_EQ((*shard)->clock, 4);
}

TEST_F(RocksDbStoreTest, BackgroundFlushErrorIsReportedOnceAndARetryCommits) {
  auto fs = std::make_shared<FaultInjectingFileSystem>();
  {
    auto store = OpenStore(dir_, 64, false, fs);
    StatusOr<DenseShard*> shard = store->CreateDense(DenseSpec());
    ASSERT_TRUE(shard.ok()) << shard.status();
    SetDense(store.get(), *shard, 1);
    ASSERT_OK(store->Flush(1));
    ASSERT_OK(store->WaitForFlush());
    // Injected EIO where the flush writes its SST file.
    fs->SetWriteError(FaultInjectingFileSystem::WriteError::kIO, "relaxps-flush-meta.sst.tmp");
    SetDense(store.get(), *shard, 2);
    ASSERT_OK(store->Flush(2));  // Only starts the job.
    // The job's error comes back exactly once: from the next Flush if the job
    // ended before it, else from WaitForFlush.
    Status next = store->Flush(3);
    Status waited = store->WaitForFlush();
    ASSERT_NE(next.ok(), waited.ok()) << next << " / " << waited;
    const Status& s = next.ok() ? waited : next;
    EXPECT_EQ(s.code(), StatusCode::kIOError) << s;
    EXPECT_NE(s.ToString().find("relaxps-flush-meta.sst.tmp"), std::string::npos) << s;
    EXPECT_NE(s.ToString().find("injected EIO"), std::string::npos) << s;
    EXPECT_GT(fs->injected_errors(), 0u);
    // The disk recovers: a retry commits.
    fs->SetWriteError(FaultInjectingFileSystem::WriteError::kNone);
    SetDense(store.get(), *shard, 3);
    ASSERT_OK(store->Flush(4));
    ASSERT_OK(store->WaitForFlush());
  }
  auto store = OpenStore(dir_);
  StatusOr<DenseShard*> shard = store->CreateDense(DenseSpec());
  ASSERT_TRUE(shard.ok()) << shard.status();
  ExpectDense(*shard, 3);
}

// Simulates a crash between a Flush's commit and the move of its staged rows
// (and, separately, staged rows left by a crash before any commit) by writing
// the on-disk records directly, then opens the store.
TEST_F(RocksDbStoreTest, OpenFinishesAnInterruptedFlushAndDiscardsUncommittedRows) {
  const SparseTableSpec spec = SparseSpec();
  std::vector<uint64_t> ids = {5, 6};
  for (bool pending : {true, false}) {
    SCOPED_TRACE(pending ? "apply pending" : "no pending flush");
    std::filesystem::remove_all(dir_);
    {
      auto store = OpenStore(dir_);
      ASSERT_OK(store->CreateSparse(spec));
      std::vector<float> v1 = MakeRows(ids, spec.row_floats(), 1);
      ASSERT_OK(store->WriteRows("emb", ids.data(), ids.size(), v1.data()));
      ASSERT_OK(store->Flush(1));
    }
    {
      rocksdb::DB* raw = nullptr;
      ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), dir_, &raw).ok());
      std::unique_ptr<rocksdb::DB> db(raw);
      std::vector<float> v2 = MakeRows({6}, spec.row_floats(), 2);
      // The sparse table was the first table created: id 1.
      rocksdb::WriteBatch batch;
      batch.Put(storage_internal::RowKey(storage_internal::kStagedPrefix, 1, 6),
                rocksdb::Slice(reinterpret_cast<const char*>(v2.data()), v2.size() * 4));
      batch.Put(storage_internal::kFlushKey,
                storage_internal::EncodeFlushRecord({2, /*apply_pending=*/pending}));
      rocksdb::WriteOptions wo;
      wo.sync = true;
      ASSERT_TRUE(db->Write(wo, &batch).ok());
    }
    auto store = OpenStore(dir_);
    ASSERT_NE(store, nullptr);
    std::vector<float> back(ids.size() * spec.row_floats());
    ASSERT_OK(store->ReadRows("emb", ids.data(), ids.size(), back.data()));
    std::vector<float> expect = MakeRows(ids, spec.row_floats(), 1);
    if (pending) {
      std::vector<float> v2 = MakeRows({6}, spec.row_floats(), 2);
      std::copy(v2.begin(), v2.end(), expect.begin() + spec.row_floats());
    }
    EXPECT_EQ(back, expect);
  }
}

// The acceptance bound for tables larger than the cache: in a fresh process,
// train (read, update, write) a table whose rows total 4x cache_mb, flush, read
// it all back, and check the peak RSS stays under 2x the cache + 150 MB.
void TrainLargeTableAndCheckRss(const std::string& dir) {
  const size_t cache_mb = 16;
  const SparseTableSpec spec = SparseSpec(64, 2);  // 512 bytes per row.
  const size_t num_rows = 4 * cache_mb * 2048;     // 4x the cache.
  auto store = OpenStore(dir, cache_mb);
  if (store == nullptr || !store->CreateSparse(spec).ok()) _exit(2);
  const size_t batch = 1024;
  std::vector<uint64_t> ids(batch);
  std::vector<float> rows(batch * spec.row_floats());
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (size_t b = 0; b < num_rows; b += batch) {
      for (size_t i = 0; i < batch; ++i) ids[i] = (b + i) * 2654435761u;  // Scattered ids.
      if (!store->ReadRows("emb", ids.data(), batch, rows.data()).ok()) _exit(3);
      for (float& v : rows) v += 1.0f;
      if (!store->WriteRows("emb", ids.data(), batch, rows.data()).ok()) _exit(4);
    }
    if (!store->Flush(epoch).ok()) _exit(5);
  }
  for (size_t b = 0; b < num_rows; b += batch) {
    for (size_t i = 0; i < batch; ++i) ids[i] = (b + i) * 2654435761u;
    if (!store->ReadRows("emb", ids.data(), batch, rows.data()).ok()) _exit(6);
    for (size_t i = 0; i < batch; ++i) {
      std::vector<float> expect = InitialRow(spec, ids[i]);
      for (size_t c = 0; c < spec.row_floats(); ++c) {
        if (rows[i * spec.row_floats() + c] != (expect[c] + 1.0f) + 1.0f) _exit(7);
      }
    }
  }
  if (*store->NumRows("emb") != num_rows) _exit(8);
  std::ifstream status("/proc/self/status");
  std::string line;
  long hwm_kb = -1;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) hwm_kb = std::stol(line.substr(6));
  }
  const long limit_kb = (2 * cache_mb + 150) * 1024;
  fprintf(stderr, "peak RSS %ld KiB, limit %ld KiB\n", hwm_kb, limit_kb);
  // Sanitizer builds inflate RSS by design: there only the data is checked.
  _exit(hwm_kb > 0 && (test::kSanitizerInflatesMemory || hwm_kb < limit_kb) ? 0 : 9);
}

TEST_F(RocksDbStoreTest, TableOf4xTheCacheTrainsWithBoundedRss) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // A fresh process: its own VmHWM.
  EXPECT_EXIT(TrainLargeTableAndCheckRss(dir_), ::testing::ExitedWithCode(0), "peak RSS");
}

// ---- wal_per_update under a real SIGKILL ------------------------------------

constexpr char kCrashDirEnv[] = "RELAXPS_STORAGE_TEST_CRASH_DIR";

// Runs in the death-test child: acknowledged updates, then SIGKILL (no Flush,
// no destructors).
void WriteThenDie(const std::string& dir, bool wal) {
  auto store = OpenStore(dir, 1, wal);
  if (store == nullptr) _exit(3);
  auto shard = store->CreateDense(DenseSpec());
  if (!shard.ok() || !store->CreateSparse(SparseSpec()).ok()) _exit(4);
  if (!store->Flush(1).ok() || !store->WaitForFlush().ok()) _exit(5);  // "initial" is committed.
  store->BeforeDenseWrite(*shard);
  for (size_t i = 20000; i < 20100; ++i) (*shard)->slots[0][i] = 42.0f + i;
  for (size_t i = 20000; i < 20100; ++i) (*shard)->slots[2][i] = -1.0f;
  (*shard)->step = 3;
  (*shard)->clock = 2;
  if (!store->DenseUpdated(*shard, 20000, 100).ok()) _exit(6);
  std::vector<uint64_t> ids = {10, 20, 30};
  std::vector<float> rows = MakeRows(ids, SparseSpec().row_floats(), 7);
  if (!store->WriteRows("emb", ids.data(), ids.size(), rows.data()).ok()) _exit(7);
  ::kill(::getpid(), SIGKILL);
  _exit(8);
}

class RocksDbStoreCrashTest : public ::testing::TestWithParam<bool> {};

TEST_P(RocksDbStoreCrashTest, SigkillKeepsAcknowledgedUpdatesOnlyWithWal) {
  const bool wal = GetParam();
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // Re-exec: no inherited RocksDB threads.
  if (const char* child_dir = ::getenv(kCrashDirEnv)) {
    WriteThenDie(child_dir, wal);  // Only reached in the death-test child.
  }
  ScopedTempDir tmp("rocksdb_crash_test");
  const std::string dir = tmp.path() + "/db";
  ::setenv(kCrashDirEnv, dir.c_str(), 1);
  EXPECT_EXIT(WriteThenDie(dir, wal), ::testing::KilledBySignal(SIGKILL), "");
  ::unsetenv(kCrashDirEnv);

  auto store = OpenStore(dir, 1, wal);
  ASSERT_NE(store, nullptr);
  StatusOr<DenseShard*> shard = store->CreateDense(DenseSpec());
  ASSERT_TRUE(shard.ok()) << shard.status();
  std::vector<float> init(40000);
  DenseSpec().init.Fill(0, 40000, init.data());
  const uint64_t rows_before_read = *store->NumRows("emb");
  std::vector<uint64_t> ids = {10, 20, 30};
  std::vector<float> back(ids.size() * SparseSpec().row_floats());
  ASSERT_OK(store->ReadRows("emb", ids.data(), ids.size(), back.data()));
  if (wal) {
    for (size_t i = 20000; i < 20100; ++i) {
      ASSERT_EQ((*shard)->slots[0][i], 42.0f + i);
      ASSERT_EQ((*shard)->slots[2][i], -1.0f);
    }
    EXPECT_EQ((*shard)->slots[0][19999], init[19999]);
    EXPECT_EQ((*shard)->step, 3);
    EXPECT_EQ((*shard)->clock, 2);
    EXPECT_EQ(back, MakeRows(ids, SparseSpec().row_floats(), 7));
    EXPECT_EQ(rows_before_read, 3u);
  } else {
    for (size_t i = 20000; i < 20100; ++i) ASSERT_EQ((*shard)->slots[0][i], init[i]);
    EXPECT_EQ((*shard)->step, 0);
    EXPECT_EQ(rows_before_read, 0u);
    EXPECT_EQ(std::vector<float>(back.begin(), back.begin() + 16), InitialRow(SparseSpec(), 10));
  }
}

INSTANTIATE_TEST_SUITE_P(Wal, RocksDbStoreCrashTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "WalPerUpdate" : "NoWal"; });

// ---- Damaged stores ---------------------------------------------------------

TEST_F(RocksDbStoreTest, OpeningADamagedStoreFailsWithAnErrorNamingIt) {
  {
    auto store = OpenStore(dir_);
    StatusOr<DenseShard*> shard = store->CreateDense(DenseSpec());
    ASSERT_TRUE(shard.ok());
    ASSERT_OK(store->Flush(1));
  }
  // Truncate every SST file to half its size.
  int truncated = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir_)) {
    if (e.path().extension() == ".sst") {
      std::filesystem::resize_file(e.path(), e.file_size() / 2);
      ++truncated;
    }
  }
  ASSERT_GT(truncated, 0);
  ParamStoreOptions o;
  o.data_dir = dir_;
  StatusOr<std::unique_ptr<ParamStore>> store = NewParamStore(o);
  ASSERT_FALSE(store.ok());
  EXPECT_TRUE(store.status().code() == StatusCode::kCorruption ||
              store.status().code() == StatusCode::kIOError)
      << store.status();
  EXPECT_NE(store.status().message().find(dir_), std::string::npos) << store.status();
}

TEST_F(RocksDbStoreTest, SparseStepIsPersistedWithTheTable) {
  for (bool wal : {false, true}) {
    SCOPED_TRACE(wal ? "wal_per_update" : "flush");
    std::filesystem::remove_all(dir_);
    const std::vector<uint64_t> ids = {3};
    {
      auto store = OpenStore(dir_, 64, wal);
      ASSERT_OK(store->CreateSparse(SparseSpec()));
      EXPECT_EQ(store->SparseStep("nope"), nullptr);
      int64_t* step = store->SparseStep("emb");
      ASSERT_NE(step, nullptr);
      EXPECT_EQ(*step, 0);
      *step = 41;
      ASSERT_OK(store->WriteRows("emb", ids.data(), 1,
                                 MakeRows(ids, SparseSpec().row_floats(), 1).data()));
      if (!wal) {
        ASSERT_OK(store->Flush(1));
      }
    }
    auto store = OpenStore(dir_, 64, wal);
    ASSERT_NE(store->SparseStep("emb"), nullptr);
    EXPECT_EQ(*store->SparseStep("emb"), 41);
  }
}

uint64_t SstBytes(const std::string& dir) {
  uint64_t bytes = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".sst") continue;
    // RocksDB deletes obsolete files in the background: one listed a moment
    // ago may be gone (no longer on disk, so it counts 0).
    std::error_code ec;
    const uint64_t size = std::filesystem::file_size(e.path(), ec);
    if (!ec) bytes += size;
  }
  return bytes;
}

// Each flush writes the table under a new generation and drops the older
// ones as whole files, so the data on disk stays one copy of the table
// instead of piling up until compactions rewrite it.
TEST_F(RocksDbStoreTest, RepeatedFlushesKeepOneGenerationOnDisk) {
  const DenseShardSpec spec = DenseSpec(0, 400000, 3);  // 4.8 MB per generation.
  const uint64_t generation_bytes = 400000 * 3 * sizeof(float);
  {
    auto store = OpenStore(dir_);
    StatusOr<DenseShard*> shard = store->CreateDense(spec);
    ASSERT_TRUE(shard.ok()) << shard.status();
    for (int v = 1; v <= 8; ++v) {
      SetDense(store.get(), *shard, v);
      ASSERT_OK(store->Flush(v));
      ASSERT_OK(store->WaitForFlush());
      // A dropped file that a running compaction's version still references
      // stays on disk until that compaction ends: at most one extra.
      EXPECT_LT(SstBytes(dir_), 2 * generation_bytes + generation_bytes / 2)
          << "after flush " << v;
    }
  }
  auto store = OpenStore(dir_);
  EXPECT_LT(SstBytes(dir_), generation_bytes + generation_bytes / 2);
  StatusOr<DenseShard*> shard = store->CreateDense(spec);
  ASSERT_TRUE(shard.ok()) << shard.status();
  ExpectDense(*shard, 8);
}

TEST_F(RocksDbStoreTest, MissingChunkOfAFlushedTableIsCorruptionNamingTheTable) {
  {
    auto store = OpenStore(dir_);
    StatusOr<DenseShard*> shard = store->CreateDense(DenseSpec());
    ASSERT_TRUE(shard.ok());
    SetDense(store.get(), *shard, 1);
    ASSERT_OK(store->Flush(1));
  }
  {
    rocksdb::DB* raw = nullptr;
    rocksdb::Options options;
    ASSERT_TRUE(rocksdb::DB::Open(options, dir_, &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    // The first table has id 1; its first flush wrote generation 1.
    const std::string key = storage_internal::DenseChunkKey(1, 1, /*slot=*/2, /*chunk=*/1);
    std::string value;
    ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), key, &value).ok());
    ASSERT_TRUE(db->Delete(rocksdb::WriteOptions(), key).ok());
  }
  auto store = OpenStore(dir_);
  StatusOr<DenseShard*> shard = store->CreateDense(DenseSpec());
  ASSERT_FALSE(shard.ok());
  EXPECT_EQ(shard.status().code(), StatusCode::kCorruption) << shard.status();
  EXPECT_NE(shard.status().message().find("'w'"), std::string::npos) << shard.status();
  EXPECT_NE(shard.status().message().find("chunk 1 of slot 2"), std::string::npos)
      << shard.status();
}

TEST_F(RocksDbStoreTest, OpeningAGarbledCurrentFileFails) {
  { ASSERT_NE(OpenStore(dir_), nullptr); }
  { std::ofstream(dir_ + "/CURRENT", std::ios::trunc) << "MANIFEST-999999\n"; }
  ParamStoreOptions o;
  o.data_dir = dir_;
  StatusOr<std::unique_ptr<ParamStore>> store = NewParamStore(o);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find(dir_), std::string::npos) << store.status();
}

TEST_F(RocksDbStoreTest, FactoryRejectsMissingDataDir) {
  ParamStoreOptions o;
  o.kind = "rocksdb";
  EXPECT_EQ(NewParamStore(o).status().code(), StatusCode::kInvalidArgument);
}

// A range move's cut (ParamStore::ReshapeDense): the shard shrinks in place
// under a new name, keeps its head's values, grows back over its tail while
// the memory is kept, and a flush after it persists the new name and range
// alone (the old name's record is gone from the reopened store).
TEST_F(RocksDbStoreTest, AReshapedShardKeepsItsValuesAndIsPersistedUnderItsNewName) {
  {
    auto store = OpenStore(dir_);
    ASSERT_NE(store, nullptr);
    ASSERT_OK_AND_ASSIGN(DenseShard * shard, store->CreateDense(DenseSpec()));
    SetDense(store.get(), shard, 1);
    ASSERT_OK(store->DenseUpdated(shard, 0, shard->size()));
    ASSERT_OK(store->Flush(1));
    float* const memory = shard->slots[0];
    // Past its memory, or onto another table's name: refused, nothing changed.
    EXPECT_EQ(store->ReshapeDense(shard, "w@0-50000", 50000).code(),
              StatusCode::kInvalidArgument);
    ASSERT_OK(store->CreateSparse(SparseSpec()));
    EXPECT_EQ(store->ReshapeDense(shard, "emb", 20000).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(shard->size(), 40000u);
    // The cut and its take-back: the same memory, the tail as it was.
    ASSERT_OK(store->ReshapeDense(shard, "w@0-20000", 20000));
    EXPECT_EQ(store->GetDense("w@0-20000"), shard);
    EXPECT_EQ(store->GetDense("w"), nullptr);
    EXPECT_EQ(shard->slots[0], memory);
    ASSERT_OK(store->ReshapeDense(shard, "w", 40000));
    ExpectDense(shard, 1);
    // The cut again, published: the head changes, the tail's memory goes.
    ASSERT_OK(store->ReshapeDense(shard, "w@0-20000", 20000));
    std::shared_ptr<const void> pin = store->PinDense(shard);
    ASSERT_NE(pin, nullptr);
    SetDense(store.get(), shard, 2);
    ASSERT_OK(store->DenseUpdated(shard, 0, shard->size()));
    store->ReleaseDenseTail(shard);
    EXPECT_EQ(store->ReshapeDense(shard, "w", 40000).code(), StatusCode::kInvalidArgument);
    ASSERT_OK(store->Flush(2));
    store.reset();
    // A payload in flight keeps the slots allocated past the store.
    EXPECT_EQ(memory[5], RowValue(5, 0, 2));
  }
  auto store = OpenStore(dir_);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->Tables(), (std::vector<std::string>{"emb", "w@0-20000"}));
  EXPECT_EQ(store->GetDense("w"), nullptr);
  DenseShard* shard = store->GetDense("w@0-20000");
  ASSERT_NE(shard, nullptr);
  EXPECT_EQ(shard->spec.begin, 0u);
  EXPECT_EQ(shard->spec.end, 20000u);
  ExpectDense(shard, 2);
}

// A store writing every update through the WAL refuses to reshape (its
// chunks follow the committed record's shape): the caller copies.
TEST_F(RocksDbStoreTest, AStoreWithThePerUpdateWalRefusesToReshape) {
  auto store = OpenStore(dir_, 64, /*wal=*/true);
  ASSERT_NE(store, nullptr);
  ASSERT_OK_AND_ASSIGN(DenseShard * shard, store->CreateDense(DenseSpec()));
  EXPECT_EQ(store->ReshapeDense(shard, "w@0-20000", 20000).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(shard->size(), 40000u);
  EXPECT_EQ(store->GetDense("w"), shard);
}

}  // namespace
}  // namespace relaxps
