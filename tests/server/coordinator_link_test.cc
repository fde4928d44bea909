// CoordinatorLink on its own, over a FakeTransport and a FakeClock (no
// sockets, no sleeps): registration retried while the coordinator is
// unreachable and given up at its timeout, what heartbeats report and how
// their replies are handed on, failures up to the coordinator's timeout, a
// failed job, a new leader (a standby's redirect, a newer term; a deposed
// coordinator's term ignored), and a fence: declared dead, the rejoin
// registers again with the same id, or the server counts as fenced.
#include "server/internal/coordinator_link.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "tests/client/fake_transport.h"
#include "tests/test_util.h"

namespace relaxps {
namespace server_internal {
namespace {

using client_internal::FakeTransport;

constexpr char kA[] = "tcp://127.0.0.1:1001";
constexpr char kB[] = "tcp://127.0.0.1:1002";
constexpr int kTimeoutMs = 3000;
const std::string kToken(16, 'a');
const std::string kNewToken(16, 'b');

// What the link asked of its server; the loop thread is the test's.
class TestHost : public CoordinatorLink::Host {
 public:
  bool awaiting_state() const override { return awaiting; }
  void PostToLoop(std::function<void()> fn) override { fn(); }
  void ExitLater(const Status& why) override { exits.push_back(why); }
  void StopNow() override { ++stops; }
  void OnDeclaredDead(const std::string& why) override {
    declared_dead.push_back(why);
    if (rejoin) link->Rejoin();
  }
  void OnHeartbeatReply(const wire::HeartbeatReply& reply,
                        const wire::ServerTokens& t) override {
    replies.push_back(reply);
    tokens.push_back(t);
  }
  void OnRejoined(const wire::RegisterReply& reply, const wire::ServerTokens& t) override {
    rejoins.push_back(reply);
    tokens.push_back(t);
  }

  CoordinatorLink* link = nullptr;
  bool awaiting = false;
  bool rejoin = true;  // What the policy answers a declared death with.
  std::vector<Status> exits;
  int stops = 0;
  std::vector<std::string> declared_dead;
  std::vector<wire::HeartbeatReply> replies;
  std::vector<wire::RegisterReply> rejoins;
  std::vector<wire::ServerTokens> tokens;
};

wire::Header RegisterAnswer(int id, const std::string& token, const std::string& identity,
                            uint64_t term, uint64_t map_version = 1) {
  wire::Header h;
  wire::RegisterReply* r = h.mutable_register_reply();
  r->set_id(id);
  r->set_member_token(token);
  r->set_coordinator_identity(identity);
  r->set_coordinator_term(term);
  r->mutable_shard_map()->set_version(map_version);
  r->mutable_shard_map()->set_epoch(map_version);
  h.mutable_server_tokens()->set_map_version(map_version);
  h.mutable_server_tokens()->add_ids(id);
  h.mutable_server_tokens()->add_tokens(token);
  return h;
}

wire::Header HeartbeatAnswer(const std::string& identity, uint64_t term) {
  wire::Header h;
  h.mutable_heartbeat_reply()->set_coordinator_identity(identity);
  h.mutable_heartbeat_reply()->set_coordinator_term(term);
  return h;
}

class CoordinatorLinkTest : public ::testing::Test {
 protected:
  void SetUp() override { Make(kA); }

  void Make(const std::string& coordinator) {
    CoordinatorLink::Options o;
    o.coordinator = coordinator;
    o.register_timeout_ms = kTimeoutMs;
    // A long period: the thread never beats while the test drives the link.
    o.heartbeat_ms = 3600 * 1000;
    o.coordinator_timeout_ms = kTimeoutMs;
    o.endpoint = "tcp://127.0.0.1:2001";
    wire::ShardCheckpoint restored;
    restored.set_seq(4);
    o.restored_from = restored;
    auto transport = std::make_unique<FakeTransport>();
    transport_ = transport.get();
    link_ = std::make_unique<CoordinatorLink>(std::move(o), std::move(transport), &host_, &clock_);
    host_.link = link_.get();
    ASSERT_OK(link_->Connect());
  }

  // Registers as server 3 (token kToken, coordinator "coord-1" of term 2)
  // and starts heartbeating.
  void RegisterAndStart() {
    transport_->SetAnswer(transport_->HandleOf(kA), Status::OK(),
                          RegisterAnswer(3, kToken, "coord-1", 2));
    StatusOr<wire::RegisterReply> rr = link_->Register(3);
    ASSERT_OK(rr);
    link_->Registered(*rr);
    link_->StartHeartbeat();
  }

