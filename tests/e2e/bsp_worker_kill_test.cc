// End to end (acceptance of the consistency issue): under BSP a dead worker is
// dropped from the live set after its heartbeat timeout, so the barrier never
// hangs. Three MLP workers, one server, --heartbeat_timeout_ms=1000; SIGKILL
// one worker; the other two must be advancing again within heartbeat
// timeout + 1 s of the kill.
//
// How "advancing" is measured: the workers print a progress line every 0.5 s
// of training (--log_every_s=0.5), and the first step after a stall prints at
// once (its log time has passed). Under BSP a survivor can be at most one clock
// ahead of the killed worker, so without the fix it blocks within a step of
// the kill and prints nothing more. The test therefore requires, for each
// survivor, a progress line first seen in (kill + timeout, kill + timeout + 1 s]
// whose clock is higher than every clock that survivor printed before that
// window.
#include <signal.h>

#include <cstdio>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "tests/e2e/e2e_util.h"
#include "tests/test_util.h"

namespace relaxps {
namespace test {
namespace {

constexpr Millis kStartTimeout{60000};
constexpr int kHeartbeatTimeoutMs = 1000;
constexpr int kWorkers = 3;

TEST(e2e_BspWorkerKill, SurvivorsAdvanceWithinHeartbeatTimeoutPlusOneSecond) {
  const std::string dir = MakeTempDir();
  LocalClusterOptions options;
  options.num_servers = 1;
  options.num_workers = kWorkers;
  options.coordinator_flags = {"--consistency=bsp",
                               "--heartbeat_timeout_ms=" + std::to_string(kHeartbeatTimeoutMs)};
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<LocalCluster> cluster, LocalCluster::Start(dir, options));

  std::unique_ptr<Subprocess> workers[kWorkers];
  for (int i = 0; i < kWorkers; ++i) {
    const std::string name = "worker-" + std::to_string(i);
    std::vector<std::string> flags = MlpWorkerFlags(dir, name, kWorkers, 120, 0.5);
    flags.push_back("--final_eval=false");
    ASSERT_OK_AND_ASSIGN(workers[i], cluster->StartWorker(name, flags));
  }
  int victim = -1;
  for (int i = 0; i < kWorkers; ++i) {
    ASSERT_OK_AND_ASSIGN(int id, WaitForWorkerId(workers[i].get(), kStartTimeout));
    if (id == 1) victim = i;
  }
  ASSERT_NE(victim, -1) << "no process got worker id 1";

  // Training is under way on every worker: watch for 1.5 s, each must advance.
  ProgressWatcher watcher;
  for (auto& w : workers) watcher.Add(w->log_path());
  watcher.Poll();
  const SteadyTime warm = Now();
  watcher.PollUntil(warm + Millis(1500), Millis(10));
  for (auto& w : workers) {
    const auto& lines = watcher.Lines(w->log_path());
    ASSERT_GE(lines.size(), 2u) << w->Log();
    ASSERT_GT(lines.back().line.clock, lines.front().line.clock)
        << "BSP job not advancing before the kill:\n"
        << w->Log();
  }

  workers[victim]->Kill(SIGKILL);
  const SteadyTime killed = Now();
  const SteadyTime window_begin = killed + Millis(kHeartbeatTimeoutMs);
  const SteadyTime window_end = window_begin + Millis(1000);
  watcher.PollUntil(window_end, Millis(10));
  // A little longer, to show in the message when the survivors did resume.
  watcher.PollUntil(window_end + Millis(3000), Millis(10));

  for (int i = 0; i < kWorkers; ++i) {
    if (i == victim) continue;
    const std::string& log = workers[i]->log_path();
    const int64_t before_window = watcher.MaxClockSeenBy(log, window_begin);
    bool advanced_in_window = false;
    double first_advance_s = -1;
    std::string timeline;
    for (const SeenProgress& s : watcher.Lines(log)) {
      const double t = std::chrono::duration<double>(s.seen - killed).count();
      if (t > -1.0) timeline += "  t=" + std::to_string(t) + "s clock=" + std::to_string(s.line.clock) + "\n";
      if (s.seen > window_begin && s.line.clock > before_window) {
        if (first_advance_s < 0) first_advance_s = t;
        if (s.seen <= window_end) advanced_in_window = true;
      }
    }
    EXPECT_TRUE(advanced_in_window)
        << "worker process " << i << " did not advance past clock " << before_window
        << " within " << kHeartbeatTimeoutMs << " ms + 1 s of the kill (first advance after "
        << first_advance_s << " s; -1 = never). Progress lines seen (time since kill):\n"
        << timeline;
    EXPECT_TRUE(workers[i]->IsRunning()) << workers[i]->Log();
    std::printf("worker process %d: first clock past %lld seen %.3f s after the kill\n", i,
                static_cast<long long>(before_window), first_advance_s);
  }

  // The coordinator has dropped the killed worker.
  ASSERT_OK_AND_ASSIGN(ClusterStatus status, cluster->QueryStatus());
  ASSERT_NE(status.worker(1), nullptr);
  EXPECT_FALSE(status.worker(1)->alive);
  if (!::testing::Test::HasFailure()) RemoveTree(dir);
}

}  // namespace
}  // namespace test
}  // namespace relaxps
