// PartSender on its own, over a FakeTransport (answers inline) and a
// FakeClock (no sleeps): which acknowledgements count as updates, a part
// parked until its server restarts and resent there, a part re-routed at
// once when the map changed meanwhile or parked until the next map, a
// resend given up at its deadline, a "moved" reply re-routed a bounded
// number of times, and under chain routing the failover reported only for a
// resent push, a WrongShard reply's map installed and a late reply of a dead
// server refused.
#include "client/internal/part_sender.h"

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "tests/client/fake_transport.h"
#include "tests/client/test_maps.h"
#include "tests/test_util.h"

namespace relaxps {
namespace client_internal {
namespace {

constexpr int kRecoveryTimeoutMs = 10000;
const std::string kA = "tcp://127.0.0.1:1001";
const std::string kB = "tcp://127.0.0.1:1002";
const std::string kA2 = "tcp://127.0.0.1:2001";

// A map of `version` and `epoch` with one server per endpoint and a dense
// table "w" of two chunks over them (server i holds chunk i).
wire::ShardMap Map(uint64_t version, const std::vector<std::string>& endpoints,
                   uint64_t epoch = 1) {
  wire::ShardMap m = test::ServersMap(version, endpoints, epoch);
  test::AddDenseTable(&m, "w", 2);
  return m;
}

// A role whose answers the test sets.
class TestRole : public recovery::ClientRecovery {
 public:
  const recovery::ClientFeatures& features() const override { return features_; }
  recovery::PartAction OnServerFailed(const recovery::FailedPart& part) const override {
    failed.push_back(part.error);
    return on_failed;
  }
  recovery::ClientFeatures features_;
  recovery::PartAction on_failed = recovery::PartAction::kFail;
  mutable std::vector<Status> failed;
};

class PartSenderTest : public ::testing::Test, public PartSender::Host {
 protected:
  void SetUp() override { Make(/*chain_routing=*/false); }

  void Make(bool chain_routing) {
    role_.features_.chain_routing = chain_routing;
    ASSERT_OK_AND_ASSIGN(consistency_, NewConsistencyPolicy(ConsistencyOptions()));
    ASSERT_OK(router_.Install(Map(1, {kA, kB})));
    EventLogOptions eo;
    eo.clock = &clock_;
    eo.on_line = [this](const std::string& line) { events_.push_back(line); };
    ASSERT_OK_AND_ASSIGN(events_log_, EventLog::Open(eo));
    PartSender::Options o;
    o.worker_id = 7;
    o.request_timeout_ms = 5000;
    o.features = role_.features_;
    o.events = events_log_.get();
    sender_ = std::make_unique<PartSender>(o, &transport_, &router_, &resender_, &gate_, &role_,
                                           consistency_.get(), this, &clock_);
  }

  // PartSender::Host.
  Status JobError() const override { return job_error_; }
  Status SetMap(const wire::ShardMap& proto) override {
    maps_set_.push_back(proto.version());
    return router_.Install(proto).status();
  }
  bool FirstFailoverAckIn(uint64_t epoch) override {
    failover_epochs_.push_back(epoch);
    return true;
  }

  // A part of `type` for table "w" at `key_begin`, with these flags.
  static std::function<Message()> Part(wire::MsgType type, uint64_t key_begin = 0,
                                       std::function<void(wire::Header*)> flags = nullptr) {
    return [type, key_begin, flags] {
      Message m;
      m.header.set_type(type);
      m.header.set_table("w");
      m.header.set_key_begin(key_begin);
      m.header.set_key_count(1);
      if (flags) flags(&m.header);
      return m;
    };
  }
  // Sends a part to `server` and returns what its `done` got (nullopt: not
  // completed yet, e.g. parked).
  std::shared_ptr<std::optional<Status>> Send(int server, std::function<Message()> make,
                                              int64_t give_up_ms = 0) {
    auto got = std::make_shared<std::optional<Status>>();
    sender_->Send(server, std::move(make),
                  [got](const Status& s, Message&&) { *got = s; }, give_up_ms);
    return got;
  }
  int EventsOf(const std::string& kind) const {
    int n = 0;
    for (const std::string& e : events_) {
      if (e.find("\"kind\":\"" + kind + "\"") != std::string::npos) ++n;
    }
    return n;
  }