  // Answers every call with `status` and `header`, keeping the requests.
  void AnswerAll(const Status& status, const wire::Header& header) {
    transport_->SetResponder([this, status, header](int peer, const Message& request) {
      sent_.emplace_back(peer, request.header);
      return std::make_optional(std::make_pair(status, header));
    });
  }

  FakeClock clock_;
  TestHost host_;
  FakeTransport* transport_ = nullptr;  // Owned by link_.
  std::unique_ptr<CoordinatorLink> link_;
  std::vector<std::pair<int, wire::Header>> sent_;
};

TEST_F(CoordinatorLinkTest, RegistrationIsRetriedWhileTheCoordinatorIsUnreachable) {
  int calls = 0;
  transport_->SetResponder([&](int, const Message& request) {
    sent_.emplace_back(0, request.header);
    // Three silent attempts of a second each, then an answer.
    if (++calls <= 3) {
      clock_.AdvanceMs(1000);
      return std::make_optional(std::make_pair(DeadlineExceededError("silent"), wire::Header()));
    }
    return std::make_optional(std::make_pair(Status::OK(), RegisterAnswer(3, kToken, "coord-1", 2)));
  });
  wire::ServerTokens server_tokens;
  StatusOr<wire::RegisterReply> rr = link_->Register(-1, &server_tokens);
  ASSERT_OK(rr);
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(rr->id(), 3);
  // What it registers as.
  const wire::RegisterRequest& r = sent_.back().second.register_request();
  EXPECT_EQ(sent_.back().second.type(), wire::REGISTER);
  EXPECT_EQ(r.role(), "server");
  EXPECT_EQ(r.requested_id(), -1);
  EXPECT_EQ(r.endpoint(), "tcp://127.0.0.1:2001");
  EXPECT_EQ(r.restored_from().seq(), 4u);
  EXPECT_EQ(r.protocol_version(), kProtocolVersion);
  // Its identity from then on.
  EXPECT_EQ(link_->member_token(), kToken);
  EXPECT_EQ(link_->wire_token().hi, ToWireToken(kToken).hi);
  EXPECT_EQ(link_->wire_token().lo, ToWireToken(kToken).lo);
  EXPECT_EQ(server_tokens.ids_size(), 1);
  EXPECT_TRUE(link_->coordinator_identity().empty());  // Until Registered().
  link_->Registered(*rr);
  EXPECT_EQ(link_->coordinator_identity(), "coord-1");
  EXPECT_EQ(link_->coordinator_term(), 2u);

  // A standby with no leader to name answers Unavailable at once: retried too.
  calls = 0;
  transport_->SetResponder([&](int, const Message&) {
    if (++calls <= 2) {
      return std::make_optional(std::make_pair(UnavailableError("standby"), wire::Header()));
    }
    return std::make_optional(std::make_pair(Status::OK(), RegisterAnswer(3, kNewToken, "c", 2)));
  });
  ASSERT_OK(link_->Register(3));
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(link_->member_token(), kNewToken);
}

TEST_F(CoordinatorLinkTest, RegistrationGivesUpAtItsTimeoutOrOnAnErrorThatIsNotSilence) {
  int calls = 0;
  transport_->SetResponder([&](int, const Message&) {
    ++calls;
    clock_.AdvanceMs(1000);
    return std::make_optional(std::make_pair(DeadlineExceededError("silent"), wire::Header()));
  });
  StatusOr<wire::RegisterReply> rr = link_->Register(-1);
  ASSERT_FALSE(rr.ok());
  EXPECT_EQ(rr.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(rr.status().message().find(std::string("registering with coordinator ") + kA),
            std::string::npos)
      << rr.status();
  // Attempts at 0, 1, 2 and 3 s; the one that ended past 3 s is the last.
  EXPECT_EQ(calls, 4);
  EXPECT_TRUE(link_->member_token().empty());

  calls = 0;
  transport_->SetResponder([&](int, const Message&) {
    ++calls;
    return std::make_optional(
        std::make_pair(InvalidArgumentError("protocol version 1 is not supported"), wire::Header()));
  });
  rr = link_->Register(-1);
  EXPECT_EQ(rr.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(calls, 1);
}

TEST_F(CoordinatorLinkTest, AHeartbeatReportsTheMapAndItsStateAndHandsTheReplyOn) {
  RegisterAndStart();
  link_->set_map_version(7);
  host_.awaiting = true;
  wire::Header answer = HeartbeatAnswer("coord-1", 2);
  answer.mutable_heartbeat_reply()->mutable_shard_map()->set_version(8);
  answer.mutable_heartbeat_reply()->mutable_live_workers()->set_version(5);
  answer.mutable_server_tokens()->set_map_version(8);
  AnswerAll(Status::OK(), answer);
  link_->HeartbeatOnce();

  ASSERT_EQ(sent_.size(), 1u);
  const wire::Header& hb = sent_[0].second;
  EXPECT_EQ(hb.type(), wire::HEARTBEAT);
  EXPECT_EQ(hb.sender(), 3);
  EXPECT_TRUE(HeaderCarriesToken(hb, kToken));
  EXPECT_EQ(hb.heartbeat().shard_map_version(), 7u);
  EXPECT_TRUE(hb.heartbeat().awaiting_state());
  ASSERT_EQ(host_.replies.size(), 1u);
  EXPECT_EQ(host_.replies[0].shard_map().version(), 8u);
  EXPECT_EQ(host_.replies[0].live_workers().version(), 5u);
  ASSERT_EQ(host_.tokens.size(), 1u);
  EXPECT_EQ(host_.tokens[0].map_version(), 8u);
  EXPECT_TRUE(host_.exits.empty());

  // The state arrived: reported at once, with the version the server gives.
  sent_.clear();
  link_->ReportStateArrived(8);
  ASSERT_EQ(sent_.size(), 1u);
  EXPECT_EQ(sent_[0].second.heartbeat().shard_map_version(), 8u);
  EXPECT_FALSE(sent_[0].second.heartbeat().awaiting_state());
  // Leaving in order.
  sent_.clear();
  link_->Deregister();
  ASSERT_EQ(sent_.size(), 1u);
  EXPECT_EQ(sent_[0].second.type(), wire::DEREGISTER);
  EXPECT_TRUE(HeaderCarriesToken(sent_[0].second, kToken));
  link_->StopHeartbeat();
  link_->StopHeartbeat();  // Idempotent.
}

TEST_F(CoordinatorLinkTest, FailedHeartbeatsStopTheServerOnlyAfterTheCoordinatorsTimeout) {
  RegisterAndStart();
  AnswerAll(DeadlineExceededError("silent"), wire::Header());
  clock_.AdvanceMs(kTimeoutMs);
  link_->HeartbeatOnce();
  EXPECT_TRUE(host_.exits.empty());  // Silent for exactly the timeout: not yet.
  EXPECT_EQ(link_->heartbeat_failures(), 1);
  // An answer starts the silence again.
  AnswerAll(Status::OK(), HeartbeatAnswer("coord-1", 2));
  link_->HeartbeatOnce();
  EXPECT_EQ(link_->heartbeat_failures(), 0);
  AnswerAll(DeadlineExceededError("silent"), wire::Header());
  clock_.AdvanceMs(kTimeoutMs);
  link_->HeartbeatOnce();
  EXPECT_TRUE(host_.exits.empty());
  clock_.AdvanceMs(1);
  link_->HeartbeatOnce();
  ASSERT_EQ(host_.exits.size(), 1u);
  EXPECT_EQ(host_.exits[0].code(), StatusCode::kUnavailable);
  EXPECT_NE(host_.exits[0].message().find(std::string("no answer from the coordinator ") + kA +
                                          " for 3001 ms (--coordinator_timeout_ms=3000)"),
            std::string::npos)
      << host_.exits[0];
  EXPECT_EQ(host_.replies.size(), 1u);
  EXPECT_TRUE(host_.declared_dead.empty());
}

TEST_F(CoordinatorLinkTest, AFailedJobStopsTheServerAndHandsNothingOn) {
  RegisterAndStart();
  wire::Header answer = HeartbeatAnswer("coord-1", 2);
  answer.mutable_heartbeat_reply()->set_job_error("server 1 is lost");
  AnswerAll(Status::OK(), answer);
  link_->HeartbeatOnce();
  ASSERT_EQ(host_.exits.size(), 1u);
  EXPECT_EQ(host_.exits[0].code(), StatusCode::kAborted);
  EXPECT_NE(host_.exits[0].message().find("the job failed: server 1 is lost"), std::string::npos);
  EXPECT_TRUE(host_.replies.empty());
}

TEST_F(CoordinatorLinkTest, ANewLeaderIsFollowedAndADeposedCoordinatorIgnored) {
  RegisterAndStart();
  // A standby's redirect: the next heartbeat goes to the leader it names.
  wire::Header redirect;
  redirect.set_leader_endpoint(kB);
  transport_->SetResponder([&](int peer, const Message& request) {
    sent_.emplace_back(peer, request.header);
    if (peer == transport_->HandleOf(kA)) {
      return std::make_optional(std::make_pair(UnavailableError("not the leader"), redirect));
    }
    return std::make_optional(std::make_pair(Status::OK(), HeartbeatAnswer("coord-2", 3)));
  });
  link_->HeartbeatOnce();
  EXPECT_EQ(link_->current_endpoint(), kB);
  EXPECT_TRUE(host_.replies.empty());
  EXPECT_TRUE(host_.exits.empty());
  link_->HeartbeatOnce();
  ASSERT_EQ(sent_.size(), 2u);
  EXPECT_EQ(sent_[1].first, transport_->HandleOf(kB));
  // Its newer term: control messages only from the new leader's connection.
  EXPECT_EQ(link_->coordinator_identity(), "coord-2");
  EXPECT_EQ(link_->coordinator_term(), 3u);
  EXPECT_EQ(host_.replies.size(), 1u);

  // A deposed coordinator (an older term) or a reply naming none changes
  // nothing; the replies are still handed on.
  AnswerAll(Status::OK(), HeartbeatAnswer("coord-1", 2));
  link_->HeartbeatOnce();
  EXPECT_EQ(link_->coordinator_identity(), "coord-2");
  AnswerAll(Status::OK(), HeartbeatAnswer("", 4));
  link_->HeartbeatOnce();
  EXPECT_EQ(link_->coordinator_identity(), "coord-2");
  EXPECT_EQ(link_->coordinator_term(), 3u);
  // The same term again (a second reply of the leader) is kept.
  AnswerAll(Status::OK(), HeartbeatAnswer("coord-3", 3));
  link_->HeartbeatOnce();
  EXPECT_EQ(link_->coordinator_identity(), "coord-3");
  EXPECT_EQ(host_.replies.size(), 4u);
}

TEST_F(CoordinatorLinkTest, AFencedServerRegistersAgainWithItsIdAndHandsTheMapOn) {
  RegisterAndStart();
  transport_->SetResponder([&](int peer, const Message& request) {
    sent_.emplace_back(peer, request.header);
    if (request.header.type() == wire::HEARTBEAT) {
      return std::make_optional(std::make_pair(NotFoundError("unknown server 3"), wire::Header()));
    }
    return std::make_optional(
        std::make_pair(Status::OK(), RegisterAnswer(3, kNewToken, "coord-2", 5, 9)));
  });
  link_->HeartbeatOnce();
  ASSERT_EQ(host_.declared_dead.size(), 1u);
  EXPECT_EQ(host_.declared_dead[0], "unknown server 3");
  ASSERT_EQ(sent_.size(), 2u);
  EXPECT_EQ(sent_[1].second.type(), wire::REGISTER);
  EXPECT_EQ(sent_[1].second.register_request().requested_id(), 3);
  // Its new identity, then the reply handed on.
  EXPECT_EQ(link_->member_token(), kNewToken);
  EXPECT_EQ(link_->coordinator_identity(), "coord-2");
  EXPECT_EQ(link_->coordinator_term(), 5u);
  ASSERT_EQ(host_.rejoins.size(), 1u);
  EXPECT_EQ(host_.rejoins[0].shard_map().version(), 9u);
  ASSERT_EQ(host_.tokens.size(), 1u);
  EXPECT_EQ(host_.tokens[0].map_version(), 9u);
  EXPECT_FALSE(link_->fenced());
  EXPECT_EQ(host_.stops, 0);
  EXPECT_TRUE(host_.exits.empty());
  // Its heartbeats carry the new token.
  AnswerAll(Status::OK(), HeartbeatAnswer("coord-2", 5));
  link_->HeartbeatOnce();
  EXPECT_TRUE(HeaderCarriesToken(sent_.back().second, kNewToken));
  EXPECT_FALSE(HeaderCarriesToken(sent_.back().second, kToken));
}

TEST_F(CoordinatorLinkTest, AFencedServerThatCannotRegisterAgainStopsFenced) {
  RegisterAndStart();
  transport_->SetResponder([&](int, const Message& request) {
    if (request.header.type() == wire::HEARTBEAT) {
      return std::make_optional(std::make_pair(NotFoundError("unknown server 3"), wire::Header()));
    }
    return std::make_optional(
        std::make_pair(FailedPreconditionError("server 3 was replaced"), wire::Header()));
  });
  link_->HeartbeatOnce();
  EXPECT_TRUE(link_->fenced());
  EXPECT_EQ(host_.stops, 1);
  EXPECT_TRUE(host_.rejoins.empty());
  EXPECT_EQ(link_->member_token(), kToken);  // Nothing adopted.
  EXPECT_EQ(link_->coordinator_identity(), "coord-1");

  // A policy that does not rejoin: the link only reports the death.
  host_.rejoin = false;
  host_.stops = 0;
  link_->HeartbeatOnce();
  EXPECT_EQ(host_.declared_dead.size(), 2u);
  EXPECT_EQ(host_.stops, 0);
}

}  // namespace
}  // namespace server_internal
}  // namespace relaxps
