// Push replies through the real wire protocol: Header.pending for a BSP push
// waiting for its round (and its resend, acknowledged, not refused), the
// exactly-once counts that leave it out until the round is applied, and
// Header.snapshot_seq naming the newest checkpoint taken.
#include <filesystem>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <gtest/gtest.h>

#include "client/client.h"
#include "client/testing.h"
#include "common/member_token.h"
#include "common/rpc_client.h"
#include "common/wire.h"
#include "tests/server/in_process_cluster.h"
#include "tests/storage/storage_test_util.h"
#include "tests/test_util.h"

namespace relaxps {
namespace {

std::unique_ptr<Client> Connect(const std::string& coordinator) {
  ClientOptions o;
  o.coordinator = coordinator;
  o.request_timeout_ms = 5000 * test::TimeScale();
  auto c = Client::Connect(o);
  CHECK(c.ok()) << c.status();
  return std::move(c).value();
}

TableOptions DenseTable(const std::string& name, uint64_t size) {
  TableOptions t;
  t.name = name;
  t.type = TableType::kDense;
  t.optimizer.name = "sgd";
  t.optimizer.lr = 1.0f;
  t.size = size;
  return t;
}

std::string ServerEndpoint(const std::string& coordinator) {
  RpcClient rpc;
  Message m;
  m.header.set_type(wire::GET_SHARD_MAP);
  auto reply = rpc.CallSync(rpc.Connect(coordinator), std::move(m), 3000);
  CHECK(reply.ok()) << reply.status();
  return reply->header.shard_map().servers(0).endpoint();
}

// A worker's requests sent by hand, answered with the whole reply.
class RawWorker {
 public:
  explicit RawWorker(const std::string& endpoint) : socket_(ctx_, zmq::socket_type::dealer) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.set(zmq::sockopt::rcvtimeo, static_cast<int>(10000 * test::TimeScale()));
    socket_.connect(endpoint);
  }
  // Sends `h` with one float frame (if not empty); returns the reply header
  // and its float frames.
  wire::Header Call(const wire::Header& h, const std::vector<float>& payload,
                    std::vector<float>* reply_floats = nullptr) {
    std::string hs;
    h.SerializeToString(&hs);
    socket_.send(zmq::buffer(hs), payload.empty() ? zmq::send_flags::none
                                                  : zmq::send_flags::sndmore);
    if (!payload.empty()) {
      socket_.send(zmq::buffer(payload.data(), payload.size() * sizeof(float)),
                   zmq::send_flags::none);
    }
    std::vector<zmq::message_t> parts;
    wire::Header reply;
    if (!zmq::recv_multipart(socket_, std::back_inserter(parts)) || parts.empty() ||
        !reply.ParseFromArray(parts[0].data(), static_cast<int>(parts[0].size()))) {
      StatusToProto(InternalError("no reply"), reply.mutable_status());
      return reply;
    }
    if (reply_floats != nullptr && parts.size() > 1) {
      const float* f = static_cast<const float*>(parts[1].data());
      reply_floats->assign(f, f + parts[1].size() / sizeof(float));
    }
    return reply;
  }

