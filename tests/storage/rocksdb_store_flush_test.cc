// Tests of RocksDbStore's dirty-chunk flushes (rocksdb_store_flush.cc): a
// flush writes only the dense chunks that DenseUpdated named since the
// previous flush (a delta generation) until the deltas add up to the table,
// then every chunk (a new base); a reopened store overlays the deltas on the
// base and must give back the arrays bit for bit.
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include "storage/checkpoint.h"
#include "storage/internal/rocksdb_store_impl.h"
#include "storage/internal/store_format.h"
#include "storage/param_store.h"
#include "tests/storage/rocksdb_store_test_util.h"
#include "tests/storage/storage_test_util.h"
#include "tests/test_util.h"

namespace relaxps {
namespace {

using namespace testing_storage;  // NOLINT: the shared store fixtures.
using storage_internal::kDenseChunkFloats;

constexpr uint64_t kChunks = 8;
// Eight chunks, the last one partial; three slots (as Adam).
DenseShardSpec EightChunkSpec() {
  return {"w", 0, kChunks * kDenseChunkFloats - 100, 3, Uniform(11, 1 << 20), 0.125f};
}

class RocksDbStoreFlushTest : public ::testing::Test {
 protected:
  // Writes new values into chunk c of every slot as the server does
  // (BeforeDenseWrite, the write, DenseUpdated with its range) and into
  // the expected copy. A few keys in the middle of the chunk, so that a
  // chunk counts as changed even when one key changed.
  void WriteChunk(ParamStore* store, DenseShard* shard, uint64_t c) {
    const uint64_t first = c * kDenseChunkFloats + 7;
    const size_t n = 5;
    store->BeforeDenseWrite(shard);
    for (size_t s = 0; s < shard->slots.size(); ++s) {
      for (size_t i = first; i < first + n; ++i) shard->slots[s][i] = dist_(rng_);
    }
    ASSERT_OK(store->DenseUpdated(shard, first, n));
    Remember(shard);
  }
  void Remember(const DenseShard* shard) {
    expected_.assign(shard->slots.size(), {});
    for (size_t s = 0; s < shard->slots.size(); ++s) {
      expected_[s].assign(shard->slots[s], shard->slots[s] + shard->size());
    }
  }
  // Bit-identical, slot by slot.
  void ExpectRestored(const DenseShard* shard) {
    ASSERT_EQ(shard->slots.size(), expected_.size());
    for (size_t s = 0; s < shard->slots.size(); ++s) {
      for (uint64_t c = 0; c < kChunks; ++c) {
        const size_t first = c * kDenseChunkFloats;
        const size_t len = std::min<size_t>(kDenseChunkFloats, shard->size() - first);
        EXPECT_EQ(std::memcmp(shard->slots[s] + first, expected_[s].data() + first,
                              len * sizeof(float)),
                  0)
            << "slot " << s << " chunk " << c << " differs after the restore";
      }
    }
  }
  // Dense chunk keys on disk per generation (slot * kChunks + chunk),
  // read from the closed store.
  std::map<uint64_t, std::vector<uint64_t>> ChunksOnDisk() {
    std::map<uint64_t, std::vector<uint64_t>> out;
    rocksdb::DB* raw = nullptr;
    EXPECT_TRUE(rocksdb::DB::OpenForReadOnly(rocksdb::Options(), dir_, &raw).ok());
    if (raw == nullptr) return out;
    std::unique_ptr<rocksdb::DB> db(raw);
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
    for (it->Seek(std::string(1, storage_internal::kDensePrefix)); it->Valid(); it->Next()) {
      uint32_t id;
      uint64_t generation, chunk;
      int slot;
      if (!storage_internal::ParseDenseChunkKey(it->key().ToString(), &id, &generation, &slot,
                                                &chunk)) {
        ADD_FAILURE() << "bad dense key";
        continue;
      }
      out[generation].push_back(slot * kChunks + chunk);
    }
    return out;
  }

