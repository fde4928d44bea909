// UpdateLog (recovery/replay/update_log.h): what a complete checkpoint
// trims, how a pending BSP push is vouched for, and that an overflow drops
// the oldest entries and counts them; that a new map re-routes entries to
// the server holding their keys after a range move.
#include "recovery/replay/update_log.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "tests/test_util.h"

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


// A map of table "w" (size keys) cut at `cuts` into ranges held by `holders`
// (one more holder than cuts), over `servers` servers.
std::shared_ptr<const ShardMap> MapOf(uint64_t size, const std::vector<uint64_t>& cuts,
                                      const std::vector<int>& holders, int servers) {
  wire::ShardMap m;
  m.set_version(2);
  test::AddLiveServers(&m, servers);
  wire::TableShards* ts = m.add_tables();
  ts->mutable_table()->set_name("w");
  ts->mutable_table()->set_size(size);
  uint64_t begin = 0;
  for (size_t i = 0; i < holders.size(); ++i) {
    wire::DenseRange* r = ts->add_ranges();
    r->set_begin(begin);
    r->set_end(i < cuts.size() ? cuts[i] : size);
    r->set_server(holders[i]);
    begin = r->end();
  }
  auto map = ShardMap::FromProto(m);
  CHECK(map.ok()) << map.status();
  return std::make_shared<const ShardMap>(std::move(map).value());
}

TEST(UpdateLogTest, AMovedRangesEntriesFollowItsKeysToTheirNewServer) {
  constexpr uint64_t kSize = 3 * kDenseChunk;
  constexpr uint64_t kCut = 2 * kDenseChunk;
  UpdateLog log(1 << 30);
  // Server 0 held the whole table: two whole-table parts and one of the tail.
  AckedPush whole = Push(0, 1, 0, 0, false, kSize);
  for (uint64_t k = 0; k < kSize; ++k) whole.grads.data()[k] = static_cast<float>(k);
  log.Append(whole);
  AckedPush pending = Push(0, 2, 1, 0, /*pending=*/true, kSize);
  pending.push_continues = true;  // A later part of a split push.
  log.Append(pending);
  AckedPush tail = Push(0, 3, /*clock=*/0, 0, false, 10);  // Vouches for nothing.
  tail.key_begin = kCut + 5;
  log.Append(tail);
  const int64_t bytes = log.bytes();
  // The same map: nothing moves.
  EXPECT_EQ(log.Reroute(MapOf(kSize, {}, {0}, 1)), 0u);
  EXPECT_EQ(Ids(log, 0), (std::vector<uint64_t>{1, 2, 3}));

  // [kCut, kSize) moved to server 1.
  EXPECT_EQ(log.Reroute(MapOf(kSize, {kCut}, {0, 1}, 2)), 3u);
  EXPECT_EQ(log.rerouted_entries(), 3u);
  EXPECT_EQ(log.bytes(), bytes);
  EXPECT_EQ(Ids(log, 0), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(Ids(log, 1), (std::vector<uint64_t>{1, 2, 3}));
  const auto head = log.EntriesFor(0);
  const auto moved = log.EntriesFor(1);
  EXPECT_EQ(head[0]->push.key_begin, 0u);
  EXPECT_EQ(head[0]->push.grads.size(), kCut);
  EXPECT_EQ(moved[0]->push.key_begin, kCut);
  ASSERT_EQ(moved[0]->push.grads.size(), kSize - kCut);
  EXPECT_EQ(moved[0]->push.grads.data()[0], static_cast<float>(kCut));
  EXPECT_EQ(moved[0]->push.grads.data()[kSize - kCut - 1], static_cast<float>(kSize - 1));
  // The key, clock and marker go with each piece.
  EXPECT_EQ(moved[1]->push.push_id, 2u);
  EXPECT_EQ(moved[1]->push.clock, 1);
  EXPECT_TRUE(moved[1]->push.pending);
  // A later part of a split push stays one where it starts; its piece past
  // the cut starts a range of its own (one step there, as the server took).
  EXPECT_TRUE(head[1]->push.push_continues);
  EXPECT_FALSE(moved[1]->push.push_continues);
  EXPECT_EQ(moved[2]->push.key_begin, kCut + 5);

  // An acknowledgement of a part sent by the old map goes by the new one.
  log.Append(Push(0, 4, /*clock=*/0, 0, false, kSize));
  EXPECT_EQ(Ids(log, 0), (std::vector<uint64_t>{1, 2, 4}));
  EXPECT_EQ(Ids(log, 1), (std::vector<uint64_t>{1, 2, 3, 4}));
  // A reflected push of server 1 vouches for the pending piece it now holds.
  log.Append([] {
    AckedPush p = Push(1, 5, 2, 0, false, 1);
    p.key_begin = kCut;
    return p;
  }());
  EXPECT_FALSE(log.EntriesFor(1)[1]->push.pending);
  EXPECT_TRUE(log.EntriesFor(0)[1]->push.pending);

  // Server 1 drained into server 0, which now holds both ranges: server
  // 1's pieces go back to it, nothing is lost or copied twice.
  const int64_t before_drain = log.bytes();
  EXPECT_EQ(log.Reroute(MapOf(kSize, {kCut}, {0, 0}, 2)), 5u);
  EXPECT_TRUE(log.EntriesFor(1).empty());
  EXPECT_EQ(Ids(log, 0), (std::vector<uint64_t>{1, 1, 2, 2, 3, 4, 4, 5}));
  EXPECT_EQ(log.bytes(), before_drain);
}

TEST(UpdateLogTest, RowsFollowTheirBucketsServer) {
  UpdateLog log(1 << 20);
  AckedPush rows = Push(0, 1, 0, 0, false, 0);
  rows.type = wire::PUSH_ROWS;
  rows.table = "emb";
  rows.ids = KeyBuffer::CopyOf(std::vector<uint64_t>{10, 11, 12, 13});
  rows.grads = FloatBuffer::CopyOf(std::vector<float>{0, 0, 1, 1, 2, 2, 3, 3});  // Width 2.
  log.Append(rows);
  wire::ShardMap m;
  m.set_version(2);
  test::AddLiveServers(&m, 2);
  wire::TableShards* ts = m.add_tables();
  ts->mutable_table()->set_name("emb");
  ts->mutable_table()->set_type(1);
  ts->mutable_table()->set_row_width(2);
  for (const wire::SparseBucket& b : ShardMap::AssignBuckets(8, 2, 1)) *ts->add_buckets() = b;
  ASSERT_OK_AND_ASSIGN(ShardMap parsed, ShardMap::FromProto(m));
  auto map = std::make_shared<const ShardMap>(parsed);
  log.Reroute(map);
  size_t rows_seen = 0;
  for (int server = 0; server < 2; ++server) {
    for (const auto& e : log.EntriesFor(server)) {
      ASSERT_EQ(e->push.grads.size(), 2 * e->push.ids.size());
      for (size_t i = 0; i < e->push.ids.size(); ++i) {
        const uint64_t id = e->push.ids.data()[i];
        EXPECT_EQ(map->SparseServer(*map->FindTable("emb"), id), server) << id;
        EXPECT_EQ(e->push.grads.data()[2 * i], static_cast<float>(id - 10)) << id;
        ++rows_seen;
      }
    }
  }
  EXPECT_EQ(rows_seen, 4u);
}

}  // namespace
}  // namespace recovery
}  // namespace relaxps