  FakeClock clock_;
  FakeTransport transport_;
  Router router_{&transport_};
  Resender resender_{&clock_, kRecoveryTimeoutMs};
  ServerGate gate_{false};
  TestRole role_;
  std::unique_ptr<ConsistencyPolicy> consistency_;
  std::shared_ptr<EventLog> events_log_;
  std::vector<std::string> events_;
  std::unique_ptr<PartSender> sender_;
  Status job_error_;
  std::vector<uint64_t> maps_set_;
  std::vector<uint64_t> failover_epochs_;
};

TEST_F(PartSenderTest, OnlyAcknowledgedPushesCountAsUpdates) {
  auto expect_counted = [&](std::function<Message()> make, uint64_t after) {
    auto got = Send(0, std::move(make));
    ASSERT_TRUE(got->has_value());
    EXPECT_OK(**got);
    EXPECT_EQ(sender_->acked_updates(), after);
  };
  expect_counted(Part(wire::PUSH), 1);
  expect_counted(Part(wire::PUSH_PULL), 2);
  expect_counted(Part(wire::PUSH_ROWS), 3);
  expect_counted(Part(wire::PULL), 3);
  expect_counted(Part(wire::PULL_ROWS), 3);
  expect_counted(Part(wire::CLOCK), 3);
  // A split push counts once (its later parts do not), a replay or a raw
  // delta not at all.
  expect_counted(Part(wire::PUSH, 0, [](wire::Header* h) { h->set_push_continues(true); }), 3);
  expect_counted(Part(wire::PUSH, 0, [](wire::Header* h) { h->set_replayed(true); }), 3);
  expect_counted(Part(wire::PUSH, 0, [](wire::Header* h) { h->set_raw_delta(true); }), 3);
  // A push that failed is no update; the role said fail: it fails.
  transport_.SetDown(transport_.HandleOf(kA), true);
  auto got = Send(0, Part(wire::PUSH));
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(sender_->acked_updates(), 3u);
  EXPECT_EQ(role_.failed.size(), 1u);
  // A server without an endpoint fails the part before anything is sent.
  ASSERT_OK(router_.Install(Map(2, {kA, ""})));
  got = Send(1, Part(wire::PUSH));
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->code(), StatusCode::kUnavailable);
  // Once the job failed, a lost server's part fails without asking the role.
  job_error_ = AbortedError("the job failed");
  got = Send(0, Part(wire::PUSH));
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ(role_.failed.size(), 1u);
}

TEST_F(PartSenderTest, APartParkedUntilItsServerRestartsIsResentThere) {
  role_.on_failed = recovery::PartAction::kPark;
  transport_.SetDown(transport_.HandleOf(kA), true);
  auto got = Send(0, Part(wire::PUSH));
  EXPECT_FALSE(got->has_value());  // Parked.
  EXPECT_EQ(EventsOf("client_request_parked"), 1);
  EXPECT_NE(events_.back().find("\"until\":\"restart\""), std::string::npos) << events_.back();
  EXPECT_EQ(sender_->acked_updates(), 0u);

  // A new map without a new endpoint for it: still parked.
  ASSERT_OK(router_.Install(Map(2, {kA, kB})));
  EXPECT_TRUE(resender_.TakeRestarted(*router_.map()).empty());
  // Restarted at another endpoint: the client resends what was parked.
  ASSERT_OK(router_.Install(Map(3, {kA2, kB})));
  std::vector<Resender::Parked> restarted = resender_.TakeRestarted(*router_.map());
  ASSERT_EQ(restarted.size(), 1u);
  Resender::Parked& p = restarted[0];
  EXPECT_EQ(p.give_up_ms, clock_.NowMs() + kRecoveryTimeoutMs);
  sender_->Send(p.server, std::move(p.make), std::move(p.done), p.give_up_ms, p.past_gate);
  ASSERT_TRUE(got->has_value());
  EXPECT_OK(**got);
  EXPECT_EQ(transport_.calls().back().first, transport_.HandleOf(kA2));
  EXPECT_EQ(sender_->acked_updates(), 1u);
  // The outage is over for this worker: announced once.
  EXPECT_EQ(EventsOf("client_failover_acked"), 1);
  Send(0, Part(wire::PUSH), clock_.NowMs() + 1000);
  EXPECT_EQ(EventsOf("client_failover_acked"), 1);
  EXPECT_TRUE(failover_epochs_.empty());  // Not chain routing.
}

TEST_F(PartSenderTest, AResendIsGivenUpAtItsDeadline) {
  role_.on_failed = recovery::PartAction::kPark;
  transport_.SetDown(transport_.HandleOf(kA), true);
  const int64_t give_up = clock_.NowMs() + 1000;
  // Before the deadline: parked again, keeping its deadline.
  auto got = Send(0, Part(wire::PUSH), give_up);
  EXPECT_FALSE(got->has_value());
  std::vector<Resender::Parked> expired = resender_.TakeExpired(/*all=*/true);
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].give_up_ms, give_up);
  // At it: failed with the server's error, nothing parked.
  clock_.AdvanceMs(1000);
  got = Send(0, Part(wire::PUSH), give_up);
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->code(), StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(resender_.TakeExpired(/*all=*/true).empty());
  EXPECT_EQ(EventsOf("client_request_parked"), 1);
}

