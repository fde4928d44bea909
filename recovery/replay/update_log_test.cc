// UpdateLog (recovery/replay/update_log.h): what a complete checkpoint
// trims, how a pending BSP push is vouched for, and that an overflow drops
// the oldest entries and counts them.
#include "recovery/replay/update_log.h"

#include <gtest/gtest.h>

#include <vector>

namespace relaxps {
namespace recovery {
namespace {

AckedPush Push(int server, uint64_t id, int64_t clock, uint64_t snapshot_seq, bool pending,
               size_t n = 4) {
  AckedPush p;
  p.server = server;
  p.table = "w";
  p.key_begin = 0;
  p.grads = FloatBuffer::CopyOf(std::vector<float>(n, static_cast<float>(id)));
  p.clock = clock;
  p.incarnation = 7;
  p.push_id = id;
  p.snapshot_seq = snapshot_seq;
  p.pending = pending;
  return p;
}

std::vector<uint64_t> Ids(const UpdateLog& log, int server) {
  std::vector<uint64_t> ids;
  for (const auto& e : log.EntriesFor(server)) ids.push_back(e->push.push_id);
  return ids;
}

TEST(UpdateLogTest, KeepsACopyInAcknowledgementOrderPerServer) {
  UpdateLog log(1 << 20);
  AckedPush p = Push(0, 1, 0, 0, false);
  log.Append(p);
  p.grads.data()[0] = -1;  // The caller reuses its buffer.
  log.Append(Push(1, 2, 0, 0, false));
  log.Append(Push(0, 3, 1, 0, false));
  EXPECT_EQ(Ids(log, 0), (std::vector<uint64_t>{1, 3}));
  EXPECT_EQ(Ids(log, 1), (std::vector<uint64_t>{2}));
  EXPECT_EQ(log.EntriesFor(0)[0]->push.grads.data()[0], 1.0f);
  EXPECT_EQ(log.entries(), 3u);
  EXPECT_EQ(log.bytes(), 3 * 4 * static_cast<int64_t>(sizeof(float)));
}

TEST(UpdateLogTest, ACheckpointTrimsOnlyWhatItContains) {
  UpdateLog log(1 << 20);
  log.Append(Push(0, 1, 0, /*snapshot_seq=*/0, false));  // In checkpoints 1, 2, ...
  log.Append(Push(0, 2, 1, 1, false));                   // In 2, 3, ...
  log.Append(Push(0, 3, 2, 2, false));                   // In 3, ...
  log.Trim(1);
  EXPECT_EQ(Ids(log, 0), (std::vector<uint64_t>{2, 3}));
  log.Trim(1);  // Announced again: nothing more.
  EXPECT_EQ(Ids(log, 0), (std::vector<uint64_t>{2, 3}));
  log.Trim(3);
  EXPECT_TRUE(Ids(log, 0).empty());
  EXPECT_EQ(log.trimmed_entries(), 3u);
  EXPECT_EQ(log.bytes(), 0);
}

TEST(UpdateLogTest, APendingPushIsKeptUntilALaterReflectedOneVouchesForIt) {
  UpdateLog log(1 << 20);
  log.Append(Push(0, 1, /*clock=*/5, 0, /*pending=*/true));
  log.Append(Push(1, 2, 5, 0, true));  // Another server: not vouched for by server 0.
  log.Trim(10);
  EXPECT_EQ(Ids(log, 0), (std::vector<uint64_t>{1}));
  log.Append(Push(0, 3, /*clock=*/4, 0, false));  // An older clock vouches for nothing.
  log.Trim(10);
  EXPECT_EQ(Ids(log, 0), (std::vector<uint64_t>{1}));
  log.Append(Push(0, 4, /*clock=*/5, /*snapshot_seq=*/3, false));
  log.Trim(3);  // Push 1 is in checkpoints after 3 only.
  EXPECT_EQ(Ids(log, 0), (std::vector<uint64_t>{1, 4}));
  log.Trim(4);
  EXPECT_TRUE(Ids(log, 0).empty());
  EXPECT_EQ(Ids(log, 1), (std::vector<uint64_t>{2}));
}

TEST(UpdateLogTest, AReplayAnswerSetsTheEntrysMarker) {
  UpdateLog log(1 << 20);
  log.Append(Push(0, 1, 0, 0, true));
  std::vector<std::shared_ptr<const UpdateLog::Entry>> before = log.EntriesFor(0);
  log.Replayed(0, 1, /*snapshot_seq=*/6, false);
  EXPECT_TRUE(before[0]->push.pending);  // Copies handed out do not change.
  log.Trim(6);
  EXPECT_EQ(Ids(log, 0), (std::vector<uint64_t>{1}));
  log.Trim(7);
  EXPECT_TRUE(Ids(log, 0).empty());
}

TEST(UpdateLogTest, ADroppedEntryIsLostOnlyIfTheRestoredCheckpointLacksIt) {
  const int64_t entry = 4 * sizeof(float);
  UpdateLog log(entry);
  log.Append(Push(0, 1, 0, /*snapshot_seq=*/0, false));  // In checkpoints 1, ...
  log.Append(Push(0, 2, 1, 1, false));                   // In 2, ...: drops 1.
  log.Append(Push(0, 3, 2, 1, false));                   // Drops 2.
  log.Append(Push(1, 4, 2, 1, false));                   // Drops 3.
  EXPECT_EQ(log.dropped_entries(), 3u);
  EXPECT_EQ(log.uncovered_entries(), 3u);
  log.Trim(1);  // Checkpoint 1 holds push 1.
  EXPECT_EQ(log.uncovered_entries(), 2u);
  EXPECT_EQ(log.TakeLost(1, 1), 0u);  // Server 1 dropped nothing.
  EXPECT_EQ(log.TakeLost(0, 1), 2u);  // Pushes 2 and 3: not in checkpoint 1.
  EXPECT_EQ(log.lost_entries(), 2u);
  EXPECT_EQ(log.uncovered_entries(), 0u);
  EXPECT_EQ(log.TakeLost(0, 1), 0u);  // Counted once.
}

TEST(UpdateLogTest, OverflowDropsTheOldestAndCountsThem) {
  const int64_t entry = 4 * sizeof(float);
  UpdateLog log(3 * entry);
  for (uint64_t id = 1; id <= 5; ++id) log.Append(Push(id % 2, id, 0, 0, false));
  EXPECT_EQ(log.entries(), 3u);
  EXPECT_EQ(log.dropped_entries(), 2u);
  EXPECT_EQ(log.dropped_bytes(), static_cast<uint64_t>(2 * entry));
  EXPECT_EQ(Ids(log, 1), (std::vector<uint64_t>{3, 5}));
  EXPECT_EQ(Ids(log, 0), (std::vector<uint64_t>{4}));
  // An entry larger than the whole log is dropped (and counted) alone.
  log.Append(Push(0, 6, 0, 0, false, /*n=*/100));
  EXPECT_EQ(log.dropped_entries(), 3u);
  EXPECT_EQ(log.entries(), 3u);
  EXPECT_EQ(log.bytes(), 3 * entry);
}

}  // namespace
}  // namespace recovery
}  // namespace relaxps
