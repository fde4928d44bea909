// LocalFallback on its own: a fake Host records what would be sent to
// servers and to the coordinator, a fake Transport answers probes as told.
// Checks the go-local / serve / re-seed / rejoin rules: a lost server's
// waiting calls are cancelled, pushes train the copy with the table's
// learning rate, a rejoin hands back exactly the local change as a raw delta
// (and resends doubtful pushes under their keys to a merely slow server), a
// seeded server's clock moves the worker's up, a closed connection takes
// a server local only when the probe fails, and a rejoin waits for a part
// being served. Nothing here reads time but the one bounded wait for a
// rejoin that must not finish.
#include "client/internal/local_fallback.h"

#include <chrono>
#include <cmath>
#include <functional>
#include <future>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "common/payload_codec.h"
#include "tests/client/fake_transport.h"
#include "tests/test_util.h"

namespace relaxps {
namespace client_internal {
namespace {

// Records requests instead of sending them.
class FakeHost final : public LocalFallback::Host {
 public:
  int worker_id() const override { return 3; }
  int64_t clock() const override { return clock_; }
  void RaiseClock(int64_t c) override { clock_ = std::max(clock_, c); }
  bool shutting_down() const override { return false; }
  Message NewRequest(wire::MsgType type, const std::string& table, int64_t clock,
                     uint64_t map_version) const override {
    Message m;
    m.header.set_type(type);
    m.header.set_table(table);
    m.header.set_clock(clock);
    m.header.set_shard_map_version(map_version);
    return m;
  }
  Frame EncodeValues(const FloatBuffer& values) const override {
    return EncodeFloats(values, wire::ENC_FP32);
  }
  void SendToServer(int server, std::function<Message()> make,
                    Transport::ReplyCallback done) override {
    sent.emplace_back(server, make());
    done(Status::OK(), Message());
  }
  Status CheckPushFinite(const float* values, size_t n) override {
    for (size_t i = 0; i < n; ++i) {
      if (!std::isfinite(values[i])) {
        ++errors;
        return InvalidArgumentError("non-finite gradient");
      }
    }
    return Status::OK();
  }
  void CountError() override { ++errors; }
  StatusOr<Message> CallCoordinatorSync(Message msg, int /*timeout_ms*/) override {
    to_coordinator.push_back(std::move(msg));
    return Message();
  }

  int64_t clock_ = 5;
  int errors = 0;
  std::vector<std::pair<int, Message>> sent;
  std::vector<Message> to_coordinator;
};

const std::string kA = "tcp://127.0.0.1:1001";
const std::string kB = "tcp://127.0.0.1:1002";

// Two servers; dense table "w" of two chunks (one per server), SGD lr 0.5.
wire::ShardMap Map() {
  wire::ShardMap m;
  m.set_version(1);
  for (int i = 0; i < 2; ++i) {
    wire::ServerInfo* s = m.add_servers();
    s->set_id(i);
    s->set_endpoint(i == 0 ? kA : kB);
    s->set_alive(true);
  }
  wire::TableShards* w = m.add_tables();
  w->mutable_table()->set_name("w");
  w->mutable_table()->set_size(2 * kDenseChunk);
  w->mutable_table()->mutable_optimizer()->set_name("sgd");
  w->mutable_table()->mutable_optimizer()->set_lr(0.5f);
  for (const wire::DenseRange& r : ShardMap::AssignDense(2 * kDenseChunk, 2)) *w->add_ranges() = r;
  return m;
}

class LocalFallbackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK(router_.Install(Map()).status());
    LocalFallback::Options o;
    o.disconnect_probe_ms = 100;
    o.stalled_probe_ms = 100;
    ASSERT_OK_AND_ASSIGN(fallback_, LocalFallback::New(&host_, &router_, &transport_, o));
  }
  // Server 1's whole range, as the router splits it.
  DenseSlice RangeOf1() {
    StatusOr<std::vector<DenseSlice>> s = router_.map()->SplitDense("w", kDenseChunk, kDenseChunk);
    EXPECT_OK(s.status());
    EXPECT_EQ(s->size(), 1u);
    return s->front();
  }
  // Server 1's range, its copy (all 1.0 at clock 0) remembered, and server 1
  // local (lost by a stall or otherwise).
  DenseSlice LocalRangeOf1(bool stalled = false) {
    const DenseSlice s = RangeOf1();
    std::vector<float> params(s.count, 1.0f);
    fallback_->RememberDense("w", s, params.data(), 0);
    fallback_->GoLocal(1, kB, stalled, "test");
    return s;
  }

