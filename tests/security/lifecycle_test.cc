// Lifecycles that never leave a job hung or orphaned (issue 13), with the
// real binaries:
//  * a server paused past its heartbeat timeout under --recovery=checkpoint
//    restarts itself in place when it wakes (it re-executes with its id,
//    from its checkpoint), and training finishes;
//  * the coordinator SIGKILLed: every server and worker started by hand
//    exits non-zero within --coordinator_timeout_ms, naming why;
//  * `relaxps-ctl shutdown` ends a by-hand job: every process exits 0;
//  * a by-hand job whose workers all left ends by itself.
#include <signal.h>

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/e2e/e2e_util.h"
#include "tests/test_util.h"

namespace relaxps {
namespace test {
namespace {

const std::vector<std::string> kWorkerFlags = {"--model=mlp", "--duration_s=0",
                                               "--eval_every_s=0", "--final_eval=false",
                                               "--log_every_s=0.5", "--num_workers=2"};

std::vector<std::string> With(std::vector<std::string> flags, const std::vector<std::string>& more) {
  flags.insert(flags.end(), more.begin(), more.end());
  return flags;
}

TEST(LifecycleTest, PausedServerRejoinsFromItsCheckpointAndTrainingFinishes) {
  const std::string dir = MakeTempDir();
  const std::string out = dir + "/run";
  // Paused 10 s, past the 3 s heartbeat timeout: declared dead meanwhile.
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<Subprocess> run,
      StartRunLocal(dir, {"--servers=2", "--workers=2", "--model=mlp", "--duration_s=30",
                          "--out_dir=" + out, "--progress_s=1", "--eval_every_s=0",
                          "--log_every_s=0.5", "--recovery=checkpoint",
                          "--checkpoint_every_s=2", "--stop_server=1@8+10",
                          "--restart_after_s=1",
                          // Explicit, so a sanitized coordinator keeps it too.
                          "--heartbeat_timeout_ms=3000"}));
  auto code = run->Wait(Scaled(Millis(150000)));
  ASSERT_OK(code) << "run_local.sh did not finish; log:\n" << run->Log();
  EXPECT_EQ(*code, 0) << run->Log();
  ASSERT_OK_AND_ASSIGN(std::string server1, ReadFile(out + "/server-1.log"));
  EXPECT_FALSE(GrepLines(server1, "was declared dead by the coordinator").empty()) << server1;
  ASSERT_OK_AND_ASSIGN(std::string coordinator, ReadFile(out + "/coordinator.log"));
  // It restarts from its checkpoint when one was complete before the pause
  // (on a loaded machine the first may come later).
  const size_t first_ckpt = coordinator.find("complete on 2 server(s)");
  if (first_ckpt != std::string::npos && first_ckpt < coordinator.find("missed heartbeats")) {
    EXPECT_FALSE(GrepLines(server1, "restored .* from checkpoint").empty()) << server1;
  }
  EXPECT_FALSE(GrepLines(coordinator, "server 1 registers again").empty()) << coordinator;
  for (int i = 0; i < 2; ++i) {
    ASSERT_OK_AND_ASSIGN(std::string w, ReadFile(out + "/worker-" + std::to_string(i) + ".log"));
    EXPECT_FALSE(GrepLines(w, "^final worker=").empty()) << w;
  }
  EXPECT_TRUE(FindProcesses(out).empty()) << DescribeProcesses(FindProcesses(out));
  if (!::testing::Test::HasFailure()) RemoveTree(dir);
}

TEST(LifecycleTest, CoordinatorKilledEveryOtherProcessExitsNonZero) {
  const std::string dir = MakeTempDir();
  LocalClusterOptions o;
  o.num_servers = 2;
  o.server_flags = {"--coordinator_timeout_ms=3000"};
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<LocalCluster> cluster, LocalCluster::Start(dir, o));
  std::vector<std::unique_ptr<Subprocess>> workers;
  for (int i = 0; i < 2; ++i) {
    ASSERT_OK_AND_ASSIGN(auto w, cluster->StartWorker("worker-" + std::to_string(i),
                                                      With(kWorkerFlags,
                                                           {"--coordinator_timeout_ms=3000"})));
    workers.push_back(std::move(w));
  }
  for (auto& w : workers) {
    ASSERT_OK(WaitForLine(w->log_path(), "^progress ", Millis(60000), w.get()));
  }
  cluster->coordinator()->Kill(SIGKILL);
  const SteadyTime killed = Now();
  std::vector<Subprocess*> others = {cluster->server(0), cluster->server(1), workers[0].get(),
                                     workers[1].get()};
  for (Subprocess* p : others) {
    // 3 s of silence, plus a heartbeat period and a loaded machine.
    auto code = p->Wait(Scaled(Millis(20000)));
    ASSERT_OK(code) << p->CommandLine() << " still running; log:\n" << p->Log();
    EXPECT_NE(*code, 0) << p->Log();
    EXPECT_FALSE(GrepLines(p->Log(), "coordinator_timeout_ms=3000").empty()) << p->Log();
  }
  std::printf("every process exited non-zero %.2f s after the coordinator was killed\n",
              SecondsSince(killed));
  if (!::testing::Test::HasFailure()) RemoveTree(dir);
}

TEST(LifecycleTest, CtlShutdownEndsAByHandJobWithEveryProcessExitingZero) {
  const std::string dir = MakeTempDir();
  LocalClusterOptions o;
  o.num_servers = 2;
  o.num_workers = 2;
  o.coordinator_flags = {"--consistency=bsp"};
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<LocalCluster> cluster, LocalCluster::Start(dir, o));
  std::vector<std::unique_ptr<Subprocess>> workers;
  for (int i = 0; i < 2; ++i) {
    ASSERT_OK_AND_ASSIGN(auto w, cluster->StartWorker("worker-" + std::to_string(i),
                                                      kWorkerFlags));
    workers.push_back(std::move(w));
  }
  for (auto& w : workers) {
    ASSERT_OK(WaitForLine(w->log_path(), "^progress ", Millis(60000), w.get()));
  }
  ASSERT_OK_AND_ASSIGN(CommandResult ctl,
                       RunCommand({BinPath("relaxps-ctl"),
                                   "--coordinator=" + cluster->coordinator_endpoint(), "shutdown"},
                                  dir + "/ctl.log", Millis(30000)));
  EXPECT_EQ(ctl.exit_status, 0) << ctl.output;
  std::vector<Subprocess*> all = {workers[0].get(), workers[1].get(), cluster->server(0),
                                  cluster->server(1), cluster->coordinator()};
  for (Subprocess* p : all) {
    auto code = p->Wait(Scaled(Millis(30000)));
    ASSERT_OK(code) << p->CommandLine() << " still running; log:\n" << p->Log();
    EXPECT_EQ(*code, 0) << p->Log();
  }
  for (auto& w : workers) EXPECT_FALSE(GrepLines(w->Log(), "^final worker=").empty()) << w->Log();
  EXPECT_FALSE(GrepLines(cluster->server(0)->Log(), "the job is over; flushed").empty())
      << cluster->server(0)->Log();
  if (!::testing::Test::HasFailure()) RemoveTree(dir);
}

