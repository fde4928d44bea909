// Tests of RocksDbStore::Checkpoint and the checkpoint helpers: round trip,
// manifest validation, corrupted checkpoints refused, list and prune.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <future>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "storage/checkpoint.h"
#include "storage/internal/crc32c.h"
#include "storage/param_store.h"
#include "tests/storage/storage_test_util.h"

namespace relaxps {
namespace {

namespace fs = std::filesystem;
using testing_storage::ScopedTempDir;
#define ASSERT_OK RELAXPS_STORAGE_ASSERT_OK

const DenseShardSpec kDense{"w", 100, 70100, 2, {}, 0.0f};  // 70000 keys.
const SparseTableSpec kSparse{"emb", 16, 2, {}, 0.0f};

std::unique_ptr<ParamStore> OpenStore(const std::string& dir) {
  ParamStoreOptions o;
  o.data_dir = dir;
  o.cache_mb = 8;
  StatusOr<std::unique_ptr<ParamStore>> store = NewParamStore(o);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(store).value() : nullptr;
}

// Sets every dense value (parameters, optimizer state, step, clock) to a
// function of `version`.
void FillDense(ParamStore* store, int version) {
  StatusOr<DenseShard*> shard = store->CreateDense(kDense);
  ASSERT_TRUE(shard.ok()) << shard.status();
  store->BeforeDenseWrite(*shard);
  for (int s = 0; s < 2; ++s) {
    for (size_t i = 0; i < (*shard)->size(); ++i) (*shard)->slots[s][i] = version * 10.0f + i + s;
  }
  (*shard)->step = version;
  (*shard)->clock = version;
}

void ExpectDenseVersion(ParamStore* store, int version) {
  StatusOr<DenseShard*> shard = store->CreateDense(kDense);
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_EQ((*shard)->step, version);
  for (int s = 0; s < 2; ++s) {
    for (size_t i = 0; i < (*shard)->size(); ++i) {
      ASSERT_EQ((*shard)->slots[s][i], version * 10.0f + i + s) << s << "/" << i;
    }
  }
}

// Sets every value of the store's tables to a function of `version`.
void Fill(ParamStore* store, int version) {
  FillDense(store, version);
  ASSERT_OK(store->CreateSparse(kSparse));
  std::vector<uint64_t> ids(500);
  std::vector<float> rows(ids.size() * kSparse.row_floats());
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = i * 31;
    for (size_t c = 0; c < kSparse.row_floats(); ++c) {
      rows[i * kSparse.row_floats() + c] = version * 100.0f + i + c * 0.5f;
    }
  }
  ASSERT_OK(store->WriteRows("emb", ids.data(), ids.size(), rows.data()));
}

void ExpectVersion(ParamStore* store, int version) {
  ExpectDenseVersion(store, version);
  std::vector<uint64_t> ids(500);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = i * 31;
  std::vector<float> rows(ids.size() * kSparse.row_floats());
  ASSERT_OK(store->ReadRows("emb", ids.data(), ids.size(), rows.data()));
  for (size_t i = 0; i < ids.size(); ++i) {
    for (size_t c = 0; c < kSparse.row_floats(); ++c) {
      ASSERT_EQ(rows[i * kSparse.row_floats() + c], version * 100.0f + i + c * 0.5f);
    }
  }
}

class CheckpointTest : public ::testing::Test {
 protected:
  // Writes version 1 and checkpoints it as <root>/ckpt-1, then moves the live
  // store on to version 2 (flushed) and closes it.
  void MakeCheckpointThenAdvance() {
    auto store = OpenStore(data_);
    ASSERT_NE(store, nullptr);
    Fill(store.get(), 1);
    ASSERT_OK(store->Checkpoint(ckpt_, 1));
    EXPECT_EQ(store->Checkpoint(ckpt_, 1).code(), StatusCode::kInvalidArgument);  // Exists.
    Fill(store.get(), 2);
    ASSERT_OK(store->Flush(2));
  }

