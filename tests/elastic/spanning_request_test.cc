// One request per server for its adjacent ranges (docs/elastic.md, "One
// request per server"), in running in-process jobs. After the moves of issue
// 43's acceptance run (one server, two joins, the first drained) a worker
// step sends each remaining server one request per run of adjacent ranges it
// holds, not one per range (the servers' request counters), and the model is
// what the pushes make it; a push spanning two ranges of a server is applied
// to both once, counted once, and its resend is a duplicate; a request that
// runs into keys its server does not hold is refused whole, "moved", with
// nothing applied; a push split into parts across the ranges' boundary
// takes the optimizer steps of the whole one.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "client/client.h"
#include "client/testing.h"
#include "common/member_token.h"
#include "common/payload_codec.h"
#include "common/shard_map.h"
#include "tests/elastic/elastic_test_util.h"
#include "tests/server/bsp_reference.h"
#include "tests/server/in_process_cluster.h"
#include "tests/test_util.h"

namespace relaxps {
namespace {

using test::Ask;
using test::AskForReply;
using test::Drain;
using test::EventKinds;
using test::JoinedServer;
using test::MapOf;

// The cnn model of the acceptance run: one dense table of this many keys.
constexpr uint64_t kCnnKeys = 813258;

TableOptions Sgd(uint64_t size) {
  TableOptions t;
  t.name = "w";
  t.size = size;
  t.optimizer.name = "sgd";
  t.optimizer.lr = 0.5f;
  t.init.seed = 3;
  t.init.segments.push_back(InitSegment{0, size, InitKind::kUniform, -0.1f, 0.1f});
  return t;
}

// A worker of the job; with `part_keys` > 0 its dense requests are split
// into parts of about that many keys (ClientOptions::dense_part_bytes).
std::unique_ptr<Client> Connect(const std::string& coordinator, uint64_t part_keys = 0) {
  ClientOptions o;
  o.coordinator = coordinator;
  o.request_timeout_ms = 20000 * test::TimeScale();
  if (part_keys > 0) {
    o.dense_split_bytes = 4096;
    o.dense_part_bytes = static_cast<int64_t>(part_keys * sizeof(float));
  }
  auto c = Client::Connect(o);
  CHECK(c.ok()) << c.status();
  return std::move(c).value();
}

// A worker that created the sgd table "w" of `size` keys.
std::unique_ptr<Client> Worker(const std::string& coordinator, uint64_t size) {
  std::unique_ptr<Client> c = Connect(coordinator);
  CHECK(c->CreateTable(Sgd(size)).ok());
  return c;
}

// The dense ranges of "w" each server holds in `map`, in key order.
std::map<int, std::vector<wire::DenseRange>> RangesByServer(const wire::ShardMap& map) {
  std::map<int, std::vector<wire::DenseRange>> by;
  for (const wire::DenseRange& r : map.tables(0).ranges()) by[r.server()].push_back(r);
  for (auto& [server, ranges] : by) {
    std::sort(ranges.begin(), ranges.end(),
              [](const auto& a, const auto& b) { return a.begin() < b.begin(); });
  }
  return by;
}

// Runs of adjacent ranges among `ranges` (sorted).
int Runs(const std::vector<wire::DenseRange>& ranges) {
  int runs = 0;
  for (size_t i = 0; i < ranges.size(); ++i) {
    if (i == 0 || ranges[i - 1].end() != ranges[i].begin()) ++runs;
  }
  return runs;
}

// Waits until every move the coordinator started ended (done or failed) and
// no other started for a few polls, and `done` moves at least were done.
void WaitForMoves(const std::string& coordinator, size_t done) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  int settled = 0;
  while (settled < 3) {
    ASSERT_LT(std::chrono::steady_clock::now(), give_up) << "moves did not settle";
    const std::vector<std::string> kinds = EventKinds(coordinator);
    const size_t started = std::count(kinds.begin(), kinds.end(), "range_move_started");
    const size_t ended = std::count(kinds.begin(), kinds.end(), "range_move_done") +
                         std::count(kinds.begin(), kinds.end(), "range_move_failed");
    const size_t finished = std::count(kinds.begin(), kinds.end(), "range_move_done");
    settled = started == ended && finished >= done ? settled + 1 : 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// On a one-server job with `tables` dense tables: a server joins (the tail
// half of each table moves to it), then server 0 is drained (its half of
// each moves to the joined server whole), which then holds two adjacent
// ranges of each table.
void JoinAndDrainFirst(const std::string& coordinator, size_t tables,
                       std::unique_ptr<JoinedServer>* joined) {
  *joined = std::make_unique<JoinedServer>(coordinator);
  WaitForMoves(coordinator, tables);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  ASSERT_OK(Drain(coordinator, 0));
  WaitForMoves(coordinator, 2 * tables);
}

wire::ServerStats StatsOf(const std::string& endpoint) {
  Message m;
  m.header.set_type(wire::SERVER_STATS);
  return Ask(endpoint, std::move(m)).server_stats();
}

// A raw dense request of `type` for keys [begin, begin + n) of "w" as the
// worker `w` (its token), incarnation 77, exactly-once key `push_id`.
Message Raw(wire::MsgType type, const Client& w, uint64_t begin, const std::vector<float>& grads,
            uint64_t push_id, uint64_t map_version) {
  Message m;
  m.header.set_type(type);
  m.header.set_sender(w.worker_id());
  SetMemberToken(MemberTokenOf(w), &m.header);
  m.header.set_table("w");
  m.header.set_key_begin(begin);
  m.header.set_key_count(grads.size());
  m.header.set_clock(0);
  m.header.set_incarnation(77);
  m.header.set_push_id(push_id);
  m.header.set_shard_map_version(map_version);
  m.frames.push_back(EncodeFloats(FloatBuffer::CopyOf(grads), wire::ENC_FP32));
  return m;
}

std::vector<float> PullAll(Client* w, uint64_t size) {
  FloatBuffer out(size);
  CHECK(w->Pull("w", 0, out).get().ok());
  return std::vector<float>(out.begin(), out.end());
}

TEST(SpanningRequestTest, AfterTwoJoinsAndADrainEachServerGetsOneRequestPerRunPerStep) {
  InProcessCluster cluster(1, ConsistencyModel::kAsync);
  std::unique_ptr<Client> w = Worker(cluster.coordinator(), kCnnKeys);
  JoinedServer second(cluster.coordinator());
  WaitForMoves(cluster.coordinator(), 1);
  ASSERT_FALSE(HasFatalFailure());
  JoinedServer third(cluster.coordinator());
  WaitForMoves(cluster.coordinator(), 2);
  ASSERT_FALSE(HasFatalFailure());
  const std::vector<std::string> kinds = EventKinds(cluster.coordinator());
  const size_t before_drain = std::count(kinds.begin(), kinds.end(), "range_move_done");
  ASSERT_OK(Drain(cluster.coordinator(), 0));
  WaitForMoves(cluster.coordinator(), before_drain + 1);
  ASSERT_FALSE(HasFatalFailure());
  const wire::ShardMap map = MapOf(cluster.coordinator());
  std::map<int, std::vector<wire::DenseRange>> by = RangesByServer(map);
  ASSERT_EQ(by.count(0), 0u) << "server 0 still holds keys: " << map.DebugString();
  ASSERT_EQ(by.size(), 2u);

  // The worker's view: the drained map, learned from a pull.
  std::vector<float> params = PullAll(w.get(), kCnnKeys);
  std::map<int, uint64_t> before;
  const std::map<int, std::string> endpoints = {{1, second.server()->endpoint()},
                                                {2, third.server()->endpoint()}};
  for (const auto& [id, ep] : endpoints) before[id] = StatsOf(ep).requests();
  constexpr int kSteps = 4;
  FloatBuffer grads(kCnnKeys);
  for (uint64_t k = 0; k < kCnnKeys; ++k) grads[k] = static_cast<float>(k % 5) * 0.25f;
  FloatBuffer out(kCnnKeys);
  for (int step = 0; step < kSteps; ++step) {
    ASSERT_OK(w->PushPull("w", 0, grads, out).get());
    for (uint64_t k = 0; k < kCnnKeys; ++k) params[k] -= 0.5f * grads[k];
  }
  int ranges = 0, requests = 0;
  for (const auto& [id, ep] : endpoints) {
    // The second SERVER_STATS counts itself.
    const uint64_t per_step = (StatsOf(ep).requests() - before[id] - 1) / kSteps;
    const int runs = Runs(by[id]);
    std::cout << "server " << id << ": " << by[id].size() << " range(s) in " << runs
              << " run(s), " << per_step << " request(s) per worker step\n";
    EXPECT_EQ(per_step, static_cast<uint64_t>(runs)) << "server " << id;
    ranges += static_cast<int>(by[id].size());
    requests += static_cast<int>(per_step);
  }
  // The moves left some server adjacent ranges (else nothing was merged).
  EXPECT_LT(requests, ranges) << map.DebugString();
  // Every key took every step, once.
  EXPECT_EQ(test::DifferingFloats(out.data(), params.data(), kCnnKeys), 0u);
  // One update per request acknowledged, and one part counted per request.
  const ClientStats stats = w->stats();
  EXPECT_EQ(test::AppliedParts({endpoints.at(1), endpoints.at(2)}, w->worker_id(),
                               stats.incarnation),
            stats.acked_updates);
}

TEST(SpanningRequestTest, APushSpanningTwoRangesIsAppliedOnceAndItsResendIsADuplicate) {
  // One server, a join (the tail half moves to server 1), a drain of server
  // 0 (its half moves to server 1 whole): server 1 holds two adjacent ranges.
  constexpr uint64_t kSize = 4 * kDenseChunk;
  InProcessCluster cluster(1, ConsistencyModel::kAsync);
  std::unique_ptr<Client> w = Worker(cluster.coordinator(), kSize);
  std::unique_ptr<JoinedServer> joined;
  JoinAndDrainFirst(cluster.coordinator(), 1, &joined);
  ASSERT_FALSE(HasFatalFailure());
  const wire::ShardMap map = MapOf(cluster.coordinator());
  std::map<int, std::vector<wire::DenseRange>> by = RangesByServer(map);
  ASSERT_EQ(by.size(), 1u);
  ASSERT_EQ(by[1].size(), 2u) << map.DebugString();
  ASSERT_EQ(Runs(by[1]), 1);

  const std::string ep = joined->server()->endpoint();
  const std::vector<float> start = PullAll(w.get(), kSize);
  std::vector<float> grads(kSize);
  for (uint64_t k = 0; k < kSize; ++k) grads[k] = static_cast<float>(k % 3) + 1.0f;
  const uint64_t duplicates = StatsOf(ep).duplicates_skipped();
  wire::Header r = AskForReply(ep, Raw(wire::PUSH, *w, 0, grads, 5, map.version()));
  ASSERT_OK(StatusFromProto(r.status()));
  std::vector<float> expected = start;
  for (uint64_t k = 0; k < kSize; ++k) expected[k] -= 0.5f * grads[k];
  EXPECT_EQ(test::DifferingFloats(PullAll(w.get(), kSize).data(), expected.data(), kSize), 0u);
  EXPECT_EQ(test::AppliedParts({ep}, w->worker_id(), 77), 1u) << "one request, one part";

  // The resend: found in both ranges' records, applied in neither.
  r = AskForReply(ep, Raw(wire::PUSH, *w, 0, grads, 5, map.version()));
  ASSERT_OK(StatusFromProto(r.status()));
  EXPECT_EQ(StatsOf(ep).duplicates_skipped(), duplicates + 1);
  EXPECT_EQ(test::DifferingFloats(PullAll(w.get(), kSize).data(), expected.data(), kSize), 0u);
  EXPECT_EQ(test::AppliedParts({ep}, w->worker_id(), 77), 1u);

  // A PUSH_PULL spanning both answers every key with one frame.
  Message pp = Raw(wire::PUSH_PULL, *w, 0, grads, 6, map.version());
  RpcClient rpc;
  StatusOr<Message> reply = rpc.CallSync(rpc.Connect(ep), std::move(pp), 10000);
  ASSERT_OK(reply.status());
  ASSERT_EQ(reply->frames.size(), 1u);
  ASSERT_EQ(reply->frames[0].size(), kSize * sizeof(float));
  for (uint64_t k = 0; k < kSize; ++k) expected[k] -= 0.5f * grads[k];
  EXPECT_EQ(test::DifferingFloats(reply->frames[0].as<float>(), expected.data(), kSize), 0u);
  EXPECT_EQ(test::AppliedParts({ep}, w->worker_id(), 77), 2u);
}

TEST(SpanningRequestTest, ASplitPushSpanningTwoRangesTakesTheStepsOfTheWholeOne) {
  // Tables "a" and "b" alike (Adam: a step count per range), both ending on
  // server 1 as two adjacent ranges [0, 2 chunks) and [2, 4 chunks). One
  // worker pushes "a" whole (one request spanning both ranges), another
  // "b" split into parts of about 3500 keys (aligned: [6144, 9216) straddles
  // the ranges' boundary and continues a push into the second range, which
  // takes its step there). The same gradients in the same order: the same
  // model, bit for bit.
  constexpr uint64_t kSize = 4 * kDenseChunk;
  auto adam = [](const std::string& name) {
    TableOptions t = Sgd(kSize);
    t.name = name;
    t.optimizer.name = "adam";
    t.optimizer.lr = 0.01f;
    return t;
  };
  InProcessCluster cluster(1, ConsistencyModel::kAsync);
  std::unique_ptr<Client> whole = Connect(cluster.coordinator());
  std::unique_ptr<Client> split = Connect(cluster.coordinator(), /*part_keys=*/3500);
  ASSERT_OK(whole->CreateTable(adam("a")));
  ASSERT_OK(whole->CreateTable(adam("b")));
  std::unique_ptr<JoinedServer> joined;
  JoinAndDrainFirst(cluster.coordinator(), 2, &joined);
  ASSERT_FALSE(HasFatalFailure());
  const wire::ShardMap map = MapOf(cluster.coordinator());
  for (const wire::TableShards& t : map.tables()) {
    ASSERT_EQ(t.ranges_size(), 2) << map.DebugString();
    for (const wire::DenseRange& r : t.ranges()) EXPECT_EQ(r.server(), 1);
  }
  FloatBuffer grads(kSize), a(kSize), b(kSize);
  for (int step = 0; step < 3; ++step) {
    for (uint64_t k = 0; k < kSize; ++k) grads[k] = static_cast<float>((k + step) % 7) - 3.0f;
    ASSERT_OK(whole->PushPull("a", 0, grads, a).get());
    ASSERT_OK(split->PushPull("b", 0, grads, b).get());
  }
  EXPECT_EQ(test::DifferingFloats(a.data(), b.data(), kSize), 0u);
}

TEST(SpanningRequestTest, ARequestRunningIntoAnotherServersKeysIsRefusedWholeAsMoved) {
  // Two servers: server 0 holds [0, 1 chunk), server 1 the rest.
  constexpr uint64_t kSize = 2 * kDenseChunk;
  InProcessCluster cluster(2, ConsistencyModel::kAsync);
  std::unique_ptr<Client> w = Worker(cluster.coordinator(), kSize);
  const wire::ShardMap map = MapOf(cluster.coordinator());
  const std::vector<float> start = PullAll(w.get(), kSize);
  const std::vector<float> grads(kSize, 1.0f);
  // Sent by an older map than the server's: the refusal carries the map.
  const wire::Header r = AskForReply(cluster.server(0)->endpoint(),
                                     Raw(wire::PUSH, *w, 0, grads, 9, map.version() - 1));
  EXPECT_EQ(StatusFromProto(r.status()).code(), StatusCode::kWrongShard) << r.DebugString();
  EXPECT_TRUE(r.has_shard_map());
  // Nothing of it applied, on either server.
  EXPECT_EQ(test::DifferingFloats(PullAll(w.get(), kSize).data(), start.data(), kSize), 0u);
  EXPECT_EQ(test::AppliedParts({cluster.server(0)->endpoint()}, w->worker_id(), 77), 0u);
}

}  // namespace
}  // namespace relaxps
