// Resender on its own (client/internal/resender.h): which parked parts each
// Take* hands back, and when a parked part gives up, all on a FakeClock's
// time line (no sleeps, no transport, no server). The client's data path
// (client/internal/requests.cc) parks a part with its server's endpoint and
// give-up time; here the tests park hand-made parts and read what comes out.
#include "client/internal/resender.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "proto/relaxps.pb.h"
#include "relaxps/clock.h"
#include "tests/test_util.h"

namespace relaxps {
namespace client_internal {
namespace {

constexpr int kRecoveryTimeoutMs = 5000;

// A map naming `endpoints` for servers 0, 1, ... (no tables: only endpoints
// matter to the resender).
ShardMap MapWith(const std::vector<std::string>& endpoints, uint64_t version = 2) {
  wire::ShardMap proto;
  proto.set_version(version);
  for (size_t i = 0; i < endpoints.size(); ++i) {
    wire::ServerInfo* s = proto.add_servers();
    s->set_id(static_cast<int>(i));
    s->set_endpoint(endpoints[i]);
    s->set_alive(!endpoints[i].empty());
  }
  StatusOr<ShardMap> m = ShardMap::FromProto(proto);
  EXPECT_TRUE(m.ok()) << m.status();
  return std::move(*m);
}

class ResenderTest : public ::testing::Test {
 protected:
  // What the `done` of each part was called with, by the part's tag.
  struct Outcome {
    uint64_t tag;
    Status status;
  };

  // A part for `server`, failed on `endpoint`; its request carries `tag` as
  // request id, its `done` records the outcome under that tag.
  Resender::Parked Part(uint64_t tag, int server, const std::string& endpoint,
                        bool until_restart, int64_t give_up_ms = 0) {
    Resender::Parked p;
    p.server = server;
    p.endpoint = endpoint;
    p.make = [tag] {
      Message m;
      m.header.set_request_id(tag);
      return m;
    };
    p.done = [this, tag](const Status& st, Message&&) { outcomes_.push_back({tag, st}); };
    p.give_up_ms = resender_.GiveUpTime(give_up_ms);
    p.error = UnavailableError("server " + std::to_string(server) + " closed the connection");
    p.until_restart = until_restart;
    return p;
  }

  // The tags of `parts` (through their `make`), in order.
  static std::vector<uint64_t> Tags(const std::vector<Resender::Parked>& parts) {
    std::vector<uint64_t> tags;
    for (const Resender::Parked& p : parts) tags.push_back(p.make().header.request_id());
    return tags;
  }

  // How many parts are still parked (takes them all: call last).
  size_t DrainCount() { return resender_.TakeExpired(/*all=*/true).size(); }

