// End to end: interrupting scripts/run_local.sh (SIGINT, as Ctrl-C does, or
// SIGTERM) mid-run stops every process it started, and the script exits.
#include <signal.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "tests/e2e/e2e_util.h"
#include "tests/test_util.h"

namespace relaxps {
namespace test {
namespace {

constexpr Millis kStartTimeout{60000};

class e2e_RunLocalCleanup : public ::testing::TestWithParam<int> {};

TEST_P(e2e_RunLocalCleanup, SignalStopsEveryProcess) {
  const int signal = GetParam();
  const std::string dir = MakeTempDir();
  const std::string out = dir + "/run";
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Subprocess> run,
                       StartTrainingJob(dir, out, /*servers=*/1, kStartTimeout));
  std::vector<pid_t> started = FindProcesses(out);
  started.erase(std::remove(started.begin(), started.end(), run->pid()), started.end());
  ASSERT_GE(started.size(), 4u) << "expected coordinator, 1 server, 2 workers:\n"
                                << DescribeProcesses(started);

  // To the script only, not its process group: the script must do the work.
  run->Kill(signal);
  const SteadyTime sent = Now();
  // Its cleanup gives processes 3 s to stop after SIGTERM, then SIGKILLs.
  auto code = run->Wait(Millis(15000));
  ASSERT_OK(code) << "run_local.sh still running 15 s after " << strsignal(signal) << "; log:\n"
                  << run->Log();
  std::printf("run_local.sh exited with %d %.2f s after %s\n", *code, SecondsSince(sent),
              strsignal(signal));
  EXPECT_NE(*code, 0) << run->Log();
  EXPECT_FALSE(GrepLines(run->Log(), "interrupted").empty()) << run->Log();

  std::vector<pid_t> left = FindProcesses(out);
  EXPECT_TRUE(left.empty()) << "still running after run_local.sh exited:\n"
                            << DescribeProcesses(left);
  for (pid_t p : started) {
    EXPECT_FALSE(IsProcessAlive(p)) << "pid " << p << " still alive";
  }
  if (!::testing::Test::HasFailure()) RemoveTree(dir);
}

INSTANTIATE_TEST_SUITE_P(Signals, e2e_RunLocalCleanup, ::testing::Values(SIGINT, SIGTERM),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::string(info.param == SIGINT ? "SIGINT" : "SIGTERM");
                         });

}  // namespace
}  // namespace test
}  // namespace relaxps