 private:
  zmq::context_t ctx_{1};
  zmq::socket_t socket_;
};

// A push as `worker`, whose member token is `token` (MemberTokenOf).
wire::Header Push(int worker, int64_t clock, uint64_t push_id, uint64_t n,
                  const std::string& token) {
  wire::Header h;
  h.set_type(wire::PUSH);
  h.set_sender(worker);
  SetMemberToken(token, &h);
  h.set_table("w");
  h.set_key_begin(0);
  h.set_key_count(n);
  h.set_clock(clock);
  h.set_incarnation(77);
  h.set_push_id(push_id);
  return h;
}

uint64_t AppliedParts(const std::string& endpoint, int worker) {
  RpcClient rpc;
  Message m;
  m.header.set_type(wire::SERVER_STATS);
  auto stats = rpc.CallSync(rpc.Connect(endpoint), std::move(m), 3000);
  CHECK(stats.ok()) << stats.status();
  uint64_t parts = 0;
  for (const wire::AppliedParts& a : stats->header.server_stats().applied_parts()) {
    if (a.worker() == worker && a.incarnation() == 77) parts += a.parts();
  }
  return parts;
}

TEST(PushReplyTest, ABspPushWaitingForItsRoundIsPendingAndItsResendIsAcknowledged) {
  InProcessCluster cluster(1, ConsistencyModel::kBsp, 0);
  auto w0 = Connect(cluster.coordinator());
  auto w1 = Connect(cluster.coordinator());
  ASSERT_TRUE(w0->CreateTable(DenseTable("w", 4)).ok());
  const std::string server = ServerEndpoint(cluster.coordinator());
  RawWorker raw(server);
  const std::vector<float> g0(4, 1.0f), g1(4, 3.0f);
  ASSERT_EQ(w0->worker_id(), 0);
  ASSERT_EQ(w1->worker_id(), 1);
  const std::string t0 = MemberTokenOf(*w0), t1 = MemberTokenOf(*w1);

  wire::Header r = raw.Call(Push(0, 0, 1, 4, t0), g0);
  ASSERT_TRUE(StatusFromProto(r.status()).ok()) << r.DebugString();
  EXPECT_TRUE(r.pending());
  EXPECT_EQ(r.snapshot_seq(), 0u);
  // Resent while its round is open: a duplicate, still pending (not
  // "pushed twice"), and not counted as reflected.
  r = raw.Call(Push(0, 0, 1, 4, t0), g0);
  ASSERT_TRUE(StatusFromProto(r.status()).ok()) << r.DebugString();
  EXPECT_TRUE(r.pending());
  EXPECT_EQ(AppliedParts(server, 0), 0u);

  r = raw.Call(Push(1, 0, 1, 4, t1), g1);
  ASSERT_TRUE(StatusFromProto(r.status()).ok()) << r.DebugString();
  // A pull at clock 1 is answered once round 0 is applied: the mean, once.
  wire::Header pull;
  pull.set_type(wire::PULL);
  pull.set_sender(0);
  SetMemberToken(t0, &pull);
  pull.set_table("w");
  pull.set_key_count(4);
  pull.set_clock(1);
  std::vector<float> params;
  r = raw.Call(pull, {}, &params);
  ASSERT_TRUE(StatusFromProto(r.status()).ok()) << r.DebugString();
  ASSERT_EQ(params.size(), 4u);
  EXPECT_FLOAT_EQ(params[0], -2.0f);
  EXPECT_EQ(AppliedParts(server, 0), 1u);
  EXPECT_EQ(AppliedParts(server, 1), 1u);
  // Now reflected: a resend is acknowledged as such.
  r = raw.Call(Push(0, 0, 1, 4, t0), g0);
  ASSERT_TRUE(StatusFromProto(r.status()).ok()) << r.DebugString();
  EXPECT_FALSE(r.pending());
  r = raw.Call(pull, {}, &params);
  EXPECT_FLOAT_EQ(params[0], -2.0f);
}

TEST(PushReplyTest, RepliesNameTheNewestCheckpointTaken) {
  testing_storage::ScopedTempDir dir("push_reply_snapshot_seq");
  CoordinatorOptions co;
  co.num_servers = 1;
  auto coordinator = Coordinator::Start(co);
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  std::thread coordinating([&] { (*coordinator)->Run(); });
  ServerOptions so;
  so.coordinator = (*coordinator)->endpoint();
  so.store.data_dir = dir.path() + "/data/server-0";
  so.heartbeat_ms = 100;
  auto server = Server::Start(so);
  ASSERT_TRUE(server.ok()) << server.status();
  std::thread serving([&] { (*server)->Run().IgnoreError(); });
  {
    auto client = Connect((*coordinator)->endpoint());
    ASSERT_TRUE(client->CreateTable(DenseTable("w", 4)).ok());
    RawWorker raw(ServerEndpoint((*coordinator)->endpoint()));
    const std::vector<float> g(4, 1.0f);
    const int id = client->worker_id();
    const std::string token = MemberTokenOf(*client);
    wire::Header r = raw.Call(Push(id, 0, 1, 4, token), g);
    ASSERT_TRUE(StatusFromProto(r.status()).ok()) << r.DebugString();
    EXPECT_EQ(r.snapshot_seq(), 0u);
    EXPECT_FALSE(r.pending());  // Async: reflected at once.

    RpcClient rpc;
    const int peer = rpc.Connect((*coordinator)->endpoint());
    Message reg;  // An operator session (what relaxps-ctl checkpoint opens).
    reg.header.set_type(wire::REGISTER);
    reg.header.mutable_register_request()->set_role("operator");
    reg.header.mutable_register_request()->set_protocol_version(kProtocolVersion);
    auto session = rpc.CallSync(peer, std::move(reg), 5000);
    ASSERT_TRUE(session.ok()) << session.status();
    Message m;
    m.header.set_type(wire::TRIGGER_CHECKPOINT);
    SetMemberToken(session->header.register_reply().member_token(), &m.header);
    auto done = rpc.CallSync(peer, std::move(m), 60000);
    ASSERT_TRUE(done.ok()) << done.status();

    r = raw.Call(Push(id, 1, 2, 4, token), g);
    ASSERT_TRUE(StatusFromProto(r.status()).ok()) << r.DebugString();
    EXPECT_EQ(r.snapshot_seq(), 1u);
    wire::Header pp = Push(id, 2, 3, 4, token);
    pp.set_type(wire::PUSH_PULL);
    r = raw.Call(pp, g);
    ASSERT_TRUE(StatusFromProto(r.status()).ok()) << r.DebugString();
    EXPECT_EQ(r.snapshot_seq(), 1u);
    EXPECT_FALSE(r.pending());
  }
  (*server)->Stop();
  serving.join();
  (*coordinator)->Stop();
  coordinating.join();
}

}  // namespace
}  // namespace relaxps