  FakeTransport transport_;
  Router router_{&transport_};
  FakeHost host_;
  std::unique_ptr<LocalFallback> fallback_;
};

TEST_F(LocalFallbackTest, NeedsPositiveProbeTimes) {
  LocalFallback::Options o;
  o.disconnect_probe_ms = 0;
  o.stalled_probe_ms = 100;
  EXPECT_EQ(LocalFallback::New(&host_, &router_, &transport_, o).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(LocalFallbackTest, GoingLocalCancelsWhatWaitsOnTheServerOnce) {
  std::string endpoint;
  const int peer = router_.Peer(1, &endpoint);
  fallback_->GoLocal(1, kB, /*stalled=*/true, "test");
  EXPECT_TRUE(fallback_->IsLocal(1));
  EXPECT_FALSE(fallback_->IsLocal(0));
  bool stalled = false;
  std::string lost_at;
  ASSERT_TRUE(fallback_->LostAt(1, &lost_at, &stalled));
  EXPECT_EQ(lost_at, kB);
  EXPECT_TRUE(stalled);
  EXPECT_EQ(transport_.cancelled(), std::vector<int>{peer});
  fallback_->GoLocal(1, kB, true, "again");
  EXPECT_EQ(transport_.cancelled().size(), 1u);
}

// A part that waited on a stalled server fails with the cancellation of
// that loss, and the data path hands the failure back to GoLocal. On a loaded
// worker that callback may run after the server answered a probe and
// rejoined: the server goes local again, and must do so as a stall, which the
// next probe rejoins. (Seen in a 4-worker run without faults: as "unavailable"
// the server stayed local for good, and its worker trained alone for 70 s
// beside a live server that never saw its 3,034 pushes.)
TEST_F(LocalFallbackTest, APartCancelledByAStallStaysAStallWhenItFailsAfterTheRejoin) {
  fallback_->GoLocal(1, kB, /*stalled=*/true, "DeadlineExceeded: no reply before the deadline");
  ASSERT_EQ(transport_.cancel_codes().size(), 1u);
  const Status cancelled(transport_.cancel_codes()[0], "the cancelled part");
  EXPECT_TRUE(LocalFallback::IsStall(cancelled));
  fallback_->ProbeStalledServers();  // It answers: rejoined.
  ASSERT_FALSE(fallback_->IsLocal(1));

  fallback_->GoLocal(1, kB, LocalFallback::IsStall(cancelled), cancelled.ToString());  // Late.
  ASSERT_TRUE(fallback_->IsLocal(1));
  fallback_->ProbeStalledServers();
  EXPECT_FALSE(fallback_->IsLocal(1));
}

// A server lost by a closed connection (or a map) is not a stall: what it
// cancels fails as unavailable, and no probe brings it back by itself.
TEST_F(LocalFallbackTest, ALostServerCancelsAsUnavailable) {
  fallback_->GoLocal(1, kB, /*stalled=*/false, "its connection closed");
  ASSERT_EQ(transport_.cancel_codes(), std::vector<StatusCode>{StatusCode::kUnavailable});
  EXPECT_FALSE(LocalFallback::IsStall(Status(StatusCode::kUnavailable, "server 1 lost")));
  fallback_->ProbeStalledServers();
  EXPECT_TRUE(fallback_->IsLocal(1));
}

TEST_F(LocalFallbackTest, TrainsTheCopyAndHandsBackExactlyTheChange) {
  const DenseSlice s = RangeOf1();
  std::vector<float> params(s.count, 1.0f);
  fallback_->RememberDense("w", s, params.data(), /*params_clock=*/9);
  EXPECT_EQ(host_.clock(), 9);  // A seeded server's clock moves the worker up.
  fallback_->GoLocal(1, kB, false, "test");

  std::vector<float> grads(s.count, 2.0f);
  std::vector<float> out(s.count, 0.0f);
  {
    LocalFallback::ServingPart part(fallback_.get(), 1);
    ASSERT_TRUE(part.local());
    std::atomic<bool> served{false};
    ASSERT_OK_AND_ASSIGN(int64_t c,
                         fallback_->ServeDense(part, "w", s, grads.data(), nullptr, &served));
    EXPECT_EQ(c, 9);
    EXPECT_TRUE(served.load());
    // A second part of the same request counts no second step.
    ASSERT_OK(fallback_->ServeDense(part, "w", s, grads.data(), nullptr, &served).status());
    EXPECT_EQ(fallback_->local_steps(), 1u);

    std::atomic<bool> pulled{false};
    ASSERT_OK(fallback_->ServeDense(part, "w", s, nullptr, out.data(), &pulled).status());
    EXPECT_EQ(out[0], 1.0f - 2 * 0.5f * 2.0f);  // Two SGD steps at lr 0.5.
    EXPECT_FALSE(pulled.load());
  }

  fallback_->Rejoin(1, /*same_server=*/false, "test");
  ASSERT_EQ(host_.sent.size(), 1u);
  const auto& [server, req] = host_.sent[0];
  EXPECT_EQ(server, 1);
  EXPECT_EQ(req.header.type(), wire::PUSH);
  EXPECT_TRUE(req.header.raw_delta());
  EXPECT_EQ(req.header.key_begin(), s.begin);
  EXPECT_EQ(req.header.key_count(), s.count);
  ASSERT_EQ(req.frames.size(), 1u);
  const float* delta = req.frames[0].as<float>();
  EXPECT_EQ(delta[0], -2.0f);
  EXPECT_EQ(delta[s.count - 1], -2.0f);
  EXPECT_FALSE(fallback_->IsLocal(1));
}

// A rejoin waits for the part being served here, so the part's step is in
// the change it hands back; after it, no part is served here. (Before, a
// step served in the instant its worker rejoined stayed on the copy alone:
// one step in two cells of the experiment matrix, counted as dropped.)
TEST_F(LocalFallbackTest, ARejoinWaitsForThePartBeingServedAndServesNoneAfter) {
  const DenseSlice s = LocalRangeOf1();
  std::vector<float> grads(s.count, 2.0f);
  std::atomic<bool> served{false};
  std::promise<void> rejoined;
  std::future<void> rejoin_done = rejoined.get_future();
  std::thread rejoin;
  {
    LocalFallback::ServingPart part(fallback_.get(), 1);
    EXPECT_TRUE(part.local());
    rejoin = std::thread([&] {
      fallback_->Rejoin(1, /*same_server=*/false, "test");
      rejoined.set_value();
    });
    // The one wait in this file: for a rejoin that must not finish yet.
    EXPECT_EQ(rejoin_done.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout);
    EXPECT_OK(fallback_->ServeDense(part, "w", s, grads.data(), nullptr, &served).status());
  }
  rejoin.join();
  ASSERT_EQ(host_.sent.size(), 1u);
  EXPECT_TRUE(host_.sent[0].second.header.raw_delta());
  EXPECT_EQ(host_.sent[0].second.frames[0].as<float>()[0], -1.0f);  // The part's step, lr 0.5.
  EXPECT_FALSE(LocalFallback::ServingPart(fallback_.get(), 1).local());
}

TEST_F(LocalFallbackTest, RefusesANonFinitePushAndChangesNothing) {
  const DenseSlice s = LocalRangeOf1();
  std::vector<float> grads(s.count, 1.0f);
  grads[7] = std::numeric_limits<float>::quiet_NaN();
  std::atomic<bool> served{false};
  {
    LocalFallback::ServingPart part(fallback_.get(), 1);
    EXPECT_EQ(fallback_->ServeDense(part, "w", s, grads.data(), nullptr, &served).status().code(),
              StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(host_.errors, 1);
  EXPECT_EQ(fallback_->local_steps(), 0u);
  fallback_->Rejoin(1, false, "test");
  EXPECT_TRUE(host_.sent.empty());  // No change to hand back.
}

TEST_F(LocalFallbackTest, ASlowServerGetsItsDoubtfulPushesBackUnderTheirKeys) {
  const DenseSlice s = LocalRangeOf1(/*stalled=*/true);
  std::vector<float> grads(s.count, 1.0f);
  FloatBuffer copy = FloatBuffer::CopyOf(grads.data(), grads.size());
  std::atomic<bool> served{false};
  {
    LocalFallback::ServingPart part(fallback_.get(), 1);
    ASSERT_OK(fallback_->ServeDense(part, "w", s, grads.data(), nullptr, &served,
                                    /*doubtful_id=*/77, copy)
                  .status());
  }
  fallback_->Rejoin(1, /*same_server=*/true, "slow");
  // The push is resent under its key; the range's raw delta leaves it out.
  ASSERT_EQ(host_.sent.size(), 2u);
  const Message& resent = host_.sent[0].second;
  EXPECT_EQ(resent.header.push_id(), 77u);
  EXPECT_FALSE(resent.header.raw_delta());
  EXPECT_EQ(resent.frames[0].as<float>()[0], 1.0f);
  const Message& delta = host_.sent[1].second;
  EXPECT_TRUE(delta.header.raw_delta());
  EXPECT_EQ(delta.header.push_id(), 0u);
  EXPECT_EQ(delta.frames[0].as<float>()[0], 0.0f);
}

TEST_F(LocalFallbackTest, SendsItsCopyForEveryReseedRequest) {
  const DenseSlice s = LocalRangeOf1();
  wire::HeartbeatReply hr;
  hr.add_reseed()->set_server(1);
  fallback_->SendSeedCopies(hr);
  ASSERT_EQ(host_.to_coordinator.size(), 1u);
  const wire::Header& h = host_.to_coordinator[0].header;
  EXPECT_EQ(h.type(), wire::SEED_COPY);
  EXPECT_EQ(h.seed_data().server(), 1);
  EXPECT_EQ(h.seed_data().worker(), 3);
  EXPECT_EQ(h.seed_data().ranges_size(), 1);
}

TEST_F(LocalFallbackTest, AClosedConnectionTakesAServerLocalOnlyIfTheProbeFails) {
  std::string endpoint;
  const int peer0 = router_.Peer(0, &endpoint);
  const int peer1 = router_.Peer(1, &endpoint);
  fallback_->OnDisconnect(peer0);  // Answers the probe.
  EXPECT_FALSE(fallback_->IsLocal(0));
  transport_.SetDown(peer1, true);
  fallback_->OnDisconnect(peer1);
  EXPECT_TRUE(fallback_->IsLocal(1));
  ASSERT_EQ(transport_.calls().size(), 2u);
  EXPECT_EQ(transport_.calls()[1].second, wire::PING);
}

TEST_F(LocalFallbackTest, AStalledServerThatAnswersAProbeIsRejoined) {
  std::string endpoint;
  const int peer1 = router_.Peer(1, &endpoint);
  fallback_->GoLocal(1, kB, /*stalled=*/true, "test");
  transport_.SetDown(peer1, true);
  fallback_->ProbeStalledServers();
  EXPECT_TRUE(fallback_->IsLocal(1));
  transport_.SetDown(peer1, false);
  fallback_->ProbeStalledServers();
  EXPECT_FALSE(fallback_->IsLocal(1));
}

}  // namespace
}  // namespace client_internal
}  // namespace relaxps