TEST_F(PartSenderTest, AReroutedPartGoesAgainAtOnceIfTheMapChangedElseWaitsForTheNext) {
  role_.on_failed = recovery::PartAction::kReroute;
  // The map changes (a new epoch) while the part is out, and it fails.
  int calls = 0;
  transport_.SetResponder([&](int, const Message&) {
    if (++calls > 1) return std::optional<std::pair<Status, wire::Header>>();
    EXPECT_OK(router_.Install(Map(2, {kA, kB}, /*epoch=*/2)));
    return std::make_optional(std::make_pair(UnavailableError("closed"), wire::Header()));
  });
  auto got = Send(0, Part(wire::PUSH));
  ASSERT_TRUE(got->has_value());
  EXPECT_OK(**got);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(EventsOf("client_request_parked"), 0);
  EXPECT_EQ(sender_->acked_updates(), 1u);

  // No change since it was sent: parked until a new map (or the role's
  // retry), then sent again with the same deadline.
  transport_.SetResponder(nullptr);
  transport_.SetDown(transport_.HandleOf(kA), true);
  got = Send(0, Part(wire::PUSH));
  EXPECT_FALSE(got->has_value());
  ASSERT_EQ(EventsOf("client_request_parked"), 1);
  EXPECT_NE(events_.back().find("\"until\":\"new_map\""), std::string::npos) << events_.back();
  std::vector<Resender::Parked> parked = resender_.TakeParkedBefore(clock_.NowMs() + 1);
  ASSERT_EQ(parked.size(), 1u);
  transport_.SetDown(transport_.HandleOf(kA), false);
  sender_->Send(parked[0].server, std::move(parked[0].make), std::move(parked[0].done),
                parked[0].give_up_ms, parked[0].past_gate);
  ASSERT_TRUE(got->has_value());
  EXPECT_OK(**got);
}