  ScopedTempDir tmp_{"rocksdb_store_flush_test"};
  std::string dir_ = tmp_.path() + "/db";
  std::mt19937 rng_{7};
  std::uniform_real_distribution<float> dist_{-1.0f, 1.0f};
  std::vector<std::vector<float>> expected_;
};

TEST_F(RocksDbStoreFlushTest, RestoreAfterDeltaFlushesIsBitIdentical) {
  {
    auto store = OpenStore(dir_);
    StatusOr<DenseShard*> shard = store->CreateDense(EightChunkSpec());
    ASSERT_TRUE(shard.ok()) << shard.status();
    // Flush 1: every chunk changed, a new base.
    store->BeforeDenseWrite(*shard);
    for (size_t s = 0; s < 3; ++s) {
      for (size_t i = 0; i < (*shard)->size(); ++i) (*shard)->slots[s][i] = dist_(rng_);
    }
    ASSERT_OK(store->DenseUpdated(*shard, 0, (*shard)->size()));
    Remember(*shard);
    ASSERT_OK(store->Flush(1));
    ASSERT_OK(store->WaitForFlush());  // Else the next Flush is coalesced with it.
    // Flush 2: chunks 1 and 7 (the partial one). Flush 3: chunks 3 and 7.
    // Chunk 1 is then on disk only in the delta before the last one, and
    // chunks 0, 2, 4-6 only in the base.
    WriteChunk(store.get(), *shard, 1);
    WriteChunk(store.get(), *shard, 7);
    ASSERT_OK(store->Flush(2));
    // Writes while the background flush may still copy: they wait for it.
    WriteChunk(store.get(), *shard, 3);
    WriteChunk(store.get(), *shard, 7);
    (*shard)->step = 42;
    (*shard)->clock = 3;
    ASSERT_OK(store->WaitForFlush());
    ASSERT_OK(store->Flush(3));
    ASSERT_OK(store->WaitForFlush());
  }
  // A base with every chunk of every slot, then two deltas with only the
  // chunks written before each flush.
  const std::map<uint64_t, std::vector<uint64_t>> on_disk = ChunksOnDisk();
  ASSERT_EQ(on_disk.size(), 3u);
  auto gen = on_disk.begin();
  EXPECT_EQ(gen->second.size(), 3 * kChunks) << "base generation " << gen->first;
  ++gen;
  EXPECT_EQ(gen->second, (std::vector<uint64_t>{1, 7, 9, 15, 17, 23})) << "first delta";
  ++gen;
  EXPECT_EQ(gen->second, (std::vector<uint64_t>{3, 7, 11, 15, 19, 23})) << "second delta";

  auto store = OpenStore(dir_);
  StatusOr<DenseShard*> shard = store->CreateDense(EightChunkSpec());
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_EQ((*shard)->step, 42);
  EXPECT_EQ((*shard)->clock, 3);
  ExpectRestored(*shard);
}

TEST_F(RocksDbStoreFlushTest, DeltaOverANeverFlushedTableKeepsTheInitialValues) {
  {
    auto store = OpenStore(dir_);
    StatusOr<DenseShard*> shard = store->CreateDense(EightChunkSpec());
    ASSERT_TRUE(shard.ok()) << shard.status();
    Remember(*shard);  // The initializer's values.
    WriteChunk(store.get(), *shard, 5);
    ASSERT_OK(store->Flush(1));
  }
  const std::map<uint64_t, std::vector<uint64_t>> on_disk = ChunksOnDisk();
  ASSERT_EQ(on_disk.size(), 1u);
  EXPECT_EQ(on_disk.begin()->second, (std::vector<uint64_t>{5, 13, 21}));
  auto store = OpenStore(dir_);
  StatusOr<DenseShard*> shard = store->CreateDense(EightChunkSpec());
  ASSERT_TRUE(shard.ok()) << shard.status();
  ExpectRestored(*shard);
}

TEST_F(RocksDbStoreFlushTest, DeltasThatAddUpToTheTableBecomeANewBase) {
  {
    auto store = OpenStore(dir_);
    StatusOr<DenseShard*> shard = store->CreateDense(EightChunkSpec());
    ASSERT_TRUE(shard.ok()) << shard.status();
    // Three chunks per flush: deltas of 3 and 6 chunks, then 9 > 8 makes
    // the third flush a new base, which drops the generations before it.
    int64_t clock = 0;
    for (int flush = 0; flush < 5; ++flush) {
      for (uint64_t k = 0; k < 3; ++k) WriteChunk(store.get(), *shard, (flush * 3 + k) % kChunks);
      ASSERT_OK(store->Flush(++clock));
      ASSERT_OK(store->WaitForFlush());
    }
  }
  // Flush 3 is the base (every chunk); flushes 4 and 5 are deltas over it.
  const std::map<uint64_t, std::vector<uint64_t>> on_disk = ChunksOnDisk();
  ASSERT_EQ(on_disk.size(), 3u);
  EXPECT_EQ(on_disk.begin()->second.size(), 3 * kChunks);
  auto store = OpenStore(dir_);
  StatusOr<DenseShard*> shard = store->CreateDense(EightChunkSpec());
  ASSERT_TRUE(shard.ok()) << shard.status();
  ExpectRestored(*shard);
}

TEST_F(RocksDbStoreFlushTest, ADeltaRewritingEveryOlderDeltaChunkSupersedesThem) {
  {
    auto store = OpenStore(dir_);
    StatusOr<DenseShard*> shard = store->CreateDense(EightChunkSpec());
    ASSERT_TRUE(shard.ok()) << shard.status();
    int64_t clock = 0;
    // A base, then the same two chunks trained before every flush (a head
    // on a frozen backbone): 3 x kMaxDenseDeltas flushes would add up to
    // the table many times over, and the delta count passes its bound.
    store->BeforeDenseWrite(*shard);
    ASSERT_OK(store->DenseUpdated(*shard, 0, (*shard)->size()));
    Remember(*shard);
    ASSERT_OK(store->Flush(++clock));
    ASSERT_OK(store->WaitForFlush());
    for (int flush = 0; flush < 3 * storage_internal::kMaxDenseDeltas; ++flush) {
      WriteChunk(store.get(), *shard, 2);
      WriteChunk(store.get(), *shard, 5);
      ASSERT_OK(store->Flush(++clock));
      ASSERT_OK(store->WaitForFlush());
    }
    // Chunk 6 alone: not a superset of {2, 5}, so the delta before it stays.
    WriteChunk(store.get(), *shard, 6);
    ASSERT_OK(store->Flush(++clock));
    ASSERT_OK(store->WaitForFlush());
  }
  // The first base is still the base, each delta replaced the one before
  // it, and the last one adds to it.
  const std::map<uint64_t, std::vector<uint64_t>> on_disk = ChunksOnDisk();
  ASSERT_EQ(on_disk.size(), 3u);
  auto gen = on_disk.begin();
  EXPECT_EQ(gen->first, 1u) << "the base was rewritten";
  EXPECT_EQ(gen->second.size(), 3 * kChunks);
  ++gen;
  EXPECT_EQ(gen->second, (std::vector<uint64_t>{2, 5, 10, 13, 18, 21}));
  ++gen;
  EXPECT_EQ(gen->second, (std::vector<uint64_t>{6, 14, 22}));
  auto store = OpenStore(dir_);
  StatusOr<DenseShard*> shard = store->CreateDense(EightChunkSpec());
  ASSERT_TRUE(shard.ok()) << shard.status();
  ExpectRestored(*shard);
}

TEST_F(RocksDbStoreFlushTest, CheckpointOfDeltasRestoresBitIdentical) {
  const std::string ckpt = tmp_.path() + "/ckpt";
  std::vector<std::vector<float>> at_checkpoint;
  {
    auto store = OpenStore(dir_);
    StatusOr<DenseShard*> shard = store->CreateDense(EightChunkSpec());
    ASSERT_TRUE(shard.ok()) << shard.status();
    WriteChunk(store.get(), *shard, 0);
    ASSERT_OK(store->Flush(1));
    ASSERT_OK(store->WaitForFlush());
    WriteChunk(store.get(), *shard, 6);
    at_checkpoint = expected_;
    ASSERT_OK(store->Checkpoint(ckpt, 2));
    WriteChunk(store.get(), *shard, 2);  // After the checkpoint: not in it.
    ASSERT_OK(store->Flush(3));
  }
  // The store itself has chunk 2; the checkpoint, restored, does not.
  {
    auto store = OpenStore(dir_);
    StatusOr<DenseShard*> shard = store->CreateDense(EightChunkSpec());
    ASSERT_TRUE(shard.ok()) << shard.status();
    ExpectRestored(*shard);
  }
  const std::string restored_dir = tmp_.path() + "/restored";
  ASSERT_OK(RestoreCheckpoint(ckpt, restored_dir));
  expected_ = at_checkpoint;
  auto restored = OpenStore(restored_dir);
  StatusOr<DenseShard*> shard = restored->CreateDense(EightChunkSpec());
  ASSERT_TRUE(shard.ok()) << shard.status();
  ExpectRestored(*shard);
}

// Bytes of the files under `dir` whose inode is not in `seen` (what writing
// `dir` cost, hard links of files already on disk excluded); adds the
// inodes under dir to `seen`.
uint64_t NewBytes(const std::string& dir, std::set<uint64_t>* seen) {
  uint64_t bytes = 0;
  std::set<uint64_t> mine;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    struct stat st;
    if (::stat(e.path().c_str(), &st) != 0) continue;
    mine.insert(st.st_ino);
    if (!seen->count(st.st_ino)) bytes += static_cast<uint64_t>(st.st_size);
  }
  seen->insert(mine.begin(), mine.end());
  return bytes;
}

// Issue 41 point 5: a chain of incremental checkpoints, each after one
// chunk of eight changed (12.5%), pruned to the newest three as a server
// does. Each checkpoint writes about its changed chunk, not the table; every
// kept checkpoint restores bit for bit to the arrays as of its Checkpoint
// call, across the new bases the deltas add up to; pruned checkpoints and
// the generations no checkpoint needs any more are gone from the disk.
TEST_F(RocksDbStoreFlushTest, IncrementalCheckpointChainRestoresExactlyAndIsCollected) {
  const std::string root = tmp_.path() + "/checkpoints";
  const uint64_t table_bytes = EightChunkSpec().end * sizeof(float) * 3;
  std::map<std::string, std::vector<std::vector<float>>> at;  // Checkpoint -> arrays.
  std::set<uint64_t> seen;
  std::vector<uint64_t> written;  // New bytes of checkpoints 2..20.
  {
    auto store = OpenStore(dir_);
    StatusOr<DenseShard*> shard = store->CreateDense(EightChunkSpec());
    ASSERT_TRUE(shard.ok()) << shard.status();
    for (uint64_t c = 0; c < kChunks; ++c) WriteChunk(store.get(), *shard, c);
    const std::string first = root + "/" + CheckpointDirName(1);
    ASSERT_OK(store->Checkpoint(first, 1));
    EXPECT_GT(NewBytes(first, &seen), table_bytes);  // The first one holds everything.
    for (int64_t clock = 2; clock <= 20; ++clock) {
      // Chunk 3 every other time, so the deltas overlap and also add up.
      WriteChunk(store.get(), *shard, clock % 2 == 0 ? 3 : static_cast<uint64_t>(clock) % kChunks);
      const std::string dir = root + "/" + CheckpointDirName(clock);
      ASSERT_OK(store->Checkpoint(dir, clock));
      at[dir] = expected_;
      written.push_back(NewBytes(dir, &seen));
      ASSERT_OK(PruneCheckpoints(root, 3));
    }
  }
  // Most checkpoints write one 64 KiB chunk of three slots plus manifests
  // (1/8 of the table and a little); a new base (the whole table) comes
  // only when the deltas add up to the table, once every few checkpoints.
  std::string sizes;
  int full = 0;
  for (uint64_t w : written) {
    sizes += std::to_string(w) + " ";
    if (w > table_bytes / 4) ++full;
  }
  std::vector<uint64_t> sorted = written;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_LT(sorted[sorted.size() / 2], table_bytes / 5) << "bytes per checkpoint: " << sizes;
  EXPECT_LE(full, 5) << "bytes per checkpoint: " << sizes;
  std::vector<CheckpointInfo> kept = ListCheckpoints(root);
  ASSERT_EQ(kept.size(), 3u);
  EXPECT_EQ(kept.back().clock, 20);
  EXPECT_FALSE(std::filesystem::exists(root + "/" + CheckpointDirName(1)));
  for (const CheckpointInfo& info : kept) {
    SCOPED_TRACE(info.dir);
    const std::string restored_dir = tmp_.path() + "/restored-" + std::to_string(info.clock);
    ASSERT_OK(RestoreCheckpoint(info.dir, restored_dir));
    expected_ = at[info.dir];
    auto restored = OpenStore(restored_dir);
    StatusOr<DenseShard*> shard = restored->CreateDense(EightChunkSpec());
    ASSERT_TRUE(shard.ok()) << shard.status();
    ExpectRestored(*shard);
  }
  // Garbage collection: the live store and the three kept checkpoints hold
  // at most one base and the deltas above it per checkpoint, not a base per
  // checkpoint: their distinct bytes stay under four tables' worth.
  std::set<uint64_t> all;
  uint64_t bytes = NewBytes(dir_, &all);
  for (const CheckpointInfo& info : kept) bytes += NewBytes(info.dir, &all);
  EXPECT_LT(bytes, 4 * table_bytes);
}

}  // namespace
}  // namespace relaxps
