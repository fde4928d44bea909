// Leadership on its own: claiming the store (term, resumed records), writing
// only changed records, a failed write left to the caller, stepping down
// once (rejoining only under coordination), and the ZooKeeper session
// events (suspend while leading, resume within the session, expiry). A
// recording store stands in for RocksDB and ZooKeeper; no clock is involved
// (Leadership keeps no time), no sleeps.
#include "coordinator/leadership.h"

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace relaxps {
namespace {

// A store whose claims and writes the test sees and whose writes it can fail.
struct StoreLog {
  uint64_t term = 0;
  StateRecords records;
  std::vector<StateRecords> writes;
  Status fail_writes;  // Returned by Write() when not OK.
};

class RecordingStore final : public CoordinatorStateStore {
 public:
  explicit RecordingStore(StoreLog* log) : log_(log) {}
  std::string Name() const override { return "recording"; }
  StatusOr<ClaimedState> Claim() override {
    return ClaimedState{++log_->term, log_->records};
  }
  Status Write(const StateRecords& records) override {
    if (!log_->fail_writes.ok()) return log_->fail_writes;
    log_->writes.push_back(records);
    for (const auto& [name, value] : records) log_->records[name] = value;
    return Status::OK();
  }

 private:
  StoreLog* const log_;
};

TEST(LeadershipTest, StandsByUntilItClaimsAndLeads) {
  StoreLog log;
  Leadership l;
  l.OpenWith(std::make_unique<RecordingStore>(&log), /*coordinated=*/false);
  EXPECT_FALSE(l.leading());
  EXPECT_EQ(l.term(), 0u);
  EXPECT_EQ(l.store_name(), "recording");
  EXPECT_EQ(l.leader_endpoint(), "");  // No election without coordination.
  EXPECT_TRUE(l.candidates().empty());

  StatusOr<StateRecords> records = l.Claim();
  ASSERT_TRUE(records.ok()) << records.status();
  EXPECT_TRUE(records->empty());  // A new job.
  EXPECT_EQ(l.term(), 1u);
  EXPECT_FALSE(l.leading());  // Not before the caller restored and Lead()s.
  l.Lead(*records);
  EXPECT_TRUE(l.leading());
  EXPECT_FALSE(l.suspended());
}

TEST(LeadershipTest, ResumesTheStoredRecordsAndWritesOnlyWhatChanged) {
  StoreLog log;
  log.term = 4;  // Claimed four times before.
  log.records = {{"job", "j1"}, {"map", "m1"}};
  Leadership l;
  l.OpenWith(std::make_unique<RecordingStore>(&log), /*coordinated=*/true);
  StatusOr<StateRecords> records = l.Claim();
  ASSERT_TRUE(records.ok());
  EXPECT_EQ(l.term(), 5u);
  EXPECT_EQ(*records, (StateRecords{{"job", "j1"}, {"map", "m1"}}));
  l.Lead(*records);

  // The same records: nothing to write.
  ASSERT_TRUE(l.Write({{"job", "j1"}, {"map", "m1"}}).ok());
  EXPECT_TRUE(log.writes.empty());
  // One changed, one new: only those two, in one write.
  ASSERT_TRUE(l.Write({{"job", "j1"}, {"map", "m2"}, {"members", "w"}}).ok());
  ASSERT_EQ(log.writes.size(), 1u);
  EXPECT_EQ(log.writes[0], (StateRecords{{"map", "m2"}, {"members", "w"}}));
  // Written records count as written: the same snapshot again writes nothing.
  ASSERT_TRUE(l.Write({{"job", "j1"}, {"map", "m2"}, {"members", "w"}}).ok());
  EXPECT_EQ(log.writes.size(), 1u);
}

TEST(LeadershipTest, AFailedWriteIsTheCallersAndIsWrittenAgainLater) {
  StoreLog log;
  Leadership l;
  l.OpenWith(std::make_unique<RecordingStore>(&log), /*coordinated=*/true);
  StatusOr<StateRecords> records = l.Claim();
  ASSERT_TRUE(records.ok());
  l.Lead(*records);
  log.fail_writes = AbortedError("another coordinator claimed the store");
  Status s = l.Write({{"map", "m1"}});
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s;
  // Leadership leaves the decision to the caller (it steps down)...
  EXPECT_TRUE(l.leading());
  // ...and does not count the record as written.
  log.fail_writes = Status::OK();
  ASSERT_TRUE(l.Write({{"map", "m1"}}).ok());
  ASSERT_EQ(log.writes.size(), 1u);
  EXPECT_EQ(log.writes[0], (StateRecords{{"map", "m1"}}));
}

TEST(LeadershipTest, StepsDownOnceAndRejoinsOnlyUnderCoordination) {
  for (const bool coordinated : {false, true}) {
    SCOPED_TRACE(coordinated ? "coordinated" : "local store");
    StoreLog log;
    Leadership l;
    l.OpenWith(std::make_unique<RecordingStore>(&log), coordinated);
    StatusOr<StateRecords> records = l.Claim();
    ASSERT_TRUE(records.ok());
    l.Lead(*records);
    EXPECT_TRUE(l.StepDown(/*rejoin=*/true));
    EXPECT_FALSE(l.leading());
    EXPECT_TRUE(l.stepped_down());
    EXPECT_EQ(l.rejoins(), coordinated);
    // The first reason stands.
    EXPECT_FALSE(l.StepDown(/*rejoin=*/false));
    EXPECT_EQ(l.rejoins(), coordinated);
    EXPECT_EQ(l.term(), 1u);  // Still names the term it led.
  }
}

TEST(LeadershipTest, ADisconnectionSuspendsALeaderUntilItReconnects) {
  StoreLog log;
  Leadership l;
  l.OpenWith(std::make_unique<RecordingStore>(&log), /*coordinated=*/true);
  // A standby's drop changes nothing: it serves nothing anyway.
  EXPECT_EQ(l.OnZkEvent(ZkEvent::kDisconnected), Leadership::ZkChange::kNone);
  EXPECT_EQ(l.OnZkEvent(ZkEvent::kReconnected), Leadership::ZkChange::kNone);
  EXPECT_FALSE(l.leading());

  StatusOr<StateRecords> records = l.Claim();
  ASSERT_TRUE(records.ok());
  l.Lead(*records);
  EXPECT_EQ(l.OnZkEvent(ZkEvent::kDisconnected), Leadership::ZkChange::kSuspended);
  EXPECT_FALSE(l.leading());
  EXPECT_TRUE(l.suspended());
  // A second drop while suspended is not a second suspension.
  EXPECT_EQ(l.OnZkEvent(ZkEvent::kDisconnected), Leadership::ZkChange::kNone);
  EXPECT_EQ(l.OnZkEvent(ZkEvent::kReconnected), Leadership::ZkChange::kResumed);
  EXPECT_TRUE(l.leading());
  EXPECT_FALSE(l.suspended());
  EXPECT_EQ(l.term(), 1u);  // The same term: no takeover.
}

TEST(LeadershipTest, ExpiryIsTheCallersStepDownAndNothingRevivesIt) {
  StoreLog log;
  Leadership l;
  l.OpenWith(std::make_unique<RecordingStore>(&log), /*coordinated=*/true);
  StatusOr<StateRecords> records = l.Claim();
  ASSERT_TRUE(records.ok());
  l.Lead(*records);
  EXPECT_EQ(l.OnZkEvent(ZkEvent::kDisconnected), Leadership::ZkChange::kSuspended);
  EXPECT_EQ(l.OnZkEvent(ZkEvent::kExpired), Leadership::ZkChange::kExpired);
  ASSERT_TRUE(l.StepDown(/*rejoin=*/true));
  EXPECT_FALSE(l.suspended());
  // A late reconnection of the old session does not make it lead again.
  EXPECT_EQ(l.OnZkEvent(ZkEvent::kReconnected), Leadership::ZkChange::kNone);
  EXPECT_FALSE(l.leading());
  EXPECT_TRUE(l.rejoins());
}

}  // namespace
}  // namespace relaxps
