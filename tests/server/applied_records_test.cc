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
  AppliedRecords::Targets targets;
  targets.is_sparse = NoSparse;
  targets.find_bucket = [](const std::string&, uint64_t) {
    ADD_FAILURE() << "nothing to restore";
    return static_cast<AppliedLedger*>(nullptr);
  };
  targets.find_dense = [](const std::string&, uint64_t, uint64_t) {
    ADD_FAILURE() << "nothing to restore";
    return std::vector<AppliedLedger*>();
  };
  StatusOr<size_t> restored = records.Restore(targets);
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
  AppliedRecords::Targets targets;
  targets.is_sparse = [](const std::string& table) { return table == "emb"; };
  targets.find_bucket = [&](const std::string& table, uint64_t key) -> AppliedLedger* {
    asked.push_back(table + "/" + std::to_string(key) + "b");
    return table == "rows" && key == 5 ? &bucket : nullptr;
  };
  targets.find_dense = [&](const std::string& table, uint64_t begin, uint64_t end) {
    asked.push_back(table + "/" + std::to_string(begin) + "-" + std::to_string(end));
    // "gone": no longer held here.
    return table == "w" && begin == 0 ? std::vector<AppliedLedger*>{&range}
                                      : std::vector<AppliedLedger*>{};
  };
  StatusOr<size_t> restored = reopened.Restore(targets);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(*restored, 3u);  // w/0, rows/5 and emb; not gone/100.
  // The empty ledger was not saved; the sparse table is not asked for.
  EXPECT_EQ(asked, (std::vector<std::string>{"w/0-18446744073709551615", "rows/5b",
                                             "gone/100-18446744073709551615"}));
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

// A checkpoint taken before a range move, restored where the map gives the
// server other ranges than it held then: every range holding keys of a saved
// range (which reaches up to the next saved one) gets that range's push ids
// (a resent push it reflects is a duplicate), the first of them its part
// counts (they count once).
TEST(AppliedRecordsTest, ARestoredRangeGetsTheRecordOfEverySavedRangeItHoldsKeysOf) {
  std::unique_ptr<ParamStore> store = NewMemoryStore();
  {
    AppliedRecords records(kWindow);
    ASSERT_TRUE(records.Open(store.get()).ok());
    AppliedLedger first(kWindow), second(kWindow);
    first.Record(/*worker=*/0, /*incarnation=*/7, /*push_id=*/11, 0);
    first.Record(0, 7, 12, 0);
    second.Record(0, 7, 21, 0);
    // Saved: the ranges of "w" starting at 0 and at 100.
    ASSERT_TRUE(records.Save(3, {{"w", 100, false, &second}, {"w", 0, false, &first}}).ok());
  }
  AppliedRecords reopened(kWindow);
  ASSERT_TRUE(reopened.Open(store.get()).ok());
  // Held now: [0, 50), [50, 120) and [120, 160).
  struct Held {
    uint64_t begin, end;
    AppliedLedger ledger{kWindow};
  };
  std::vector<Held> held(3);
  held[0].begin = 0, held[0].end = 50;
  held[1].begin = 50, held[1].end = 120;
  held[2].begin = 120, held[2].end = 160;
  AppliedRecords::Targets targets;
  targets.is_sparse = NoSparse;
  targets.find_bucket = [](const std::string&, uint64_t) -> AppliedLedger* { return nullptr; };
  targets.find_dense = [&](const std::string& table, uint64_t begin, uint64_t end) {
    std::vector<AppliedLedger*> out;
    for (Held& h : held) {
      if (table == "w" && h.begin < end && begin < h.end) out.push_back(&h.ledger);
    }
    return out;
  };
  StatusOr<size_t> restored = reopened.Restore(targets);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(*restored, 2u);
  // [0, 50) and [50, 120) hold keys of the first saved range, [50, 120) and
  // [120, 160) of the second: each knows the pushes applied to them (only
  // [0, 50) did before: it alone starts where a saved range did).
  EXPECT_GT(held[0].ledger.Find(0, 7, 12), 0u);
  EXPECT_GT(held[1].ledger.Find(0, 7, 11), 0u);
  EXPECT_GT(held[1].ledger.Find(0, 7, 21), 0u);
  EXPECT_GT(held[2].ledger.Find(0, 7, 21), 0u);
  EXPECT_EQ(held[0].ledger.Find(0, 7, 21), 0u);  // Not a push of its keys.
  EXPECT_EQ(held[2].ledger.Find(0, 7, 13), 0u);  // Never applied.
  // The counts once: 2 parts from the first range, 1 from the second.
  EXPECT_EQ(Parts(held[0].ledger, 0, 7), 2u);
  EXPECT_EQ(Parts(held[1].ledger, 0, 7), 1u);
  EXPECT_EQ(Parts(held[2].ledger, 0, 7), 0u);
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
