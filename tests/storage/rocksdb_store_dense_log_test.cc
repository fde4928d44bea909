// RocksDbStore with wal_per_update: dense updates logged as optimizer steps
// (DenseStepped) come back on open, replayed through the same optimizer onto
// the flushed state, bit for bit; a torn tail loses only the update whose
// sync never returned; a damaged acknowledged record stops the open with a
// clear error; the log's bound flushes and starts it over; a background
// sync (PollWalSync) makes written steps durable without the caller waiting.
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/optimizer_options.h"
#include "kernels/device.h"
#include "kernels/optimizer.h"
#include "storage/fault_injecting_fs.h"
#include "storage/internal/dense_log.h"
#include "storage/param_store.h"
#include "tests/storage/storage_test_util.h"
#include "tests/test_util.h"

namespace relaxps {
namespace {

using testing_storage::ScopedTempDir;

// One dense shard's whole state.
struct State {
  std::vector<std::vector<float>> slots;
  int64_t step = 0;
  int64_t clock = 0;
  bool operator==(const State& o) const {
    if (step != o.step || clock != o.clock || slots.size() != o.slots.size()) return false;
    for (size_t s = 0; s < slots.size(); ++s) {
      // Bitwise: replay must give the very floats that were acknowledged.
      if (std::memcmp(slots[s].data(), o.slots[s].data(), slots[s].size() * sizeof(float)) != 0) {
        return false;
      }
    }
    return true;
  }
};

State Capture(const DenseShard& shard) {
  State st;
  for (float* s : shard.slots) st.slots.emplace_back(s, s + shard.size());
  st.step = shard.step;
  st.clock = shard.clock;
  return st;
}

class DenseLogStoreTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    OptimizerOptions oo;
    oo.name = GetParam();
    oo.lr = 0.05f;
    ASSERT_OK_AND_ASSIGN(optimizer_, kernels::NewOptimizer(oo));
    ASSERT_OK_AND_ASSIGN(device_, kernels::NewDevice(kernels::DeviceOptions()));
    spec_.table = "w";
    spec_.begin = 0;
    spec_.end = 40000;  // Three 64 KiB chunks, the last one partial.
    spec_.num_slots = 1 + optimizer_->num_state_slots();
    spec_.init.seed = 11;
    spec_.init.segments.push_back({0, spec_.end, InitKind::kUniform, -0.5f, 0.5f});
  }

  std::unique_ptr<ParamStore> Open(size_t dense_log_mb = 64, Status* error = nullptr,
                                   bool wal = true) {
    ParamStoreOptions o;
    o.file_system = fs_;
    o.kind = "rocksdb";
    o.data_dir = dir();
    o.wal_per_update = wal;
    o.wal_group_commit = true;
    o.dense_log_mb = dense_log_mb;
    StatusOr<std::unique_ptr<ParamStore>> store = NewParamStore(o);
    if (error != nullptr) {
      *error = store.status();
    } else {
      EXPECT_OK(store);
    }
    return store.ok() ? std::move(store).value() : nullptr;
  }

  DenseReplay Replay() {
    return [this](DenseShard* shard, const DenseStep& step) {
      std::vector<float*> state;
      for (size_t s = 1; s < shard->slots.size(); ++s) state.push_back(shard->slots[s] + step.offset);
      optimizer_->Apply(device_.get(), shard->slots[0] + step.offset, state.data(), step.grads,
                        step.n, shard->step, step.lr_scale);
      return Status::OK();
    };
  }

  // One optimizer step on keys [offset, offset + n), as a server applies
  // it, logged with DenseStepped: after the optimizer ran, or (log_first,
  // as the server does) before it runs.
  void Step(ParamStore* store, DenseShard* shard, size_t offset, size_t n, float lr_scale,
            bool log_first = false) {
    std::vector<float> g(n);
    for (float& x : g) x = dist_(rng_);
    store->BeforeDenseWrite(shard);
    std::vector<float*> state;
    for (size_t s = 1; s < shard->slots.size(); ++s) state.push_back(shard->slots[s] + offset);
    shard->step += 1;
    if (log_first) {
      shard->clock += 1;
      ASSERT_OK(store->DenseStepped(shard, DenseStep{offset, n, g.data(), lr_scale}));
      optimizer_->Apply(device_.get(), shard->slots[0] + offset, state.data(), g.data(), n,
                        shard->step, lr_scale);
      return;
    }
    if (shard->step % 2 == 0) {
      // A PushPull's update (blocked, with the reply's copy): replayed by
      // Apply, it must still give the same floats.
      std::vector<float> copy(n);
      optimizer_->ApplyAndCopy(device_.get(), shard->slots[0] + offset, state.data(), g.data(),
                               n, shard->step, lr_scale, copy.data());
    } else {
      optimizer_->Apply(device_.get(), shard->slots[0] + offset, state.data(), g.data(), n,
                        shard->step, lr_scale);
    }
    shard->clock += 1;
    ASSERT_OK(store->DenseStepped(shard, DenseStep{offset, n, g.data(), lr_scale}));
  }

