// AsyncLossCounter (recovery/chain/async_loss_counter.h): what a worker
// counts lost under --replication=async when a new chain head takes over.
#include "recovery/chain/async_loss_counter.h"

#include <gtest/gtest.h>

namespace relaxps {
namespace recovery {
namespace {

TEST(AsyncLossCounterTest, CountsTheAcknowledgedPushesANewHeadLacks) {
  AsyncLossCounter c(/*max_lag=*/4);
  // Head of epoch 1 acknowledges seqs 1..10 of range (t, 0); the others'
  // pushes interleave (3, 6 and 9 are not this worker's).
  for (uint64_t seq : {1, 2, 4, 5, 7, 8, 10}) {
    EXPECT_EQ(c.OnAcked("t", 0, seq, 0, 1).lost, 0u) << seq;
  }
  // Another range is counted apart.
  EXPECT_EQ(c.OnAcked("t", 100, 1, 0, 1).lost, 0u);
  // The new head (epoch 3) had applied up to 7: 8 and 10 are lost.
  AsyncLossCounter::Loss loss = c.OnAcked("t", 0, 8, 7, 3);
  EXPECT_EQ(loss.lost, 2u);
  EXPECT_EQ(loss.head_since, 7u);
  EXPECT_EQ(loss.head_epoch, 3u);
  EXPECT_EQ(c.lost(), 2u);
  // A late acknowledgement of the old head above 7: lost too; at or below: not.
  EXPECT_EQ(c.OnAcked("t", 0, 9, 0, 1).lost, 1u);
  EXPECT_EQ(c.OnAcked("t", 0, 6, 0, 1).lost, 0u);
  // A synchronous acknowledgement (no numbers) is ignored.
  EXPECT_EQ(c.OnAcked("t", 0, 0, 0, 0).lost, 0u);
  EXPECT_EQ(c.lost(), 3u);
}

TEST(AsyncLossCounterTest, PushesOlderThanTheLagAreOnTheTailAndNeverCounted) {
  AsyncLossCounter c(/*max_lag=*/2);
  for (uint64_t seq = 1; seq <= 10; ++seq) c.OnAcked("t", 0, seq, 0, 1);
  // Acknowledging 10 meant 8 was on every replica: only 9 and 10 may be
  // missing, even from a new head that claims to hold less.
  EXPECT_EQ(c.OnAcked("t", 0, 3, 2, 2).lost, 2u);
  EXPECT_EQ(c.lost(), 2u);
}

}  // namespace
}  // namespace recovery
}  // namespace relaxps
