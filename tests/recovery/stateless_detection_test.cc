// How fast and how exactly a stateless worker (--recovery=stateless) takes
// over from a server, through real processes: a closed connection makes it go
// local at once (the transport's socket monitor and a probe), long before any
// request timeout or the coordinator's heartbeat timeout; a push that timed
// out against a paused (SIGSTOP) server, which applies it when it wakes up,
// counts exactly once.
#include <signal.h>

#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/recovery/recovery_util.h"
#include "tests/recovery/stateless_util.h"
#include "tests/test_util.h"

namespace relaxps {
namespace test {
namespace {

constexpr uint64_t kSize = 64;
constexpr float kLr = 0.5f;

// Options of a worker that no request deadline (60 s) takes a server away
// from within a test's bound; with StartStatelessCluster(dir, 60000, ...) the
// coordinator's heartbeat timeout cannot either.
ClientOptions SlowToGiveUp(const RecoveryCluster& cluster) {
  ClientOptions o;
  o.coordinator = cluster.coordinator_endpoint();
  o.request_timeout_ms = 60000;
  o.local_after_ms = 60000;
  return o;
}

TEST(StatelessDetectionTest, ClosedConnectionGoesLocalWithoutWaitingForATimeout) {
  const std::string dir = MakeTempDir();
  ASSERT_OK_AND_ASSIGN(auto cluster, StartStatelessCluster(dir, 60000, 3000));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> c, Client::Connect(SlowToGiveUp(*cluster)));
  ASSERT_OK(c->CreateTable(SgdTable(kSize, kLr, 8.0f)));
  FloatBuffer copy(kSize);
  ASSERT_OK(c->PushPull("w", 0, IntegerGradient(kSize, 0, 0), copy).get());

  cluster->server(0)->Kill(SIGKILL);
  ASSERT_OK(cluster->server(0)->Wait(Millis(10000)).status());
  const auto t0 = std::chrono::steady_clock::now();
  FloatBuffer g = IntegerGradient(kSize, 0, 1);
  FloatBuffer out(kSize);
  ASSERT_OK(c->PushPull("w", 0, g, out).get());
  // Served locally: far below the 60 s timeouts (the bound leaves room for a
  // loaded machine; the probe itself waits 100 ms).
  EXPECT_LT(std::chrono::steady_clock::now() - t0, Scaled(Millis(10000)));
  EXPECT_EQ(c->stats().local_steps, 1u);
  for (uint64_t i = 0; i < kSize; ++i) EXPECT_EQ(out[i], copy[i] - kLr * g[i]) << i;
  c.reset();
  RemoveTree(dir);
}

// While its server is lost a worker applies its pushes to its own copy, and
// there no server checks them: the worker does. A push with a NaN or Inf,
// dense or rows, is refused and leaves the copy as it was; the next finite
// push trains on as before.
TEST(StatelessDetectionTest, NonFinitePushWhileTheServerIsLostChangesNothing) {
  const std::string dir = MakeTempDir();
  ASSERT_OK_AND_ASSIGN(auto cluster, StartStatelessCluster(dir, 60000, 3000));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> c, Client::Connect(SlowToGiveUp(*cluster)));
  ASSERT_OK(c->CreateTable(SgdTable(kSize, kLr, 8.0f)));
  ASSERT_OK(c->CreateTable(SparseSgdTable(2, kLr, 4.0f)));
  FloatBuffer copy(kSize);
  ASSERT_OK(c->PushPull("w", 0, IntegerGradient(kSize, 0, 0), copy).get());
  KeyBuffer ids(3);
  for (uint64_t i = 0; i < ids.size(); ++i) ids[i] = 10 + i;
  FloatBuffer rows(ids.size() * 2);
  ASSERT_OK(c->PullRows("s", ids, rows).get());