  // A write that is no optimizer step (a seed), logged with DenseUpdated.
  void Overwrite(ParamStore* store, DenseShard* shard, size_t offset, size_t n) {
    store->BeforeDenseWrite(shard);
    for (size_t s = 0; s < shard->slots.size(); ++s) {
      for (size_t i = 0; i < n; ++i) shard->slots[s][offset + i] = dist_(rng_);
    }
    ASSERT_OK(store->DenseUpdated(shard, offset, n));
  }

  std::string dir() const { return tmp_.path() + "/store"; }
  std::string log_path() const { return dir() + "/RELAXPS_DENSE_LOG"; }

  ScopedTempDir tmp_{"rocksdb_store_dense_log_test"};
  std::shared_ptr<FaultInjectingFileSystem> fs_ = std::make_shared<FaultInjectingFileSystem>();
  std::unique_ptr<kernels::Optimizer> optimizer_;
  std::unique_ptr<kernels::Device> device_;
  DenseShardSpec spec_;
  std::mt19937 rng_{42};
  std::uniform_real_distribution<float> dist_{-1.0f, 1.0f};
};

TEST_P(DenseLogStoreTest, ReplaysStepsBitIdentically) {
  State acked;
  {
    std::unique_ptr<ParamStore> store = Open();
    ASSERT_NE(store, nullptr);
    ASSERT_OK_AND_ASSIGN(DenseShard * shard, store->CreateDenseReplaying(spec_, Replay()));
    // Whole-shard steps, partial ones, a varying learning rate, a seed-like
    // overwrite in between; synced in groups of two.
    for (int i = 0; i < 12; ++i) {
      if (i == 5) {
        Overwrite(store.get(), shard, 100, 20000);
      } else if (i % 3 == 0) {
        Step(store.get(), shard, 17000, 9000, 0.5f);
      } else {
        Step(store.get(), shard, 0, shard->size(), 1.0f / (1 + i));
      }
      if (i % 2 == 1) {
        ASSERT_OK(store->SyncWal());
      }
    }
    ASSERT_FALSE(store->HasUnsyncedUpdates());
    acked = Capture(*shard);
    // Destroyed without a flush: only the dense log holds the updates.
  }
  std::unique_ptr<ParamStore> store = Open();
  ASSERT_NE(store, nullptr);
  // Steps cannot be replayed without the optimizer.
  StatusOr<DenseShard*> plain = store->CreateDense(spec_);
  EXPECT_EQ(plain.status().code(), StatusCode::kFailedPrecondition) << plain.status();
  EXPECT_TRUE(store->HasDense("w"));
  ASSERT_OK_AND_ASSIGN(DenseShard * shard, store->CreateDenseReplaying(spec_, Replay()));
  EXPECT_TRUE(Capture(*shard) == acked);

  // A flush makes the records obsolete and starts the log over; later steps
  // replay onto the flushed state.
  ASSERT_OK(store->Flush(7));
  Step(store.get(), shard, 0, shard->size(), 1.0f);
  Step(store.get(), shard, 30000, 10000, 1.0f);
  ASSERT_OK(store->SyncWal());
  acked = Capture(*shard);
  store.reset();
  store = Open();
  ASSERT_NE(store, nullptr);
  ASSERT_OK_AND_ASSIGN(shard, store->CreateDenseReplaying(spec_, Replay()));
  EXPECT_TRUE(Capture(*shard) == acked);
}

