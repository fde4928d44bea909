// DenseLog (storage/internal/dense_log.h): records read back as written, a
// torn tail dropped with the records before it kept, a damaged record that
// later records continue refused as Corruption, a restarted log that does
// not read the older use's records, and a sync started on the sync thread
// (StartSync) that Sync waits for, completes, and reports.
#include "storage/internal/dense_log.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "storage/internal/crc32c.h"
#include "storage/fault_injecting_fs.h"
#include "storage/internal/file_util.h"
#include "tests/storage/storage_test_util.h"
#include "tests/test_util.h"

namespace relaxps {
namespace storage_internal {
namespace {

using testing_storage::ScopedTempDir;

std::vector<float> Floats(size_t n, float base) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = base + static_cast<float>(i) * 0.5f;
  return v;
}

class DenseLogTest : public ::testing::Test {
 protected:
  std::string path() const { return tmp_.path() + "/log"; }

  // Appends a step record of n floats starting at `base`, and one values
  // record of two arrays; returns the sequence numbers.
  std::vector<uint64_t> AppendSome(DenseLog* log, int records, size_t n) {
    std::vector<uint64_t> seqs;
    for (int i = 0; i < records; ++i) {
      DenseLogRecord h;
      h.table_id = 7;
      h.offset = static_cast<uint64_t>(i);
      h.n = n;
      h.step = 10 + i;
      h.clock = 100 + i;
      std::vector<float> a = Floats(n, static_cast<float>(i)), b = Floats(n, -1.0f * i);
      std::vector<const float*> arrays(1, a.data());
      if (i % 2 == 0) {
        h.kind = DenseLogKind::kStep;
        h.lr_scale = 0.25f * (i + 1);
      } else {
        h.kind = DenseLogKind::kValues;
        arrays.push_back(b.data());
      }
      h.arrays = static_cast<uint32_t>(arrays.size());
      StatusOr<uint64_t> seq = log->Append(h, arrays.data());
      EXPECT_OK(seq);
      if (seq.ok()) seqs.push_back(*seq);
    }
    return seqs;
  }

  size_t RecordBytes(int i, size_t n) const {
    return DenseLog::kHeaderBytes + n * sizeof(float) * (i % 2 == 0 ? 1 : 2);
  }

  void CheckRecord(const DenseLogRecord& r, int i, size_t n) {
    EXPECT_EQ(r.table_id, 7u);
    EXPECT_EQ(r.offset, static_cast<uint64_t>(i));
    EXPECT_EQ(r.n, n);
    EXPECT_EQ(r.step, 10 + i);
    EXPECT_EQ(r.clock, 100 + i);
    std::vector<float> want = Floats(n, static_cast<float>(i));
    if (i % 2 == 0) {
      EXPECT_EQ(r.kind, DenseLogKind::kStep);
      EXPECT_EQ(r.lr_scale, 0.25f * (i + 1));
    } else {
      EXPECT_EQ(r.kind, DenseLogKind::kValues);
      std::vector<float> b = Floats(n, -1.0f * i);
      want.insert(want.end(), b.begin(), b.end());
    }
    EXPECT_EQ(r.floats, want);
  }

  std::string ReadAll() {
    std::string data;
    EXPECT_OK(ReadFile(DefaultFileSystem(nullptr), path(), &data));
    return data;
  }
  void WriteAll(const std::string& data) {
    std::filesystem::resize_file(path(), 0);
    FILE* f = std::fopen(path().c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(data.data(), 1, data.size(), f), data.size());
    std::fclose(f);
  }