TEST_F(PartSenderTest, AMovedReplyIsReroutedWithANewerMapABoundedNumberOfTimes) {
  Message moved;
  *moved.header.mutable_shard_map() = Map(2, {kB, kA});
  const Status wrong = WrongShardError("not here");
  EXPECT_TRUE(sender_->Rerouted(wrong, moved, 1, 0));
  EXPECT_EQ(router_.map()->version(), 2u);
  // A map no newer than the part's: nothing to route with.
  EXPECT_FALSE(sender_->Rerouted(wrong, moved, 2, 0));
  // Out of reroutes.
  *moved.header.mutable_shard_map() = Map(3, {kA, kB});
  EXPECT_FALSE(sender_->Rerouted(wrong, moved, 2, PartSender::kMaxReroutes));
  EXPECT_EQ(router_.map()->version(), 2u);
  // Not a routing error.
  EXPECT_FALSE(sender_->Rerouted(UnavailableError("x"), moved, 2, 0));
  EXPECT_FALSE(sender_->NewFailedPart(0, kA, 0, wrong, false, PartSender::kMaxReroutes)
                   .can_reroute);
  EXPECT_TRUE(sender_->NewFailedPart(0, kA, 0, wrong, false, 0).can_reroute);
}

TEST_F(PartSenderTest, UnderChainRoutingOnlyAResentPushReportsTheFailover) {
  Make(/*chain_routing=*/true);
  const int64_t resend = clock_.NowMs() + 1000;
  // A first send, and a resent CLOCK (parked for a tail that died while
  // pushes went on): no failover.
  Send(0, Part(wire::PUSH));
  Send(0, Part(wire::CLOCK), resend);
  EXPECT_TRUE(failover_epochs_.empty());
  // A resent push acknowledged: the failover took effect for this worker.
  auto got = Send(0, Part(wire::PUSH), resend);
  ASSERT_TRUE(got->has_value());
  EXPECT_OK(**got);
  EXPECT_EQ(failover_epochs_, (std::vector<uint64_t>{1}));
  EXPECT_EQ(sender_->acked_updates(), 2u);
  // A data part goes to the holder of its key now, whatever it was sent to.
  Send(0, Part(wire::PUSH, kDenseChunk));
  EXPECT_EQ(transport_.calls().back().first, transport_.HandleOf(kB));
}

TEST_F(PartSenderTest, UnderChainRoutingAWrongShardMapIsInstalledAndADeadServersReplyRefused) {
  Make(/*chain_routing=*/true);
  wire::Header wrong;
  *wrong.mutable_shard_map() = Map(2, {kA, kB}, /*epoch=*/2);
  transport_.SetAnswer(transport_.HandleOf(kA), WrongShardError("not the head"), wrong);
  auto got = Send(0, Part(wire::PUSH));
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->code(), StatusCode::kUnavailable);  // The role said fail.
  EXPECT_NE((*got)->message().find("not the head; re-routing"), std::string::npos) << **got;
  EXPECT_EQ(maps_set_, (std::vector<uint64_t>{2}));
  EXPECT_EQ(sender_->acked_updates(), 0u);

  // A late answer of a server the current map shows dead.
  wire::ShardMap dead = Map(3, {kA, kB}, /*epoch=*/3);
  dead.mutable_servers(1)->set_alive(false);
  ASSERT_OK(router_.Install(dead));
  got = Send(1, [] {
    Message m;
    m.header.set_type(wire::CLOCK);
    return m;
  });
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->code(), StatusCode::kUnavailable);
  EXPECT_NE((*got)->message().find("removed from its chains"), std::string::npos) << **got;
}