  std::string FindSst(const std::string& dir) {
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().extension() == ".sst") return e.path().string();
    }
    ADD_FAILURE() << "no .sst in " << dir;
    return "";
  }

  ScopedTempDir tmp_{"checkpoint_test"};
  std::string data_ = tmp_.path() + "/data";
  std::string root_ = tmp_.path() + "/ckpts";
  std::string ckpt_ = root_ + "/" + CheckpointDirName(1);
};

TEST_F(CheckpointTest, CheckpointAndRestoreRoundTrip) {
  MakeCheckpointThenAdvance();
  StatusOr<CheckpointInfo> info = ReadCheckpointInfo(ckpt_);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->clock, 1);
  EXPECT_EQ(info->store, "rocksdb");
  EXPECT_EQ(info->tables, (std::vector<std::string>{"emb", "w"}));
  EXPECT_GT(info->bytes, 70000u * 2 * sizeof(float));
  EXPECT_FALSE(fs::exists(ckpt_ + ".partial"));

  {
    auto store = OpenStore(data_);
    ExpectVersion(store.get(), 2);  // The live store moved on.
  }
  ASSERT_OK(RestoreCheckpoint(ckpt_, data_));
  {
    auto store = OpenStore(data_);
    ASSERT_NE(store, nullptr);
    ExpectVersion(store.get(), 1);
    // The restored store is writable and the checkpoint stays intact.
    Fill(store.get(), 3);
    ASSERT_OK(store->Flush(3));
  }
  ASSERT_TRUE(ReadCheckpointInfo(ckpt_).ok());
  // Restoring into a directory that does not exist yet also works.
  const std::string fresh = tmp_.path() + "/fresh";
  ASSERT_OK(RestoreCheckpoint(ckpt_, fresh));
  auto store = OpenStore(fresh);
  ExpectVersion(store.get(), 1);
}

// The background checkpoint holds the state of the call: writes right after
// it wait only for the in-memory copy and do not leak into the checkpoint.
TEST_F(CheckpointTest, CheckpointAsyncCapturesTheStateAtTheCall) {
  {
    auto store = OpenStore(data_);
    ASSERT_NE(store, nullptr);
    FillDense(store.get(), 1);
    std::promise<Status> done;
    store->CheckpointAsync(ckpt_, 1, [&](Status s) { done.set_value(s); });
    FillDense(store.get(), 2);
    ASSERT_OK(done.get_future().get());
    std::promise<Status> again;  // Errors reach `done` as well.
    store->CheckpointAsync(ckpt_, 1, [&](Status s) { again.set_value(s); });
    EXPECT_EQ(again.get_future().get().code(), StatusCode::kInvalidArgument);
    ExpectDenseVersion(store.get(), 2);
  }
  const std::string fresh = tmp_.path() + "/fresh";
  ASSERT_OK(RestoreCheckpoint(ckpt_, fresh));
  auto store = OpenStore(fresh);
  ASSERT_NE(store, nullptr);
  ExpectDenseVersion(store.get(), 1);
}

TEST_F(CheckpointTest, MemoryStoreCannotCheckpoint) {
  auto store = NewMemoryStore();
  EXPECT_EQ(store->Checkpoint(ckpt_, 1).code(), StatusCode::kUnavailable);
  EXPECT_FALSE(fs::exists(ckpt_));
}

TEST_F(CheckpointTest, TruncatedManifestIsRefusedAndDataDirUntouched) {
  MakeCheckpointThenAdvance();
  const std::string manifest = ckpt_ + "/" + kCheckpointManifestName;
  fs::resize_file(manifest, fs::file_size(manifest) - 20);
  StatusOr<CheckpointInfo> info = ReadCheckpointInfo(ckpt_);
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), StatusCode::kCorruption);
  EXPECT_NE(info.status().message().find(manifest), std::string::npos) << info.status();

  Status s = RestoreCheckpoint(ckpt_, data_);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find(manifest), std::string::npos) << s;
  auto store = OpenStore(data_);
  ExpectVersion(store.get(), 2);
}

