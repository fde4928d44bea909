// Server behaviour through the real wire protocol: routing, optimizers,
// sparse rows, and rejection of malformed input without harm.
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <gtest/gtest.h>

#include "client/client.h"
#include "client/testing.h"
#include "common/member_token.h"
#include "common/rpc_client.h"
#include "common/wire.h"
#include "storage/fault_injecting_fs.h"
#include "tests/server/held_store.h"
#include "tests/server/in_process_cluster.h"
#include "tests/storage/storage_test_util.h"
#include "tests/operator_session.h"
#include "tests/test_util.h"

namespace relaxps {
namespace {

using test::OperatorSession;

#define RELAXPS_EXPECT_OK_(expr) EXPECT_TRUE((expr).ok()) << (expr).ToString()

std::unique_ptr<Client> Connect(const std::string& coordinator, const std::string& role = "worker") {
  ClientOptions o;
  o.coordinator = coordinator;
  o.role = role;
  o.request_timeout_ms = 5000 * test::TimeScale();
  auto c = Client::Connect(o);
  CHECK(c.ok()) << c.status();
  return std::move(c).value();
}

TableOptions NewTable(const std::string& name, TableType type, const std::string& opt, float lr) {
  TableOptions t;
  t.name = name;
  t.type = type;
  t.optimizer.name = opt;
  t.optimizer.lr = lr;
  return t;
}

TableOptions DenseTable(const std::string& name, uint64_t size, const std::string& opt = "sgd",
                        float lr = 0.1f) {
  TableOptions t = NewTable(name, TableType::kDense, opt, lr);
  t.size = size;
  t.init.seed = 7;
  t.init.segments.push_back(InitSegment{0, size, InitKind::kUniform, -1.0f, 1.0f});
  return t;
}

TableOptions SparseTable(const std::string& name, uint32_t width, const std::string& opt,
                         float lr) {
  TableOptions t = NewTable(name, TableType::kSparse, opt, lr);
  t.row_width = width;
  return t;
}

std::vector<float> PullAll(Client* c, const std::string& table, uint64_t size) {
  FloatBuffer out(size);
  Status s = c->Pull(table, 0, out).get();
  EXPECT_TRUE(s.ok()) << s;
  return std::vector<float>(out.begin(), out.end());
}

TEST(ServerTest, DensePushAppliesSgdAcrossShards) {
  InProcessCluster cluster(2);
  auto client = Connect(cluster.coordinator());
  const uint64_t n = 3 * 4096 + 123;  // Spans both servers, uneven end.
  ASSERT_TRUE(client->CreateTable(DenseTable("w", n)).ok());
  std::vector<float> before = PullAll(client.get(), "w", n);
  // Initial values follow the initializer regardless of sharding.
  Initializer init = DenseTable("w", n).init;
  std::vector<float> expect(n);
  init.Fill(0, n, expect.data());
  ASSERT_EQ(before, expect);

  FloatBuffer g(n);
  for (uint64_t i = 0; i < n; ++i) g[i] = static_cast<float>(i % 7) - 3.0f;
  ASSERT_TRUE(client->Push("w", 0, g).get().ok());
  std::vector<float> after = PullAll(client.get(), "w", n);
  for (uint64_t i = 0; i < n; ++i) ASSERT_FLOAT_EQ(after[i], before[i] - 0.1f * g[i]) << i;

  // A sub-range push touches only that range.
  FloatBuffer g2(10);
  for (auto& v : g2) v = 1.0f;
  ASSERT_TRUE(client->Push("w", 4090, g2).get().ok());
  std::vector<float> after2 = PullAll(client.get(), "w", n);
  for (uint64_t i = 0; i < n; ++i) {
    const float want = (i >= 4090 && i < 4100) ? after[i] - 0.1f : after[i];
    ASSERT_FLOAT_EQ(after2[i], want) << i;
  }
}

TEST(ServerTest, PushPullReturnsUpdatedParamsAndFp16HalvesBytes) {
  InProcessCluster cluster(1);
  auto c32 = Connect(cluster.coordinator());
  const uint64_t n = 50000;
  ASSERT_TRUE(c32->CreateTable(DenseTable("m", n)).ok());
  std::vector<float> before = PullAll(c32.get(), "m", n);
  FloatBuffer g(n), out(n);
  for (auto& v : g) v = 0.5f;
  const uint64_t sent0 = c32->stats().bytes_sent;
  ASSERT_TRUE(c32->PushPull("m", 0, g, out).get().ok());
  const uint64_t fp32_bytes = c32->stats().bytes_sent - sent0;
  for (uint64_t i = 0; i < n; ++i) ASSERT_FLOAT_EQ(out[i], before[i] - 0.05f);

  ClientOptions o;
  o.coordinator = cluster.coordinator();
  o.wire_dtype = "fp16";
  auto c16 = Client::Connect(o);
  ASSERT_TRUE(c16.ok());
  const uint64_t s0 = (*c16)->stats().bytes_sent;
  ASSERT_TRUE((*c16)->PushPull("m", 0, g, out).get().ok());
  const uint64_t fp16_bytes = (*c16)->stats().bytes_sent - s0;
  EXPECT_LT(fp16_bytes, fp32_bytes * 0.55);
  for (uint64_t i = 0; i < n; ++i) ASSERT_NEAR(out[i], before[i] - 0.1f, 2e-3f) << i;
}

// A PUSH_PULL's answer is written by the update itself (Optimizer::
// ApplyAndCopy): it must hold exactly what a pull right after reads, for a
// rule with state, over a range spanning both servers, a range crossing
// their boundary, and a single key (whose 4-byte gradient ZeroMQ keeps
// inside the message object, so it must be read where the request ends up).
TEST(ServerTest, PushPullAnswersWithWhatAPullThenReads) {
  InProcessCluster cluster(2);
  auto client = Connect(cluster.coordinator());
  const uint64_t n = 3 * 4096 + 123;
  ASSERT_TRUE(client->CreateTable(DenseTable("w", n, "adam", 0.01f)).ok());
  const std::vector<float> initial = PullAll(client.get(), "w", n);
  for (auto [begin, count] : {std::pair<uint64_t, uint64_t>{0, n}, {4090, 10}, {7, 1}}) {
    SCOPED_TRACE("keys [" + std::to_string(begin) + ", +" + std::to_string(count) + ")");
    for (int step = 0; step < 3; ++step) {
      FloatBuffer g(count), out(count), pulled(count);
      for (uint64_t i = 0; i < count; ++i) g[i] = std::sin(0.3f * static_cast<float>(i + step));
      ASSERT_TRUE(client->PushPull("w", begin, g, out).get().ok());
      ASSERT_TRUE(client->Pull("w", begin, pulled).get().ok());
      ASSERT_EQ(0, std::memcmp(out.data(), pulled.data(), count * sizeof(float)))
          << "step " << step;
    }
  }
  const std::vector<float> final_values = PullAll(client.get(), "w", n);
  EXPECT_NE(final_values[7], initial[7]);
  EXPECT_NE(final_values[n - 1], initial[n - 1]);
}

TEST(ServerTest, SparseRowsAreCreatedOnTouchAndUpdated) {
  InProcessCluster cluster(2);
  auto client = Connect(cluster.coordinator());
  TableOptions t = SparseTable("emb", 8, "adagrad", 0.5f);
  t.init.seed = 3;
  t.init.segments.push_back(InitSegment{0, 8, InitKind::kNormal, 0.0f, 0.1f});
  ASSERT_TRUE(client->CreateTable(t).ok());
  KeyBuffer ids(5);
  const uint64_t raw[5] = {1, 1ull << 40, 17, 1, 999999};  // Duplicate id 1.
  std::memcpy(ids.data(), raw, sizeof(raw));
  FloatBuffer rows(5 * 8);
  ASSERT_TRUE(client->PullRows("emb", ids, rows).get().ok());
  for (int r = 0; r < 5; ++r) {
    std::vector<float> want(8);
    t.init.FillRow(raw[r], 8, want.data());
    for (int c = 0; c < 8; ++c) ASSERT_FLOAT_EQ(rows[r * 8 + c], want[c]);
  }
  FloatBuffer grads(5 * 8);
  for (auto& v : grads) v = 1.0f;
  ASSERT_TRUE(client->PushRows("emb", ids, grads).get().ok());
  FloatBuffer rows2(5 * 8);
  ASSERT_TRUE(client->PullRows("emb", ids, rows2).get().ok());
  // Adagrad's first step moves each weight by lr * g / sqrt(g^2) = lr * sign(g);
  // row 1 got g = 2 (duplicate summed) and still moves by lr.
  for (int i = 0; i < 5 * 8; ++i) ASSERT_NEAR(rows2[i], rows[i] - 0.5f, 1e-5f) << i;
}

// One server on a HeldStore (held closed), a sparse table "emb" of width 4
// with SGD at lr 1, and a push of rows 3 and 9 with gradient 1 (not waited
// for).
struct HeldRowPush {
  explicit HeldRowPush(bool in_place)
      : gate(std::make_shared<test::RowGate>()), cluster(Options(), ServerOptionsFor(gate, in_place)) {
    client = Connect(cluster.coordinator());
    CHECK(client->CreateTable(SparseTable("emb", 4, "sgd", 1.0f)).ok());
    const uint64_t raw[2] = {3, 9};
    std::memcpy(ids.data(), raw, sizeof(raw));
    FloatBuffer grads(2 * 4);
    for (auto& v : grads) v = 1.0f;
    CHECK(client->PullRows("emb", ids, before).get().ok());
    pushed = client->PushRows("emb", ids, grads);
  }
  static CoordinatorOptions Options() {
    CoordinatorOptions co;
    co.num_servers = 1;
    return co;
  }
  static ServerOptions ServerOptionsFor(std::shared_ptr<test::RowGate> gate, bool in_place) {
    ServerOptions so;
    so.store_factory = test::HeldStore::Factory(std::move(gate), in_place);
    return so;
  }
  // After the gate opened: the rows moved by -1.
  void ExpectApplied() {
    FloatBuffer after(2 * 4);
    ASSERT_TRUE(client->PullRows("emb", ids, after).get().ok());
    for (int i = 0; i < 2 * 4; ++i) EXPECT_FLOAT_EQ(after[i], before[i] - 1.0f) << i;
  }