  FakeClock clock_;
  Resender resender_{&clock_, kRecoveryTimeoutMs};
  std::vector<Outcome> outcomes_;
};

TEST_F(ResenderTest, ServerLossIsUnavailableOrDeadlineExceededOnly) {
  EXPECT_TRUE(Resender::IsServerLoss(UnavailableError("closed")));
  EXPECT_TRUE(Resender::IsServerLoss(DeadlineExceededError("no answer")));
  EXPECT_FALSE(Resender::IsServerLoss(Status::OK()));
  EXPECT_FALSE(Resender::IsServerLoss(AbortedError("job failed")));
  EXPECT_FALSE(Resender::IsServerLoss(InvalidArgumentError("bad table")));
  EXPECT_FALSE(Resender::IsServerLoss(NotFoundError("no such table")));
}

TEST_F(ResenderTest, GiveUpTimeIsFirstFailurePlusRecoveryTimeoutAndThenKept) {
  const int64_t t0 = clock_.NowMs();
  EXPECT_EQ(resender_.NowMs(), t0);
  EXPECT_EQ(resender_.GiveUpTime(0), t0 + kRecoveryTimeoutMs);
  clock_.AdvanceMs(1234);
  // A part failing for the first time now gets a later give-up time...
  EXPECT_EQ(resender_.GiveUpTime(0), t0 + 1234 + kRecoveryTimeoutMs);
  // ... but a part that failed before keeps its own (resends do not extend it).
  EXPECT_EQ(resender_.GiveUpTime(t0 + kRecoveryTimeoutMs), t0 + kRecoveryTimeoutMs);
}

TEST_F(ResenderTest, ParkStampsTheClockTime) {
  const int64_t t0 = clock_.NowMs();
  resender_.Park(Part(1, 0, "tcp://a:1", /*until_restart=*/false));
  clock_.AdvanceMs(70);
  resender_.Park(Part(2, 0, "tcp://a:1", /*until_restart=*/false));
  std::vector<Resender::Parked> taken = resender_.TakeExpired(/*all=*/true);
  ASSERT_EQ(taken.size(), 2u);
  EXPECT_EQ(taken[0].parked_ms, t0);
  EXPECT_EQ(taken[1].parked_ms, t0 + 70);
}

// Park() says which part opens an outage (the client emits one
// client_request_parked event for it): the first for a server at an
// endpoint, not the parts after it nor a failed resend, again once the
// server failed at a new endpoint (it restarted and was lost again).
TEST_F(ResenderTest, ParkReportsTheFirstPartOfEachServerAndEndpoint) {
  EXPECT_TRUE(resender_.Park(Part(1, 0, "tcp://s0:1", /*until_restart=*/true)));
  EXPECT_FALSE(resender_.Park(Part(2, 0, "tcp://s0:1", /*until_restart=*/true)));
  EXPECT_TRUE(resender_.Park(Part(3, 1, "tcp://s1:1", /*until_restart=*/false)));
  // Taken and resent to the same dead endpoint: parked again, silently.
  ASSERT_EQ(resender_.TakeParkedBefore(clock_.NowMs()).size(), 1u);
  EXPECT_FALSE(resender_.Park(Part(3, 1, "tcp://s1:1", /*until_restart=*/false)));
  // Server 0 restarted at a new endpoint and was lost there too.
  EXPECT_TRUE(resender_.Park(Part(4, 0, "tcp://s0:2", /*until_restart=*/true)));
  EXPECT_EQ(DrainCount(), 4u);
}

// FirstAckAfterPark: once per announced outage (the first acknowledged push
// after the server came back), never for a server that was not parked for.
TEST_F(ResenderTest, FirstAckAfterParkIsOncePerOutage) {
  EXPECT_FALSE(resender_.FirstAckAfterPark(0));
  ASSERT_TRUE(resender_.Park(Part(1, 0, "tcp://s0:1", /*until_restart=*/true)));
  EXPECT_TRUE(resender_.FirstAckAfterPark(0));
  EXPECT_FALSE(resender_.FirstAckAfterPark(0));
  EXPECT_FALSE(resender_.FirstAckAfterPark(1));
  // Lost again at its new endpoint: a new outage, a new first ack.
  ASSERT_TRUE(resender_.Park(Part(2, 0, "tcp://s0:2", /*until_restart=*/true)));
  EXPECT_TRUE(resender_.FirstAckAfterPark(0));
  EXPECT_EQ(DrainCount(), 2u);
}

TEST_F(ResenderTest, RestartParkedPartIsTakenOnlyByANewNonEmptyEndpointOfItsServer) {
  resender_.Park(Part(1, 0, "tcp://s0:1", /*until_restart=*/true));
  resender_.Park(Part(2, 1, "tcp://s1:1", /*until_restart=*/true));
  resender_.Park(Part(3, 2, "tcp://s2:1", /*until_restart=*/true));

  // Same endpoints everywhere: nothing restarted.
  EXPECT_TRUE(resender_.TakeRestarted(MapWith({"tcp://s0:1", "tcp://s1:1", "tcp://s2:1"})).empty());
  // Server 1 dead without an endpoint yet, server 2 beyond the map's servers:
  // neither has restarted.
  EXPECT_TRUE(resender_.TakeRestarted(MapWith({"tcp://s0:1", ""})).empty());

  // Server 1 back at a new endpoint: only its part comes out, still able to
  // build its request and report its outcome.
  std::vector<Resender::Parked> taken =
      resender_.TakeRestarted(MapWith({"tcp://s0:1", "tcp://s1:2", "tcp://s2:1"}));
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].server, 1);
  EXPECT_EQ(taken[0].endpoint, "tcp://s1:1");
  EXPECT_EQ(Tags(taken), std::vector<uint64_t>({2}));
  taken[0].done(Status::OK(), Message());
  ASSERT_EQ(outcomes_.size(), 1u);
  EXPECT_EQ(outcomes_[0].tag, 2u);

