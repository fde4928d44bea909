// The limits on unread replies push back on requests, never drop a reply
// (issue 40, point 3): a server reserves a data reply's bytes when it admits
// the request, refuses one whose reply does not fit with ResourceExhausted
// before applying anything, and the client sends it again after a backoff.
// Over a real coordinator, server and clients in this process, with
// --max_unread_reply_mb_per_peer at 4 MiB and replies of 1 MiB:
//  * BSP: 16 pulls parked at the gate hold their reservations; the pulls
//    past 4 MiB are refused (the server counts them) until the gate opens,
//    then every pull completes with the parameters.
//  * Async: 32 PushPulls, 32 zero-copy PushPulls and 16 row pulls in
//    flight complete, and every push is applied exactly once (the values).
//  * relaxps-ctl pull while a worker's parked pulls fill the limits: resent
//    until the gate opens, then done.
//  * BSP and SSP: 2 workers x 4 clocks of 8 PushPulls of 1 MiB each (twice
//    the limit): every push applied (the server answers a PushPull that does
//    not fit as a PUSH; the client pulls later), every clock completes, the
//    values exact.
#include <chrono>
#include <cstdio>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "client/client.h"
#include "coordinator/coordinator.h"
#include "server/server.h"
#include "tests/security/attack_util.h"
#include "tests/server/in_process_cluster.h"
#include "tests/test_util.h"