TEST_F(CheckpointTest, GarbledManifestIsRefused) {
  MakeCheckpointThenAdvance();
  const std::string manifest = ckpt_ + "/" + kCheckpointManifestName;
  std::string text;
  {
    std::ifstream in(manifest);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  const size_t pos = text.find("clock 1");
  ASSERT_NE(pos, std::string::npos);
  text[pos + 6] = '7';  // Same length, different clock: only the CRC catches it.
  { std::ofstream(manifest, std::ios::trunc) << text; }
  StatusOr<CheckpointInfo> info = ReadCheckpointInfo(ckpt_);
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), StatusCode::kCorruption);
  EXPECT_NE(info.status().message().find("checksum"), std::string::npos) << info.status();
  EXPECT_NE(info.status().message().find(manifest), std::string::npos) << info.status();
}

TEST_F(CheckpointTest, TruncatedSstIsRefusedNamingTheFile) {
  MakeCheckpointThenAdvance();
  const std::string sst = FindSst(ckpt_);
  // The checkpoint's SSTs are hard links shared with the store's files; break
  // the link first so the live store stays intact.
  fs::copy_file(sst, sst + ".tmp");
  fs::rename(sst + ".tmp", sst);
  fs::resize_file(sst, fs::file_size(sst) / 2);
  StatusOr<CheckpointInfo> info = ReadCheckpointInfo(ckpt_);
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), StatusCode::kCorruption);
  EXPECT_NE(info.status().message().find(sst), std::string::npos) << info.status();
  Status s = RestoreCheckpoint(ckpt_, data_);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find(sst), std::string::npos) << s;
  auto store = OpenStore(data_);
  ExpectVersion(store.get(), 2);
}

TEST_F(CheckpointTest, GarbledSstIsRefusedByRestoreNamingTheCheckpoint) {
  MakeCheckpointThenAdvance();
  // Garble 4 KiB in the middle of the largest SST (same size: the manifest
  // check passes, the block checksums do not).
  std::string sst;
  uintmax_t best = 0;
  for (const auto& e : fs::directory_iterator(ckpt_)) {
    if (e.path().extension() == ".sst" && e.file_size() > best) {
      best = e.file_size();
      sst = e.path().string();
    }
  }
  ASSERT_GT(best, 64u * 1024);
  fs::copy_file(sst, sst + ".tmp");
  fs::rename(sst + ".tmp", sst);
  {
    std::fstream f(sst, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(best / 2));
    std::string junk(4096, '\x5a');
    f.write(junk.data(), junk.size());
  }
  ASSERT_TRUE(ReadCheckpointInfo(ckpt_).ok());
  Status s = RestoreCheckpoint(ckpt_, data_);
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s;
  EXPECT_NE(s.message().find(ckpt_), std::string::npos) << s;
  EXPECT_NE(s.message().find(fs::path(sst).filename().string()), std::string::npos) << s;
  EXPECT_FALSE(fs::exists(data_ + ".restoring"));
  auto store = OpenStore(data_);
  ExpectVersion(store.get(), 2);
}

TEST_F(CheckpointTest, MissingCheckpointIsNotFound) {
  EXPECT_EQ(ReadCheckpointInfo(root_ + "/nope").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(RestoreCheckpoint(root_ + "/nope", data_).code(), StatusCode::kNotFound);
}

TEST_F(CheckpointTest, ListSortsByClockAndPruneKeepsTheLastK) {
  {
    auto store = OpenStore(data_);
    for (int64_t clock : {3, 10, 1, 7, 5}) {
      Fill(store.get(), static_cast<int>(clock));
      ASSERT_OK(store->Checkpoint(root_ + "/" + CheckpointDirName(clock), clock));
    }
  }
  fs::create_directories(root_ + "/ckpt-99");  // No manifest: skipped.
  fs::create_directories(root_ + "/other");    // Not a checkpoint name.
  std::vector<CheckpointInfo> all = ListCheckpoints(root_);
  ASSERT_EQ(all.size(), 5u);
  std::vector<int64_t> clocks;
  for (const CheckpointInfo& c : all) clocks.push_back(c.clock);
  EXPECT_EQ(clocks, (std::vector<int64_t>{1, 3, 5, 7, 10}));

  EXPECT_EQ(PruneCheckpoints(root_, 0).code(), StatusCode::kInvalidArgument);
  ASSERT_OK(PruneCheckpoints(root_, 2));
  all = ListCheckpoints(root_);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].clock, 7);
  EXPECT_EQ(all[1].clock, 10);
  EXPECT_FALSE(fs::exists(root_ + "/ckpt-1"));
  EXPECT_FALSE(fs::exists(root_ + "/ckpt-5"));
  EXPECT_TRUE(fs::exists(root_ + "/other"));
  // The survivors still restore.
  ASSERT_OK(RestoreCheckpoint(all[0].dir, data_));
  auto store = OpenStore(data_);
  ExpectVersion(store.get(), 7);
  EXPECT_TRUE(ListCheckpoints(tmp_.path() + "/missing").empty());
}

