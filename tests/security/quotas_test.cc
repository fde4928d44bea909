// Quotas and limits (issue 13), without --security=curve: what one peer that
// knows an endpoint can make a server or the coordinator hold is bounded,
// and the job goes on.
//  * A table over the job's --max_table_mb or a server's --max_server_mb is
//    refused and leaves no trace in the map; later tables still work.
//  * BSP pushes at distinct future clocks: refused beyond the window.
//  * Sparse reads of random ids create no rows (both stores).
//  * Unread replies: bounded per peer, the excess dropped and counted.
//  * 100k rejected requests write less than 1 MB of log.
//  * A message over --max_message_mb never reaches the server.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include <glog/logging.h>
#include <gtest/gtest.h>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "client/client.h"
#include "client/testing.h"
#include "common/member_token.h"
#include "common/rpc_client.h"
#include "coordinator/coordinator.h"
#include "server/server.h"
#include "storage/param_store.h"
#include "tests/security/attack_util.h"
#include "tests/server/in_process_cluster.h"
#include "tests/test_util.h"

namespace relaxps {
namespace {

// A coordinator and `num_servers` servers in this process, with the options
// a test gives.
CoordinatorOptions WithServers(CoordinatorOptions co, int num_servers) {
  co.num_servers = num_servers;
  return co;
}

std::unique_ptr<Client> ConnectWorker(const std::string& coordinator) {
  ClientOptions o;
  o.coordinator = coordinator;
  o.request_timeout_ms = static_cast<int>(test::Scaled(test::Millis(10000)).count());
  auto c = Client::Connect(o);
  CHECK(c.ok()) << c.status();
  return std::move(c).value();
}

TableOptions Dense(const std::string& name, uint64_t size) {
  TableOptions t;
  t.name = name;
  t.size = size;
  t.optimizer.name = "sgd";
  t.optimizer.lr = 1.0f;
  return t;
}

std::vector<std::string> TableNames(const std::string& coordinator) {
  RpcClient rpc;
  Message m;
  m.header.set_type(wire::GET_SHARD_MAP);
  auto reply = rpc.CallSync(rpc.Connect(coordinator), std::move(m), 10000);
  CHECK(reply.ok()) << reply.status();
  std::vector<std::string> names;
  for (const auto& t : reply->header.shard_map().tables()) names.push_back(t.table().name());
  return names;
}

using test::RawPeer;

TEST(QuotasTest, TablesOverTheQuotasAreRefusedAndLeaveNoTrace) {
  CoordinatorOptions co;
  co.max_table_bytes = uint64_t{64} << 20;
  ServerOptions so;
  so.max_bytes = uint64_t{8} << 20;  // Per server; sgd holds 4 bytes per key.
  InProcessCluster cluster(WithServers(co, 2), so);
  auto worker = ConnectWorker(cluster.coordinator());

  // Over the job's largest table (the 2^34 floats): refused at once.
  Status s = worker->CreateTable(Dense("huge", uint64_t{1} << 34));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("--max_table_mb=64"), std::string::npos) << s;
  // Under it, but over what each server admits (3M floats = 12 MiB each).
  s = worker->CreateTable(Dense("big", uint64_t{6} << 20));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("--max_server_mb"), std::string::npos) << s;
  EXPECT_TRUE(TableNames(cluster.coordinator()).empty());

  // Later tables still work, up to the quota.
  ASSERT_OK(worker->CreateTable(Dense("ok", uint64_t{2} << 20)));
  EXPECT_EQ(TableNames(cluster.coordinator()), std::vector<std::string>{"ok"});
  FloatBuffer g(16), out(16);
  for (auto& v : g) v = 1.0f;
  ASSERT_OK(worker->PushPull("ok", 0, g, out).get());
  for (float v : out) EXPECT_FLOAT_EQ(v, -1.0f);
}