TEST_P(DenseLogStoreTest, LargeStepsLoggedBeforeTheOptimizerRunsAreDurableAfterSyncWal) {
  // 100,000 keys: a whole-shard record of 400 KB starts its sync as it is
  // written, and the optimizer runs while it does.
  spec_.end = 100000;
  spec_.init.segments[0].end = spec_.end;
  State acked;
  {
    std::unique_ptr<ParamStore> store = Open();
    ASSERT_NE(store, nullptr);
    ASSERT_OK_AND_ASSIGN(DenseShard * shard, store->CreateDenseReplaying(spec_, Replay()));
    // Two records, the second appended while the first one's sync may run:
    // SyncWal covers both.
    Step(store.get(), shard, 0, shard->size(), 1.0f, /*log_first=*/true);
    Step(store.get(), shard, 0, shard->size(), 0.5f, /*log_first=*/true);
    ASSERT_OK(store->SyncWal());
    EXPECT_FALSE(store->HasUnsyncedUpdates());
    Step(store.get(), shard, 1000, 90000, 0.25f, /*log_first=*/true);
    ASSERT_OK(store->SyncWal());
    acked = Capture(*shard);
    fs_->SimulateCrash();  // Drops whatever no sync covered.
  }
  fs_->Reactivate();
  std::unique_ptr<ParamStore> store = Open();
  ASSERT_NE(store, nullptr);
  ASSERT_OK_AND_ASSIGN(DenseShard * shard, store->CreateDenseReplaying(spec_, Replay()));
  EXPECT_TRUE(Capture(*shard) == acked);
}

TEST_P(DenseLogStoreTest, LogsTheGradientNotTheSlots) {
  std::unique_ptr<ParamStore> store = Open();
  ASSERT_NE(store, nullptr);
  ASSERT_OK_AND_ASSIGN(DenseShard * shard, store->CreateDenseReplaying(spec_, Replay()));
  for (int i = 0; i < 3; ++i) Step(store.get(), shard, 0, shard->size(), 1.0f);
  ASSERT_OK(store->SyncWal());
  // One float per key and step, whatever the optimizer's state slots.
  EXPECT_EQ(std::filesystem::file_size(log_path()),
            3 * (storage_internal::DenseLog::kHeaderBytes + shard->size() * sizeof(float)));
}

TEST_P(DenseLogStoreTest, TornTailLosesOnlyTheUnsyncedStep) {
  std::vector<State> after;  // State after each step.
  {
    std::unique_ptr<ParamStore> store = Open();
    ASSERT_NE(store, nullptr);
    ASSERT_OK_AND_ASSIGN(DenseShard * shard, store->CreateDenseReplaying(spec_, Replay()));
    for (int i = 0; i < 4; ++i) {
      Step(store.get(), shard, 0, shard->size(), 1.0f);
      ASSERT_OK(store->SyncWal());
      after.push_back(Capture(*shard));
    }
  }
  // The last record's write cut short by the crash (its sync never
  // returned, so it was never acknowledged).
  const size_t record = storage_internal::DenseLog::kHeaderBytes + spec_.end * sizeof(float);
  std::filesystem::resize_file(log_path(), 3 * record + record / 2);
  {
    std::unique_ptr<ParamStore> store = Open();
    ASSERT_NE(store, nullptr);
    ASSERT_OK_AND_ASSIGN(DenseShard * shard, store->CreateDenseReplaying(spec_, Replay()));
    EXPECT_TRUE(Capture(*shard) == after[2]);
    // The log goes on after the kept records.
    Step(store.get(), shard, 0, shard->size(), 1.0f);
    ASSERT_OK(store->SyncWal());
    after.push_back(Capture(*shard));
  }
  std::unique_ptr<ParamStore> store = Open();
  ASSERT_NE(store, nullptr);
  ASSERT_OK_AND_ASSIGN(DenseShard * shard, store->CreateDenseReplaying(spec_, Replay()));
  EXPECT_TRUE(Capture(*shard) == after.back());
}

TEST_P(DenseLogStoreTest, DamagedAcknowledgedRecordIsAClearError) {
  {
    std::unique_ptr<ParamStore> store = Open();
    ASSERT_NE(store, nullptr);
    ASSERT_OK_AND_ASSIGN(DenseShard * shard, store->CreateDenseReplaying(spec_, Replay()));
    for (int i = 0; i < 3; ++i) Step(store.get(), shard, 0, shard->size(), 1.0f);
    ASSERT_OK(store->SyncWal());
  }
  const size_t record = storage_internal::DenseLog::kHeaderBytes + spec_.end * sizeof(float);
  {
    std::fstream f(log_path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(record + 1000));
    f.put('\x7f');
  }
  Status error;
  std::unique_ptr<ParamStore> store = Open(64, &error);
  EXPECT_EQ(store, nullptr);
  EXPECT_EQ(error.code(), StatusCode::kCorruption) << error;
  EXPECT_NE(error.message().find("RELAXPS_DENSE_LOG"), std::string::npos) << error;
}