  // The same map again takes nothing more; servers 0 and 2 both restart.
  EXPECT_TRUE(resender_.TakeRestarted(MapWith({"tcp://s0:1", "tcp://s1:2", "tcp://s2:1"})).empty());
  taken = resender_.TakeRestarted(MapWith({"tcp://s0:9", "tcp://s1:2", "tcp://s2:9"}));
  EXPECT_EQ(Tags(taken), std::vector<uint64_t>({1, 3}));
  EXPECT_EQ(DrainCount(), 0u);
}

TEST_F(ResenderTest, RerouteParkedPartsAreTakenByEveryMapInParkingOrder) {
  resender_.Park(Part(1, 0, "tcp://s0:1", /*until_restart=*/false));
  resender_.Park(Part(2, 1, "tcp://s1:1", /*until_restart=*/true));
  resender_.Park(Part(3, 1, "tcp://s1:1", /*until_restart=*/false));
  resender_.Park(Part(4, 0, "tcp://s0:1", /*until_restart=*/false));

  // A map that changes no endpoint still hands back the parts waiting for a
  // new head (a new map may name one), not the one waiting for a restart.
  std::vector<Resender::Parked> taken =
      resender_.TakeRestarted(MapWith({"tcp://s0:1", "tcp://s1:1"}));
  EXPECT_EQ(Tags(taken), std::vector<uint64_t>({1, 3, 4}));
  for (const Resender::Parked& p : taken) EXPECT_FALSE(p.until_restart);
  std::vector<Resender::Parked> left = resender_.TakeExpired(/*all=*/true);
  EXPECT_EQ(Tags(left), std::vector<uint64_t>({2}));
}

TEST_F(ResenderTest, TakeParkedBeforeTakesRerouteParkedPartsUpToThatTime) {
  const int64_t t0 = clock_.NowMs();
  resender_.Park(Part(1, 0, "tcp://s0:1", /*until_restart=*/false));  // t0
  resender_.Park(Part(2, 0, "tcp://s0:1", /*until_restart=*/true));   // t0, waits for a restart
  clock_.AdvanceMs(100);
  resender_.Park(Part(3, 0, "tcp://s0:1", /*until_restart=*/false));  // t0 + 100
  clock_.AdvanceMs(100);
  resender_.Park(Part(4, 0, "tcp://s0:1", /*until_restart=*/false));  // t0 + 200

  EXPECT_TRUE(resender_.TakeParkedBefore(t0 - 1).empty());
  // "At or before": the boundary counts.
  EXPECT_EQ(Tags(resender_.TakeParkedBefore(t0)), std::vector<uint64_t>({1}));
  EXPECT_TRUE(resender_.TakeParkedBefore(t0 + 99).empty());
  EXPECT_EQ(Tags(resender_.TakeParkedBefore(t0 + 150)), std::vector<uint64_t>({3}));
  // A part waiting for its server's restart is never taken by time alone.
  EXPECT_EQ(Tags(resender_.TakeParkedBefore(t0 + 1000000)), std::vector<uint64_t>({4}));
  EXPECT_EQ(Tags(resender_.TakeExpired(/*all=*/true)), std::vector<uint64_t>({2}));
}

TEST_F(ResenderTest, TakeExpiredFollowsTheFakeClock) {
  const int64_t t0 = clock_.NowMs();
  resender_.Park(Part(1, 0, "tcp://s0:1", /*until_restart=*/true));  // gives up at t0 + 5000
  clock_.AdvanceMs(2000);
  resender_.Park(Part(2, 1, "tcp://s1:1", /*until_restart=*/false));  // at t0 + 7000
  // A part that failed before (a resend) keeps its first give-up time.
  resender_.Park(Part(3, 1, "tcp://s1:1", /*until_restart=*/true, t0 + 3000));

  EXPECT_TRUE(resender_.TakeExpired(false).empty());
  clock_.AdvanceMs(999);  // t0 + 2999
  EXPECT_TRUE(resender_.TakeExpired(false).empty());
  clock_.AdvanceMs(1);  // t0 + 3000: due exactly at its give-up time.
  EXPECT_EQ(Tags(resender_.TakeExpired(false)), std::vector<uint64_t>({3}));
  clock_.AdvanceMs(1999);  // t0 + 4999
  EXPECT_TRUE(resender_.TakeExpired(false).empty());
  clock_.AdvanceMs(1);  // t0 + 5000
  EXPECT_EQ(Tags(resender_.TakeExpired(false)), std::vector<uint64_t>({1}));
  clock_.AdvanceMs(1999);  // t0 + 6999
  EXPECT_TRUE(resender_.TakeExpired(false).empty());
  clock_.AdvanceMs(1);
  EXPECT_EQ(Tags(resender_.TakeExpired(false)), std::vector<uint64_t>({2}));
  EXPECT_TRUE(resender_.TakeExpired(true).empty());
}

TEST_F(ResenderTest, TakeExpiredAllTakesPartsNotDueYet) {
  resender_.Park(Part(1, 0, "tcp://s0:1", true));
  resender_.Park(Part(2, 1, "tcp://s1:1", false));
  EXPECT_TRUE(resender_.TakeExpired(false).empty());
  EXPECT_EQ(Tags(resender_.TakeExpired(true)), std::vector<uint64_t>({1, 2}));
  EXPECT_TRUE(resender_.TakeExpired(true).empty());
}

TEST_F(ResenderTest, FailExpiredFailsDuePartsWithTheirOwnErrorNamingTheWait) {
  resender_.Park(Part(1, 3, "tcp://s3:1", true));  // Due at t0 + 5000.
  clock_.AdvanceMs(1000);
  resender_.Park(Part(2, 4, "tcp://s4:1", true));  // Due at t0 + 6000.

  clock_.AdvanceMs(3999);  // t0 + 4999: nothing due.
  resender_.FailExpired(Status::OK());
  EXPECT_TRUE(outcomes_.empty());

  clock_.AdvanceMs(1);  // t0 + 5000: part 1 only.
  resender_.FailExpired(Status::OK());
  ASSERT_EQ(outcomes_.size(), 1u);
  EXPECT_EQ(outcomes_[0].tag, 1u);
  EXPECT_EQ(outcomes_[0].status.code(), StatusCode::kUnavailable);
  const std::string& msg = outcomes_[0].status.message();
  EXPECT_NE(msg.find("server 3 did not come back within 5000 ms"), std::string::npos) << msg;
  EXPECT_NE(msg.find("server 3 closed the connection"), std::string::npos) << msg;

  // Part 2 is still parked and comes back when its server restarts.
  EXPECT_EQ(Tags(resender_.TakeRestarted(MapWith({"", "", "", "tcp://s3:1", "tcp://s4:2"}))),
            std::vector<uint64_t>({2}));
  EXPECT_EQ(outcomes_.size(), 1u);
}

TEST_F(ResenderTest, FailExpiredWithAnErrorFailsEveryPartWithThatError) {
  resender_.Park(Part(1, 0, "tcp://s0:1", true));
  resender_.Park(Part(2, 1, "tcp://s1:1", false));
  // Nothing is due, but the job failed (or the client shuts down): all go.
  resender_.FailExpired(AbortedError("job failed: server 0 lost"));
  ASSERT_EQ(outcomes_.size(), 2u);
  EXPECT_EQ(outcomes_[0].tag, 1u);
  EXPECT_EQ(outcomes_[1].tag, 2u);
  for (const Outcome& o : outcomes_) {
    EXPECT_EQ(o.status.code(), StatusCode::kAborted);
    EXPECT_EQ(o.status.message(), "job failed: server 0 lost");
  }
  EXPECT_EQ(DrainCount(), 0u);
}

TEST_F(ResenderTest, PartsParkedFromManyThreadsAreEachTakenOnce) {
  constexpr int kThreads = 4, kPerThread = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([this, t] {
      for (int i = 0; i < kPerThread; ++i) {
        // Even: waits for server 0's restart; odd: for the next map.
        const uint64_t tag = static_cast<uint64_t>(t * kPerThread + i);
        resender_.Park(Part(tag, 0, "tcp://s0:1", /*until_restart=*/tag % 2 == 0));
      }
    });
  }
  std::atomic<size_t> taken_concurrently{0};
  std::thread taker([&] {
    for (int i = 0; i < 50; ++i) {
      taken_concurrently += resender_.TakeRestarted(MapWith({"tcp://s0:1"})).size();
    }
  });
  for (std::thread& t : threads) t.join();
  taker.join();
  const size_t rerouted = taken_concurrently + resender_.TakeRestarted(MapWith({"tcp://s0:1"})).size();
  EXPECT_EQ(rerouted, static_cast<size_t>(kThreads * kPerThread / 2));
  std::vector<Resender::Parked> restarted = resender_.TakeRestarted(MapWith({"tcp://s0:2"}));
  EXPECT_EQ(restarted.size(), static_cast<size_t>(kThreads * kPerThread / 2));
  for (const Resender::Parked& p : restarted) EXPECT_TRUE(p.until_restart);
  EXPECT_EQ(DrainCount(), 0u);
}

}  // namespace
}  // namespace client_internal
}  // namespace relaxps