  std::shared_ptr<test::RowGate> gate;
  InProcessCluster cluster;
  std::unique_ptr<Client> client;
  KeyBuffer ids = KeyBuffer(2);
  FloatBuffer before = FloatBuffer(2 * 4);
  std::future<Status> pushed;
};

TEST(ServerTest, RowPushToAMemoryStoreIsAcknowledgedBeforeItsRowsAreUpdated) {
  HeldRowPush p(/*in_place=*/true);
  // The server's loop holds at the update while the worker already has its
  // acknowledgement: the update no longer adds to the round trip.
  ASSERT_TRUE(p.gate->AwaitWaiter(test::Scaled(test::Millis(10000))));
  ASSERT_EQ(p.pushed.wait_for(test::Scaled(test::Millis(10000))), std::future_status::ready);
  EXPECT_TRUE(p.pushed.get().ok());
  p.gate->Open();
  // The worker's next request is served after the update.
  p.ExpectApplied();
}

TEST(ServerTest, RowPushToAStoreThatWritesRowsIsAcknowledgedAfterTheWrite) {
  HeldRowPush p(/*in_place=*/false);
  // Such a store may fail the write (a full disk): no acknowledgement before.
  ASSERT_TRUE(p.gate->AwaitWaiter(test::Scaled(test::Millis(10000))));
  EXPECT_EQ(p.pushed.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  p.gate->Open();
  ASSERT_EQ(p.pushed.wait_for(test::Scaled(test::Millis(10000))), std::future_status::ready);
  EXPECT_TRUE(p.pushed.get().ok());
  p.ExpectApplied();
}

// Sends raw multipart messages to a server, like a buggy or hostile peer.
class RawPeer {
 public:
  explicit RawPeer(const std::string& endpoint) : socket_(ctx_, zmq::socket_type::dealer) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.set(zmq::sockopt::rcvtimeo, 3000);
    socket_.connect(endpoint);
  }
  void Send(std::vector<std::string> frames) {
    for (size_t i = 0; i < frames.size(); ++i) {
      socket_.send(zmq::buffer(frames[i]),
                   i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  }
  void SendRequest(const wire::Header& h, std::vector<std::string> payload) {
    std::string hs;
    h.SerializeToString(&hs);
    payload.insert(payload.begin(), hs);
    Send(payload);
  }
  // Receives a reply and returns its status (Internal if none arrived).
  Status ReceiveStatus() {
    std::vector<zmq::message_t> parts;
    if (!zmq::recv_multipart(socket_, std::back_inserter(parts))) {
      return InternalError("no reply");
    }
    wire::Header h;
    if (parts.empty() || !h.ParseFromArray(parts[0].data(), static_cast<int>(parts[0].size()))) {
      return InternalError("unparsable reply");
    }
    return StatusFromProto(h.status());
  }

 private:
  zmq::context_t ctx_{1};
  zmq::socket_t socket_;
};

std::string ServerEndpoint(const std::string& coordinator) {
  auto observer = Connect(coordinator, "observer");
  (void)observer->ListTables();
  // The server endpoint is in the shard map; ask through a pull-less path.
  RpcClient rpc;
  Message m;
  m.header.set_type(wire::GET_SHARD_MAP);
  auto reply = rpc.CallSync(rpc.Connect(coordinator), std::move(m), 3000);
  CHECK(reply.ok());
  return reply->header.shard_map().servers(0).endpoint();
}

TEST(ServerTest, MalformedInputIsRejectedAndHarmless) {
  InProcessCluster cluster(1);
  auto client = Connect(cluster.coordinator());
  const uint64_t n = 1000;
  ASSERT_TRUE(client->CreateTable(DenseTable("p", n)).ok());
  const std::vector<float> before = PullAll(client.get(), "p", n);
  RawPeer peer(ServerEndpoint(cluster.coordinator()));

  // 1. Garbage bytes as the header frame.
  peer.Send({std::string("\xff\xfe garbage \x01\x02\x03", 15), "more"});
  EXPECT_EQ(peer.ReceiveStatus().code(), StatusCode::kInvalidArgument);

  wire::Header push;
  push.set_type(wire::PUSH);
  // As the registered worker: a stranger's push is refused before it is
  // looked at (tests/security/forged_messages_test.cc).
  push.set_sender(client->worker_id());
  SetMemberToken(MemberTokenOf(*client), &push);
  push.set_request_id(11);
  push.set_table("p");
  push.set_key_begin(0);
  push.set_key_count(4);
  std::string four_floats(16, '\0');

  // 2. Wrong frame count: a push without its payload, and with two.
  peer.SendRequest(push, {});
  EXPECT_EQ(peer.ReceiveStatus().code(), StatusCode::kInvalidArgument);
  peer.SendRequest(push, {four_floats, four_floats});
  EXPECT_EQ(peer.ReceiveStatus().code(), StatusCode::kInvalidArgument);

  // 3. Unknown table.
  wire::Header unknown = push;
  unknown.set_table("nope");
  peer.SendRequest(unknown, {four_floats});
  EXPECT_EQ(peer.ReceiveStatus().code(), StatusCode::kNotFound);

  // 4. Wrong payload length, and a range outside the table.
  peer.SendRequest(push, {std::string(15, '\0')});
  EXPECT_EQ(peer.ReceiveStatus().code(), StatusCode::kInvalidArgument);
  wire::Header outside = push;
  outside.set_key_begin(n - 2);
  peer.SendRequest(outside, {four_floats});
  EXPECT_EQ(peer.ReceiveStatus().code(), StatusCode::kWrongShard);

  // 5. NaN and Inf gradients.
  float bad[4] = {1.0f, std::numeric_limits<float>::quiet_NaN(), 0.0f, 0.0f};
  peer.SendRequest(push, {std::string(reinterpret_cast<char*>(bad), 16)});
  EXPECT_EQ(peer.ReceiveStatus().code(), StatusCode::kInvalidArgument);
  bad[1] = std::numeric_limits<float>::infinity();
  peer.SendRequest(push, {std::string(reinterpret_cast<char*>(bad), 16)});
  EXPECT_EQ(peer.ReceiveStatus().code(), StatusCode::kInvalidArgument);
  FloatBuffer nan_grads(n);
  nan_grads[500] = std::nanf("");
  Status s = client->Push("p", 0, nan_grads).get();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;

  // 6. Unknown message type and a header that claims to be a reply.
  wire::Header weird;
  weird.set_type(static_cast<wire::MsgType>(77));
  peer.SendRequest(weird, {});
  EXPECT_EQ(peer.ReceiveStatus().code(), StatusCode::kInvalidArgument);

  // Parameters are unharmed and the server still serves correct requests.
  EXPECT_EQ(PullAll(client.get(), "p", n), before);
  FloatBuffer ok(n);
  for (auto& v : ok) v = 1.0f;
  ASSERT_TRUE(client->Push("p", 0, ok).get().ok());
  const std::vector<float> after = PullAll(client.get(), "p", n);
  for (uint64_t i = 0; i < n; ++i) ASSERT_FLOAT_EQ(after[i], before[i] - 0.1f);

  // And it counted what it rejected.
  RpcClient rpc;
  Message m;
  m.header.set_type(wire::SERVER_STATS);
  auto stats = rpc.CallSync(rpc.Connect(ServerEndpoint(cluster.coordinator())), std::move(m), 3000);
  ASSERT_TRUE(stats.ok());
  EXPECT_GE(stats->header.server_stats().rejected(), 8u);
  EXPECT_EQ(stats->header.server_stats().nonfinite_rejected(), 3u);
}

// A PUSH_PULL whose gradient has one NaN or Inf, at its first, a middle or
// its last element, is refused whole: the server checks the whole gradient
// before its one pass that updates the parameters and writes the reply
// (Optimizer::ApplyAndCopy), so no element of it is applied. The range is
// not a multiple of any block or vector length.
TEST(ServerTest, NonFinitePushPullIsRefusedWholeWithNothingApplied) {
  InProcessCluster cluster(1);
  auto client = Connect(cluster.coordinator());
  const uint64_t n = 3 * 4096 + 1029;
  ASSERT_TRUE(client->CreateTable(DenseTable("p", n)).ok());
  const std::vector<float> before = PullAll(client.get(), "p", n);
  RawPeer peer(ServerEndpoint(cluster.coordinator()));
  wire::Header h;
  h.set_type(wire::PUSH_PULL);
  h.set_sender(client->worker_id());
  SetMemberToken(MemberTokenOf(*client), &h);
  h.set_table("p");
  h.set_key_begin(0);
  h.set_key_count(n);
  int64_t request_id = 100;
  for (const uint64_t at : {uint64_t{0}, n / 2, n - 1}) {
    for (const float bad : {std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity()}) {
      std::vector<float> g(n, 0.25f);
      g[at] = bad;
      h.set_request_id(++request_id);
      peer.SendRequest(h, {std::string(reinterpret_cast<const char*>(g.data()),
                                       n * sizeof(float))});
      EXPECT_EQ(peer.ReceiveStatus().code(), StatusCode::kInvalidArgument)
          << "bad value " << bad << " at " << at;
    }
  }
  ASSERT_EQ(PullAll(client.get(), "p", n), before);
  // A finite PushPull is applied to every key, and answers what it wrote.
  FloatBuffer g(n), out(n);
  for (uint64_t i = 0; i < n; ++i) g[i] = static_cast<float>(i % 13) - 6.0f;
  ASSERT_TRUE(client->PushPull("p", 0, g, out).get().ok());
  const std::vector<float> after = PullAll(client.get(), "p", n);
  for (uint64_t i = 0; i < n; ++i) {
    ASSERT_FLOAT_EQ(after[i], before[i] - 0.1f * g[i]) << i;
    ASSERT_EQ(out[i], after[i]) << i;
  }
}

TEST(ServerTest, ClientRejectsBadArgumentsLocally) {
  InProcessCluster cluster(1);
  auto client = Connect(cluster.coordinator());
  ASSERT_TRUE(client->CreateTable(DenseTable("q", 100)).ok());
  EXPECT_EQ(client->Pull("q", 90, FloatBuffer(20)).get().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(client->Pull("missing", 0, FloatBuffer(1)).get().code(), StatusCode::kNotFound);
  // Re-creating with the same options is fine; different options are not.
  EXPECT_TRUE(client->CreateTable(DenseTable("q", 100)).ok());
  EXPECT_EQ(client->CreateTable(DenseTable("q", 101)).code(), StatusCode::kInvalidArgument);
  TableOptions bad = DenseTable("r", 10);
  bad.optimizer.name = "rmsprop";
  EXPECT_EQ(client->CreateTable(bad).code(), StatusCode::kInvalidArgument);
}

TEST(ServerTest, OutOfRangeServerIdIsRefused) {
  InProcessCluster cluster(1);
  ServerOptions so;
  so.coordinator = cluster.coordinator();
  so.store.kind = "memory";
  so.server_id = 5;
  so.register_timeout_ms = 3000;
  auto server = Server::Start(so);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), StatusCode::kInvalidArgument) << server.status();
  EXPECT_NE(server.status().message().find("out of range"), std::string::npos);
}

// A disk that fails (ENOSPC) during a coordinated checkpoint: the server
// reports the error (the checkpoint fails, naming it), keeps serving from
// its last good state, and the next checkpoint on a recovered disk works.
TEST(ServerTest, CheckpointOnAFullDiskFailsAndTheServerGoesOn) {
  testing_storage::ScopedTempDir dir("server_disk_fault");
  CoordinatorOptions co;
  co.num_servers = 1;
  auto coordinator = Coordinator::Start(co);
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  std::thread coordinating([&] { (*coordinator)->Run(); });
  auto fs = std::make_shared<FaultInjectingFileSystem>();
  ServerOptions so;
  so.coordinator = (*coordinator)->endpoint();
  so.store.data_dir = dir.path() + "/data/server-0";
  so.store.file_system = fs;
  so.heartbeat_ms = 100;
  auto server = Server::Start(so);
  ASSERT_TRUE(server.ok()) << server.status();
  std::thread serving([&] { (*server)->Run().IgnoreError(); });
  {
    ClientOptions cli;
    cli.coordinator = (*coordinator)->endpoint();
    auto client = Client::Connect(cli);
    ASSERT_TRUE(client.ok()) << client.status();
    TableOptions t = DenseTable("w", 100);
    ASSERT_TRUE((*client)->CreateTable(t).ok());
    ASSERT_TRUE((*client)->Push("w", 0, FloatBuffer(100)).get().ok());

    RpcClient rpc;
    const int peer = rpc.Connect((*coordinator)->endpoint());
    const std::string session = OperatorSession(&rpc, peer);
    auto trigger = [&] {
      Message m;
      m.header.set_type(wire::TRIGGER_CHECKPOINT);
      SetMemberToken(session, &m.header);
      return rpc.CallSync(peer, std::move(m), 60000).status();
    };
    fs->SetWriteError(FaultInjectingFileSystem::WriteError::kNoSpace, "/checkpoints/");
    Status failed = trigger();
    EXPECT_FALSE(failed.ok());
    EXPECT_NE(failed.ToString().find("No space left on device"), std::string::npos) << failed;
    // Still serving, from memory: a push and a pull go through.
    FloatBuffer grads(100);
    for (size_t i = 0; i < grads.size(); ++i) grads[i] = 1.0f;
    ASSERT_TRUE((*client)->Push("w", 0, grads).get().ok());
    FloatBuffer out(100);
    ASSERT_TRUE((*client)->Pull("w", 0, out).get().ok());
    EXPECT_NE(out[0], 0.0f);

    fs->SetWriteError(FaultInjectingFileSystem::WriteError::kNone);
    Status ok = trigger();
    EXPECT_TRUE(ok.ok()) << ok;
  }
  (*server)->Stop();
  serving.join();
  (*coordinator)->Stop();
  coordinating.join();
}

// Every file under `dir` (relative path -> contents).
std::map<std::string, std::string> DirContents(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::ostringstream contents;
    contents << in.rdbuf();
    files[std::filesystem::relative(e.path(), dir).string()] = contents.str();
  }
  return files;
}

// A server started with restore_from ("--restore_from=latest") whose restore
// fails on the store's file system (ENOSPC copying the checkpoint's MANIFEST
// into the scratch copy, midway through the restore): Start() fails with an
// IOError naming the data dir, the checkpoint and the disk error; the data
// dir is byte for byte what it was and no scratch copy is left. With the
// disk recovered the same restore succeeds.
TEST(ServerTest, RestoreFailingOnTheStoresFileSystemLeavesTheDataDirUntouched) {
  testing_storage::ScopedTempDir dir("server_restore_fault");
  CoordinatorOptions co;
  co.num_servers = 1;
  auto coordinator = Coordinator::Start(co);
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  std::thread coordinating([&] { (*coordinator)->Run(); });
  auto fs = std::make_shared<FaultInjectingFileSystem>();
  ServerOptions so;
  so.coordinator = (*coordinator)->endpoint();
  so.server_id = 0;
  so.store.data_dir = dir.path() + "/data/server-0";
  so.store.file_system = fs;
  so.heartbeat_ms = 100;
  {
    auto server = Server::Start(so);
    ASSERT_TRUE(server.ok()) << server.status();
    std::thread serving([&] { (*server)->Run().IgnoreError(); });
    {
      ClientOptions cli;
      cli.coordinator = (*coordinator)->endpoint();
      auto client = Client::Connect(cli);
      ASSERT_TRUE(client.ok()) << client.status();
      ASSERT_TRUE((*client)->CreateTable(DenseTable("w", 100)).ok());
      FloatBuffer grads(100);
      for (size_t i = 0; i < grads.size(); ++i) grads[i] = 1.0f;
      ASSERT_TRUE((*client)->Push("w", 0, grads).get().ok());
      RpcClient rpc;
      const int peer = rpc.Connect((*coordinator)->endpoint());
      Message m;
      m.header.set_type(wire::TRIGGER_CHECKPOINT);
      SetMemberToken(OperatorSession(&rpc, peer), &m.header);
      const Status checkpointed = rpc.CallSync(peer, std::move(m), 60000).status();
      ASSERT_TRUE(checkpointed.ok()) << checkpointed;
      // The data dir moves on past the checkpoint.
      ASSERT_TRUE((*client)->Push("w", 0, grads).get().ok());
    }
    (*server)->Stop();
    serving.join();
  }
  const std::map<std::string, std::string> before = DirContents(so.store.data_dir);
  ASSERT_FALSE(before.empty());

  so.restore_from = "latest";
  fs->SetWriteError(FaultInjectingFileSystem::WriteError::kNoSpace, "server-0.restoring/MANIFEST");
  auto failed = Server::Start(so);
  ASSERT_FALSE(failed.ok());
  const std::string error = failed.status().ToString();
  EXPECT_EQ(failed.status().code(), StatusCode::kIOError) << error;
  EXPECT_NE(error.find("cannot restore " + so.store.data_dir), std::string::npos) << error;
  EXPECT_NE(error.find("/ckpt-"), std::string::npos) << error;
  EXPECT_NE(error.find("No space left on device"), std::string::npos) << error;
  EXPECT_GT(fs->injected_errors(), 0u);
  EXPECT_EQ(DirContents(so.store.data_dir), before);
  EXPECT_FALSE(std::filesystem::exists(so.store.data_dir + ".restoring"));

  fs->SetWriteError(FaultInjectingFileSystem::WriteError::kNone);
  {
    auto restored = Server::Start(so);
    ASSERT_TRUE(restored.ok()) << restored.status();
    EXPECT_NE(DirContents(so.store.data_dir), before);
  }
  (*coordinator)->Stop();
  coordinating.join();
}

}  // namespace
}  // namespace relaxps