TEST_P(DenseLogStoreTest, BoundFlushesAndStartsTheLogOver) {
  State acked;
  {
    std::unique_ptr<ParamStore> store = Open(/*dense_log_mb=*/1);
    ASSERT_NE(store, nullptr);
    ASSERT_OK_AND_ASSIGN(DenseShard * shard, store->CreateDenseReplaying(spec_, Replay()));
    // 160 KB a step: the 1 MiB bound is passed every 7 steps.
    for (int i = 0; i < 20; ++i) {
      Step(store.get(), shard, 0, shard->size(), 1.0f);
      ASSERT_OK(store->SyncWal());
    }
    EXPECT_GE(store->CommittedFlushes(), 2u);
    EXPECT_LT(std::filesystem::file_size(log_path()), (1u << 20) + 200000);
    acked = Capture(*shard);
  }
  std::unique_ptr<ParamStore> store = Open(1);
  ASSERT_NE(store, nullptr);
  ASSERT_OK_AND_ASSIGN(DenseShard * shard, store->CreateDenseReplaying(spec_, Replay()));
  EXPECT_TRUE(Capture(*shard) == acked);
}

TEST_P(DenseLogStoreTest, OpenedWithoutTheWalStillReplaysOnceAndFlushesIt) {
  State acked;
  {
    std::unique_ptr<ParamStore> store = Open();
    ASSERT_NE(store, nullptr);
    ASSERT_OK_AND_ASSIGN(DenseShard * shard, store->CreateDenseReplaying(spec_, Replay()));
    for (int i = 0; i < 3; ++i) Step(store.get(), shard, 0, shard->size(), 1.0f);
    ASSERT_OK(store->SyncWal());
    acked = Capture(*shard);
  }
  // Restarted without --wal_per_update: the records are replayed, and the
  // flush that writes their result names them, so they are not replayed a
  // second time onto it.
  for (int open = 0; open < 2; ++open) {
    SCOPED_TRACE(open);
    std::unique_ptr<ParamStore> store = Open(64, nullptr, /*wal=*/false);
    ASSERT_NE(store, nullptr);
    ASSERT_OK_AND_ASSIGN(DenseShard * shard, store->CreateDenseReplaying(spec_, Replay()));
    EXPECT_TRUE(Capture(*shard) == acked);
    ASSERT_OK(store->Flush(3));
    ASSERT_OK(store->WaitForFlush());
  }
}

TEST_P(DenseLogStoreTest, CrashKeepsWhatWasSyncedAndAWriteErrorIsMendedByAFlush) {
  State acked;
  {
    std::unique_ptr<ParamStore> store = Open();
    ASSERT_NE(store, nullptr);
    ASSERT_OK_AND_ASSIGN(DenseShard * shard, store->CreateDenseReplaying(spec_, Replay()));
    Step(store.get(), shard, 0, shard->size(), 1.0f);
    ASSERT_OK(store->SyncWal());
    // A full disk cuts the next record short: the update is refused ...
    fs_->SetWriteError(FaultInjectingFileSystem::WriteError::kNoSpace, "RELAXPS_DENSE_LOG");
    std::vector<float> g(shard->size(), 0.25f);
    store->BeforeDenseWrite(shard);
    shard->step += 1;
    Status refused = store->DenseStepped(shard, DenseStep{0, shard->size(), g.data(), 1.0f});
    EXPECT_EQ(refused.code(), StatusCode::kIOError) << refused;
    EXPECT_TRUE(store->HasUnsyncedUpdates());
    fs_->SetWriteError(FaultInjectingFileSystem::WriteError::kNone);
    // ... and the log takes nothing more until a flush has made the state
    // durable without it (the next SyncWal does) and started it over.
    ASSERT_OK(store->SyncWal());
    EXPECT_FALSE(store->HasUnsyncedUpdates());
    Step(store.get(), shard, 100, 30000, 0.5f);
    ASSERT_OK(store->SyncWal());
    acked = Capture(*shard);
    Step(store.get(), shard, 0, shard->size(), 1.0f);  // Never synced.
    fs_->SimulateCrash();
  }
  fs_->Reactivate();
  std::unique_ptr<ParamStore> store = Open();
  ASSERT_NE(store, nullptr);
  ASSERT_OK_AND_ASSIGN(DenseShard * shard, store->CreateDenseReplaying(spec_, Replay()));
  EXPECT_TRUE(Capture(*shard) == acked);
}

