// AppliedRecords on its own, over an in-memory store: what a saved record
// holds (units with entries, sparse tables, the checkpoint seq; a flush
// keeps the newest checkpoint's), and where a reopened record's units go on
// Restore (ranges and buckets the server names, sparse tables' own ledgers,
// units no longer held skipped). AppliedRecords keeps no time: no clock,
// no sleeps.
#include "server/internal/applied_records.h"

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace relaxps {
namespace server_internal {
namespace {

constexpr size_t kWindow = 16;

uint64_t Parts(const AppliedLedger& ledger, int worker, uint64_t incarnation) {
  std::map<std::pair<int, uint64_t>, uint64_t> counts;
  ledger.AddCounts(&counts);
  auto it = counts.find({worker, incarnation});
  return it == counts.end() ? 0 : it->second;
}

bool NoSparse(const std::string&) { return false; }

TEST(AppliedRecordsTest, NothingToSaveOrRestoreBeforeOpen) {
  AppliedRecords records(kWindow);
  EXPECT_FALSE(records.is_open());
  AppliedLedger range(kWindow);
  range.Record(0, 7, 1, 0);
  EXPECT_TRUE(records.Save(3, {{"w", 0, false, &range}}).ok());
  StatusOr<size_t> restored = records.Restore(NoSparse, [](const std::string&, uint64_t, bool) {
    ADD_FAILURE() << "nothing to restore";
    return static_cast<AppliedLedger*>(nullptr);
  });
  ASSERT_TRUE(restored.ok());
  EXPECT_EQ(*restored, 0u);
}

TEST(AppliedRecordsTest, ASavedRecordComesBackIntoTheUnitsOfAReopenedServer) {
  std::unique_ptr<ParamStore> store = NewMemoryStore();
  {
    AppliedRecords records(kWindow);
    ASSERT_TRUE(records.Open(store.get()).ok());
    EXPECT_EQ(records.snapshot_seq(), 0u);  // A new store.
    AppliedLedger range(kWindow), bucket(kWindow), dropped(kWindow), empty(kWindow);
    range.Record(/*worker=*/0, /*incarnation=*/7, /*push_id=*/1, 0);
    range.Record(0, 7, 2, 0);
    bucket.Record(1, 9, 5, 0);
    dropped.Record(2, 4, 1, 0);
    records.SparseLedger("emb")->Record(1, 9, 6, 0);
    ASSERT_TRUE(records
                    .Save(/*checkpoint_seq=*/3, {{"w", 0, false, &range},
                                                 {"rows", 5, true, &bucket},
                                                 {"gone", 100, false, &dropped},
                                                 {"w", 200, false, &empty}})
                    .ok());
  }
  // The same store reopened (a restarted server, a restored checkpoint).
  AppliedRecords reopened(kWindow);
  ASSERT_TRUE(reopened.Open(store.get()).ok());
  EXPECT_EQ(reopened.snapshot_seq(), 3u);
  AppliedLedger range(kWindow), bucket(kWindow);
  std::vector<std::string> asked;
  StatusOr<size_t> restored = reopened.Restore(
      [](const std::string& table) { return table == "emb"; },
      [&](const std::string& table, uint64_t key, bool is_bucket) -> AppliedLedger* {
        asked.push_back(table + "/" + std::to_string(key) + (is_bucket ? "b" : ""));
        if (table == "w" && key == 0 && !is_bucket) return &range;
        if (table == "rows" && key == 5 && is_bucket) return &bucket;
        return nullptr;  // "gone": no longer held here.
      });
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(*restored, 3u);  // w/0, rows/5 and emb; not gone/100.
  // The empty ledger was not saved; the sparse table is not asked for.
  EXPECT_EQ(asked, (std::vector<std::string>{"w/0", "rows/5b", "gone/100"}));
  EXPECT_EQ(Parts(range, 0, 7), 2u);
  EXPECT_GT(range.Find(0, 7, 2), 0u);  // A replayed push is a duplicate.
  EXPECT_EQ(Parts(bucket, 1, 9), 1u);
  AppliedLedger* emb = reopened.FindSparseLedger("emb");
  ASSERT_NE(emb, nullptr);
  EXPECT_GT(emb->Find(1, 9, 6), 0u);
  std::map<std::pair<int, uint64_t>, uint64_t> counts;
  reopened.AddSparseCounts(&counts);
  EXPECT_EQ(counts, (std::map<std::pair<int, uint64_t>, uint64_t>{{{1, 9}, 1}}));
}

TEST(AppliedRecordsTest, AFlushKeepsTheNewestCheckpointCaptured) {
  std::unique_ptr<ParamStore> store = NewMemoryStore();
  AppliedRecords records(kWindow);
  ASSERT_TRUE(records.Open(store.get()).ok());
  records.Captured(4);
  records.Captured(2);  // An older one does not lower it.
  EXPECT_EQ(records.snapshot_seq(), 4u);
  ASSERT_TRUE(records.Save(/*checkpoint_seq=*/0, {}).ok());  // A flush.
  AppliedRecords reopened(kWindow);
  ASSERT_TRUE(reopened.Open(store.get()).ok());
  EXPECT_EQ(reopened.snapshot_seq(), 4u);
}

TEST(AppliedRecordsTest, SparseLedgersAreMadeOnceAndFoundAfter) {
  AppliedRecords records(kWindow);
  EXPECT_EQ(records.FindSparseLedger("emb"), nullptr);
  AppliedLedger* emb = records.SparseLedger("emb");
  EXPECT_EQ(records.SparseLedger("emb"), emb);
  EXPECT_EQ(records.FindSparseLedger("emb"), emb);
  EXPECT_EQ(records.FindSparseLedger("other"), nullptr);
}

}  // namespace
}  // namespace server_internal
}  // namespace relaxps