namespace relaxps {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr size_t kValues = kMiB / sizeof(float);  // One 1 MiB reply.

std::unique_ptr<Client> Connect(const std::string& coordinator) {
  ClientOptions o;
  o.coordinator = coordinator;
  o.request_timeout_ms = static_cast<int>(test::Scaled(test::Millis(20000)).count());
  auto c = Client::Connect(o);
  CHECK(c.ok()) << c.status();
  return std::move(c).value();
}

TableOptions Dense(const std::string& name, uint64_t size, float init) {
  TableOptions t;
  t.name = name;
  t.size = size;
  t.optimizer.name = "sgd";
  t.optimizer.lr = 1.0f;
  t.init.segments.push_back(InitSegment{0, size, InitKind::kConstant, init, 0.0f});
  return t;
}

ServerOptions SmallUnreadLimit() {
  ServerOptions so;
  so.max_unread_reply_bytes_per_peer = 4 * kMiB;
  return so;
}

// Waits until the server at `endpoint` refused a request for a quota
// (unread replies among them); returns the count.
uint64_t WaitRefused(const std::string& endpoint) {
  return test::WaitForServerStats(
             endpoint, [](const wire::ServerStats& s) { return s.quota_rejected() > 0; },
             test::Scaled(test::Millis(10000)), std::chrono::milliseconds(5))
      .quota_rejected();
}

TEST(ReplyReservationTest, ParkedPullsPastThePerPeerLimitAreRefusedThenAllComplete) {
  CoordinatorOptions co;
  co.num_servers = 1;
  co.consistency = ConsistencyModel::kBsp;
  co.heartbeat_timeout_ms = 2000 * test::TimeScale();
  InProcessCluster cluster(co, SmallUnreadLimit());
  constexpr int kPulls = 16;
  auto a = Connect(cluster.coordinator());
  ASSERT_OK(a->CreateTable(Dense("p", kPulls * kValues, 0.5f)));
  auto b = Connect(cluster.coordinator());
  const std::string server = cluster.server(0)->endpoint();

  // b at clock 1: its pulls wait at the gate until a finishes clock 0.
  ASSERT_OK(b->Clock());
  std::vector<FloatBuffer> outs;
  std::vector<std::future<Status>> pulls;
  for (int i = 0; i < kPulls; ++i) {
    outs.emplace_back(kValues);
    pulls.push_back(b->Pull("p", i * kValues, outs.back()));
  }
  // 4 MiB of them park (reserved); the others are refused while they wait.
  const uint64_t refused = WaitRefused(server);
  EXPECT_GT(refused, 0u);
  for (auto& p : pulls) {
    EXPECT_EQ(p.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  }
  ASSERT_OK(a->Clock());  // Round 0 done: the gate opens.
  for (int i = 0; i < kPulls; ++i) {
    ASSERT_OK(pulls[i].get()) << "pull " << i;
    EXPECT_EQ(outs[i][0], 0.5f) << i;
    EXPECT_EQ(outs[i][kValues - 1], 0.5f) << i;
  }
  const wire::ServerStats stats = test::ServerStatsOf(server);
  std::printf("%d parked 1 MiB pulls, 4 MiB per peer: %llu refusals, %llu replies dropped\n",
              kPulls, static_cast<unsigned long long>(stats.quota_rejected()),
              static_cast<unsigned long long>(stats.replies_dropped()));
  EXPECT_EQ(stats.replies_dropped(), 0u);
}

TEST(ReplyReservationTest, EveryPushOfManyLargePushPullsInFlightIsAppliedOnce) {
  CoordinatorOptions co;
  co.num_servers = 1;
  InProcessCluster cluster(co, SmallUnreadLimit());
  constexpr int kParts = 32;
  constexpr int kRounds = 2;
  auto w = Connect(cluster.coordinator());
  ASSERT_OK(w->CreateTable(Dense("p", kParts * kValues, 100.0f)));
  TableOptions rows;
  rows.name = "e";
  rows.type = TableType::kSparse;
  rows.row_width = 256;  // 1 KiB rows: 1 MiB per pull of 1024 rows.
  rows.optimizer.name = "sgd";
  rows.optimizer.lr = 1.0f;
  ASSERT_OK(w->CreateTable(rows));
  const std::string server = cluster.server(0)->endpoint();

  // Part i's gradient is i + 1 everywhere: after round r its keys hold
  // 100 - r (i + 1), whatever order the parts were applied in.
  for (int r = 1; r <= kRounds; ++r) {
    std::vector<FloatBuffer> outs;
    std::vector<std::future<Status>> pushpulls;
    std::vector<std::future<StatusOr<FloatBuffer>>> zero_copy;
    for (int i = 0; i < kParts; ++i) {
      FloatBuffer g(kValues / 2);
      for (size_t k = 0; k < g.size(); ++k) g[k] = static_cast<float>(i + 1);
      // The first half of each part's keys by PushPull, the second by the
      // zero-copy PushPull.
      outs.emplace_back(kValues / 2);
      pushpulls.push_back(w->PushPull("p", i * kValues, g, outs.back()));
      FloatBuffer g2 = FloatBuffer::CopyOf(g.data(), g.size());
      zero_copy.push_back(w->PushPullZeroCopy("p", i * kValues + kValues / 2, g2));
    }
    std::vector<FloatBuffer> row_outs;
    std::vector<std::future<Status>> row_pulls;
    for (int i = 0; i < 16; ++i) {
      KeyBuffer ids(1024);
      for (size_t k = 0; k < ids.size(); ++k) ids[k] = static_cast<uint64_t>(i * 1024 + k);
      row_outs.emplace_back(1024 * 256);
      row_pulls.push_back(w->PullRows("e", ids, row_outs.back()));
    }
    for (int i = 0; i < kParts; ++i) {
      const float want = 100.0f - static_cast<float>(r * (i + 1));
      ASSERT_OK(pushpulls[i].get()) << "round " << r << " part " << i;
      EXPECT_EQ(outs[i][0], want) << "round " << r << " part " << i;
      StatusOr<FloatBuffer> z = zero_copy[i].get();
      ASSERT_OK(z.status()) << "round " << r << " part " << i;
      EXPECT_EQ((*z)[z->size() - 1], want) << "round " << r << " part " << i;
    }
    for (auto& p : row_pulls) ASSERT_OK(p.get());
  }
  // The whole table once more: every key pushed exactly kRounds times.
  FloatBuffer all(kParts * kValues);
  ASSERT_OK(w->Pull("p", 0, all).get());
  for (int i = 0; i < kParts; ++i) {
    const float want = 100.0f - static_cast<float>(kRounds * (i + 1));
    for (size_t k = 0; k < kValues; k += 4099) {
      ASSERT_EQ(all[i * kValues + k], want) << "part " << i << " key " << k;
    }
    ASSERT_EQ(all[(i + 1) * kValues - 1], want) << "part " << i;
  }
  const wire::ServerStats stats = test::ServerStatsOf(server);
  std::printf("%d rounds of %d x 2 PushPulls of 512 KiB and 16 row pulls of 1 MiB in flight, "
              "4 MiB per peer: %llu refusals (resent), %llu replies dropped\n",
              kRounds, kParts, static_cast<unsigned long long>(stats.quota_rejected()),
              static_cast<unsigned long long>(stats.replies_dropped()));
  EXPECT_EQ(stats.replies_dropped(), 0u);
}

// Two workers, each with 8 PushPulls of 1 MiB per clock for each server,
// twice its 4 MiB per-peer limit: the server applies every push (a round
// waits for them all) and refuses the pull parts that do not fit, which the
// clients pull later. Every clock completes; under BSP each PushPull reads
// the round it closed, exactly (SGD lr 1: part i of worker w pushes
// (w + 1) * (i + 1), a round steps by the mean, 1.5 * (i + 1)); under SSP
// each push is applied on arrival, so the table ends at -3 * (i + 1) per
// clock. Every push part is applied once: the servers' applied parts of
// each worker are its acknowledged updates. `recovery` "chain": 2 servers,
// each range on both (the push goes down the chain as a PUSH).
void RunPushPullClocks(ConsistencyModel model, const std::string& recovery = "none") {
  CoordinatorOptions co;
  co.num_servers = recovery == "chain" ? 2 : 1;
  co.recovery = recovery;
  co.consistency = model;
  co.staleness = 0;
  co.heartbeat_timeout_ms = 2000 * test::TimeScale();
  InProcessCluster cluster(co, SmallUnreadLimit());
  const int kParts = 8 * co.num_servers;
  constexpr int kClocks = 4;
  constexpr int kWorkers = 2;
  std::vector<std::unique_ptr<Client>> workers;
  workers.push_back(Connect(cluster.coordinator()));
  ASSERT_OK(workers[0]->CreateTable(Dense("p", kParts * kValues, 0.0f)));
  workers.push_back(Connect(cluster.coordinator()));

  std::vector<std::string> errors(kWorkers);
  std::vector<std::thread> threads;
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      Client* c = workers[w].get();
      for (int clock = 0; clock < kClocks; ++clock) {
        std::vector<FloatBuffer> outs;
        std::vector<std::future<Status>> pushpulls;
        for (int i = 0; i < kParts; ++i) {
          FloatBuffer g(kValues);
          for (size_t k = 0; k < g.size(); ++k) g[k] = static_cast<float>((w + 1) * (i + 1));
          outs.emplace_back(kValues);
          pushpulls.push_back(c->PushPull("p", i * kValues, g, outs.back()));
        }
        for (int i = 0; i < kParts; ++i) {
          Status s = pushpulls[i].get();
          const std::string at = "worker " + std::to_string(w) + " clock " +
                                 std::to_string(clock) + " part " + std::to_string(i);
          if (!s.ok()) {
            errors[w] += at + ": " + s.ToString() + "\n";
            continue;
          }
          const float want = -1.5f * static_cast<float>((clock + 1) * (i + 1));
          if (model == ConsistencyModel::kBsp &&
              (outs[i][0] != want || outs[i][kValues - 1] != want)) {
            errors[w] += at + ": read " + std::to_string(outs[i][0]) + ", want " +
                         std::to_string(want) + "\n";
          }
        }
        if (!errors[w].empty()) return;  // Stuck: the rest would wait as long.
        if (Status s = c->Clock(); !s.ok()) errors[w] += "Clock: " + s.ToString() + "\n";
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int w = 0; w < kWorkers; ++w) EXPECT_EQ(errors[w], "") << "worker " << w;

  FloatBuffer all(kParts * kValues);
  ASSERT_OK(workers[0]->Pull("p", 0, all).get());
  for (int i = 0; i < kParts; ++i) {
    const float want = -3.0f * (model == ConsistencyModel::kBsp ? 0.5f : 1.0f) *
                       static_cast<float>(kClocks * (i + 1));
    for (size_t k = 0; k < kValues; k += 4099) {
      ASSERT_EQ(all[i * kValues + k], want) << "part " << i << " key " << k;
    }
  }
  uint64_t refusals = 0;
  uint64_t dropped = 0;
  std::map<int, uint64_t> applied;  // Worker -> parts.
  for (int i = 0; i < co.num_servers; ++i) {
    const wire::ServerStats stats = test::ServerStatsOf(cluster.server(i)->endpoint());
    refusals += stats.quota_rejected();
    dropped += stats.replies_dropped();
    for (const wire::AppliedParts& a : stats.applied_parts()) applied[a.worker()] += a.parts();
  }
  for (auto& c : workers) {
    EXPECT_EQ(applied[c->worker_id()], c->stats().acked_updates) << "worker " << c->worker_id();
  }
  std::printf("%s, recovery %s: %d workers x %d clocks x %d PushPulls of 1 MiB, 4 MiB per "
              "peer: %llu refusals, %llu replies dropped\n",
              model == ConsistencyModel::kBsp ? "BSP" : "SSP", recovery.c_str(), kWorkers,
              kClocks, kParts, static_cast<unsigned long long>(refusals),
              static_cast<unsigned long long>(dropped));
  EXPECT_GT(refusals, 0u);  // The limit was in the way.
  EXPECT_EQ(dropped, 0u);
}

TEST(ReplyReservationTest, BspClocksOfPushPullsPastThePerPeerLimitComplete) {
  RunPushPullClocks(ConsistencyModel::kBsp);
}

TEST(ReplyReservationTest, SspClocksOfPushPullsPastThePerPeerLimitComplete) {
  RunPushPullClocks(ConsistencyModel::kSsp);
}

TEST(ReplyReservationTest, ChainBspClocksOfPushPullsPastThePerPeerLimitApplyEachPushOnce) {
  RunPushPullClocks(ConsistencyModel::kBsp, "chain");
}

}  // namespace
}  // namespace relaxps