  cluster->server(0)->Kill(SIGKILL);
  ASSERT_OK(cluster->server(0)->Wait(Millis(10000)).status());
  FloatBuffer out(kSize);
  ASSERT_OK(c->PushPull("w", 0, IntegerGradient(kSize, 0, 1), out).get());  // Local now.
  ASSERT_EQ(c->stats().local_steps, 1u);
  for (float bad : {std::nanf(""), INFINITY}) {
    FloatBuffer g = IntegerGradient(kSize, 0, 2);
    g[kSize / 2] = bad;
    FloatBuffer ignored(kSize);
    EXPECT_EQ(c->Push("w", 0, g).get().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(c->PushPull("w", 0, g, ignored).get().code(), StatusCode::kInvalidArgument);
    FloatBuffer row_grads(ids.size() * 2);
    row_grads[3] = bad;
    EXPECT_EQ(c->PushRows("s", ids, row_grads).get().code(), StatusCode::kInvalidArgument);
  }
  FloatBuffer after(kSize), rows_after(ids.size() * 2);
  ASSERT_OK(c->Pull("w", 0, after).get());
  ASSERT_OK(c->PullRows("s", ids, rows_after).get());
  for (uint64_t i = 0; i < kSize; ++i) EXPECT_EQ(after[i], out[i]) << i;
  for (size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(rows_after[i], rows[i]) << i;
  EXPECT_EQ(c->stats().local_steps, 1u);
  // A finite push still trains locally.
  FloatBuffer g = IntegerGradient(kSize, 0, 3);
  ASSERT_OK(c->PushPull("w", 0, g, after).get());
  for (uint64_t i = 0; i < kSize; ++i) EXPECT_EQ(after[i], out[i] - kLr * g[i]) << i;
  c.reset();
  RemoveTree(dir);
}

TEST(StatelessDetectionTest, PushThatTimedOutAgainstAPausedServerCountsOnce) {
  const std::string dir = MakeTempDir();
  ASSERT_OK_AND_ASSIGN(auto cluster, StartStatelessCluster(dir, 60000, 3000));
  ClientOptions o;
  o.coordinator = cluster->coordinator_endpoint();
  o.local_after_ms *= TimeScale();  // Only the paused server's pushes go local.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> c, Client::Connect(o));
  ASSERT_OK(c->CreateTable(SgdTable(kSize, kLr, 8.0f)));
  std::vector<float> expected(kSize, 8.0f);  // Init minus every push, once.
  auto push = [&](int step) {
    FloatBuffer g = IntegerGradient(kSize, 0, step);
    ASSERT_OK(c->Push("w", 0, g).get());
    for (uint64_t i = 0; i < kSize; ++i) expected[i] -= kLr * g[i];
  };
  push(0);
  FloatBuffer copy(kSize);
  ASSERT_OK(c->Pull("w", 0, copy).get());  // The copy the worker trains on.

  // Paused: the first push waits local_after_ms and is served locally, but it
  // sits in the server's socket and is applied when the server wakes up.
  // A loaded sanitizer run may take the warm-up push past local_after_ms
  // too (seen once under TSan at load 10): count from here.
  const uint64_t local_before = c->stats().local_steps;
  cluster->server(0)->Kill(SIGSTOP);
  for (int step = 1; step <= 3; ++step) ASSERT_NO_FATAL_FAILURE(push(step));
  EXPECT_EQ(c->stats().local_steps - local_before, 3u);
  cluster->server(0)->Kill(SIGCONT);

  // The worker's probe finds it alive: the timed-out push is resent with its
  // key (skipped, applied already), the other two go back as a raw delta.
  bool equal = false;
  std::vector<float> got;
  for (int i = 0; i < 300 && !equal; ++i) {
    ASSERT_OK_AND_ASSIGN(got, ReadDenseSlot(cluster->server_endpoint(0), "w", 0, kSize, 0));
    equal = got == expected;
    if (!equal) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(equal) << "key 0: server " << got[0] << ", expected " << expected[0];
  std::this_thread::sleep_for(Scaled(Millis(1000)));  // Nothing arrives twice later.
  ASSERT_OK_AND_ASSIGN(got, ReadDenseSlot(cluster->server_endpoint(0), "w", 0, kSize, 0));
  EXPECT_EQ(got, expected);
  // Served by the server again.
  FloatBuffer g = IntegerGradient(kSize, 0, 9);
  FloatBuffer out(kSize);
  ASSERT_OK(c->PushPull("w", 0, g, out).get());
  for (uint64_t i = 0; i < kSize; ++i) EXPECT_EQ(out[i], expected[i] - kLr * g[i]) << i;
  EXPECT_EQ(c->stats().local_steps - local_before, 3u);
  c.reset();
  RemoveTree(dir);
}

// The same for a row push: resent with its key, skipped by the server that
// applied it on waking up.
TEST(StatelessDetectionTest, RowPushThatTimedOutAgainstAPausedServerCountsOnce) {
  const std::string dir = MakeTempDir();
  ASSERT_OK_AND_ASSIGN(auto cluster, StartStatelessCluster(dir, 60000, 3000));
  ClientOptions o;
  o.coordinator = cluster->coordinator_endpoint();
  o.local_after_ms *= TimeScale();  // Only the paused server's pushes go local.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> c, Client::Connect(o));
  constexpr size_t kWidth = 4;
  ASSERT_OK(c->CreateTable(SparseSgdTable(kWidth, kLr, 1.0f)));
  KeyBuffer ids(2);
  ids[0] = 5;
  ids[1] = 9;
  std::vector<float> expected(2 * kWidth, 1.0f);
  auto push = [&](int step) {
    FloatBuffer g = IntegerGradient(2 * kWidth, 0, step);
    ASSERT_OK(c->PushRows("s", ids, g).get());
    for (size_t i = 0; i < g.size(); ++i) expected[i] -= kLr * g[i];
  };
  push(0);
  FloatBuffer rows(2 * kWidth);
  ASSERT_OK(c->PullRows("s", ids, rows).get());
  const uint64_t local_before = c->stats().local_steps;  // As above.
  cluster->server(0)->Kill(SIGSTOP);
  for (int step = 1; step <= 3; ++step) ASSERT_NO_FATAL_FAILURE(push(step));
  EXPECT_EQ(c->stats().local_steps - local_before, 3u);
  cluster->server(0)->Kill(SIGCONT);
  bool equal = false;
  std::vector<float> got;
  for (int i = 0; i < 300 && !equal; ++i) {
    ASSERT_OK_AND_ASSIGN(got, ReadRowsSlot(cluster->server_endpoint(0), "s", {5, 9}, 0));
    equal = got == expected;
    if (!equal) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(equal) << "row 5: server " << got[0] << ", expected " << expected[0];
  std::this_thread::sleep_for(Scaled(Millis(1000)));
  ASSERT_OK_AND_ASSIGN(got, ReadRowsSlot(cluster->server_endpoint(0), "s", {5, 9}, 0));
  EXPECT_EQ(got, expected);
  c.reset();
  RemoveTree(dir);
}

}  // namespace
}  // namespace test
}  // namespace relaxps
