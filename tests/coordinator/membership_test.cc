// Membership with a fake clock, and the recovery-policy factory.
#include "coordinator/membership.h"

#include <vector>

#include <gtest/gtest.h>


namespace relaxps {
namespace {

TEST(MembershipTest, SilentMembersExpireAndTheWorkerSetVersionMoves) {
  Membership m(/*heartbeat_timeout_ms=*/1000);
  const uint64_t v0 = m.worker_set_version();
  EXPECT_EQ(m.AddServer(-1, "tcp://a", 10, /*now=*/0), 0);
  EXPECT_EQ(m.AddServer(-1, "tcp://b", 11, 0), 1);
  EXPECT_EQ(m.AddWorker(-1, 0, 20, 0), 0);
  EXPECT_EQ(m.AddWorker(-1, 0, 21, 0), 1);
  EXPECT_GT(m.worker_set_version(), v0);

  // Heartbeats keep members alive and carry worker clocks (never backwards).
  EXPECT_TRUE(m.ServerHeartbeat(0, 900));
  EXPECT_TRUE(m.WorkerHeartbeat(0, 7, 900));
  EXPECT_TRUE(m.WorkerHeartbeat(0, 5, 950));
  EXPECT_EQ(m.workers().at(0).clock, 7);
  EXPECT_EQ(m.MinWorkerClock(), 0);

  // At t=1500 the silent ones (server 1, worker 1) are dead; the others live.
  const uint64_t v1 = m.worker_set_version();
  EXPECT_EQ(m.ExpireServers(1500), std::vector<int>({1}));
  EXPECT_EQ(m.ExpireWorkers(1500), std::vector<int>({1}));
  EXPECT_GT(m.worker_set_version(), v1);
  EXPECT_EQ(m.live_servers(), 1);
  std::vector<int> ids;
  std::vector<int64_t> clocks;
  m.LiveWorkers(&ids, &clocks);
  EXPECT_EQ(ids, std::vector<int>({0}));
  EXPECT_EQ(clocks, std::vector<int64_t>({7}));
  EXPECT_EQ(m.MinWorkerClock(), 7);
  // A dead member's heartbeat is refused; it must re-register (same id).
  EXPECT_FALSE(m.WorkerHeartbeat(1, 9, 1600));
  EXPECT_EQ(m.AddWorker(1, m.MinWorkerClock(), 22, 1600), 1);
  EXPECT_TRUE(m.WorkerHeartbeat(1, 9, 1700));
  // Ids are never reused by new members.
  EXPECT_EQ(m.AddWorker(-1, 0, 23, 1700), 2);
}

// A dead worker is lost unless it reported finishing or said goodbye; a
// new registration of its id starts over.
TEST(MembershipTest, ADeadWorkerIsLostUnlessItFinished) {
  Membership m(/*heartbeat_timeout_ms=*/1000);
  m.AddWorker(-1, 0, 20, 0);
  m.AddWorker(-1, 0, 21, 0);
  m.AddWorker(-1, 0, 22, 0);
  EXPECT_TRUE(m.MarkWorkerFinished(0));
  EXPECT_FALSE(m.MarkWorkerFinished(0));   // Once.
  EXPECT_FALSE(m.MarkWorkerFinished(99));  // Unknown.
  m.RemoveWorker(1);
  // Ended with an error: not lost, but failed.
  EXPECT_TRUE(m.MarkWorkerFinished(1, "Aborted: diverged"));
  EXPECT_EQ(m.FailedWorkers(), std::vector<std::string>{"worker 1: Aborted: diverged"});
  EXPECT_EQ(m.LostWorkers(), 0);         // Worker 0 finished but is still live.
  EXPECT_EQ(m.ExpireWorkers(2000), (std::vector<int>{0, 2}));
  EXPECT_EQ(m.LostWorkers(), 1);  // Worker 2 went silent.
  m.AddWorker(2, 0, 23, 2100);    // Registers again with its id: not lost.
  EXPECT_EQ(m.LostWorkers(), 0);
  EXPECT_FALSE(m.workers().at(2).finished);
}

TEST(MembershipTest, ForgivenSilenceRestartsTheTimeoutOfLiveMembersOnly) {
  Membership m(/*heartbeat_timeout_ms=*/1000);
  m.AddServer(-1, "tcp://a", 10, /*now=*/0);
  m.AddServer(-1, "tcp://b", 11, 0);
  m.AddWorker(-1, 0, 20, 0);
  EXPECT_TRUE(m.MarkServerDead(1));
  // The coordinator stalled from t=100 to t=5000: nobody could be heard.
  m.ForgiveSilence(5000);
  EXPECT_TRUE(m.ExpireServers(5900).empty());
  EXPECT_TRUE(m.ExpireWorkers(5900).empty());
  EXPECT_FALSE(m.servers().at(1).alive);  // The dead stay dead.
  EXPECT_FALSE(m.ServerHeartbeat(1, 5900));
  // Still silent a whole timeout after the stall: dead.
  EXPECT_EQ(m.ExpireServers(6001), std::vector<int>({0}));
  EXPECT_EQ(m.ExpireWorkers(6001), std::vector<int>({0}));
}

TEST(MembershipTest, WorkersNeverHeardFromAreDroppedOnceDeadTheOthersStayListed) {
  Membership m(/*heartbeat_timeout_ms=*/1000);
  const int heard = m.AddWorker(-1, 0, 20, /*now=*/0);
  const int silent = m.AddWorker(-1, 0, 21, 0);
  const int finished = m.AddWorker(-1, 0, 22, 0);
  EXPECT_TRUE(m.WorkerHeartbeat(heard, 1, 500));
  EXPECT_TRUE(m.MarkWorkerFinished(finished));
  EXPECT_EQ(m.size(), 3u);
  EXPECT_EQ(m.DropNeverHeardWorkers(), 0);  // Nobody dead yet.
  EXPECT_EQ(m.ExpireWorkers(1001), std::vector<int>({silent, finished}));
  EXPECT_EQ(m.DropNeverHeardWorkers(), 1);
  EXPECT_EQ(m.workers().count(silent), 0u);
  EXPECT_EQ(m.workers().count(finished), 1u);  // It said goodbye: not a forgery.
  EXPECT_EQ(m.ExpireWorkers(1501), std::vector<int>({heard}));
  EXPECT_EQ(m.DropNeverHeardWorkers(), 0);  // Heard once: lost, and listed as such.
  EXPECT_EQ(m.LostWorkers(), 1);
  EXPECT_EQ(m.size(), 2u);
}

}  // namespace
}  // namespace relaxps
