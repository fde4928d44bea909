// AppliedLedger in isolation: pending BSP pushes are recognized but neither
// counted nor saved until their round is applied.
#include "server/internal/applied_ledger.h"

#include <map>
#include <utility>

#include <gtest/gtest.h>

namespace relaxps {
namespace server_internal {
namespace {

uint64_t Parts(const AppliedLedger& ledger, int worker, uint64_t incarnation) {
  std::map<std::pair<int, uint64_t>, uint64_t> counts;
  ledger.AddCounts(&counts);
  auto it = counts.find({worker, incarnation});
  return it == counts.end() ? 0 : it->second;
}

TEST(AppliedLedgerTest, APendingPushIsADuplicateButNotSavedUntilItsRoundIsApplied) {
  AppliedLedger ledger(16);
  ledger.Record(0, 7, 1, 0);             // Clock 0: applied.
  ledger.RecordPending(0, 7, 2, 0, 1);   // Clock 1: waiting for its round.
  EXPECT_GT(ledger.Find(0, 7, 2), 0u);   // A resend is a duplicate...
  EXPECT_TRUE(ledger.IsPending(0, 7, 2));  // ...acknowledged as pending.
  EXPECT_FALSE(ledger.IsPending(0, 7, 1));
  EXPECT_EQ(Parts(ledger, 0, 7), 1u);

  // A checkpoint now: its record claims push 1 only.
  google::protobuf::RepeatedPtrField<wire::DedupEntry> saved;
  ledger.Save(&saved, 0, false);
  ASSERT_EQ(saved.size(), 1);
  EXPECT_EQ(saved[0].parts(), 1u);
  ASSERT_EQ(saved[0].push_ids_size(), 1);
  EXPECT_EQ(saved[0].push_ids(0), 1u);
  AppliedLedger restored(16);
  restored.Load(saved);
  EXPECT_EQ(restored.Find(0, 7, 2), 0u);  // Replayed into it: applied.

  ledger.SettleBelow(1);  // Round 1 not applied yet.
  EXPECT_TRUE(ledger.IsPending(0, 7, 2));
  ledger.SettleBelow(2);
  EXPECT_FALSE(ledger.IsPending(0, 7, 2));
  EXPECT_GT(ledger.Find(0, 7, 2), 0u);
  EXPECT_EQ(Parts(ledger, 0, 7), 2u);
  saved.Clear();
  ledger.Save(&saved, 0, false);
  ASSERT_EQ(saved[0].push_ids_size(), 2);
  EXPECT_EQ(saved[0].parts(), 2u);
}

TEST(AppliedLedgerTest, AnIncarnationWithOnlyPendingPartsIsNotSaved) {
  AppliedLedger ledger(16);
  ledger.RecordPending(3, 1, 5, 0, 4);
  ledger.RecordPending(3, 1, 0, 0, 4);  // A part without a key: counted at settle.
  google::protobuf::RepeatedPtrField<wire::DedupEntry> saved;
  ledger.Save(&saved, 0, false);
  EXPECT_EQ(saved.size(), 0);
  ledger.SettleBelow(5);
  EXPECT_EQ(Parts(ledger, 3, 1), 2u);
}

// A chain state transfer carries the pending rounds, so their parts go along
// as applied.
TEST(AppliedLedgerTest, AChainSnapshotCarriesPendingPartsAsApplied) {
  AppliedLedger ledger(16);
  ledger.RecordPending(0, 1, 9, 12, 3);
  google::protobuf::RepeatedPtrField<wire::DedupEntry> saved;
  ledger.Save(&saved, 0, /*with_seqs=*/true, /*include_pending=*/true);
  ASSERT_EQ(saved.size(), 1);
  EXPECT_EQ(saved[0].parts(), 1u);
  ASSERT_EQ(saved[0].push_ids_size(), 1);
  EXPECT_EQ(saved[0].seqs(0), 12u);
  AppliedLedger joiner(16);
  joiner.Load(saved);
  EXPECT_EQ(joiner.Find(0, 1, 9), 12u);
}

// The later ranges of a request spanning several (docs/elastic.md, "One
// request per server"): its id recorded, the part not counted there, pending
// or not, and not in a chain snapshot's counts either.
TEST(AppliedLedgerTest, AnUncountedPartIsRecordedButNotCounted) {
  AppliedLedger ledger(16);
  ledger.RecordPending(2, 4, 8, 0, 1, /*counted=*/false);
  ledger.RecordPending(2, 4, 0, 0, 1, /*counted=*/false);  // No key: nothing to keep.
  EXPECT_TRUE(ledger.IsPending(2, 4, 8));
  EXPECT_EQ(ledger.pending_parts(), 0u);
  google::protobuf::RepeatedPtrField<wire::DedupEntry> saved;
  ledger.Save(&saved, 0, /*with_seqs=*/false, /*include_pending=*/true);
  ASSERT_EQ(saved.size(), 1);
  EXPECT_EQ(saved[0].parts(), 0u);
  ledger.SettleBelow(2);
  EXPECT_FALSE(ledger.IsPending(2, 4, 8));
  EXPECT_GT(ledger.Find(2, 4, 8), 0u);  // A resend is a duplicate...
  EXPECT_EQ(Parts(ledger, 2, 4), 0u);   // ...of a part counted elsewhere.
  ledger.RecordId(2, 4, 9, 0);          // RecordPush(counted=false), applied at once.
  EXPECT_GT(ledger.Find(2, 4, 9), 0u);
  EXPECT_EQ(Parts(ledger, 2, 4), 0u);
}

}  // namespace
}  // namespace server_internal
}  // namespace relaxps