TEST(QuotasTest, BspPushesFarInTheFutureAreRefused) {
  CoordinatorOptions co;
  co.consistency = ConsistencyModel::kBsp;
  co.staleness = 0;
  ServerOptions so;
  so.max_clocks_ahead = 4;
  InProcessCluster cluster(WithServers(co, 1), so);
  auto worker = ConnectWorker(cluster.coordinator());
  auto other = ConnectWorker(cluster.coordinator());  // Stays at clock 0 meanwhile.
  ASSERT_OK(worker->CreateTable(Dense("w", 1000)));
  ASSERT_OK(other->GetTable("w"));

  // The attack of the issue: 500 pushes of 1 float at distinct future clocks
  // (each would hold a round buffer of the whole shard).
  RawPeer peer(cluster.server(0)->endpoint());
  wire::Header push;
  push.set_type(wire::PUSH);
  push.set_table("w");
  push.set_key_begin(0);
  push.set_key_count(1);
  push.set_sender(worker->worker_id());
  SetMemberToken(MemberTokenOf(*worker), &push);
  const float one = 1.0f;
  for (int c = 1; c <= 500; ++c) {
    push.set_request_id(c);
    push.set_clock(c);
    peer.Send(push, std::string(reinterpret_cast<const char*>(&one), sizeof(one)));
  }
  const wire::ServerStats stats = test::WaitForServerRequests(
      cluster.server(0)->endpoint(), 500, test::Scaled(test::Millis(20000)));
  // Clocks 1..4 fit the window (staleness 0 + 4); the other 496 are refused.
  EXPECT_GE(stats.quota_rejected(), 496u);

  // The real workers' round at clock 0 still closes.
  FloatBuffer g(1000), out(1000), g2(1000), out2(1000);
  for (auto& v : g) v = 1.0f;
  for (auto& v : g2) v = 3.0f;
  auto a = worker->PushPull("w", 0, g, out);
  auto b = other->PushPull("w", 0, g2, out2);
  const Status sa = a.get(), sb = b.get();
  ASSERT_OK(sb);
  ASSERT_OK(sa);
  EXPECT_FLOAT_EQ(out2[500], -2.0f);  // The mean of 1 and 3.
}

TEST(QuotasTest, SparseReadsCreateNoRows) {
  const std::string dir = test::MakeTempDir();
  for (const char* kind : {"memory", "rocksdb"}) {
    SCOPED_TRACE(kind);
    ParamStoreOptions o;
    o.kind = kind;
    o.data_dir = dir + "/" + kind;
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<ParamStore> store, NewParamStore(o));
    SparseTableSpec spec;
    spec.table = "emb";
    spec.width = 4;
    spec.num_slots = 1;
    spec.init.seed = 3;
    spec.init.segments.push_back({0, 4, InitKind::kUniform, -1.0f, 1.0f});
    ASSERT_OK(store->CreateSparse(spec));
    std::mt19937_64 rng(7);
    std::vector<uint64_t> ids(4000);
    for (auto& id : ids) id = rng();
    std::vector<float> peeked(ids.size() * 4), read(ids.size() * 4);
    ASSERT_OK(store->PeekRows("emb", ids.data(), ids.size(), peeked.data()));
    ASSERT_OK_AND_ASSIGN(uint64_t rows, store->NumRows("emb"));
    EXPECT_EQ(rows, 0u);
    // The values are what a created row would hold.
    ASSERT_OK(store->ReadRows("emb", ids.data(), ids.size(), read.data()));
    EXPECT_EQ(peeked, read);
    ASSERT_OK_AND_ASSIGN(rows, store->NumRows("emb"));
    EXPECT_EQ(rows, ids.size());
  }
  test::RemoveTree(dir);
}

TEST(QuotasTest, UnreadRepliesAreBoundedPerPeer) {
  CoordinatorOptions co;
  ServerOptions so;
  so.max_queued_replies = 16;
  InProcessCluster cluster(WithServers(co, 1), so);
  auto worker = ConnectWorker(cluster.coordinator());
  const uint64_t n = 100000;  // 400 KB per pull reply.
  ASSERT_OK(worker->CreateTable(Dense("p", n)));

  // 1,000 pulls whose replies are never read (the issue: 396 MB held).
  RawPeer peer(cluster.server(0)->endpoint(), /*rcvhwm=*/1);
  wire::Header pull;
  pull.set_type(wire::PULL);
  pull.set_table("p");
  pull.set_key_begin(0);
  pull.set_key_count(n);
  pull.set_sender(-1);
  for (int i = 1; i <= 1000; ++i) {
    pull.set_request_id(i);
    peer.Send(pull);
  }
  const wire::ServerStats stats = test::WaitForServerRequests(
      cluster.server(0)->endpoint(), 1000, test::Scaled(test::Millis(30000)));
  std::printf("1000 unread 400 KB pulls: %llu replies dropped\n",
              static_cast<unsigned long long>(stats.replies_dropped()));
  // At most the queue (16) plus what the kernel's socket buffers took.
  EXPECT_GE(stats.replies_dropped(), 900u);
  FloatBuffer out(n);
  ASSERT_OK(worker->Pull("p", 0, out).get());
}

// Waits until `server` has rejected more than `n` requests; returns the count.
uint64_t WaitRejectedAbove(const std::string& server, uint64_t n) {
  return test::WaitForServerStats(
             server, [n](const wire::ServerStats& s) { return s.rejected() > n; },
             test::Scaled(test::Millis(10000)))
      .rejected();
}

