// Seeded chaos under chain replication (--replicas=2 on 3 servers, heartbeat
// timeout 1000 ms): two workers push integer gradients (SGD, lr 1) as fast as
// they can while each trial SIGKILLs (then restarts) or SIGSTOPs (1.2-2 s,
// then SIGCONT: the server is fenced and rejoins in process) a random server;
// one server is down at a time, so a range never loses all its replicas. After every trial
// every live replica must hold exactly the initial value minus every
// acknowledged push, once: per worker, a counter key in every range counts
// the pushes applied there (lost = acknowledged - applied, doubled = applied -
// acknowledged), and every other key is compared bit for bit.
//
// RELAXPS_CHAOS_TRIALS (default 10) and RELAXPS_CHAOS_SEED (default 1) set
// the run; scripts/chaos.sh runs more and prints the summary line.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/wire.h"
#include "tests/recovery/chain_util.h"
#include "tests/test_util.h"

namespace relaxps {
namespace test {
namespace {

constexpr uint64_t kSize = 3 * 4096 + 1000;
constexpr float kInit = 4096.0f;
constexpr int kWorkers = 2;

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

int64_t Percentile(std::vector<int64_t> v, double p) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

class ChainChaosTest : public ::testing::Test {
 protected:
  struct Worker {
    std::unique_ptr<Client> client;
    std::vector<double> sum = std::vector<double>(kSize, 0.0);
    int64_t acked = 0;
    // Acknowledgement time of its first push started at or after fault_ms_.
    std::atomic<int64_t> first_ack_after_fault_ms{0};
    Status error;
  };

  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(cluster_,
                         RecoveryCluster::Start(MakeTempDir(), 3,
                                                {"--recovery=chain", "--replicas=2",
                                                 "--consistency=async",
                                                 "--heartbeat_timeout_ms=1000"}));
    for (int id = 0; id < 3; ++id) ASSERT_OK(cluster_->StartServer(id, ServerFlags()));
    for (int w = 0; w < kWorkers; ++w) {
      workers_.push_back(std::make_unique<Worker>());
      ASSERT_OK_AND_ASSIGN(workers_[w]->client, cluster_->Connect("worker"));
      TableOptions t;
      t.name = "w";
      t.type = TableType::kDense;
      t.size = kSize;
      t.optimizer.name = "sgd";
      t.optimizer.lr = 1.0f;
      t.init.segments.push_back(InitSegment{0, kSize, InitKind::kConstant, kInit, 0.0f});
      ASSERT_OK(workers_[w]->client->CreateTable(t));
    }
    for (const ChainRange& r : Chains(cluster_.get(), "w")) range_begins_.push_back(r.begin);
    ASSERT_EQ(range_begins_.size(), 3u);
  }

  static std::vector<std::string> ServerFlags() { return {"--store=memory", "--heartbeat_ms=100"}; }

  // Push k of worker w: -1 on its counter key of every range (the value
  // counts the pushes applied), small integers elsewhere.
  FloatBuffer Gradient(int w, int64_t k) const {
    FloatBuffer g(kSize);
    for (uint64_t i = 0; i < kSize; ++i) g[i] = static_cast<float>((i * 5 + k + 3 * w) % 3) - 1.0f;
    for (uint64_t b : range_begins_) {
      for (int v = 0; v < kWorkers; ++v) g[b + v] = v == w ? -1.0f : 0.0f;
    }
    return g;
  }

  void StartPushing() {
    pushers_ = std::make_unique<Pushers>();
    for (int w = 0; w < kWorkers; ++w) {
      pushers_->threads.emplace_back([this, w] {
        Worker& me = *workers_[w];
        while (!pushers_->stop.load()) {
          FloatBuffer g = Gradient(w, me.acked);
          const int64_t started = RealClock()->NowMs();
          Status s = me.client->Push("w", 0, g).get();
          if (!s.ok()) {
            me.error = s;
            return;
          }
          const int64_t fault = fault_ms_.load();
          if (fault != 0 && started >= fault && me.first_ack_after_fault_ms.load() == 0) {
            me.first_ack_after_fault_ms = RealClock()->NowMs();
          }
          for (uint64_t i = 0; i < kSize; ++i) me.sum[i] += g[i];
          ++me.acked;
        }
      });
    }
  }