// The checkpoint directory holds the SST files and one manifest file, which
// carries RocksDB's small mutable files; a corrupt packed byte is caught by
// the manifest's checksum before anything is restored.
TEST_F(CheckpointTest, SmallFilesArePackedIntoTheManifestAndChecksummed) {
  MakeCheckpointThenAdvance();
  StatusOr<CheckpointInfo> info = ReadCheckpointInfo(ckpt_);
  ASSERT_TRUE(info.ok()) << info.status();
  std::vector<std::string> packed;
  for (const CheckpointFile& f : info->packed) packed.push_back(f.name);
  ASSERT_FALSE(packed.empty());
  EXPECT_EQ(std::count(packed.begin(), packed.end(), "CURRENT"), 1);
  EXPECT_EQ(std::count_if(packed.begin(), packed.end(),
                          [](const std::string& n) { return n.rfind("MANIFEST-", 0) == 0; }),
            1);
  for (const auto& e : fs::directory_iterator(ckpt_)) {
    const std::string name = e.path().filename().string();
    EXPECT_TRUE(name == kCheckpointManifestName || e.path().extension() == ".sst") << name;
  }
  for (const CheckpointFile& f : info->files) EXPECT_EQ(fs::path(f.name).extension(), ".sst");

  // Flip a byte of the packed data (the last bytes before the checksum line).
  const std::string manifest = ckpt_ + "/" + kCheckpointManifestName;
  {
    std::fstream f(manifest, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-20, std::ios::end);
    const char c = static_cast<char>(f.get());
    f.seekp(-20, std::ios::end);
    f.put(static_cast<char>(c ^ 0x20));
  }
  Status s = RestoreCheckpoint(ckpt_, data_);
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s;
  EXPECT_NE(s.message().find("checksum"), std::string::npos) << s;
  auto store = OpenStore(data_);
  ExpectVersion(store.get(), 2);
}

// A checkpoint written before packing (manifest version 1: every file
// separate, MANIFEST and OPTIONS included) is listed and restored.
TEST_F(CheckpointTest, VersionOneCheckpointsStillRestore) {
  MakeCheckpointThenAdvance();
  StatusOr<CheckpointInfo> info = ReadCheckpointInfo(ckpt_);
  ASSERT_TRUE(info.ok()) << info.status();
  // Unpack it (a restore) and describe the files as version 1 did.
  const std::string old = tmp_.path() + "/old";
  ASSERT_OK(RestoreCheckpoint(ckpt_, old));
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(old)) {
    if (e.is_regular_file()) names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  std::string text = "relaxps-checkpoint 1\nclock 4\nstore rocksdb\n";
  for (const std::string& t : info->tables) text += "table " + t + "\n";
  for (const std::string& n : names) {
    text += "file " + n + " " + std::to_string(fs::file_size(old + "/" + n)) + "\n";
  }
  char crc[9];
  std::snprintf(crc, sizeof(crc), "%08x", storage_internal::Crc32c(0, text.data(), text.size()));
  text += std::string("crc32c ") + crc + "\n";
  { std::ofstream(old + "/" + kCheckpointManifestName, std::ios::binary) << text; }
  fs::rename(old, root_ + "/" + CheckpointDirName(4));

  std::vector<CheckpointInfo> all = ListCheckpoints(root_);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[1].clock, 4);
  EXPECT_TRUE(all[1].packed.empty());
  EXPECT_EQ(all[1].files.size(), names.size());
  ASSERT_OK(RestoreCheckpoint(all[1].dir, data_));
  auto store = OpenStore(data_);
  ExpectVersion(store.get(), 1);
}

}  // namespace
}  // namespace relaxps
