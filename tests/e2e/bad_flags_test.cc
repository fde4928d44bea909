// End to end: every binary rejects a bad flag value at start-up with exit
// status 2 and a one-line reason on stderr (naming the flag or the value), and
// never hangs.
#include <cctype>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace relaxps {
namespace test {
namespace {

// Nobody listens here: a binary that validated its flags after connecting
// would hang or fail differently instead of exiting 2 at once.
constexpr const char* kNoCoordinator = "--coordinator=tcp://127.0.0.1:1";

struct BadFlagCase {
  std::string name;                // test name suffix
  std::string binary;              // in RELAXPS_BIN_DIR
  std::vector<std::string> flags;  // the command line after the binary
  std::string mention;             // the stderr line must contain this, in any case
  bool needs_no_gpu = false;       // skipped on a machine with a GPU
};

std::string Lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

std::ostream& operator<<(std::ostream& os, const BadFlagCase& c) { return os << c.name; }

class e2e_BadFlags : public ::testing::TestWithParam<BadFlagCase> {};

TEST_P(e2e_BadFlags, ExitsWithStatus2AndOneLineReason) {
  const BadFlagCase& c = GetParam();
  if (c.needs_no_gpu && HasGpu()) GTEST_SKIP() << "a GPU is present";
  const std::string dir = MakeTempDir();
  std::vector<std::string> argv = {BinPath(c.binary)};
  argv.insert(argv.end(), c.flags.begin(), c.flags.end());
  SubprocessOptions options;
  options.log_path = dir + "/stdout.log";
  options.stderr_path = dir + "/stderr.log";
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Subprocess> p, Subprocess::Start(argv, options));
  auto code = p->Wait(Millis(20000));
  ASSERT_OK(code) << "hangs on a bad flag";
  ASSERT_OK_AND_ASSIGN(std::string err, ReadFile(options.stderr_path));
  EXPECT_EQ(*code, 2) << p->CommandLine() << "\nstderr:\n" << err;
  std::vector<std::string> lines = GrepLines(err, "\\S");
  ASSERT_EQ(lines.size(), 1u) << p->CommandLine() << ": expected one line on stderr, got:\n"
                              << err;
  EXPECT_NE(Lower(lines[0]).find(Lower(c.mention)), std::string::npos)
      << "reason does not mention '" << c.mention << "': " << lines[0];
  if (!::testing::Test::HasFailure()) RemoveTree(dir);
}

const BadFlagCase kCases[] = {
    // relaxps-coordinator
    {"coordinator_consistency", "relaxps-coordinator", {"--consistency=bogus"}, "bogus"},
    {"coordinator_recovery", "relaxps-coordinator", {"--recovery=bogus"}, "bogus"},
    {"coordinator_num_servers_zero", "relaxps-coordinator", {"--num_servers=0"}, "num_servers"},
    {"coordinator_heartbeat_timeout", "relaxps-coordinator", {"--heartbeat_timeout_ms=0"},
     "heartbeat_timeout_ms"},
    {"coordinator_negative_staleness", "relaxps-coordinator",
     {"--consistency=ssp", "--staleness=-1"}, "staleness"},
    {"coordinator_not_a_number", "relaxps-coordinator", {"--num_servers=abc"}, "num_servers"},
    {"coordinator_unknown_flag", "relaxps-coordinator", {"--no_such_flag=1"}, "no_such_flag"},
    {"coordinator_positional", "relaxps-coordinator", {"stray"}, "stray"},
    {"coordinator_wildcard_bind_without_advertise", "relaxps-coordinator",
     {"--bind=tcp://0.0.0.0:*", "--insecure_bind_public"}, "--advertise"},
    {"coordinator_metrics_port", "relaxps-coordinator", {"--metrics_port=70000"}, "metrics_port"},
    {"coordinator_flagfile_value", "relaxps-coordinator",
     {"--flagfile=" RELAXPS_SOURCE_DIR "/tests/e2e/testdata/bad_consistency.flags"}, "bogus"},
    {"coordinator_flagfile_unknown_flag", "relaxps-coordinator",
     {"--flagfile=" RELAXPS_SOURCE_DIR "/tests/e2e/testdata/unknown_flag.flags"}, "no_such_flag"},
    {"coordinator_flagfile_missing", "relaxps-coordinator", {"--flagfile=/nonexistent/x.flags"},
     "cannot read"},
    {"server_flagfile_unknown_flag", "relaxps-server",
     {kNoCoordinator, "--flagfile=" RELAXPS_SOURCE_DIR "/tests/e2e/testdata/unknown_flag.flags"},
     "no_such_flag"},
    // relaxps-server
    {"server_store", "relaxps-server", {kNoCoordinator, "--store=bogus"}, "bogus"},
    {"server_device", "relaxps-server", {kNoCoordinator, "--device=bogus"}, "bogus"},
    {"server_cuda_without_gpu", "relaxps-server", {kNoCoordinator, "--device=cuda"}, "cuda", true},
    {"server_no_coordinator", "relaxps-server", {}, "coordinator"},
    {"server_coordination_not_zk", "relaxps-server", {"--coordination=tcp://127.0.0.1:2181/job"},
     "--coordination must be zk://"},
    {"server_cache_mb", "relaxps-server", {kNoCoordinator, "--cache_mb=0"}, "cache_mb"},
    {"server_dense_log_mb", "relaxps-server", {kNoCoordinator, "--dense_log_mb=0"}, "dense_log_mb"},
    {"server_unknown_flag", "relaxps-server", {kNoCoordinator, "--no_such_flag=1"}, "no_such_flag"},
    {"server_wildcard_bind_without_advertise", "relaxps-server",
     {kNoCoordinator, "--bind=tcp://0.0.0.0:*", "--insecure_bind_public"}, "--advertise"},
    {"server_advertise_without_port", "relaxps-server",
     {kNoCoordinator, "--advertise=tcp://10.0.0.1"}, "no port"},
    {"server_metrics_port", "relaxps-server", {kNoCoordinator, "--metrics_port=-2"},
     "metrics_port"},
    // relaxps-worker
    {"worker_model", "relaxps-worker", {kNoCoordinator, "--model=bogus"}, "bogus"},
    {"worker_cuda_without_gpu", "relaxps-worker", {kNoCoordinator, "--model=mlp", "--device=cuda"},
     "cuda", true},
    {"worker_optimizer", "relaxps-worker", {kNoCoordinator, "--optimizer=bogus"}, "bogus"},
    {"worker_batch", "relaxps-worker", {kNoCoordinator, "--batch=0"}, "batch"},
    {"worker_lr_schedule", "relaxps-worker", {kNoCoordinator, "--lr_schedule=step:every=0"},
     "lr_schedule"},
    {"coordinator_start_barrier_timeout", "relaxps-coordinator",
     {"--start_barrier_timeout_ms=0"}, "start_barrier_timeout_ms"},
    {"worker_wire_dtype", "relaxps-worker", {kNoCoordinator, "--wire_dtype=fp8"}, "wire_dtype"},
    {"worker_not_a_number", "relaxps-worker", {kNoCoordinator, "--batch=abc"}, "batch"},
    {"worker_unknown_flag", "relaxps-worker", {kNoCoordinator, "--no_such_flag=1"}, "no_such_flag"},
    {"worker_local_and_coordinator", "relaxps-worker", {kNoCoordinator, "--local"}, "local"},
    // An unresolvable host: a clear error at once, not a timeout.
    {"coordinator_unresolvable_advertise", "relaxps-coordinator",
     {"--advertise=no-such-host.invalid"}, "cannot resolve host 'no-such-host.invalid'"},
    {"server_unresolvable_coordinator", "relaxps-server",
     {"--coordinator=tcp://no-such-host.invalid:5555"},
     "cannot resolve host 'no-such-host.invalid'"},
    {"worker_unresolvable_coordinator", "relaxps-worker",
     {"--coordinator=tcp://no-such-host.invalid:5555", "--model=mlp"},
     "cannot resolve host 'no-such-host.invalid'"},
    {"ctl_unresolvable_coordinator", "relaxps-ctl",
     {"--coordinator=tcp://no-such-host.invalid:5555", "status"},
     "cannot resolve host 'no-such-host.invalid'"},
    // relaxps-ctl
    {"ctl_no_coordinator", "relaxps-ctl", {"status"}, "coordinator"},
    {"ctl_unknown_command", "relaxps-ctl", {kNoCoordinator, "bogus"}, "bogus"},
    {"ctl_unknown_flag", "relaxps-ctl", {kNoCoordinator, "--no_such_flag=1", "status"},
     "no_such_flag"},
};

INSTANTIATE_TEST_SUITE_P(Binaries, e2e_BadFlags, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<BadFlagCase>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace test
}  // namespace relaxps
