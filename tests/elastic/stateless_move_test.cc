// Range moves under --recovery=stateless (docs/elastic.md "Stateless") on
// real processes: a one-server job gets a second server (--join) that takes
// the tail of the table, and the joined server is SIGKILLed right after the
// move, before the worker pulled anything by the new map. The worker's copy
// of the whole table follows the map (LocalReplica::FollowMoves): it trains
// the moved range locally from its piece of the copy, the restarted server
// is re-seeded from it, and with one worker, SGD and integer gradients every
// key ends exactly at the initial value minus lr times every gradient pushed
// (none lost, none applied twice, on either server).
#include <signal.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/shard_map.h"
#include "tests/elastic/joined_server.h"
#include "tests/recovery/recovery_util.h"
#include "tests/recovery/stateless_util.h"
#include "tests/test_util.h"

namespace relaxps {
namespace test {
namespace {

constexpr uint64_t kSize = 3 * kDenseChunk + 1000;
constexpr uint64_t kCut = 2 * kDenseChunk;  // The joined server's share: [kCut, kSize).
constexpr float kLr = 0.5f;
constexpr float kInit = 1.0f;
constexpr int kJoined = 1;

TEST(StatelessMoveTest, AServerLostRightAfterAMoveIsReseededFromTheWorkersSplitCopy) {
  const std::string dir = MakeTempDir();
  const std::string events = dir + "/events.jsonl";
  ASSERT_OK_AND_ASSIGN(auto cluster,
                       RecoveryCluster::Start(dir, 1, {"--recovery=stateless",
                                                       "--heartbeat_timeout_ms=1000",
                                                       "--reseed_timeout_ms=3000",
                                                       "--events_file=" + events}));
  const std::vector<std::string> flags = StatelessServerFlags();
  ASSERT_OK(cluster->StartServer(0, flags));
  ASSERT_OK_AND_ASSIGN(auto client, cluster->Connect("worker"));
  ASSERT_OK(client->CreateTable(SgdTable(kSize, kLr, kInit)));
  std::vector<double> sum(kSize, 0.0);
  int step = 0;
  FloatBuffer out(kSize);
  auto train = [&](int steps) {
    for (int k = 0; k < steps; ++k, ++step) {
      FloatBuffer g = IntegerGradient(kSize, 0, step);
      ASSERT_OK(client->PushPull("w", 0, g, out).get()) << "step " << step;
      for (uint64_t i = 0; i < kSize; ++i) sum[i] += g[i];
    }
  };
  train(3);  // The worker's copy: the whole table, from server 0.

  std::unique_ptr<Subprocess> joined;
  std::string joined_endpoint;
  ASSERT_OK(JoinServer(cluster.get(), kJoined, flags, events, kCut, &joined, &joined_endpoint));
  joined->Kill(SIGKILL);
  ASSERT_OK(joined->Wait(Millis(10000)).status());
  // The next push goes to server 0 by the old map, is answered "moved", and
  // its tail, for the lost server 1, is served from the worker's copy.
  train(4);
  EXPECT_GT(client->stats().local_steps, 0u) << "the moved range was never trained locally";

  // Server 1 again (empty, --store=memory): seeded from the worker's copy.
  ASSERT_OK(cluster->StartServer(kJoined, flags));
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  StatusOr<std::vector<float>> seeded = UnavailableError("not asked");
  while (std::chrono::steady_clock::now() < until) {
    seeded = ReadDenseSlot(cluster->server_endpoint(kJoined), "w", kCut, kSize - kCut, 0);
    if (seeded.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_OK(seeded.status()) << "server 1 was never seeded";
  train(3);  // Back on both servers.

  ASSERT_OK(client->Pull("w", 0, out).get());
  ASSERT_OK_AND_ASSIGN(std::vector<float> head,
                       ReadDenseSlot(cluster->server_endpoint(0), "w", 0, kCut, 0));
  ASSERT_OK_AND_ASSIGN(std::vector<float> tail,
                       ReadDenseSlot(cluster->server_endpoint(kJoined), "w", kCut, kSize - kCut, 0));
  size_t wrong = 0;
  for (uint64_t i = 0; i < kSize; ++i) {
    const float expected = kInit - kLr * static_cast<float>(sum[i]);
    const float held = i < kCut ? head[i] : tail[i - kCut];
    wrong += out[i] != expected || held != expected;
  }
  std::printf("stateless move check: %d steps, %llu local, %zu of %llu keys off the exact sum\n",
              step, static_cast<unsigned long long>(client->stats().local_steps), wrong,
              static_cast<unsigned long long>(kSize));
  EXPECT_EQ(wrong, 0u);
}

}  // namespace
}  // namespace test
}  // namespace relaxps
