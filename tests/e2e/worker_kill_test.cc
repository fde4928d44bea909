// End to end: SIGKILL one of two workers of an async job. The other worker
// keeps training and finishes normally; the coordinator reports the killed
// worker dead.
#include <signal.h>

#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "tests/e2e/e2e_util.h"
#include "tests/test_util.h"

namespace relaxps {
namespace test {
namespace {

constexpr Millis kStartTimeout{60000};  // generous: a loaded 2-core machine
constexpr double kDurationS = 25;

TEST(e2e_WorkerKill, SurvivorKeepsTrainingAndKilledWorkerIsReportedDead) {
  const std::string dir = MakeTempDir();
  LocalClusterOptions options;
  options.num_servers = 1;
  options.num_workers = 2;
  options.coordinator_flags = {"--heartbeat_timeout_ms=1000"};
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<LocalCluster> cluster, LocalCluster::Start(dir, options));

  std::unique_ptr<Subprocess> workers[2];
  for (int i = 0; i < 2; ++i) {
    const std::string name = "worker-" + std::to_string(i);
    ASSERT_OK_AND_ASSIGN(workers[i],
                         cluster->StartWorker(name, MlpWorkerFlags(dir, name, 2, kDurationS, 0.5)));
  }
  // The coordinator assigns ids in registration order; find which process is 1.
  int ids[2];
  for (int i = 0; i < 2; ++i) {
    ASSERT_OK_AND_ASSIGN(ids[i], WaitForWorkerId(workers[i].get(), kStartTimeout));
  }
  ASSERT_NE(ids[0], ids[1]);
  ASSERT_TRUE((ids[0] == 0 || ids[0] == 1) && (ids[1] == 0 || ids[1] == 1))
      << "ids " << ids[0] << ", " << ids[1];
  Subprocess* victim = workers[ids[0] == 1 ? 0 : 1].get();
  Subprocess* survivor = workers[ids[0] == 1 ? 1 : 0].get();

  ASSERT_OK_AND_ASSIGN(ClusterStatus before, cluster->QueryStatus());
  ASSERT_NE(before.worker(1), nullptr) << "worker 1 not in relaxps-ctl status";
  EXPECT_TRUE(before.worker(1)->alive);

  victim->Kill(SIGKILL);
  const SteadyTime killed = Now();
  ASSERT_OK_AND_ASSIGN(int victim_status, victim->Wait(Millis(5000)));
  EXPECT_EQ(victim_status, 128 + SIGKILL);
  ProgressWatcher watcher;
  watcher.Add(survivor->log_path());
  watcher.Poll();
  const int64_t clock_at_kill = watcher.MaxClockSeenBy(survivor->log_path(), Now());
  ASSERT_GE(clock_at_kill, 0);

  // The survivor keeps advancing: progress lines with ever higher clocks.
  int64_t last = clock_at_kill;
  int advances = 0;
  const SteadyTime deadline = killed + std::chrono::seconds(10);
  while (advances < 3 && Now() < deadline && survivor->IsRunning()) {
    watcher.PollUntil(Now() + Millis(100), Millis(20));
    for (const SeenProgress& s : watcher.Lines(survivor->log_path())) {
      if (s.line.kind == "progress" && s.line.clock > last) {
        last = s.line.clock;
        ++advances;
      }
    }
  }
  EXPECT_GE(advances, 3) << "survivor stuck at clock " << last << " (clock at kill "
                         << clock_at_kill << ") for " << SecondsSince(killed)
                         << " s after the kill; log:\n"
                         << survivor->Log();

  // The coordinator notices the death (heartbeat timeout 1 s; allow 10 s).
  bool reported_dead = false;
  int64_t survivor_clock_in_status = -1;
  ClusterStatus status;
  while (!reported_dead && SecondsSince(killed) < 10) {
    auto st = cluster->QueryStatus();
    if (st.ok()) {
      status = *st;
      const WorkerStatus* w1 = status.worker(1);
      reported_dead = w1 != nullptr && !w1->alive;
      if (const WorkerStatus* w0 = status.worker(0)) survivor_clock_in_status = w0->clock;
    }
    if (!reported_dead) std::this_thread::sleep_for(Millis(200));
  }
  EXPECT_TRUE(reported_dead) << "coordinator still reports worker 1 alive 10 s after SIGKILL";
  ASSERT_NE(status.worker(0), nullptr);
  EXPECT_TRUE(status.worker(0)->alive);
  EXPECT_GT(survivor_clock_in_status, clock_at_kill)
      << "relaxps-ctl status shows no progress of worker 0 after the kill";

  // The survivor trains until --duration_s and exits 0 with a final line.
  ASSERT_OK_AND_ASSIGN(int code, survivor->Wait(std::chrono::seconds(static_cast<int>(kDurationS) + 60)));
  EXPECT_EQ(code, 0) << survivor->Log();
  std::vector<ProgressLine> lines = ParseProgress(survivor->Log());
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back().kind, "final") << survivor->Log();
  EXPECT_GE(lines.back().clock, last);

  // The cluster itself survived the worker's death.
  EXPECT_TRUE(cluster->coordinator()->IsRunning()) << cluster->coordinator()->Log();
  EXPECT_TRUE(cluster->server(0)->IsRunning()) << cluster->server(0)->Log();
  if (!::testing::Test::HasFailure()) RemoveTree(dir);
}

}  // namespace
}  // namespace test
}  // namespace relaxps