  // Marks a fault now; returns its time.
  int64_t Fault() {
    for (auto& w : workers_) w->first_ack_after_fault_ms = 0;
    const int64_t now = RealClock()->NowMs();
    fault_ms_ = now;
    return now;
  }
  // Failover time of the fault at `at_ms`: until every worker had a push
  // started after it acknowledged (every push spans all three ranges, so
  // each one needs the failed server's chains reconfigured), at most
  // `limit_ms`.
  int64_t MeasureFailover(int64_t at_ms, int64_t limit_ms) {
    int64_t worst = 0;
    for (auto& w : workers_) {
      while (w->first_ack_after_fault_ms.load() == 0 && RealClock()->NowMs() < at_ms + limit_ms &&
             w->error.ok()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      const int64_t ack = w->first_ack_after_fault_ms.load();
      worst = std::max(worst, (ack == 0 ? RealClock()->NowMs() : ack) - at_ms);
    }
    return worst;
  }

  // Stops pushing, checks every replica, counts lost / doubled pushes.
  void Verify(int trial) {
    pushers_->Join();
    for (int w = 0; w < kWorkers; ++w) ASSERT_OK(workers_[w]->error) << "worker " << w;
    std::vector<ChainRange> ranges = Chains(cluster_.get(), "w");
    ASSERT_EQ(ranges.size(), 3u);
    for (const ChainRange& r : ranges) {
      for (int server : r.chain) {
        ASSERT_OK_AND_ASSIGN(std::vector<float> got,
                             WhenInSync([&] {
                               return ReadDenseSlot(cluster_->server_endpoint(server), "w",
                                                    r.begin, r.end - r.begin, 0);
                             }));
        for (int w = 0; w < kWorkers; ++w) {
          const int64_t applied = static_cast<int64_t>(got[w]) - static_cast<int64_t>(kInit);
          lost_ += std::max<int64_t>(0, workers_[w]->acked - applied);
          doubled_ += std::max<int64_t>(0, applied - workers_[w]->acked);
        }
        for (uint64_t i = r.begin; i < r.end; ++i) {
          double v = kInit;
          for (int w = 0; w < kWorkers; ++w) v -= workers_[w]->sum[i];
          ASSERT_EQ(got[i - r.begin], static_cast<float>(v))
              << "trial " << trial << ": server " << server << " key " << i;
        }
      }
    }
  }

  std::unique_ptr<RecoveryCluster> cluster_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::unique_ptr<Pushers> pushers_;  // Joined before the workers go (TearDown).
  std::vector<uint64_t> range_begins_;
  int64_t lost_ = 0, doubled_ = 0;
  std::atomic<int64_t> fault_ms_{0};

  void TearDown() override {
    if (pushers_ != nullptr) pushers_->Join();
  }
};

TEST_F(ChainChaosTest, RandomKillsAndPausesLoseNothingAndApplyNothingTwice) {
  const int trials = EnvInt("RELAXPS_CHAOS_TRIALS", 10);
  const int seed = EnvInt("RELAXPS_CHAOS_SEED", 1);
  std::mt19937 rng(seed);
  std::vector<int64_t> kill_failover, stop_failover;
  int kills = 0, stops = 0;
  for (int trial = 0; trial < trials; ++trial) {
    StartPushing();
    std::this_thread::sleep_for(std::chrono::milliseconds(200 + rng() % 400));
    const int victim = static_cast<int>(rng() % 3);
    const bool pause = rng() % 3 == 0;
    const int64_t at = Fault();
    if (pause) {
      ++stops;
      const int pause_ms = 1200 + static_cast<int>(rng() % 800);
      cluster_->server(victim)->Kill(SIGSTOP);
      stop_failover.push_back(MeasureFailover(at, 10000));
      const int64_t left = at + pause_ms - RealClock()->NowMs();
      if (left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(left));
      ASSERT_TRUE(WaitForChains(cluster_.get(), "w", victim, 0, 10000))
          << "trial " << trial << ": paused server " << victim << " not routed around";
      cluster_->server(victim)->Kill(SIGCONT);  // Fenced, it rejoins in process.
    } else {
      ++kills;
      cluster_->server(victim)->Kill(SIGKILL);
      kill_failover.push_back(MeasureFailover(at, 10000));
      ASSERT_TRUE(WaitForChains(cluster_.get(), "w", victim, 0, 10000))
          << "trial " << trial << ": killed server " << victim << " not routed around";
      ASSERT_OK(cluster_->StartServer(victim, ServerFlags()));
    }
    ASSERT_TRUE(WaitForChains(cluster_.get(), "w", -1, 2, 15000))
        << "trial " << trial << ": server " << victim << " did not rejoin";
    std::this_thread::sleep_for(std::chrono::milliseconds(200 + rng() % 300));
    Verify(trial);
    LOG(INFO) << "trial " << trial << ": " << (pause ? "SIGSTOP" : "SIGKILL") << " server "
              << victim << ", failover "
              << (pause ? stop_failover.back() : kill_failover.back()) << " ms";
  }
  int64_t acked = 0;
  for (auto& w : workers_) acked += w->acked;
  std::printf(
      "chaos summary: seed=%d trials=%d kills=%d stops=%d acked=%lld lost=%lld doubled=%lld "
      "kill_failover_ms p50=%lld max=%lld stop_failover_ms p50=%lld max=%lld\n",
      seed, trials, kills, stops, static_cast<long long>(acked), static_cast<long long>(lost_),
      static_cast<long long>(doubled_), static_cast<long long>(Percentile(kill_failover, 0.5)),
      static_cast<long long>(Percentile(kill_failover, 1.0)),
      static_cast<long long>(Percentile(stop_failover, 0.5)),
      static_cast<long long>(Percentile(stop_failover, 1.0)));
  EXPECT_EQ(lost_, 0);
  EXPECT_EQ(doubled_, 0);
}

}  // namespace
}  // namespace test
}  // namespace relaxps
