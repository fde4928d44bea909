// End to end: scripts/run_local.sh supervising a 2-server, 2-worker job. A
// SIGKILLed relaxps-server must make run_local.sh exit non-zero within 10 s,
// naming the dead server, and leave none of the processes it started running.
// Under --recovery=checkpoint the script restarts the server from its latest
// checkpoint instead and both workers train to the end.
#include <signal.h>

#include <algorithm>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "tests/e2e/e2e_util.h"
#include "tests/test_util.h"

namespace relaxps {
namespace test {
namespace {

constexpr Millis kStartTimeout{60000};

TEST(e2e_ServerKill, RunLocalExitsNamingTheServerAndStopsEverything) {
  const std::string dir = MakeTempDir();
  const std::string out = dir + "/run";
  // Training has started on both workers.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Subprocess> run,
                       StartTrainingJob(dir, out, /*servers=*/2, kStartTimeout));
  ASSERT_OK_AND_ASSIGN(std::string endpoint, ReadFile(out + "/coordinator.endpoint"));
  endpoint.erase(endpoint.find_last_not_of(" \n") + 1);
  ASSERT_OK_AND_ASSIGN(ClusterStatus status, QueryClusterStatus(endpoint, dir));
  const ServerStatus* server1 = status.server(1);
  ASSERT_NE(server1, nullptr) << "no server 1 in relaxps-ctl status";
  ASSERT_TRUE(server1->alive);
  ASSERT_GT(server1->pid, 0);
  const pid_t victim = server1->pid;

  // Every process the script started mentions the unique out dir on its
  // command line (the script itself too: exclude it).
  std::vector<pid_t> started = FindProcesses(out);
  started.erase(std::remove(started.begin(), started.end(), run->pid()), started.end());
  ASSERT_GE(started.size(), 5u) << "expected coordinator, 2 servers, 2 workers:\n"
                                << DescribeProcesses(started);
  for (const ServerStatus& s : status.servers) {
    EXPECT_NE(std::find(started.begin(), started.end(), s.pid), started.end())
        << "server " << s.id << " pid " << s.pid << " not found among\n"
        << DescribeProcesses(started);
  }

  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  const SteadyTime killed = Now();
  auto code = run->Wait(Millis(10000));
  ASSERT_OK(code) << "run_local.sh still running 10 s after server 1 was killed; log:\n"
                  << run->Log();
  EXPECT_NE(*code, 0) << run->Log();
  // e.g. "run_local.sh: server 1 (pid 1234) died with exit code 137; ..."
  const std::string log = run->Log();
  EXPECT_FALSE(GrepLines(log, "server 1 \\(pid " + std::to_string(victim) + "\\) died").empty())
      << "run_local.sh did not name the dead server; log:\n"
      << log;
  std::printf("run_local.sh exited with %d %.2f s after the kill\n", *code, SecondsSince(killed));

  // Nothing it started is left.
  std::vector<pid_t> left = FindProcesses(out);
  EXPECT_TRUE(left.empty()) << "still running after run_local.sh exited:\n"
                            << DescribeProcesses(left);
  for (pid_t p : started) {
    EXPECT_FALSE(IsProcessAlive(p)) << "pid " << p << " still alive";
  }
  if (!::testing::Test::HasFailure()) RemoveTree(dir);
}

TEST(e2e_ServerKill, CheckpointPolicyRestartsTheServerAndTrainingGoesOn) {
  const std::string dir = MakeTempDir();
  const std::string out = dir + "/run";
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<Subprocess> run,
      // Killed after its first checkpoints, however slow the build (sanitizers).
      StartRunLocal(dir, {"--servers=2", "--workers=2", "--model=mlp",
                          "--duration_s=" + std::to_string(20 * TimeScale()),
                          "--out_dir=" + out, "--progress_s=1", "--eval_every_s=0",
                          "--log_every_s=0.5", "--recovery=checkpoint",
                          "--checkpoint_every_s=2",
                          "--kill_server=1@" + std::to_string(6 * TimeScale()),
                          "--restart_after_s=2"}));
  auto code = run->Wait(Scaled(Millis(100000)));
  ASSERT_OK(code) << "run_local.sh did not finish; log:\n" << run->Log();
  EXPECT_EQ(*code, 0) << run->Log();
  const std::string log = run->Log();
  EXPECT_TRUE(GrepLines(log, "exited with code [1-9]").size() == 1)  // Only server 1's 137.
      << log;
  EXPECT_FALSE(GrepLines(log, "restarted server 1").empty()) << log;

  ASSERT_OK_AND_ASSIGN(std::string events, ReadFile(out + "/events.csv"));
  for (const char* e : {"kill,1", "down,1", "restart,1"}) {
    EXPECT_NE(events.find(e), std::string::npos) << e << " missing from events.csv:\n" << events;
  }
  ASSERT_OK_AND_ASSIGN(std::string server1, ReadFile(out + "/server-1.log"));
  EXPECT_FALSE(GrepLines(server1, "restored .* from checkpoint").empty()) << server1;
  for (int i = 0; i < 2; ++i) {
    ASSERT_OK_AND_ASSIGN(std::string w, ReadFile(out + "/worker-" + std::to_string(i) + ".log"));
    EXPECT_FALSE(GrepLines(w, "^final worker=").empty()) << w;
    EXPECT_TRUE(GrepLines(w, "^error ").empty()) << w;
  }
  std::vector<pid_t> left = FindProcesses(out);
  EXPECT_TRUE(left.empty()) << "still running after run_local.sh exited:\n"
                            << DescribeProcesses(left);
  if (!::testing::Test::HasFailure()) RemoveTree(dir);
}

}  // namespace
}  // namespace test
}  // namespace relaxps
