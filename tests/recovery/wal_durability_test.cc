// WAL-per-update durability through a real server process: a steady load of
// pushes, SIGKILL mid-stream, restart on the same data directory: every
// update the client saw acknowledged is there.
#include <signal.h>

#include <atomic>
#include <deque>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/recovery/recovery_util.h"
#include "tests/test_util.h"

namespace relaxps {
namespace test {
namespace {

constexpr int kWidth = 4;
constexpr uint64_t kCounters = 64;

TEST(WalDurabilityTest, AcknowledgedUpdatesSurviveSigkill) {
  const std::string dir = MakeTempDir();
  ASSERT_OK_AND_ASSIGN(auto cluster, RecoveryCluster::Start(dir, 1, {"--recovery=checkpoint"}));
  const std::vector<std::string> flags = {"--store=rocksdb", "--wal_per_update",
                                          "--flush_every_clocks=0"};
  ASSERT_OK(cluster->StartServer(0, flags));
  ClientOptions co;
  co.coordinator = cluster->coordinator_endpoint();
  co.request_timeout_ms = 3000;
  ASSERT_OK_AND_ASSIGN(auto client, Client::Connect(co));
  // SGD with lr 1 and zero init: a gradient of -1 adds exactly 1.
  TableOptions rows;
  rows.name = "rows";
  rows.type = TableType::kSparse;
  rows.row_width = kWidth;
  rows.optimizer.name = "sgd";
  rows.optimizer.lr = 1.0f;
  ASSERT_OK(client->CreateTable(rows));
  TableOptions counters;
  counters.name = "counters";
  counters.type = TableType::kDense;
  counters.size = kCounters;
  counters.optimizer.name = "sgd";
  counters.optimizer.lr = 1.0f;
  ASSERT_OK(client->CreateTable(counters));

  // Pusher: up to 16 updates in flight; update i adds 1 to row i and 1 to
  // counter i % 64. Records which ones were acknowledged.
  struct InFlight {
    uint64_t i;
    std::future<Status> row, counter;
  };
  std::vector<uint64_t> acked_rows;
  std::vector<int64_t> acked_counter(kCounters, 0), sent_counter(kCounters, 0);
  std::atomic<uint64_t> acked{0};
  std::atomic<bool> stop{false};
  std::thread pusher([&] {
    std::deque<InFlight> window;
    uint64_t next = 0;
    auto retire = [&](InFlight& f) {
      const bool row_ok = f.row.get().ok();
      const bool counter_ok = f.counter.get().ok();
      if (row_ok) acked_rows.push_back(f.i);
      if (counter_ok) ++acked_counter[f.i % kCounters];
      if (row_ok) acked.fetch_add(1);
    };
    while (!stop.load()) {
      if (window.size() >= 16) {
        retire(window.front());
        window.pop_front();
        continue;
      }
      KeyBuffer id(1);
      id[0] = next;
      FloatBuffer g(kWidth);
      for (int k = 0; k < kWidth; ++k) g[k] = -1.0f;
      FloatBuffer one(1);
      one[0] = -1.0f;
      ++sent_counter[next % kCounters];
      window.push_back(InFlight{next, client->PushRows("rows", id, g),
                                client->Push("counters", next % kCounters, one)});
      ++next;
    }
    for (InFlight& f : window) retire(f);
  });

  // Let the load run, then kill the server in the middle of it.
  for (int i = 0; i < 300 * TimeScale() && acked.load() < 400; ++i) {
    std::this_thread::sleep_for(Millis(20));
  }
  ASSERT_GT(acked.load(), 50u) << "the load did not get going";
  cluster->server(0)->Kill(SIGKILL);
  const uint64_t acked_at_kill = acked.load();
  std::this_thread::sleep_for(Millis(300));
  stop.store(true);
  pusher.join();
  ASSERT_OK(cluster->server(0)->Wait(Millis(10000)));
  std::printf("acknowledged %zu row updates (%llu when SIGKILL was sent)\n", acked_rows.size(),
              static_cast<unsigned long long>(acked_at_kill));
  client.reset();

  ASSERT_OK(cluster->StartServer(0, flags));
  ASSERT_OK_AND_ASSIGN(auto observer, cluster->Connect("observer"));
  KeyBuffer ids(acked_rows.size());
  for (size_t i = 0; i < acked_rows.size(); ++i) ids[i] = acked_rows[i];
  FloatBuffer out(acked_rows.size() * kWidth);
  ASSERT_OK(observer->PullRows("rows", ids, out).get());
  size_t lost = 0;
  for (size_t i = 0; i < acked_rows.size(); ++i) {
    for (int k = 0; k < kWidth; ++k) {
      if (out[i * kWidth + k] != 1.0f) {
        if (++lost <= 5) {
          ADD_FAILURE() << "acknowledged row " << acked_rows[i] << " column " << k << " is "
                        << out[i * kWidth + k] << ", expected 1";
        }
      }
    }
  }
  EXPECT_EQ(lost, 0u);
  FloatBuffer c(kCounters);
  ASSERT_OK(observer->Pull("counters", 0, c).get());
  int64_t acked_total = 0, present_total = 0;
  for (uint64_t k = 0; k < kCounters; ++k) {
    EXPECT_GE(c[k], static_cast<float>(acked_counter[k])) << "counter " << k << " lost updates";
    EXPECT_LE(c[k], static_cast<float>(sent_counter[k])) << "counter " << k;
    acked_total += acked_counter[k];
    present_total += static_cast<int64_t>(c[k]);
  }
  std::printf("dense counters: %lld acknowledged increments, %lld present after restart\n",
              static_cast<long long>(acked_total), static_cast<long long>(present_total));
  if (!::testing::Test::HasFailure()) RemoveTree(dir);
}

}  // namespace
}  // namespace test
}  // namespace relaxps
