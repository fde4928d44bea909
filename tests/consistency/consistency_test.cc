// Consistency models end to end through real servers: BSP equivalence with a
// single large-batch worker, SSP's staleness bound, async's lack of one.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <future>
#include <thread>

#include <gtest/gtest.h>

#include "client/client.h"
#include "common/initializer.h"
#include "consistency/consistency_policy.h"
#include "consistency/vector_clock.h"
#include "tests/server/in_process_cluster.h"
#include "tests/test_util.h"

namespace relaxps {
namespace {

TEST(VectorClockTest, MinTracksSlowestLiveWorker) {
  VectorClock vc;
  vc.SetLive({0, 1, 2}, {0, 0, 0});
  EXPECT_EQ(vc.Min(), 0);
  vc.Advance(0, 0);
  vc.Advance(1, 0);
  EXPECT_EQ(vc.Min(), 0);
  EXPECT_TRUE(vc.Advance(2, 0));
  EXPECT_EQ(vc.Min(), 1);
  vc.Advance(0, 5);
  EXPECT_EQ(vc.Get(0), 6);
  // Dropping the slowest raises the minimum; a joiner starts at the minimum.
  vc.SetLive({0, 1}, {6, 1});
  EXPECT_EQ(vc.Min(), 1);
  vc.Advance(1, 3);
  vc.SetLive({0, 1, 7}, {6, 4, 0});
  EXPECT_EQ(vc.Get(7), 4);
  // Pushes from non-members do not hold anyone back.
  EXPECT_FALSE(vc.Advance(42, 100));
  EXPECT_FALSE(vc.IsLive(42));
}

TEST(ConsistencyPolicyTest, GatesFollowTheModel) {
  auto bsp = NewConsistencyPolicy({ConsistencyModel::kBsp, 0});
  auto ssp = NewConsistencyPolicy({ConsistencyModel::kSsp, 2});
  auto async = NewConsistencyPolicy({ConsistencyModel::kAsync, 0});
  ASSERT_TRUE(bsp.ok() && ssp.ok() && async.ok());
  EXPECT_TRUE((*bsp)->AggregatesPushes());
  EXPECT_EQ((*bsp)->RequiredMinClock(5), 5);
  EXPECT_FALSE((*ssp)->AggregatesPushes());
  EXPECT_EQ((*ssp)->RequiredMinClock(5), 3);
  EXPECT_LT((*async)->RequiredMinClock(5), -1000000);
  EXPECT_FALSE((*bsp)->ServesCachedReads());
  EXPECT_TRUE((*ssp)->ServesCachedReads());
  EXPECT_FALSE((*async)->ServesCachedReads());
  EXPECT_EQ((*ssp)->staleness_bound(), 2);
  EXPECT_LT((*async)->staleness_bound(), 0);
  for (const char* name : {"bsp", "ssp", "async"}) {
    auto model = ParseConsistencyModel(name);
    ASSERT_TRUE(model.ok()) << name;
    EXPECT_STREQ(ConsistencyModelName(*model), name);
  }
  auto bad = ParseConsistencyModel("eventual");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'eventual'"), std::string::npos);
  EXPECT_FALSE(NewConsistencyPolicy({ConsistencyModel::kSsp, -1}).ok());
}

// A least-squares problem: y = x . w* with deterministic data.
constexpr int kDim = 6000;  // Spans two servers (dense chunks of 4096).

void Sample(uint64_t i, std::vector<float>* x, float* y) {
  x->resize(kDim);
  double dot = 0;
  for (int d = 0; d < kDim; ++d) {
    (*x)[d] = static_cast<float>(HashUniform(11, i * kDim + d) - 0.5);
    dot += (*x)[d] * std::sin(0.01 * d);
  }
  *y = static_cast<float>(dot);
}

// Mean gradient of 0.5 (x.w - y)^2 over samples [first, first + count).
void Gradient(const float* w, uint64_t first, int count, float* g) {
  std::fill(g, g + kDim, 0.0f);
  std::vector<float> x;
  float y;
  for (int s = 0; s < count; ++s) {
    Sample(first + s, &x, &y);
    double pred = 0;
    for (int d = 0; d < kDim; ++d) pred += x[d] * w[d];
    const float err = static_cast<float>(pred - y) / count;
    for (int d = 0; d < kDim; ++d) g[d] += err * x[d];
  }
}

TableOptions Model(const std::string& optimizer) {
  TableOptions t;
  t.name = "w";
  t.size = kDim;
  t.optimizer.name = optimizer;
  t.optimizer.lr = optimizer == "adam" ? 0.01f : 0.05f;
  t.init.seed = 5;
  t.init.segments.push_back(InitSegment{0, kDim, InitKind::kUniform, -0.1f, 0.1f});
  return t;
}

std::unique_ptr<Client> Connect(const std::string& coordinator) {
  ClientOptions o;
  o.coordinator = coordinator;
  o.request_timeout_ms = 20000 * test::TimeScale();
  auto c = Client::Connect(o);
  CHECK(c.ok()) << c.status();
  return std::move(c).value();
}

// Trains `steps` BSP steps with `workers` workers of batch `batch` each and
// returns the final parameters.
std::vector<float> TrainBsp(int workers, int batch, int steps, const std::string& optimizer) {
  InProcessCluster cluster(2, ConsistencyModel::kBsp);
  std::vector<std::unique_ptr<Client>> clients;
  for (int k = 0; k < workers; ++k) clients.push_back(Connect(cluster.coordinator()));
  for (auto& c : clients) CHECK(c->CreateTable(Model(optimizer)).ok());
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int k = 0; k < workers; ++k) {
    threads.emplace_back([&, k] {
      Client* c = clients[k].get();
      FloatBuffer w(kDim), g(kDim);
      if (!c->Pull("w", 0, w).get().ok()) ++failures;
      for (int t = 0; t < steps; ++t) {
        const uint64_t first = static_cast<uint64_t>(t) * workers * batch + k * batch;
        Gradient(w.data(), first, batch, g.data());
        Status s = c->PushPull("w", 0, g, w).get();
        if (!s.ok()) {
          LOG(ERROR) << s;
          ++failures;
          return;
        }
        if (!c->Clock().ok()) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  FloatBuffer out(kDim);
  CHECK(clients[0]->Pull("w", 0, out).get().ok());
  return std::vector<float>(out.begin(), out.end());
}

double RelativeError(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

class BspEquivalenceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(BspEquivalenceTest, NWorkersMatchOneWorkerWithNTimesTheBatch) {
  const int kBatch = 4;
  const int kSteps = 50;
  const std::string optimizer = GetParam();
  for (int n : {2, 4}) {
    std::vector<float> single = TrainBsp(1, n * kBatch, kSteps, optimizer);
    std::vector<float> multi = TrainBsp(n, kBatch, kSteps, optimizer);
    std::vector<float> init(kDim);
    Model(optimizer).init.Fill(0, kDim, init.data());
    // The model moved, so equality is not trivially the initial values.
    ASSERT_GT(RelativeError(single, init), 1e-2);
    const double err = RelativeError(multi, single);
    EXPECT_LE(err, 1e-5) << n << " workers, " << optimizer;
    std::printf("bsp %s: %d workers x batch %d vs 1 x batch %d: relative error %.3g\n",
                optimizer.c_str(), n, kBatch, n * kBatch, err);
  }
}

INSTANTIATE_TEST_SUITE_P(Optimizers, BspEquivalenceTest, ::testing::Values("sgd", "adam"));

// Trains BSP with 2 workers that push each step's gradient layer by layer:
// one Push per [layer_ends[i-1], layer_ends[i]), all in flight together, then
// Clock() and a Pull of the whole model.
// With `start_barrier`, the coordinator gets --num_workers=2 and each worker
// connects, creates the table and trains in its own thread, the second one
// `late_ms` after the first.
std::vector<float> TrainBspByLayer(const std::vector<uint64_t>& layer_ends, int steps,
                                   bool start_barrier = false, int late_ms = 0) {
  const int kWorkers = 2;
  const int kBatch = 4;
  InProcessCluster cluster(2, ConsistencyModel::kBsp, 2, 1000, start_barrier ? kWorkers : 0);
  std::vector<std::unique_ptr<Client>> clients(kWorkers);
  if (!start_barrier) {
    for (auto& c : clients) c = Connect(cluster.coordinator());
    for (auto& c : clients) CHECK(c->CreateTable(Model("adam")).ok());
  }
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int k = 0; k < kWorkers; ++k) {
    threads.emplace_back([&, k] {
      if (start_barrier) {
        std::this_thread::sleep_for(std::chrono::milliseconds(k * late_ms));
        clients[k] = Connect(cluster.coordinator());  // Returns once both are live.
        if (!clients[k]->CreateTable(Model("adam")).ok()) ++failures;
      }
      Client* c = clients[k].get();
      const int part = c->worker_id();  // Data split by worker id.
      FloatBuffer w(kDim), g(kDim);
      if (!c->Pull("w", 0, w).get().ok()) ++failures;
      for (int t = 0; t < steps; ++t) {
        Gradient(w.data(), (t * kWorkers + part) * kBatch, kBatch, g.data());
        std::vector<std::future<Status>> pushes;
        uint64_t begin = 0;
        for (uint64_t end : layer_ends) {
          pushes.push_back(c->Push("w", begin, g.Slice(begin, end - begin)));
          begin = end;
        }
        for (auto& p : pushes) {
          Status s = p.get();
          if (!s.ok()) {
            ADD_FAILURE() << s;
            ++failures;
          }
        }
        if (!c->Clock().ok() || !c->Pull("w", 0, w).get().ok()) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  FloatBuffer out(kDim);
  CHECK(clients[0]->Pull("w", 0, out).get().ok());
  return std::vector<float>(out.begin(), out.end());
}

// The start barrier: a second worker starting 300 ms late changes nothing,
// since the first one's Connect() returns only once both are live (without
// it the first would run BSP rounds alone).
TEST(StartBarrierTest, LateSecondWorkerUnderBspChangesNothing) {
  const int kSteps = 20;
  std::vector<float> together = TrainBspByLayer({kDim}, kSteps);
  std::vector<float> late = TrainBspByLayer({kDim}, kSteps, /*start_barrier=*/true, 300);
  size_t differing = 0;
  for (int d = 0; d < kDim; ++d) differing += std::memcmp(&together[d], &late[d], sizeof(float)) != 0;
  EXPECT_EQ(differing, 0u);
  std::printf("start barrier: %zu of %d parameters differ with the second worker 300 ms late\n",
              differing, kDim);
}

TEST(StartBarrierTest, TooFewWorkersFailConnectWithTheCount) {
  InProcessCluster cluster(1, ConsistencyModel::kSsp, 2, 1000, /*num_workers=*/2,
                           /*start_barrier_timeout_ms=*/300);
  ClientOptions o;
  o.coordinator = cluster.coordinator();
  auto c = Client::Connect(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kDeadlineExceeded) << c.status();
  EXPECT_NE(c.status().message().find("1 of 2 workers"), std::string::npos) << c.status();
}

// Per-layer pushes (how frameworks overlap communication with the backward
// pass) give the very same rounds as one push of the whole model. The layer
// boundary 2500 lies inside the first server's range [0, 4096), so that
// shard's round needs both pieces of every worker.
TEST(BspPerLayerTest, LayerByLayerPushesAreBitIdenticalToWholeModelPushes) {
  const int kSteps = 20;
  std::vector<float> whole = TrainBspByLayer({kDim}, kSteps);
  std::vector<float> layered = TrainBspByLayer({2500, kDim}, kSteps);
  std::vector<float> init(kDim);
  Model("adam").init.Fill(0, kDim, init.data());
  ASSERT_GT(RelativeError(whole, init), 1e-2);
  size_t differing = 0;
  for (int d = 0; d < kDim; ++d) differing += std::memcmp(&whole[d], &layered[d], sizeof(float)) != 0;
  EXPECT_EQ(differing, 0u);
  std::printf("bsp per-layer: %zu of %d parameters differ from whole-model pushes after %d steps\n",
              differing, kDim, kSteps);
}

// A step schedule with warm-up, applied by the servers by push clock: after
// every clock, every key of both shards moved by exactly the same amount,
// lr * Factor(clock), whether rounds (BSP, 2 workers) or pushes on arrival
// (async, 1 worker) carry the gradient.
class LrScheduleTest : public ::testing::TestWithParam<ConsistencyModel> {};

TEST_P(LrScheduleTest, EveryShardSwitchesRateAtTheSameClock) {
  const int workers = GetParam() == ConsistencyModel::kBsp ? 2 : 1;
  InProcessCluster cluster(2, GetParam());
  TableOptions t;
  t.name = "w";
  t.size = kDim;  // Both servers hold a range.
  t.optimizer.name = "sgd";
  t.optimizer.lr = 0.5f;
  auto schedule = ParseLrSchedule("step:every=3,gamma=0.5,warmup=2");
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  t.lr_schedule = *schedule;
  std::vector<std::unique_ptr<Client>> clients;
  for (int k = 0; k < workers; ++k) {
    clients.push_back(Connect(cluster.coordinator()));
    ASSERT_TRUE(clients.back()->CreateTable(t).ok());
  }
  auto info = clients[0]->GetTable("w");  // The record carries the schedule.
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->options.lr_schedule.step_every_clocks, 3);
  const int kClocks = 10;
  std::vector<std::vector<float>> seen(kClocks);
  std::vector<std::thread> threads;
  for (int k = 0; k < workers; ++k) {
    threads.emplace_back([&, k] {
      FloatBuffer g(kDim), w(kDim);
      for (float& x : g) x = 1.0f;
      for (int c = 0; c < kClocks; ++c) {
        ASSERT_TRUE(clients[k]->Push("w", 0, g).get().ok());
        ASSERT_TRUE(clients[k]->Clock().ok());
        ASSERT_TRUE(clients[k]->Pull("w", 0, w).get().ok());
        if (k == 0) seen[c].assign(w.begin(), w.end());
      }
    });
  }
  for (auto& th : threads) th.join();
  double expected = 0;
  for (int c = 0; c < kClocks; ++c) {
    const double factor = t.lr_schedule.Factor(c);
    expected -= 0.5 * factor;
    ASSERT_EQ(seen[c].size(), static_cast<size_t>(kDim));
    size_t differing = 0;  // Keys that moved differently from key 0 (either shard).
    for (int d = 1; d < kDim; ++d) differing += seen[c][d] != seen[c][0];
    EXPECT_EQ(differing, 0u) << "clock " << c;
    EXPECT_NEAR(seen[c][0], expected, 1e-5) << "clock " << c << " factor " << factor;
    if (GetParam() == ConsistencyModel::kBsp) {
      std::printf("lr schedule: clock %d factor %.3f w[0]=%.6f w[%d]=%.6f\n", c, factor,
                  seen[c][0], kDim - 1, seen[c][kDim - 1]);
    }
  }
  // The schedule did change the rate: warm-up 0.5, 1, then halvings.
  EXPECT_DOUBLE_EQ(t.lr_schedule.Factor(0), 0.5);
  EXPECT_DOUBLE_EQ(t.lr_schedule.Factor(5), 0.5);
}

INSTANTIATE_TEST_SUITE_P(Models, LrScheduleTest,
                         ::testing::Values(ConsistencyModel::kBsp, ConsistencyModel::kAsync));

// Client::SetLearningRate under BSP: worker 0 changes the rate before its
// push of clock 4; every key of both shards takes the new rate from round 4
// on, and the table record shows the change.
TEST(SetLearningRateTest, EveryShardSwitchesAtTheCallersClock) {
  InProcessCluster cluster(2, ConsistencyModel::kBsp);
  TableOptions t;
  t.name = "w";
  t.size = kDim;
  t.optimizer.name = "sgd";
  t.optimizer.lr = 0.5f;
  std::unique_ptr<Client> clients[2] = {Connect(cluster.coordinator()),
                                        Connect(cluster.coordinator())};
  for (auto& c : clients) ASSERT_TRUE(c->CreateTable(t).ok());
  const int kClocks = 8;
  std::vector<std::vector<float>> seen(kClocks);
  std::thread other([&] {
    FloatBuffer g(kDim), w(kDim);
    for (float& x : g) x = 1.0f;
    for (int c = 0; c < kClocks; ++c) {
      ASSERT_TRUE(clients[1]->Push("w", 0, g).get().ok());
      ASSERT_TRUE(clients[1]->Clock().ok());
      ASSERT_TRUE(clients[1]->Pull("w", 0, w).get().ok());
    }
  });
  FloatBuffer g(kDim), w(kDim);
  for (float& x : g) x = 1.0f;
  for (int c = 0; c < kClocks; ++c) {
    if (c == 4) {
      ASSERT_TRUE(clients[0]->SetLearningRate("w", 0.125f).ok());
    }
    ASSERT_TRUE(clients[0]->Push("w", 0, g).get().ok());
    ASSERT_TRUE(clients[0]->Clock().ok());
    ASSERT_TRUE(clients[0]->Pull("w", 0, w).get().ok());
    seen[c].assign(w.begin(), w.end());
  }
  other.join();
  float expected = 0;
  for (int c = 0; c < kClocks; ++c) {
    expected -= c < 4 ? 0.5f : 0.125f;
    size_t differing = 0;
    for (int d = 1; d < kDim; ++d) differing += seen[c][d] != seen[c][0];
    EXPECT_EQ(differing, 0u) << "clock " << c;
    EXPECT_FLOAT_EQ(seen[c][0], expected) << "clock " << c;
  }
  auto info = clients[0]->GetTable("w");  // Its map came with the reply.
  ASSERT_TRUE(info.ok());
  ASSERT_EQ(info->options.lr_changes.size(), 1u);
  EXPECT_EQ(info->options.lr_changes[0].first, 4);
  EXPECT_EQ(info->options.lr_changes[0].second, 0.125f);
  // CreateTable with the original options still succeeds.
  EXPECT_TRUE(clients[1]->CreateTable(t).ok());
  EXPECT_EQ(clients[0]->SetLearningRate("w", -1.0f).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(clients[0]->SetLearningRate("nope", 0.1f).code(), StatusCode::kNotFound);
}

TEST(LrScheduleParseTest, SchedulesAndErrors) {
  auto cosine = ParseLrSchedule("cosine:clocks=100,min=0.1");
  ASSERT_TRUE(cosine.ok()) << cosine.status();
  EXPECT_DOUBLE_EQ(cosine->Factor(0), 1.0);
  EXPECT_NEAR(cosine->Factor(50), 0.55, 1e-6);  // min is stored as a float.
  EXPECT_NEAR(cosine->Factor(1000), 0.1, 1e-6);
  auto warm = ParseLrSchedule("warmup=4");
  ASSERT_TRUE(warm.ok());
  EXPECT_DOUBLE_EQ(warm->Factor(0), 0.25);
  EXPECT_DOUBLE_EQ(warm->Factor(3), 1.0);
  EXPECT_DOUBLE_EQ(warm->Factor(100), 1.0);
  for (const char* bad : {"linear", "step", "step:every=0,gamma=0.5", "step:every=2,gamma=2",
                          "cosine:clocks=10,min=2", "step:every=x", "constant:gamma=1"}) {
    auto s = ParseLrSchedule(bad);
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  TableOptions t;
  t.name = "w";
  t.size = 10;
  t.lr_schedule.kind = LrSchedule::Kind::kStep;  // No period.
  EXPECT_FALSE(t.Validate().ok());
}

struct StalenessRun {
  int64_t max_staleness = 0;
  double blocked_s = 0;
};

// A fast worker and a straggler (sleep per step); returns what the fast one saw.
StalenessRun RunWithStraggler(ConsistencyModel model, int staleness) {
  InProcessCluster cluster(1, model, staleness);
  auto fast = Connect(cluster.coordinator());
  auto slow = Connect(cluster.coordinator());
  TableOptions t = Model("sgd");
  t.size = 1000;
  t.init.segments[0].end = 1000;
  CHECK(fast->CreateTable(t).ok());
  CHECK(slow->CreateTable(t).ok());
  const int kSteps = 20;
  std::thread straggler([&] {
    FloatBuffer w(1000), g(1000);
    for (int s = 0; s < kSteps; ++s) {
      // Stretched under sanitizers, where a PushPull alone takes tens of ms:
      // waiting for the straggler must still dominate the fast worker's time.
      std::this_thread::sleep_for(std::chrono::milliseconds(25 * test::TimeScale()));
      CHECK(slow->PushPull("w", 0, g, w).get().ok());
      CHECK(slow->Clock().ok());
    }
  });
  StalenessRun run;
  FloatBuffer w(1000), g(1000);
  for (int s = 0; s < kSteps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    Status st = fast->PushPull("w", 0, g, w).get();
    run.blocked_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_TRUE(st.ok()) << st;
    CHECK(fast->Clock().ok());
    // Parameters for the computation at clock() reflect last_params_clock().
    run.max_staleness = std::max(run.max_staleness, fast->clock() - fast->last_params_clock());
  }
  straggler.join();
  return run;
}

TEST(SspTest, FastWorkerNeverExceedsTheBoundAndBlocks) {
  StalenessRun ssp = RunWithStraggler(ConsistencyModel::kSsp, 2);
  EXPECT_LE(ssp.max_staleness, 2);
  EXPECT_EQ(ssp.max_staleness, 2);  // It did run ahead as far as allowed...
  EXPECT_GT(ssp.blocked_s, 0.2);    // ...and waited for the straggler.
  StalenessRun async = RunWithStraggler(ConsistencyModel::kAsync, 2);
  EXPECT_GT(async.max_staleness, 2);
  EXPECT_LT(async.blocked_s, ssp.blocked_s);
  std::printf("ssp(2): max staleness %lld, blocked %.2f s; async: max staleness %lld, blocked %.2f s\n",
              static_cast<long long>(ssp.max_staleness), ssp.blocked_s,
              static_cast<long long>(async.max_staleness), async.blocked_s);
}

}  // namespace
}  // namespace relaxps