  ScopedTempDir tmp_{"dense_log_test"};
};

TEST(Crc32cTest, KnownValues) {
  // RFC 3720's check value, and a split computation equal to a whole one
  // (the hardware path works 8 bytes at a time, the tail byte by byte).
  EXPECT_EQ(Crc32c(0, "123456789", 9), 0xe3069283u);
  std::string big(1000, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7 + 3);
  const uint32_t whole = Crc32c(0, big.data(), big.size());
  EXPECT_EQ(Crc32c(Crc32c(0, big.data(), 13), big.data() + 13, big.size() - 13), whole);
  EXPECT_NE(Crc32c(0, big.data(), big.size() - 1), whole);
}

TEST(Crc32cTest, InterleavedLanesEqualOneStream) {
  // Calls of 12 KiB and more run three lanes side by side and join them;
  // calls of fewer bytes run one stream. Both must give the same CRC, at
  // every length and alignment around the lanes' edges.
  std::string big(200000, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 2654435761u) >> 13);
  for (size_t start : {size_t{0}, size_t{3}}) {
    for (size_t n : std::vector<size_t>{12287, 12288, 12289, 24576 + 13, 199997 - 3}) {
      uint32_t pieces = 0;
      for (size_t at = 0; at < n; at += 1000) {
        pieces = Crc32c(pieces, big.data() + start + at, std::min<size_t>(1000, n - at));
      }
      EXPECT_EQ(Crc32c(0, big.data() + start, n), pieces) << "n " << n << " start " << start;
    }
  }
}

TEST_F(DenseLogTest, RecordsReadBackAsWritten) {
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<DenseLog> log, DenseLog::Open(nullptr, path(), "", 5));
    EXPECT_EQ(AppendSome(log.get(), 4, 100), (std::vector<uint64_t>{5, 6, 7, 8}));
    ASSERT_OK(log->Sync());
    EXPECT_EQ(log->last_seq(), 8u);
    EXPECT_EQ(log->syncs(), 1u);
  }
  std::vector<DenseLogRecord> records;
  uint64_t valid = 0;
  ASSERT_OK(DenseLog::Read(nullptr, path(), &records, &valid));
  ASSERT_EQ(records.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(records[i].seq, 5u + i);
    CheckRecord(records[i], i, 100);
  }
  EXPECT_EQ(valid, RecordBytes(0, 100) + RecordBytes(1, 100) + RecordBytes(2, 100) +
                       RecordBytes(3, 100));
}

TEST_F(DenseLogTest, MissingFileHasNoRecords) {
  std::vector<DenseLogRecord> records;
  uint64_t valid = 7;
  ASSERT_OK(DenseLog::Read(nullptr, path(), &records, &valid));
  EXPECT_TRUE(records.empty());
  EXPECT_EQ(valid, 0u);
}

TEST_F(DenseLogTest, TornTailKeepsTheRecordsBeforeIt) {
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<DenseLog> log, DenseLog::Open(nullptr, path(), "", 1));
    AppendSome(log.get(), 3, 64);
    ASSERT_OK(log->Sync());
  }
  const std::string data = ReadAll();
  const size_t first_two = RecordBytes(0, 64) + RecordBytes(1, 64);
  // The third record cut short anywhere, header included.
  for (size_t cut : {first_two + 3, first_two + 40, data.size() - 1}) {
    WriteAll(data.substr(0, cut));
    std::vector<DenseLogRecord> records;
    uint64_t valid = 0;
    ASSERT_OK(DenseLog::Read(nullptr, path(), &records, &valid)) << "cut at " << cut;
    ASSERT_EQ(records.size(), 2u) << "cut at " << cut;
    CheckRecord(records[1], 1, 64);
    EXPECT_EQ(valid, first_two);
  }
  // A damaged last record (its write torn in the middle) counts the same.
  std::string damaged = data;
  damaged[data.size() - 5] ^= 0x40;
  WriteAll(damaged);
  std::vector<DenseLogRecord> records;
  uint64_t valid = 0;
  ASSERT_OK(DenseLog::Read(nullptr, path(), &records, &valid));
  EXPECT_EQ(records.size(), 2u);
}

TEST_F(DenseLogTest, DamagedRecordFollowedByLaterOnesIsCorruption) {
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<DenseLog> log, DenseLog::Open(nullptr, path(), "", 1));
    AppendSome(log.get(), 4, 64);
    ASSERT_OK(log->Sync());
  }
  std::string data = ReadAll();
  const size_t second = RecordBytes(0, 64);
  data[second + DenseLog::kHeaderBytes + 10] ^= 0x01;  // A float of record 2.
  WriteAll(data);
  std::vector<DenseLogRecord> records;
  uint64_t valid = 0;
  Status s = DenseLog::Read(nullptr, path(), &records, &valid);
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s;
  EXPECT_NE(s.message().find("offset " + std::to_string(second)), std::string::npos) << s;
  EXPECT_NE(s.message().find("acknowledged"), std::string::npos) << s;
}

