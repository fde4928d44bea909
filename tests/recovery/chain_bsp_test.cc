// Chain replication under BSP, end to end (real coordinator and server
// processes, --recovery=chain --replicas=2): the head of each dense range
// closes its rounds and forwards CHAIN_COMPLETE with each round's worker
// count; the follower keeps each worker's forwarded pushes apart and applies
// the rounds the head names. Three workers push layer by layer (one skips a
// layer each clock) in a different order each clock; afterwards both
// replicas of every range hold, slot by slot (parameters, Adam's m and v),
// bit for bit the model of one process with the combined batch
// (tests/server/bsp_reference.h).
#include <algorithm>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/consistency/dense_bsp_driver.h"
#include "tests/recovery/chain_util.h"
#include "tests/test_util.h"

namespace relaxps {
namespace test {
namespace {

constexpr uint64_t kSize = 6000;  // Two ranges: [0, 4096) and [4096, 6000).
constexpr int kWorkers = 3;
constexpr int kClocks = 5;

TEST(ChainBspTest, EveryReplicaHoldsTheCombinedBatchModel) {
  const std::string dir = MakeTempDir();
  ASSERT_OK_AND_ASSIGN(auto cluster,
                       RecoveryCluster::Start(dir, 2,
                                              {"--recovery=chain", "--replicas=2",
                                               "--consistency=bsp", "--heartbeat_timeout_ms=3000"}));
  for (int id = 0; id < 2; ++id) ASSERT_OK(cluster->StartServer(id, {"--store=memory"}));
  ASSERT_OK_AND_ASSIGN(std::vector<std::unique_ptr<Client>> owned,
                       ConnectWorkers(cluster.get(), kWorkers, DenseAdamTable("w", kSize)));
  std::vector<Client*> workers;
  for (auto& c : owned) workers.push_back(c.get());
  DenseBspDriver driver(workers, DenseAdamTable("w", kSize), {0, 2500, 4096, kSize});
  ASSERT_OK(driver.Start());
  std::vector<size_t> order(kWorkers);
  std::iota(order.begin(), order.end(), 0);
  for (int t = 0; t < kClocks; ++t) {
    std::next_permutation(order.begin(), order.end());
    ASSERT_OK(driver.Push(t, order));
    for (Client* w : workers) ASSERT_OK(w->Clock());
    ASSERT_OK_AND_ASSIGN(const size_t differing, driver.PullAndCompare());
    EXPECT_EQ(differing, 0u) << "clock " << t;
  }

  const std::vector<ChainRange> ranges = Chains(cluster.get(), "w");
  ASSERT_EQ(ranges.size(), 2u);
  for (const ChainRange& r : ranges) {
    ASSERT_EQ(r.chain.size(), 2u);
    for (int slot = 0; slot < 3; ++slot) {
      const float* expected = driver.reference().slot(slot).data() + r.begin;
      for (int server : r.chain) {
        ASSERT_OK_AND_ASSIGN(std::vector<float> got, WhenInSync([&] {
                               return ReadDenseSlot(cluster->server_endpoint(server), "w", r.begin,
                                                    r.end - r.begin, slot);
                             }));
        ASSERT_EQ(got.size(), r.end - r.begin);
        const size_t differing = DifferingFloats(got.data(), expected, got.size());
        EXPECT_EQ(differing, 0u) << "range " << r.begin << " slot " << slot << " server "
                                 << server << (server == r.chain[0] ? " (head)" : " (follower)");
        std::printf("chain bsp: range [%llu, %llu) slot %d on server %d (%s): %zu of %zu floats "
                    "differ from one process with the combined batch\n",
                    static_cast<unsigned long long>(r.begin),
                    static_cast<unsigned long long>(r.end), slot, server,
                    server == r.chain[0] ? "head" : "follower", differing, got.size());
      }
    }
  }
  RemoveTree(dir);
}

}  // namespace
}  // namespace test
}  // namespace relaxps
