// Stateless recovery through real processes (acceptance 1 of the stateless
// issue): one server, two workers, SGD on fixed integer gradients. The server
// is SIGKILLed; both workers keep taking steps on their own copies (every
// PushPull completes, served locally); a new server registers with the lost
// id and comes up with exactly the merge rule applied to the workers' copies;
// training goes on from there without rolling any clock back.
// Hybrid (--recovery=hybrid --replicas=2 on two servers): losing one server
// is a chain failover (no local step); losing both at once strands the range
// and falls back to exactly the same re-seeding from the workers' copies.
#include <signal.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "recovery/seed_merge.h"
#include "tests/recovery/chain_util.h"
#include "tests/recovery/recovery_util.h"
#include "tests/recovery/stateless_util.h"
#include "tests/test_util.h"

namespace relaxps {
namespace test {
namespace {

constexpr uint64_t kSize = 64;
constexpr float kLr = 0.5f;

TableOptions DenseSgd() { return SgdTable(kSize, kLr, 8.0f); }
FloatBuffer Gradient(int worker, int step) { return IntegerGradient(kSize, worker, step); }

// What a worker holds after its local steps: copy, change, clock, base
// clock, and (momentum tables) its local velocity.
struct Worker {
  std::unique_ptr<Client> client;
  std::vector<float> copy;
  std::vector<float> change = std::vector<float>(kSize, 0.0f);
  std::vector<float> velocity = std::vector<float>(kSize, 0.0f);
  int64_t base_clock = 0;
  int steps = 0;
};

// k local steps; `momentum` > 0: the table's optimizer is momentum, which the
// worker applies locally too (velocity from zero when the server was lost).
void LocalSteps(Worker* w, int worker, int k, float momentum = 0.0f) {
  for (int step = 0; step < k; ++step) {
    FloatBuffer g = Gradient(worker, step);
    FloatBuffer out(kSize);
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_OK(w->client->PushPull("w", 0, g, out).get());
    // Never waits for the dead server longer than the local_after_ms bound
    // (plus scheduling slack on a loaded machine).
    EXPECT_LT(std::chrono::steady_clock::now() - t0, Scaled(Millis(5000)));
    for (uint64_t i = 0; i < kSize; ++i) {
      const float before = w->copy[i];
      w->velocity[i] = momentum * w->velocity[i] + g[i];
      w->copy[i] = before - kLr * (momentum > 0 ? w->velocity[i] : g[i]);
      w->change[i] += w->copy[i] - before;
    }
    EXPECT_EQ(std::vector<float>(out.data(), out.data() + kSize), w->copy) << "step " << step;
    ASSERT_OK(w->client->Clock());
    ++w->steps;
  }
  EXPECT_EQ(w->client->stats().local_steps, static_cast<uint64_t>(k));
}

// Pulls until the client reads from the seeded server (its parameters reflect
// at least `clock`, the seed's), for at most 30 s.
void PullUntilSeeded(Client* c, int64_t clock) {
  for (int i = 0; i < 300 && c->last_params_clock() < clock; ++i) {
    FloatBuffer p(kSize);
    ASSERT_OK(c->Pull("w", 0, p).get());
    if (c->last_params_clock() < clock) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_GE(c->last_params_clock(), clock);
}

// Both workers read from the seeded server (parameters at `clock` or later,
// their clocks moved up: no rollback) and a's next update applies on `seeded`.
void ExpectTrainingGoesOn(Worker* a, Worker* b, int64_t clock, const std::vector<float>& seeded) {
  for (Worker* w : {b, a}) {
    ASSERT_NO_FATAL_FAILURE(PullUntilSeeded(w->client.get(), clock));
    EXPECT_GE(w->client->clock(), clock);
  }
  FloatBuffer g = Gradient(0, 99);
  FloatBuffer out(kSize);
  ASSERT_OK(a->client->PushPull("w", 0, g, out).get());
  for (uint64_t i = 0; i < kSize; ++i) EXPECT_EQ(out[i], seeded[i] - kLr * g[i]) << i;
}

// Reads keys [0, n) of the table from `endpoint` until the server answers
// (a server awaiting its seed refuses) and the values satisfy `done`, for at
// most 30 s.
StatusOr<std::vector<float>> ReadWhen(const std::string& endpoint,
                                      const std::function<bool(const std::vector<float>&)>& done,
                                      uint64_t n = kSize) {
  StatusOr<std::vector<float>> got = UnavailableError("not read");
  for (int i = 0; i < 300; ++i) {
    got = ReadDenseSlot(endpoint, "w", 0, n, 0);
    if (got.ok() && done(*got)) return got;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!got.ok()) return got;
  return DeadlineExceededError("values never reached the expected state");
}

// `rounds` ordinary steps of both workers through the server, then both pull
// the same state: the copies they go local with.
void TrainThenPullOneCopy(Worker* a, Worker* b, int rounds) {
  for (int round = 0; round < rounds; ++round) {
    for (Worker* w : {a, b}) {
      ASSERT_OK(w->client->Push("w", 0, Gradient(w == a ? 10 : 11, round)).get());
      ASSERT_OK(w->client->Clock());
    }
  }
  for (Worker* w : {a, b}) {
    FloatBuffer p(kSize);
    ASSERT_OK(w->client->Pull("w", 0, p).get());
    w->copy.assign(p.data(), p.data() + kSize);
    w->base_clock = w->client->last_params_clock();
  }
  ASSERT_EQ(a->copy, b->copy);
}

TEST(StatelessReseedTest, NewServerHoldsTheMergedCopiesAndTrainingGoesOn) {
  const std::string dir = MakeTempDir();
  ASSERT_OK_AND_ASSIGN(auto cluster, StartStatelessCluster(dir, 1000, 30000));
  const std::vector<std::string> server_flags = StatelessServerFlags();
  Worker a, b;
  // Each worker's client events (client_rejoined) in a file of its own.
  auto with_events = [&dir](const std::string& name) {
    return [path = dir + "/" + name + "-events.jsonl"](ClientOptions* o) {
      EventLogOptions events;
      events.path = path;
      StatusOr<std::shared_ptr<EventLog>> log = EventLog::Open(events);
      ASSERT_OK(log.status());
      o->events = *log;
    };
  };
  ASSERT_OK_AND_ASSIGN(a.client, cluster->Connect("worker", with_events("a")));
  ASSERT_OK_AND_ASSIGN(b.client, cluster->Connect("worker", with_events("b")));
  ASSERT_OK(a.client->CreateTable(DenseSgd()));
  ASSERT_OK(b.client->CreateTable(DenseSgd()));

  ASSERT_NO_FATAL_FAILURE(TrainThenPullOneCopy(&a, &b, 2));  // Both at clock 2.

  cluster->server(0)->Kill(SIGKILL);
  ASSERT_OK(cluster->server(0)->Wait(Millis(10000)).status());
  LocalSteps(&a, 0, 3);  // The freshest copy: it seeds the new server.
  LocalSteps(&b, 1, 2);
  const int64_t clock_a = a.client->clock();
  ASSERT_GT(clock_a, b.client->clock());

  // A new server for the lost id: refuses data until seeded, then holds the
  // merged copies.
  ASSERT_OK(cluster->StartServer(0, server_flags));
  StatusOr<std::vector<float>> seeded =
      ReadWhen(cluster->server_endpoint(0), [](const std::vector<float>&) { return true; });
  ASSERT_OK(seeded);

  // The rule (freshest seed, staleness-weighted changes), applied to the
  // copies computed here independently of the client.
  std::vector<WorkerCopy> copies = {
      WorkerCopy{a.client->worker_id(), clock_a, a.base_clock, 3, a.copy.data(), a.change.data()},
      WorkerCopy{b.client->worker_id(), b.client->clock(), b.base_clock, 2, b.copy.data(),
                 b.change.data()}};
  ASSERT_OK_AND_ASSIGN(MergeResult expected,
                       MergeCopies(copies, kSize, SeedRule::kFreshest, MergeRule::kStaleness));
  EXPECT_EQ(expected.seed_worker, a.client->worker_id());
  EXPECT_EQ(*seeded, expected.params);  // Exactly, float for float.
  const float weight = static_cast<float>(1.0 / std::max<int64_t>(1, clock_a - b.base_clock));
  for (uint64_t i = 0; i < kSize; ++i) {
    EXPECT_FLOAT_EQ((*seeded)[i], a.copy[i] + weight * b.change[i]) << i;
  }

  // Both workers switch back to the server (B's first reply moves its clock
  // up to the seed's: no rollback), and an update applies on the seed.
  ASSERT_NO_FATAL_FAILURE(ExpectTrainingGoesOn(&a, &b, clock_a, *seeded));
  EXPECT_EQ(a.client->stats().local_steps, 3u);  // Served by the server again.
  // The local steps were applied late, by the seeded server: a's at clocks
  // 2-4 were 3, 2, 1 clocks behind its clock 5 when it sent its copy; b's at
  // 2-3 were 2 and 1 behind its clock 4.
  for (const auto& [name, late, hist] :
       {std::tuple<std::string, int, std::string>{"a", 3, "[0,1,2]"}, {"b", 2, "[0,1,1]"}}) {
    ASSERT_OK_AND_ASSIGN(std::string events, ReadFile(dir + "/" + name + "-events.jsonl"));
    EXPECT_NE(events.find("\"late_updates\":" + std::to_string(late) + ",\"staleness_hist\":" +
                          hist + "}"),
              std::string::npos)
        << name << ": " << events;
  }
  ASSERT_OK_AND_ASSIGN(std::string log, ReadFile(dir + "/coordinator.log"));
  EXPECT_NE(log.find("RESEED server=0 source=worker:" + std::to_string(a.client->worker_id())),
            std::string::npos)
      << log;
  if (!::testing::Test::HasFailure()) RemoveTree(dir);  // Kept for a failure's logs.
}

// A momentum table: each worker trains its copy locally with momentum, and the
// new server gets the seeding worker's velocity as its momentum slot instead
// of zeros, so the step size does not change when the server is back.
TEST(StatelessReseedTest, MomentumTableTrainsLocallyWithMomentumAndTheSeedKeepsTheVelocity) {
  constexpr float kMomentum = 0.5f;  // With kLr 0.5 and integer gradients: exact.
  const std::string dir = MakeTempDir();
  ASSERT_OK_AND_ASSIGN(auto cluster, StartStatelessCluster(dir, 1000, 30000));
  TableOptions t = DenseSgd();
  t.optimizer.name = "momentum";
  t.optimizer.momentum = kMomentum;
  Worker a, b;
  ASSERT_OK_AND_ASSIGN(a.client, cluster->Connect("worker"));
  ASSERT_OK_AND_ASSIGN(b.client, cluster->Connect("worker"));
  ASSERT_OK(a.client->CreateTable(t));
  ASSERT_OK(b.client->CreateTable(t));
  ASSERT_NO_FATAL_FAILURE(TrainThenPullOneCopy(&a, &b, 1));
  // The server's own velocity is not zero: the seed must not keep it either.
  ASSERT_OK_AND_ASSIGN(std::vector<float> old_velocity,
                       ReadDenseSlot(cluster->server_endpoint(0), "w", 0, kSize, 1));

  cluster->server(0)->Kill(SIGKILL);
  ASSERT_OK(cluster->server(0)->Wait(Millis(10000)).status());
  LocalSteps(&a, 0, 3, kMomentum);  // The freshest copy: it seeds the new server.
  LocalSteps(&b, 1, 2, kMomentum);
  const int64_t clock_a = a.client->clock();

  ASSERT_OK(cluster->StartServer(0, StatelessServerFlags()));
  StatusOr<std::vector<float>> seeded =
      ReadWhen(cluster->server_endpoint(0), [](const std::vector<float>&) { return true; });
  ASSERT_OK(seeded);
  std::vector<WorkerCopy> copies = {
      WorkerCopy{a.client->worker_id(), clock_a, a.base_clock, 3, a.copy.data(), a.change.data(),
                 false, a.velocity.data()},
      WorkerCopy{b.client->worker_id(), b.client->clock(), b.base_clock, 2, b.copy.data(),
                 b.change.data(), false, b.velocity.data()}};
  ASSERT_OK_AND_ASSIGN(MergeResult expected,
                       MergeCopies(copies, kSize, SeedRule::kFreshest, MergeRule::kStaleness));
  EXPECT_EQ(*seeded, expected.params);
  EXPECT_EQ(expected.velocity, a.velocity);
  ASSERT_OK_AND_ASSIGN(std::vector<float> velocity,
                       ReadDenseSlot(cluster->server_endpoint(0), "w", 0, kSize, 1));
  EXPECT_EQ(velocity, a.velocity);
  EXPECT_NE(velocity, old_velocity);

  // The next update continues the seed's trajectory: w -= lr * (mu * v + g).
  ASSERT_NO_FATAL_FAILURE(PullUntilSeeded(a.client.get(), clock_a));
  FloatBuffer g = Gradient(0, 99);
  FloatBuffer out(kSize);
  ASSERT_OK(a.client->PushPull("w", 0, g, out).get());
  for (uint64_t i = 0; i < kSize; ++i) {
    EXPECT_EQ(out[i], (*seeded)[i] - kLr * (kMomentum * a.velocity[i] + g[i])) << i;
  }
  ASSERT_OK_AND_ASSIGN(std::string log, ReadFile(dir + "/coordinator.log"));
  EXPECT_NE(log.find("velocity_ranges=1"), std::string::npos) << log;
  if (!::testing::Test::HasFailure()) RemoveTree(dir);  // Kept for a failure's logs.
}

// Issue 41: under stateless recovery a large request is split like under
// any policy (64 KiB as 4 parts of 16 KiB). The parts of a pull are
// remembered together as one whole copy; after the server's loss every part
// of a PushPull is served from it (one local step per request, not per
// part), and the new server is seeded with exactly that copy.
TEST(StatelessReseedTest, SplitRequestsAreServedPerPartFromOneWholeCopy) {
  constexpr uint64_t kBig = 4 * 4096;
  const std::string dir = MakeTempDir();
  ASSERT_OK_AND_ASSIGN(auto cluster, StartStatelessCluster(dir, 1000, 30000));
  ASSERT_OK_AND_ASSIGN(auto c, cluster->Connect("worker", [](ClientOptions* o) {
    o->dense_split_bytes = 4096 * sizeof(float);
    o->dense_part_bytes = 4096 * sizeof(float);
  }));
  ASSERT_OK(c->CreateTable(SgdTable(kBig, kLr, 8.0f)));
  for (int step = 0; step < 2; ++step) {
    ASSERT_OK(c->Push("w", 0, IntegerGradient(kBig, 3, step)).get());
    ASSERT_OK(c->Clock());
  }
  ASSERT_OK_AND_ASSIGN(const uint64_t before_pull, ClientRequests(cluster.get(), {0}));
  FloatBuffer pulled(kBig);
  ASSERT_OK(c->Pull("w", 0, pulled).get());
  ASSERT_OK_AND_ASSIGN(const uint64_t after_pull, ClientRequests(cluster.get(), {0}));
  // 4 parts, and the SERVER_STATS request that read `before_pull`.
  EXPECT_EQ(after_pull - before_pull, 4u + 1) << "the pull was not sent as 4 parts";
  std::vector<float> copy(pulled.data(), pulled.data() + kBig);
  ASSERT_NE(copy[0], 8.0f);  // Trained: not the initializer's value.

  cluster->server(0)->Kill(SIGKILL);
  ASSERT_OK(cluster->server(0)->Wait(Millis(10000)).status());
  for (int step = 0; step < 3; ++step) {
    FloatBuffer g = IntegerGradient(kBig, 3, 10 + step);
    FloatBuffer out(kBig);
    ASSERT_OK(c->PushPull("w", 0, g, out).get());
    for (uint64_t i = 0; i < kBig; ++i) copy[i] -= kLr * g[i];
    ASSERT_EQ(std::vector<float>(out.data(), out.data() + kBig), copy) << "step " << step;
    ASSERT_OK(c->Clock());
  }
  EXPECT_EQ(c->stats().local_steps, 3u);

  const int64_t clock = c->clock();
  ASSERT_OK(cluster->StartServer(0, StatelessServerFlags()));
  StatusOr<std::vector<float>> seeded = ReadWhen(
      cluster->server_endpoint(0), [](const std::vector<float>&) { return true; }, kBig);
  ASSERT_OK(seeded);
  EXPECT_EQ(*seeded, copy);  // The one worker's copy, float for float.
  // Training goes on from the seed through the server.
  for (int i = 0; i < 300 && c->last_params_clock() < clock; ++i) {
    ASSERT_OK(c->Pull("w", 0, pulled).get());
    if (c->last_params_clock() < clock) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  ASSERT_GE(c->last_params_clock(), clock);
  FloatBuffer g = IntegerGradient(kBig, 3, 99);
  FloatBuffer out(kBig);
  ASSERT_OK(c->PushPull("w", 0, g, out).get());
  for (uint64_t i = 0; i < kBig; ++i) ASSERT_EQ(out[i], copy[i] - kLr * g[i]) << i;
  EXPECT_EQ(c->stats().local_steps, 3u);  // Served by the server again.
  if (!::testing::Test::HasFailure()) RemoveTree(dir);  // Kept for a failure's logs.
}

TEST(StatelessReseedTest, HybridFailsOverOnOneLossAndReseedsWhenEveryReplicaIsLost) {
  const std::string dir = MakeTempDir();
  ASSERT_OK_AND_ASSIGN(auto cluster,
                       RecoveryCluster::Start(dir, 2, {"--recovery=hybrid", "--replicas=2",
                                                       "--heartbeat_timeout_ms=1000",
                                                       "--reseed_timeout_ms=30000",
                                                       // The holder's own id, not a spare.
                                                       "--spare_takeover_ms=600000"}));
  const std::vector<std::string> server_flags = {"--store=memory", "--heartbeat_ms=100"};
  ASSERT_OK(cluster->StartServer(0, server_flags));
  ASSERT_OK(cluster->StartServer(1, server_flags));
  Worker a, b;
  ASSERT_OK_AND_ASSIGN(a.client, cluster->Connect("worker"));
  ASSERT_OK_AND_ASSIGN(b.client, cluster->Connect("worker"));
  ASSERT_OK(a.client->CreateTable(DenseSgd()));
  ASSERT_OK(b.client->CreateTable(DenseSgd()));
  std::vector<float> expected(kSize, 8.0f);  // Init minus every acknowledged push, once.
  auto push_round = [&](int round) {
    for (Worker* w : {&a, &b}) {
      FloatBuffer g = Gradient(w == &a ? 10 : 11, round);
      ASSERT_OK(w->client->Push("w", 0, g).get());
      for (uint64_t i = 0; i < kSize; ++i) expected[i] -= kLr * g[i];
      ASSERT_OK(w->client->Clock());
    }
  };
  for (int round = 0; round < 2; ++round) ASSERT_NO_FATAL_FAILURE(push_round(round));

  // One loss: the head dies; every push is acknowledged by the new head,
  // exactly once, and nothing is served locally.
  cluster->server(0)->Kill(SIGKILL);
  ASSERT_OK(cluster->server(0)->Wait(Millis(10000)).status());
  for (int round = 2; round < 6; ++round) ASSERT_NO_FATAL_FAILURE(push_round(round));
  ASSERT_TRUE(WaitForChains(cluster.get(), "w", 0, 0, 10000));
  EXPECT_EQ(a.client->stats().local_steps, 0u);
  EXPECT_EQ(b.client->stats().local_steps, 0u);
  ASSERT_OK_AND_ASSIGN(std::vector<float> survivor,
                       ReadDenseSlot(cluster->server_endpoint(1), "w", 0, kSize, 0));
  EXPECT_EQ(survivor, expected);
  // It rejoins as tail with the survivor's state.
  ASSERT_OK(cluster->StartServer(0, server_flags));
  ASSERT_TRUE(WaitForChains(cluster.get(), "w", -1, 2, 15000));
  ASSERT_OK(ReadWhen(cluster->server_endpoint(0),
                     [&](const std::vector<float>& v) { return v == expected; }).status());

  // Both replicas die at once: the workers go local on the copies they pulled.
  for (Worker* w : {&a, &b}) {
    FloatBuffer p(kSize);
    ASSERT_OK(w->client->Pull("w", 0, p).get());
    w->copy.assign(p.data(), p.data() + kSize);
    w->base_clock = w->client->last_params_clock();
  }
  ASSERT_EQ(a.copy, expected);
  cluster->server(0)->Kill(SIGKILL);
  cluster->server(1)->Kill(SIGKILL);
  ASSERT_OK(cluster->server(0)->Wait(Millis(10000)).status());
  ASSERT_OK(cluster->server(1)->Wait(Millis(10000)).status());
  ASSERT_OK_AND_ASSIGN(std::string fallback,
                       WaitForLine(dir + "/coordinator.log",
                                   "FALLBACK cause=all-replicas-lost server=[01] ", Scaled(Millis(15000))));
  const int holder = fallback[fallback.find("server=") + 7] - '0';
  LocalSteps(&a, 0, 3);  // The freshest copy: it seeds the new server.
  LocalSteps(&b, 1, 2);
  const int64_t clock_a = a.client->clock();

  // The other server registers first: it stays out of the stranded chain;
  // the holder's id is seeded with exactly the stateless rule.
  ASSERT_OK(cluster->StartServer(1 - holder, server_flags));
  ASSERT_OK(cluster->StartServer(holder, server_flags));
  std::vector<WorkerCopy> copies = {
      WorkerCopy{a.client->worker_id(), clock_a, a.base_clock, 3, a.copy.data(), a.change.data()},
      WorkerCopy{b.client->worker_id(), b.client->clock(), b.base_clock, 2, b.copy.data(),
                 b.change.data()}};
  ASSERT_OK_AND_ASSIGN(MergeResult merged,
                       MergeCopies(copies, kSize, SeedRule::kFreshest, MergeRule::kStaleness));
  ASSERT_OK_AND_ASSIGN(std::vector<float> seeded, ReadWhen(cluster->server_endpoint(holder),
                                                           [](const std::vector<float>&) { return true; }));
  EXPECT_EQ(seeded, merged.params);  // Exactly, float for float.
  // Then the other joins the chain as tail and receives the seeded state.
  ASSERT_TRUE(WaitForChains(cluster.get(), "w", -1, 2, 15000));
  ASSERT_OK(ReadWhen(cluster->server_endpoint(1 - holder),
                     [&](const std::vector<float>& v) { return v == seeded; }).status());

  // Training goes on through the chain from the seed, without rollback.
  ASSERT_NO_FATAL_FAILURE(ExpectTrainingGoesOn(&a, &b, clock_a, seeded));
  EXPECT_EQ(a.client->stats().local_steps, 3u);
  ASSERT_OK_AND_ASSIGN(std::string log, ReadFile(dir + "/coordinator.log"));
  EXPECT_NE(log.find("RESEED server=" + std::to_string(holder) + " source=worker:" +
                     std::to_string(a.client->worker_id())),
            std::string::npos)
      << log;
  if (!::testing::Test::HasFailure()) RemoveTree(dir);  // Kept for a failure's logs.
}

}  // namespace
}  // namespace test
}  // namespace relaxps