// What a part's `done` got, set on any thread (a resent part completes on
// the resends' thread).
struct Outcome {
  void Set(const Status& s) {
    MutexLock l(&mu);
    ++calls;
    status = s;
  }
  // Waits (real time) for the first completion; nullopt if none came.
  std::optional<Status> Wait() {
    const auto give_up = std::chrono::steady_clock::now() + test::Scaled(test::Millis(5000));
    while (std::chrono::steady_clock::now() < give_up) {
      {
        MutexLock l(&mu);
        if (calls > 0) return status;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return std::nullopt;
  }
  int Calls() {
    MutexLock l(&mu);
    return calls;
  }
  Mutex mu;
  int calls = 0;
  Status status;
};

TEST_F(PartSenderTest, APartRefusedForUnreadRepliesIsResentUntilAccepted) {
  std::atomic<int> refusals{3};
  transport_.SetResponder(
      [&](int, const Message&) -> std::optional<std::pair<Status, wire::Header>> {
        if (refusals.fetch_sub(1) > 0) {
          return std::make_pair(ResourceExhaustedError("the peer has not read 4 MiB"),
                                wire::Header());
        }
        return std::nullopt;  // OK.
      });
  auto outcome = std::make_shared<Outcome>();
  sender_->Send(0, Part(wire::PUSH_PULL),
                [outcome](const Status& s, Message&&) { outcome->Set(s); });
  std::optional<Status> got = outcome->Wait();
  ASSERT_TRUE(got.has_value());
  EXPECT_OK(*got);
  EXPECT_EQ(transport_.calls().size(), 4u);  // Three refusals, then accepted.
  EXPECT_EQ(sender_->refused_resends(), 3u);
  EXPECT_EQ(sender_->acked_updates(), 1u);  // Counted once, when accepted.
  EXPECT_TRUE(role_.failed.empty());  // Not a server loss.
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  EXPECT_EQ(outcome->Calls(), 1);
}

TEST_F(PartSenderTest, APartRefusedUntilItsDeadlineFailsWithTheRefusal) {
  // Each refusal takes 2 s of the part's 5 s (request_timeout_ms).
  transport_.SetResponder(
      [&](int, const Message&) -> std::optional<std::pair<Status, wire::Header>> {
        clock_.AdvanceMs(2000);
        return std::make_pair(ResourceExhaustedError("the peer has not read 4 MiB"),
                              wire::Header());
      });
  auto outcome = std::make_shared<Outcome>();
  sender_->Send(0, Part(wire::PULL), [outcome](const Status& s, Message&&) { outcome->Set(s); });
  std::optional<Status> got = outcome->Wait();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->code(), StatusCode::kResourceExhausted) << *got;
  EXPECT_NE(got->message().find("deadline"), std::string::npos) << *got;
  EXPECT_EQ(transport_.calls().size(), 3u);  // At 0, 2 and 4 s; the next would pass 5 s.
  EXPECT_EQ(outcome->Calls(), 1);
}

TEST_F(PartSenderTest, APushPullAnsweredAsAPushPullsLaterAsAPlainPull) {
  // The server applies the push and refuses the pull part (a reply of type
  // PUSH: ServerImpl::RefusePullPart), refuses the PULL once, then answers it.
  std::mutex mu;
  std::vector<std::pair<wire::Header, size_t>> sent;  // Header, frames.
  transport_.SetReplier(
      [&](int, const Message& request) -> std::optional<std::pair<Status, Message>> {
        std::lock_guard<std::mutex> l(mu);
        sent.emplace_back(request.header, request.frames.size());
        Message reply;
        switch (sent.size()) {
          case 1:
            reply.header.set_type(wire::PUSH);
            reply.header.set_snapshot_seq(5);
            reply.header.set_pending(true);
            reply.header.set_chain_seq(9);
            return std::make_pair(Status::OK(), std::move(reply));
          case 2:
            return std::make_pair(ResourceExhaustedError("the peer has not read 4 MiB"),
                                  std::move(reply));
          default:
            reply.header.set_type(wire::PULL);
            reply.header.set_params_clock(3);
            const float param = 2.5f;
            reply.frames.push_back(Frame::Copy(&param, sizeof(param)));
            return std::make_pair(Status::OK(), std::move(reply));
        }
      });
  auto outcome = std::make_shared<Outcome>();
  auto final_reply = std::make_shared<wire::Header>();
  auto frames = std::make_shared<size_t>(0);
  auto push_pull = [] {
    Message m = Part(wire::PUSH_PULL, 0, [](wire::Header* h) {
      h->set_clock(4);
      h->set_push_id(77);
    })();
    const float grad = 1.0f;
    m.frames.push_back(Frame::Copy(&grad, sizeof(grad)));
    return m;
  };
  sender_->Send(0, push_pull,
                [outcome, final_reply, frames](const Status& s, Message&& reply) {
                  *final_reply = reply.header;
                  *frames = reply.frames.size();
                  outcome->Set(s);
                });
  std::optional<Status> got = outcome->Wait();
  ASSERT_TRUE(got.has_value());
  EXPECT_OK(*got);
  std::lock_guard<std::mutex> l(mu);
  ASSERT_EQ(sent.size(), 3u);
  EXPECT_EQ(sent[0].first.type(), wire::PUSH_PULL);
  EXPECT_EQ(sent[0].second, 1u);
  for (size_t i = 1; i < sent.size(); ++i) {
    // The pull part alone: a PULL of the next clock, no gradient, no key.
    EXPECT_EQ(sent[i].first.type(), wire::PULL) << i;
    EXPECT_EQ(sent[i].first.clock(), 5) << i;
    EXPECT_EQ(sent[i].first.push_id(), 0u) << i;
    EXPECT_EQ(sent[i].second, 0u) << i;
  }
  // The parameters, with the push's acknowledgement.
  EXPECT_EQ(*frames, 1u);
  EXPECT_EQ(final_reply->params_clock(), 3);
  EXPECT_EQ(final_reply->snapshot_seq(), 5u);
  EXPECT_TRUE(final_reply->pending());
  EXPECT_EQ(final_reply->chain_seq(), 9u);
  EXPECT_EQ(sender_->acked_updates(), 1u);  // The push, once.
  EXPECT_EQ(sender_->refused_resends(), 2u);
  EXPECT_EQ(outcome->Calls(), 1);
}

TEST_F(PartSenderTest, AMovedPullAfterAnUnkeyedPushFailsInsteadOfPushingAgain) {
  for (const uint64_t push_id : {uint64_t{0}, uint64_t{8}}) {
    int calls = 0;
    transport_.SetReplier(
        [&](int, const Message&) -> std::optional<std::pair<Status, Message>> {
          Message reply;
          if (++calls == 1) {
            reply.header.set_type(wire::PUSH);
            return std::make_pair(Status::OK(), std::move(reply));
          }
          *reply.header.mutable_shard_map() = Map(2, {kB, kA});
          return std::make_pair(WrongShardError("not here"), std::move(reply));
        });
    auto outcome = std::make_shared<Outcome>();
    auto has_map = std::make_shared<bool>(false);
    sender_->Send(0, Part(wire::PUSH_PULL, 0, [push_id](wire::Header* h) { h->set_push_id(push_id); }),
                  [outcome, has_map](const Status& s, Message&& reply) {
                    *has_map = reply.header.has_shard_map();
                    outcome->Set(s);
                  });
    std::optional<Status> got = outcome->Wait();
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->code(), StatusCode::kWrongShard) << *got;
    // Re-routing sends the whole PUSH_PULL again: only a keyed push may go twice.
    EXPECT_EQ(*has_map, push_id != 0) << push_id;
  }
}

TEST_F(PartSenderTest, StopResendsFailsAPartWaitingToBeResent) {
  transport_.SetResponder([&](int, const Message&) -> std::optional<std::pair<Status, wire::Header>> {
    return std::make_pair(ResourceExhaustedError("the peer has not read 4 MiB"), wire::Header());
  });
  auto outcome = std::make_shared<Outcome>();
  sender_->Send(0, Part(wire::PULL_ROWS),
                [outcome](const Status& s, Message&&) { outcome->Set(s); });
  EXPECT_EQ(outcome->Calls(), 0);  // Waiting to be resent.
  sender_->StopResends();
  EXPECT_EQ(outcome->Calls(), 1);
  std::optional<Status> got = outcome->Wait();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->code(), StatusCode::kAborted) << *got;
}

}  // namespace
}  // namespace client_internal
}  // namespace relaxps