TEST_F(DenseLogTest, RestartedLogEndsBeforeTheOlderUsesRecords) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DenseLog> log, DenseLog::Open(nullptr, path(), "", 1));
  AppendSome(log.get(), 4, 64);
  ASSERT_OK(log->Sync());
  ASSERT_OK(log->Restart());
  EXPECT_EQ(log->bytes(), 0u);
  EXPECT_EQ(AppendSome(log.get(), 2, 64), (std::vector<uint64_t>{5, 6}));
  ASSERT_OK(log->Sync());
  // The file keeps its size (blocks reused, not truncated) ...
  EXPECT_EQ(std::filesystem::file_size(path()), 2 * RecordBytes(0, 64) + 2 * RecordBytes(1, 64));
  // ... and reads as the new use only.
  std::vector<DenseLogRecord> records;
  uint64_t valid = 0;
  ASSERT_OK(DenseLog::Read(nullptr, path(), &records, &valid));
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].seq, 5u);
  EXPECT_EQ(records[1].seq, 6u);
  CheckRecord(records[1], 1, 64);
}

TEST_F(DenseLogTest, OpenGoesOnAfterTheRecordsItKeeps) {
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<DenseLog> log, DenseLog::Open(nullptr, path(), "", 1));
    AppendSome(log.get(), 3, 32);
    ASSERT_OK(log->Sync());
  }
  std::vector<DenseLogRecord> records;
  uint64_t valid = 0;
  ASSERT_OK(DenseLog::Read(nullptr, path(), &records, &valid));
  std::string keep = ReadAll().substr(0, valid);
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<DenseLog> log, DenseLog::Open(nullptr, path(), keep, 4));
    EXPECT_EQ(AppendSome(log.get(), 1, 32), (std::vector<uint64_t>{4}));
    ASSERT_OK(log->Sync());
  }
  ASSERT_OK(DenseLog::Read(nullptr, path(), &records, &valid));
  ASSERT_EQ(records.size(), 4u);
  EXPECT_EQ(records[3].seq, 4u);
  CheckRecord(records[2], 2, 32);
}

TEST_F(DenseLogTest, StartedSyncIsTheSyncOfTheRecordsBeforeIt) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DenseLog> log, DenseLog::Open(nullptr, path(), "", 1));
  AppendSome(log.get(), 2, 64);
  log->StartSync();
  log->StartSync();  // One is running or done: nothing more.
  ASSERT_OK(log->Sync());  // Waits for it; no second fdatasync.
  EXPECT_EQ(log->syncs(), 1u);
  EXPECT_FALSE(log->unsynced());
  log->StartSync();  // Nothing unsynced: no sync.
  ASSERT_OK(log->Sync());
  EXPECT_EQ(log->syncs(), 1u);
}

TEST_F(DenseLogTest, SyncAfterAStartedSyncCoversTheRecordsAppendedMeanwhile) {
  auto fs = std::make_shared<FaultInjectingFileSystem>();
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<DenseLog> log, DenseLog::Open(fs.get(), path(), "", 1));
    // Every Append and Sync waits 30 ms first: the started sync covers the
    // first record only, the second is appended while it waits.
    fs->SetWriteDelayMs(30);
    AppendSome(log.get(), 1, 64);
    log->StartSync();
    AppendSome(log.get(), 1, 64);
    ASSERT_OK(log->Sync());
    EXPECT_EQ(log->syncs(), 2u);
    fs->SetWriteDelayMs(0);
    fs->SimulateCrash();  // Drops whatever no sync covered.
  }
  fs->Reactivate();
  std::vector<DenseLogRecord> records;
  uint64_t valid = 0;
  ASSERT_OK(DenseLog::Read(fs.get(), path(), &records, &valid));
  EXPECT_EQ(records.size(), 2u);
}

TEST_F(DenseLogTest, FailedStartedSyncFailsTheNextSyncWhichThenRetries) {
  auto fs = std::make_shared<FaultInjectingFileSystem>();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DenseLog> log, DenseLog::Open(fs.get(), path(), "", 1));
  AppendSome(log.get(), 1, 64);
  fs->SetWriteError(FaultInjectingFileSystem::WriteError::kIO, "log");
  log->StartSync();
  Status s = log->Sync();  // Waits for the started sync, which failed.
  EXPECT_EQ(fs->injected_errors(), 1u);
  EXPECT_EQ(s.code(), StatusCode::kIOError) << s;
  EXPECT_NE(s.message().find("cannot sync dense log"), std::string::npos) << s;
  EXPECT_TRUE(log->unsynced());
  fs->SetWriteError(FaultInjectingFileSystem::WriteError::kNone);
  ASSERT_OK(log->Sync());  // Retried, on this thread.
  EXPECT_FALSE(log->unsynced());
}

}  // namespace
}  // namespace storage_internal
}  // namespace relaxps