// The "frame declaring 2 GB": with ZMQ_MAXMSGSIZE the peer is cut off
// before the server allocates or sees the message. A PULL with one extra
// frame is a request the server answers with an error (counted as rejected)
// when it is small; the same request with a 4 MiB frame, over a 1 MiB limit,
// never reaches it, and the server goes on serving.
TEST(QuotasTest, MessagesOverTheSizeLimitNeverReachTheServer) {
  ServerOptions so;
  so.max_message_bytes = int64_t{1} << 20;
  InProcessCluster cluster(WithServers(CoordinatorOptions(), 1), so);
  auto worker = ConnectWorker(cluster.coordinator());
  ASSERT_OK(worker->CreateTable(Dense("p", 100)));
  wire::Header pull;
  pull.set_type(wire::PULL);
  pull.set_table("p");
  pull.set_key_begin(0);
  pull.set_key_count(100);
  pull.set_sender(-1);
  pull.set_request_id(1);

  const uint64_t before = test::ServerStatsOf(cluster.server(0)->endpoint()).rejected();
  RawPeer small(cluster.server(0)->endpoint());
  small.Send(pull, std::string(1000, 'x'));
  const uint64_t after_small = WaitRejectedAbove(cluster.server(0)->endpoint(), before);
  ASSERT_EQ(after_small, before + 1) << "the small malformed request was not seen";

  RawPeer big(cluster.server(0)->endpoint());
  big.Send(pull, std::string(size_t{4} << 20, 'x'));
  std::this_thread::sleep_for(test::Scaled(test::Millis(500)));
  small.Send(pull, std::string(1000, 'x'));  // A marker sent after the big one.
  const uint64_t after_marker = WaitRejectedAbove(cluster.server(0)->endpoint(), after_small);
  std::this_thread::sleep_for(test::Scaled(test::Millis(500)));
  EXPECT_EQ(test::ServerStatsOf(cluster.server(0)->endpoint()).rejected(), after_marker);
  EXPECT_EQ(after_marker, after_small + 1) << "the 4 MiB message reached the server";
  std::printf("4 MiB message over a 1 MiB limit: dropped by ZeroMQ (rejected %llu -> %llu, "
              "the marker only)\n",
              static_cast<unsigned long long>(after_small),
              static_cast<unsigned long long>(after_marker));
  FloatBuffer out(100);
  ASSERT_OK(worker->Pull("p", 0, out).get());
}

// Counts the bytes of WARNING lines glog writes.
class CountingSink : public google::LogSink {
 public:
  void send(google::LogSeverity severity, const char*, const char*, int, const struct ::tm*,
            const char* message, size_t message_len) override {
    if (severity >= google::GLOG_WARNING) {
      bytes_ += message_len + 60;  // Plus glog's line prefix.
      lines_ += 1;
    }
  }
  uint64_t bytes() const { return bytes_.load(); }
  uint64_t lines() const { return lines_.load(); }

 private:
  std::atomic<uint64_t> bytes_{0}, lines_{0};
};

TEST(QuotasTest, HundredThousandRejectedRequestsLogUnderOneMegabyte) {
  InProcessCluster cluster(WithServers(CoordinatorOptions(), 1), ServerOptions());
  auto worker = ConnectWorker(cluster.coordinator());
  ASSERT_OK(worker->CreateTable(Dense("p", 100)));
  CountingSink sink;
  google::AddLogSink(&sink);
  RawPeer peer(cluster.server(0)->endpoint());
  const auto start = std::chrono::steady_clock::now();
  wire::Header bad;
  bad.set_table("nope");
  for (int i = 1; i <= 100000; ++i) {
    bad.set_request_id(i);
    // Four reasons: a push without its worker's token, an unknown table
    // (an observer's pull), a forged WORKER_SET, a kind no server serves.
    // (A kind no build sends is refused before the server sees it:
    // relaxps_server_malformed_total.)
    bad.set_type(i % 4 == 0 ? wire::PUSH : i % 4 == 1 ? wire::PULL : wire::WORKER_SET);
    bad.set_sender(i % 4 == 1 ? -1 : 0);
    if (i % 4 == 3) bad.set_type(wire::GET_EVENTS);
    peer.Send(bad);
    if (i % 1000 == 0) peer.DrainReplies();
  }
  wire::ServerStats stats;
  const auto give_up = std::chrono::steady_clock::now() + test::Scaled(test::Millis(60000));
  for (;;) {
    peer.DrainReplies();
    stats = test::ServerStatsOf(cluster.server(0)->endpoint());
    if (stats.rejected() >= 100000 || std::chrono::steady_clock::now() >= give_up) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  google::RemoveLogSink(&sink);
  std::printf("100000 rejected requests in %.1f s: %llu WARNING lines, %llu bytes of log\n",
              seconds, static_cast<unsigned long long>(sink.lines()),
              static_cast<unsigned long long>(sink.bytes()));
  EXPECT_GE(stats.rejected(), 100000u);
  EXPECT_LT(sink.bytes(), 1000000u);
  // One line a second per reason (4 reasons), plus a little slack.
  EXPECT_LE(sink.lines(), 4 * (static_cast<uint64_t>(seconds) + 2) + 10);
  FloatBuffer out(100);
  ASSERT_OK(worker->Pull("p", 0, out).get());
}

}  // namespace
}  // namespace relaxps