TEST(LifecycleTest, ByHandJobEndsWhenEveryWorkerLeft) {
  const std::string dir = MakeTempDir();
  LocalClusterOptions o;
  o.num_servers = 1;
  o.num_workers = 1;
  o.coordinator_flags = {"--exit_when_done=true"};  // LocalCluster turns it off.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<LocalCluster> cluster, LocalCluster::Start(dir, o));
  ASSERT_OK_AND_ASSIGN(auto worker,
                       cluster->StartWorker("worker-0", {"--model=mlp", "--duration_s=2",
                                                         "--eval_every_s=0", "--final_eval=false"}));
  for (Subprocess* p : {worker.get(), cluster->server(0), cluster->coordinator()}) {
    auto code = p->Wait(Scaled(Millis(60000)));
    ASSERT_OK(code) << p->CommandLine() << " still running; log:\n" << p->Log();
    // The coordinator exits non-zero if the worker's goodbye was lost (a
    // loaded machine); it exits either way, which is what this test is about.
    if (p != cluster->coordinator()) {
      EXPECT_EQ(*code, 0) << p->Log();
    }
  }
  EXPECT_FALSE(GrepLines(cluster->coordinator()->Log(), "exiting: the job is over").empty())
      << cluster->coordinator()->Log();
  if (!::testing::Test::HasFailure()) RemoveTree(dir);
}

}  // namespace
}  // namespace test
}  // namespace relaxps