// Group commit in the background (ParamStore::PollWalSync, what a server
// with --wal_reply=applied runs): a step is in the log file before any sync
// (UnsyncedUpdatesWritten); a poll starts the sync and returns without
// waiting for it, a step made meanwhile waits for the next sync, the
// listener tells when each ended, and once a poll finds everything durable
// a crash of the machine keeps it.
TEST_P(DenseLogStoreTest, BackgroundSyncMakesWrittenStepsDurableWithoutWaiting) {
  State acked;
  std::atomic<int> ended{0};
  {
    std::unique_ptr<ParamStore> store = Open();
    ASSERT_NE(store, nullptr);
    ASSERT_OK_AND_ASSIGN(DenseShard * shard, store->CreateDenseReplaying(spec_, Replay()));
    store->SetWalSyncListener([&ended] { ended.fetch_add(1); });
    Step(store.get(), shard, 0, shard->size(), 1.0f, /*log_first=*/true);
    EXPECT_TRUE(store->HasUnsyncedUpdates());
    EXPECT_TRUE(store->UnsyncedUpdatesWritten());
    fs_->HoldSyncs(true, "RELAXPS_DENSE_LOG");
    bool durable = true;
    ASSERT_OK(store->PollWalSync(&durable));  // Starts the sync, held by the disk.
    EXPECT_FALSE(durable);
    for (int i = 0; fs_->held_syncs() == 0; ++i) {
      ASSERT_LT(i, 10000) << "the background sync never reached the disk";
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    Step(store.get(), shard, 100, 30000, 0.5f, /*log_first=*/true);  // While it runs.
    ASSERT_OK(store->PollWalSync(&durable));
    EXPECT_FALSE(durable);
    EXPECT_EQ(ended.load(), 0);
    fs_->HoldSyncs(false);
    for (int i = 0; !durable; ++i) {
      ASSERT_LT(i, 10000) << "the steps never became durable";
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ASSERT_OK(store->PollWalSync(&durable));
    }
    // The first sync, then one for the step made while it ran.
    EXPECT_EQ(ended.load(), 2);
    EXPECT_FALSE(store->HasUnsyncedUpdates());
    acked = Capture(*shard);
    store->SetWalSyncListener(nullptr);
    fs_->SimulateCrash();  // Drops whatever no sync covered: nothing here.
  }
  fs_->Reactivate();
  std::unique_ptr<ParamStore> store = Open();
  ASSERT_NE(store, nullptr);
  ASSERT_OK_AND_ASSIGN(DenseShard * shard, store->CreateDenseReplaying(spec_, Replay()));
  EXPECT_TRUE(Capture(*shard) == acked);
}

// A background sync that fails is reported by the next poll, and nothing it
// covered counts as durable until a sync succeeds.
TEST_P(DenseLogStoreTest, FailedBackgroundSyncIsReportedByThePoll) {
  std::unique_ptr<ParamStore> store = Open();
  ASSERT_NE(store, nullptr);
  ASSERT_OK_AND_ASSIGN(DenseShard * shard, store->CreateDenseReplaying(spec_, Replay()));
  Step(store.get(), shard, 0, shard->size(), 1.0f, /*log_first=*/true);
  fs_->SetWriteError(FaultInjectingFileSystem::WriteError::kIO, "RELAXPS_DENSE_LOG");
  bool durable = false;
  Status polled;
  for (int i = 0; polled.ok(); ++i) {
    ASSERT_LT(i, 10000) << "the failed sync was never reported";
    ASSERT_FALSE(durable);
    polled = store->PollWalSync(&durable);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(polled.code(), StatusCode::kIOError) << polled;
  EXPECT_FALSE(durable);
  EXPECT_TRUE(store->HasUnsyncedUpdates());
  fs_->SetWriteError(FaultInjectingFileSystem::WriteError::kNone);
  ASSERT_OK(store->SyncWal());
  EXPECT_FALSE(store->HasUnsyncedUpdates());
}

INSTANTIATE_TEST_SUITE_P(Optimizers, DenseLogStoreTest,
                         ::testing::Values("momentum", "adam", "sgd"));

}  // namespace
}  // namespace relaxps
