// Hybrid recovery's last fallback, through real processes: both replicas of a
// range die at once and no worker holds a copy of it (it only pushed). The
// worker trains on the table's initializer values meanwhile, and the
// server registering with the last holder's id comes back with what it
// restored from the latest checkpoint (--restore_from=latest) plus the
// worker's change, logged as "FALLBACK cause=no-worker-copy"; the other
// server rejoins its chain.
#include <signal.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/recovery/chain_util.h"
#include "tests/recovery/recovery_util.h"
#include "tests/recovery/stateless_util.h"
#include "tests/test_util.h"

namespace relaxps {
namespace test {
namespace {

constexpr uint64_t kSize = 64;
constexpr float kLr = 0.5f;

TEST(HybridCheckpointTest, RangeNoWorkerHoldsComesBackFromTheLatestCheckpoint) {
  const std::string dir = MakeTempDir();
  ASSERT_OK_AND_ASSIGN(auto cluster,
                       RecoveryCluster::Start(dir, 2, {"--recovery=hybrid", "--replicas=2",
                                                       "--heartbeat_timeout_ms=1000",
                                                       "--reseed_timeout_ms=2000",
                                                       // The holder's own id, not a spare.
                                                       "--spare_takeover_ms=600000"}));
  const std::vector<std::string> flags = {"--store=rocksdb", "--heartbeat_ms=100"};
  for (int id = 0; id < 2; ++id) ASSERT_OK(cluster->StartServer(id, flags));
  ASSERT_OK_AND_ASSIGN(auto c, cluster->Connect("worker"));
  ASSERT_OK(c->CreateTable(SgdTable(kSize, kLr, 8.0f)));
  std::vector<float> at_checkpoint(kSize, 8.0f);
  for (int step = 0; step < 3; ++step) {
    FloatBuffer g = IntegerGradient(kSize, 0, step);
    ASSERT_OK(c->Push("w", 0, g).get());
    for (uint64_t i = 0; i < kSize; ++i) at_checkpoint[i] -= kLr * g[i];
    ASSERT_OK(c->Clock());
  }
  ASSERT_OK_AND_ASSIGN(CommandResult ck, cluster->Ctl({"checkpoint"}));
  ASSERT_EQ(ck.exit_status, 0) << ck.output;
  ASSERT_OK(c->Push("w", 0, IntegerGradient(kSize, 0, 3)).get());  // Lost with both.

  cluster->server(0)->Kill(SIGKILL);
  cluster->server(1)->Kill(SIGKILL);
  for (int id = 0; id < 2; ++id) ASSERT_OK(cluster->server(id)->Wait(Millis(10000)).status());
  ASSERT_OK_AND_ASSIGN(std::string stranded,
                       WaitForLine(dir + "/coordinator.log",
                                   "FALLBACK cause=all-replicas-lost server=[01] ",
                                   Scaled(Millis(15000))));
  const int holder = stranded[stranded.find("server=") + 7] - '0';
  // No copy to train on: the worker's pushes are served locally on the
  // initializer's values (8.0), and only their change is merged.
  std::vector<float> local(kSize, 8.0f), change(kSize, 0.0f);
  for (int step = 4; step < 6; ++step) {
    FloatBuffer g = IntegerGradient(kSize, 0, step), out(kSize);
    ASSERT_OK(c->PushPull("w", 0, g, out).get());
    for (uint64_t i = 0; i < kSize; ++i) {
      const float before = local[i];
      local[i] = before - kLr * g[i];
      change[i] += local[i] - before;
    }
    EXPECT_EQ(std::vector<float>(out.data(), out.data() + kSize), local);
    ASSERT_OK(c->Clock());
  }
  EXPECT_EQ(c->stats().local_steps, 2u);
  std::vector<std::string> restore = flags;
  restore.push_back("--restore_from=latest");
  ASSERT_OK(cluster->StartServer(1 - holder, flags));
  ASSERT_OK(cluster->StartServer(holder, restore));
  ASSERT_OK_AND_ASSIGN(std::string fallback,
                       WaitForLine(dir + "/coordinator.log",
                                   "FALLBACK cause=no-worker-copy server=" + std::to_string(holder) +
                                       " .*source=checkpoint@.* plus the workers' merged changes",
                                   Scaled(Millis(30000))));
  StatusOr<std::vector<float>> got = UnavailableError("not read");
  for (int i = 0; i < 300 && !got.ok(); ++i) {
    got = ReadDenseSlot(cluster->server_endpoint(holder), "w", 0, kSize, 0);
    if (!got.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_OK(got);
  std::vector<float> expected(kSize);
  for (uint64_t i = 0; i < kSize; ++i) expected[i] = at_checkpoint[i] + (0.0f + 1.0f * change[i]);
  EXPECT_EQ(*got, expected);
  // The other server joins the chain as tail once it is served again.
  ASSERT_TRUE(WaitForChains(cluster.get(), "w", -1, 2, 15000));
  // The worker switches back: once its pull reads the restored values its
  // pushes land on the server.
  FloatBuffer pulled(kSize);
  for (int i = 0; i < 300; ++i) {
    ASSERT_OK(c->Pull("w", 0, pulled).get());
    if (std::vector<float>(pulled.data(), pulled.data() + kSize) == expected) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(std::vector<float>(pulled.data(), pulled.data() + kSize), expected);
  ASSERT_OK(c->Push("w", 0, IntegerGradient(kSize, 0, 6)).get());
  EXPECT_EQ(c->stats().local_steps, 2u);
  c.reset();
  RemoveTree(dir);
}

}  // namespace
}  // namespace test
}  // namespace relaxps
