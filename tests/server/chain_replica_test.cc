// ChainReplica: acknowledgement bookkeeping and the exactly-once record.
#include "server/internal/chain_replica.h"

#include <gtest/gtest.h>

namespace relaxps {
namespace server_internal {
namespace {

TEST(ChainReplicaTest, RepliesWaitForTheSuccessorsAcknowledgement) {
  ChainReplica c;
  c.SetRole(/*head=*/true, /*successor=*/1);
  const uint64_t s1 = c.NextSeq(), s2 = c.NextSeq();
  int done = 0;
  c.WhenAcked(s1, [&] { done |= 1; });
  c.WhenAcked(s2, [&] { done |= 2; });
  EXPECT_EQ(done, 0);
  c.OnAcked(s1);
  EXPECT_EQ(done, 1);
  // Becoming the tail (the successor died) acknowledges everything applied.
  c.SetRole(true, -1);
  EXPECT_EQ(done, 3);
  int now = 0;
  c.WhenAcked(c.NextSeq(), [&] { now = 1; });
  EXPECT_EQ(now, 1);
}

TEST(ChainReplicaTest, AcknowledgementsDropTheLogAndNeverExceedWhatWasApplied) {
  ChainReplica c;
  c.SetRole(true, 2);
  for (int i = 0; i < 3; ++i) c.Logged(c.NextSeq(), LoggedOp(), 0);
  c.OnAcked(2);
  ASSERT_EQ(c.unacked().size(), 1u);
  EXPECT_EQ(c.unacked().front().first, 3u);
  c.OnAcked(99);  // A confused successor cannot acknowledge the future.
  EXPECT_EQ(c.acked_seq(), 3u);
}

TEST(ChainReplicaTest, ExactlyOnceRecordSurvivesASnapshot) {
  ChainReplica head;
  head.SetRole(true, 1);
  head.RecordApplied(/*worker=*/4, /*incarnation=*/9, /*push_id=*/17, head.NextSeq());
  EXPECT_EQ(head.FindApplied(4, 9, 17), 1u);
  EXPECT_EQ(head.FindApplied(4, 10, 17), 0u);  // A new incarnation starts afresh.
  EXPECT_EQ(head.FindApplied(4, 9, 18), 0u);
  wire::ChainSnapshot snap;
  head.SaveDedup(&snap);
  ChainReplica joined;
  joined.LoadDedup(snap);
  EXPECT_EQ(joined.FindApplied(4, 9, 17), 1u);
  // Ids older than the kept window count as applied.
  for (uint64_t id = 100; id < 100 + ChainReplica::kDedupWindow; ++id) {
    head.RecordApplied(4, 9, id, head.NextSeq());
  }
  EXPECT_NE(head.FindApplied(4, 9, 17), 0u);
  EXPECT_EQ(head.FindApplied(4, 9, 100 + ChainReplica::kDedupWindow), 0u);
}

}  // namespace
}  // namespace server_internal
}  // namespace relaxps
