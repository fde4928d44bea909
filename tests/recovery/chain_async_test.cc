// --recovery=chain --replication=sync|async through real processes (three
// servers, --replicas=2): what each promises and what it may lose when a
// range's head dies. A worker pushes ones onto range A and then range B
// (SGD, lr 1: a replica's value is minus the pushes it holds) while A's
// tail is SIGSTOPped (so nothing A's head answers from then on reaches it);
// once the worker is blocked, A's head is SIGKILLed and its tail
// continued: it heads A alone. B is the range whose head survives and whose
// tail is the killed server: its head does not change, so nothing of it is
// lost or counted. Sync: the worker was blocked at once and nothing
// acknowledged is lost. Async: A's head went on answering until
// --replication_max_lag updates were not on the tail; the acknowledged
// pushes the new head lacks (at most the lag) are exactly what the worker
// counted lost (chain_async_lost).
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/recovery/chain_util.h"
#include "tests/test_util.h"

namespace relaxps {
namespace test {
namespace {

// Three ranges, one headed by each server, of 4 MiB each: a few pushes fill
// the socket buffers, so what the head answered while the tail was stopped
// is still in the head's send queue when it dies, not in the tail's
// receive buffer (which the tail would apply once continued).
constexpr uint64_t kSize = 3 * (uint64_t{1} << 20);
constexpr int kMaxLag = 8;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class ChainAsyncTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ChainAsyncTest, AHeadFailureLosesAtMostTheLagAndTheWorkerCountsIt) {
  const bool async = std::string(GetParam()) == "async";
  const std::string dir = MakeTempDir();
  ASSERT_OK_AND_ASSIGN(
      auto cluster,
      RecoveryCluster::Start(dir, 3,
                             {"--recovery=chain", "--replicas=2", "--consistency=async",
                              // The stopped tail must not be declared dead meanwhile.
                              "--heartbeat_timeout_ms=30000",
                              std::string("--replication=") + GetParam(),
                              "--replication_max_lag=" + std::to_string(kMaxLag)}));
  for (int id = 0; id < 3; ++id) {
    ASSERT_OK(cluster->StartServer(id, {"--store=memory", "--heartbeat_ms=100"}));
  }
  ASSERT_OK_AND_ASSIGN(auto worker, cluster->Connect("worker", [](ClientOptions* o) {
                         o->request_timeout_ms = 20000 * TimeScale();
                       }));
  TableOptions t;
  t.name = "w";
  t.type = TableType::kDense;
  t.size = kSize;
  t.optimizer.name = "sgd";
  t.optimizer.lr = 1.0f;
  ASSERT_OK(worker->CreateTable(t));
  std::vector<ChainRange> ranges = Chains(cluster.get(), "w");
  ASSERT_EQ(ranges.size(), 3u);
  const ChainRange a = ranges.front();
  ASSERT_EQ(a.chain.size(), 2u);
  const int head = a.chain[0], tail = a.chain[1];
  ChainRange b;
  for (const ChainRange& r : ranges) {
    if (r.chain[0] != head && r.chain[0] != tail) b = r;
  }
  ASSERT_EQ(b.chain.size(), 2u);
  ASSERT_EQ(b.chain[1], head) << "B's tail is the server killed below";

  // acked[0]: A's pushes acknowledged, acked[1]: B's.
  std::atomic<uint64_t> acked[2] = {0, 0};
  std::atomic<int64_t> in_flight_since_ms{-1};
  Pushers pushers;
  pushers.threads.emplace_back([&] {
    const ChainRange* targets[2] = {&a, &b};
    const FloatBuffer ones = FloatBuffer::CopyOf(std::vector<float>(a.end - a.begin, 1.0f));
    while (!pushers.stop) {
      for (int i = 0; i < 2; ++i) {
        const ChainRange& r = *targets[i];
        in_flight_since_ms = NowMs();
        Status s = worker->Push("w", r.begin, ones.Slice(0, r.end - r.begin)).get();
        in_flight_since_ms = -1;
        if (s.ok()) ++acked[i];
      }
    }
  });
  auto wait_for = [&](const std::function<bool()>& done, int ms) {
    const int64_t until = NowMs() + ms * TimeScale();
    while (!done() && NowMs() < until) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return done();
  };
  ASSERT_TRUE(wait_for([&] { return acked[0] >= 20; }, 20000));

  cluster->server(tail)->Kill(SIGSTOP);
  const uint64_t acked_at_stop = acked[0];
  // Blocked: the current push waits at A's head for the stopped tail.
  ASSERT_TRUE(wait_for(
      [&] {
        const int64_t since = in_flight_since_ms;
        return since >= 0 && NowMs() - since > 1000;
      },
      20000))
      << "the worker was never blocked";
  const uint64_t acked_blind = acked[0] - acked_at_stop;
  // Sync: at most the push the tail acknowledged just before it stopped.
  EXPECT_LE(acked_blind, async ? static_cast<uint64_t>(kMaxLag) + 1 : 1u)
      << "answered more than the lag without the tail";

  cluster->server(head)->Kill(SIGKILL);
  cluster->server(tail)->Kill(SIGCONT);
  ASSERT_TRUE(WaitForChains(cluster.get(), "w", head, 0, 20000)) << "no failover";
  const uint64_t acked_at_failover = acked[0];
  ASSERT_TRUE(wait_for([&] { return acked[0] >= acked_at_failover + 10; }, 20000))
      << "no progress after the failover";
  pushers.Join();

  // Each range's value on the server that heads it now.
  uint64_t lost[2];
  const int now_head[2] = {tail, b.chain[0]};
  for (int i = 0; i < 2; ++i) {
    const ChainRange& r = i == 0 ? a : b;
    ASSERT_OK_AND_ASSIGN(std::vector<float> value, WhenInSync([&] {
                           return ReadDenseSlot(cluster->server_endpoint(now_head[i]), "w",
                                                r.begin, 1, 0);
                         }));
    const uint64_t applied = static_cast<uint64_t>(-value[0]);
    ASSERT_GE(acked[i].load(), applied) << "applied more than was acknowledged";
    lost[i] = acked[i] - applied;
  }
  const auto counters = worker->stats().recovery_counters;
  const uint64_t counted = counters.count("chain_async_lost") ? counters.at("chain_async_lost") : 0;
  std::printf("replication=%s: %llu acknowledged while A's tail was stopped; lost %llu of A, "
              "%llu of B; %llu counted lost by the worker (max lag %d)\n",
              GetParam(), static_cast<unsigned long long>(acked_blind),
              static_cast<unsigned long long>(lost[0]), static_cast<unsigned long long>(lost[1]),
              static_cast<unsigned long long>(counted), kMaxLag);
  EXPECT_EQ(lost[1], 0u) << "B's head survived";
  EXPECT_EQ(counted, lost[0] + lost[1]) << "the worker's count is not the true loss";
  if (async) {
    EXPECT_LE(lost[0], static_cast<uint64_t>(kMaxLag));
  } else {
    EXPECT_EQ(lost[0], 0u);
    EXPECT_EQ(counters.count("chain_async_lost"), 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Replication, ChainAsyncTest, ::testing::Values("sync", "async"),
                         [](const ::testing::TestParamInfo<const char*>& p) {
                           return std::string(p.param);
                         });

}  // namespace
}  // namespace test
}  // namespace relaxps
