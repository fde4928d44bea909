// Range moves under the policies that keep state outside the servers'
// ranges (replay: the workers' logs; stateless: the workers' copies), on
// real processes: two BSP workers train a one-server job during which a
// server joins (the tail moves to it) and the first server is drained (the
// head moves too, and it exits); the final model is bit for bit the model of
// the same job without them, and every part a worker was acknowledged is
// applied once (applied parts == acknowledged parts, relaxps-ctl stats).
#include <signal.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/shard_map.h"
#include "tests/elastic/joined_server.h"
#include "tests/recovery/recovery_util.h"
#include "tests/server/bsp_reference.h"
#include "tests/test_util.h"

namespace relaxps {
namespace test {
namespace {

// The joined server's share is the tail [2 chunks, kSize).
constexpr uint64_t kSize = 3 * kDenseChunk + 1000;
constexpr uint64_t kCut = 2 * kDenseChunk;
constexpr int kJoined = 1;

FloatBuffer Grad(int round) {
  FloatBuffer g(kSize);
  for (uint64_t i = 0; i < kSize; ++i) {
    g[i] = 0.001f * static_cast<float>((i * 7 + round * 3) % 23) - 0.01f;
  }
  return g;
}

// Two BSP workers train through kClocks clocks of a one-server job under
// `policy`;
// with `moves`, a server joins after clock 2 (the tail moves to it) and
// server 0 is drained after clock 4 (the head moves too, and it exits).
// Returns the final parameters, or fails the test.
std::vector<float> RunBspJob(const std::string& policy, bool moves) {
  constexpr int kClocks = 8;
  const std::string dir = MakeTempDir();
  const std::string events = dir + "/events.jsonl";
  auto cluster = RecoveryCluster::Start(
      dir, 1, {"--recovery=" + policy, "--consistency=bsp", "--heartbeat_timeout_ms=1000",
               "--events_file=" + events});
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  if (!cluster.ok()) return {};
  RecoveryCluster* c = cluster->get();
  const std::vector<std::string> flags = {
      policy == "replay" ? "--store=rocksdb" : "--store=memory", "--heartbeat_ms=100"};
  EXPECT_OK(c->StartServer(0, flags));
  std::vector<std::unique_ptr<Client>> workers;
  for (int w = 0; w < 2; ++w) {
    auto client = c->Connect("worker");
    EXPECT_TRUE(client.ok()) << client.status();
    if (!client.ok()) return {};
    workers.push_back(std::move(client).value());
  }
  EXPECT_OK(workers[0]->CreateTable(DenseAdamTable("w", kSize)));
  EXPECT_OK(workers[1]->CreateTable(DenseAdamTable("w", kSize)));
  std::unique_ptr<Subprocess> joined;
  std::string joined_endpoint;
  FloatBuffer params(kSize);
  for (int t = 0; t < kClocks; ++t) {
    for (size_t w = 0; w < workers.size(); ++w) {
      // Alternate which worker's push arrives first.
      const size_t k = t % 2 == 0 ? w : 1 - w;
      FloatBuffer g = Grad(t * 2 + static_cast<int>(workers[k]->worker_id()));
      EXPECT_OK(workers[k]->Push("w", 0, g).get()) << "clock " << t;
    }
    for (auto& w : workers) EXPECT_OK(w->Clock());
    for (auto& w : workers) EXPECT_OK(w->Pull("w", 0, params).get()) << "clock " << t;
    if (moves && t == 2) {
      EXPECT_OK(JoinServer(c, kJoined, flags, events, kCut, &joined, &joined_endpoint));
    }
    if (moves && t == 4) {
      auto drain = c->Ctl({"drain-server", "0"});
      EXPECT_TRUE(drain.ok() && drain->exit_status == 0) << (drain.ok() ? drain->output : "");
    }
  }
  if (moves) {
    EXPECT_OK(c->server(0)->Wait(Millis(30000)).status()) << "server 0 never left";
  }
  for (auto& w : workers) {
    const ClientStats stats = w->stats();
    auto applied = c->AppliedParts(w->worker_id(), stats.incarnation);
    EXPECT_TRUE(applied.ok()) << applied.status();
    if (applied.ok()) {
      EXPECT_EQ(*applied, stats.acked_updates) << "worker " << w->worker_id();
    }
  }
  if (joined != nullptr) joined->Kill(SIGKILL);
  return std::vector<float>(params.begin(), params.end());
}

class BspMoveTest : public ::testing::TestWithParam<std::string> {};

TEST_P(BspMoveTest, AJoinAndADrainDuringTrainingEndBitIdenticalToTheJobWithout) {
  const std::vector<float> fixed = RunBspJob(GetParam(), false);
  const std::vector<float> moved = RunBspJob(GetParam(), true);
  ASSERT_EQ(fixed.size(), kSize);
  ASSERT_EQ(moved.size(), kSize);
  EXPECT_EQ(std::memcmp(fixed.data(), moved.data(), kSize * sizeof(float)), 0)
      << DifferingFloats(moved.data(), fixed.data(), kSize) << " floats differ";
}

// replay: rocksdb stores (its checkpoints); stateless: memory (a lost
// server restarts empty and is re-seeded).
INSTANTIATE_TEST_SUITE_P(Policies, BspMoveTest, ::testing::Values("replay", "stateless"));

}  // namespace
}  // namespace test
}  // namespace relaxps
