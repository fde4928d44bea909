// Test utilities shared by every relaxps test.
//
//  * ASSERT_OK / EXPECT_OK for relaxps::Status and relaxps::StatusOr<T>.
//  * Subprocess: runs a real binary as a child process with its stdout and
//    stderr in a log file. The child runs in its own process group and gets
//    SIGKILL if the test process dies (PR_SET_PDEATHSIG); the destructor
//    SIGKILLs the whole group and reaps the child, so a test never leaves a
//    process behind, even when an assertion returns early.
//  * File and log helpers: MakeTempDir, ReadFile, WaitForFile, WaitForLine.
//  * LocalCluster: a coordinator and N servers as real processes on
//    OS-chosen ports (endpoint files), plus helpers to start workers and run
//    relaxps-ctl against it.
//  * Process scans (/proc) to check that a script left nothing running.
//
// Thread-safety: none of these classes is synchronized; use each object from
// one thread (the test's). The free functions are thread-safe.
#ifndef RELAXPS_TESTS_TEST_UTIL_H_
#define RELAXPS_TESTS_TEST_UTIL_H_

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "common/status.h"
#include "common/wire.h"

// ---- ASSERT_OK / EXPECT_OK ------------------------------------------------------
//
//   ASSERT_OK(store->Put(...));          // a Status
//   ASSERT_OK(NewParamStore(options));   // a StatusOr<T>: checks its status
//
// On failure the message shows the expression and the status.
namespace relaxps {
namespace test_internal {
inline const Status& GetStatus(const Status& s) { return s; }
template <typename T>
const Status& GetStatus(const StatusOr<T>& s) {
  return s.status();
}
template <typename T>
::testing::AssertionResult IsOk(const char* expr, const T& value) {
  const Status& s = GetStatus(value);
  if (s.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << expr << " is " << s.ToString() << ", expected OK";
}
}  // namespace test_internal
}  // namespace relaxps

#ifndef ASSERT_OK
#define ASSERT_OK(expr) ASSERT_PRED_FORMAT1(::relaxps::test_internal::IsOk, expr)
#endif
#ifndef EXPECT_OK
#define EXPECT_OK(expr) EXPECT_PRED_FORMAT1(::relaxps::test_internal::IsOk, expr)
#endif

// `ASSERT_OK_AND_ASSIGN(auto x, Foo());` asserts Foo() is OK and moves its value into x.
#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  ASSERT_OK_AND_ASSIGN_IMPL_(RELAXPS_CONCAT_(_relaxps_test_statusor_, __LINE__), lhs, expr)
#define ASSERT_OK_AND_ASSIGN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  ASSERT_OK(tmp);                                  \
  lhs = std::move(tmp).value()

namespace relaxps {
namespace test {

using Millis = std::chrono::milliseconds;

// True in sanitizer builds whose runtime inflates a process's memory (ASan's
// redzones and quarantine, TSan's shadow): tests that bound a peak RSS still
// check everything else, but not the bound (scripts/test.sh --sanitize=...).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitizerInflatesMemory = true;
#else
inline constexpr bool kSanitizerInflatesMemory = false;
#endif

// How much slower this build runs than a Release build: the environment's
// RELAXPS_TEST_TIME_SCALE (CMake's RELAXPS_TEST_TIMEOUT_SCALE, 3 under ASan,
// 5 under TSan), 1 when unset or invalid. Scaled(t) is t times that: for a
// test's own waits on work to happen, never for how fast something must be.
int TimeScale();
Millis Scaled(Millis t);

// Paths of the build's binaries and of the source tree (compile definitions
// of relaxps_test_util).
std::string BinPath(const std::string& binary);     // RELAXPS_BIN_DIR/binary
std::string SourcePath(const std::string& relative);  // RELAXPS_SOURCE_DIR/relative

// Creates a fresh directory ${TMPDIR:-/tmp}/relaxps-<suite>.<test>-XXXXXX for
// the running test (or relaxps-test-XXXXXX outside a test) and returns its
// absolute path. The name is unique, so it can also identify the processes a
// test started (their command lines mention it). Aborts the test binary
// (CHECK) if the directory cannot be created.
std::string MakeTempDir();

// Removes a directory tree; errors are ignored.
void RemoveTree(const std::string& path);

// Returns the whole file.
StatusOr<std::string> ReadFile(const std::string& path);

// Polls `done` every 5 ms of real time until it returns true (then true) or
// max_ms passed (then what it returns last): for tests whose fake clock makes
// the work happen at once but on another thread.
bool Eventually(const std::function<bool()>& done, int max_ms = 20000);

// Waits until `path` exists and is not empty. DeadlineExceeded after
// Scaled(timeout): both waits below are for work to happen, so sanitizer
// builds stretch them (callers pass the Release-build figure).
Status WaitForFile(const std::string& path, Millis timeout);

class Subprocess;

// Waits until a line of the file at `log` matches `re` (std::regex_search) and
// returns that line (the first match). DeadlineExceeded after Scaled(timeout);
// Aborted as soon as `process` (if given) has exited without the line
// appearing, so a crashed process fails the test at once, not after the timeout.
StatusOr<std::string> WaitForLine(const std::string& log, const std::string& re,
                                  Millis timeout, Subprocess* process = nullptr);

// The lines of `text` that match `re` (std::regex_search), in order.
std::vector<std::string> GrepLines(const std::string& text, const std::string& re);

// Options of Subprocess::Start.
struct SubprocessOptions {
  // stdout and stderr go to this file (truncated). Required.
  std::string log_path;
  // If not empty, stderr goes here instead (for tests about error messages).
  std::string stderr_path;
  // Extra environment variables "NAME=value"; they override inherited ones.
  std::vector<std::string> env;
  // Working directory of the child ("" = the test's).
  std::string cwd;
};

// A child process running a binary. Not copyable; the destructor kills
// (SIGKILL to the child's process group) and reaps it.
class Subprocess {
 public:
  // Starts argv[0] (a path, not searched in PATH) with argv[1..]. The child:
  // stdin from /dev/null, stdout/stderr to the log file(s), its own process
  // group (pgid == pid), PR_SET_PDEATHSIG(SIGKILL), no inherited fds above 2.
  // Returns NotFound if argv[0] is not an executable file, IOError if the log
  // cannot be opened or fork fails.
  static StatusOr<std::unique_ptr<Subprocess>> Start(std::vector<std::string> argv,
                                                     SubprocessOptions options);
  // Convenience: stdout and stderr both to `log_path`.
  static StatusOr<std::unique_ptr<Subprocess>> Start(std::vector<std::string> argv,
                                                     const std::string& log_path);

  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;
  ~Subprocess();

  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return options_.log_path; }
  // "relaxps-server --coordinator=..." for messages.
  std::string CommandLine() const;

  // Sends `signal` to the child only (not to its process group). No-op once
  // the child has been reaped.
  void Kill(int signal);
  // Sends `signal` to the child's whole process group (its own children too,
  // e.g. the processes a script started).
  void KillGroup(int signal);

  // True until the child has exited (reaps it when it has).
  bool IsRunning();

  // Waits for the child to exit and returns its status the way a shell shows
  // it: the exit code, or 128 + signal number if a signal killed it.
  // DeadlineExceeded if it is still running after `timeout`.
  StatusOr<int> Wait(Millis timeout);

  // The log file's contents so far ("" if unreadable).
  std::string Log() const;

 private:
  Subprocess(std::vector<std::string> argv, SubprocessOptions options, pid_t pid)
      : argv_(std::move(argv)), options_(std::move(options)), pid_(pid) {}
  // Reaps the child if it has exited; `block` waits for it.
  void Reap(bool block);

  // Constant after construction.
  const std::vector<std::string> argv_;
  const SubprocessOptions options_;
  const pid_t pid_;
  // Set once the child has been reaped.
  std::optional<int> exit_status_;
};

// Runs a command to completion and returns {exit status, stdout+stderr}.
// DeadlineExceeded (after killing it) if it runs longer than `timeout`.
struct CommandResult {
  int exit_status = -1;
  std::string output;
};
StatusOr<CommandResult> RunCommand(std::vector<std::string> argv, const std::string& log_path,
                                   Millis timeout);

// ---- Cluster status as reported by `relaxps-ctl status` ----
struct ServerStatus {
  int id = -1;
  std::string endpoint;
  bool alive = false;
  pid_t pid = 0;
};
struct WorkerStatus {
  int id = -1;
  bool alive = false;
  int64_t clock = -1;
};
struct ClusterStatus {
  std::string job_error;  // "" unless the coordinator reports one
  std::vector<ServerStatus> servers;
  std::vector<WorkerStatus> workers;
  const WorkerStatus* worker(int id) const;
  const ServerStatus* server(int id) const;
};
// Parses the output of `relaxps-ctl status`.
ClusterStatus ParseClusterStatus(const std::string& text);
// Runs `relaxps-ctl --coordinator=<endpoint> status` (log under `dir`) and
// parses it. Unavailable if relaxps-ctl fails.
StatusOr<ClusterStatus> QueryClusterStatus(const std::string& coordinator_endpoint,
                                           const std::string& dir);

// ---- Worker progress lines ("progress worker=W time_s=T clock=C ...") ----
struct ProgressLine {
  std::string kind;  // "progress" or "final"
  int worker = -1;
  double time_s = 0;
  int64_t clock = -1;
};
// The progress and final lines of a worker's log, in order.
std::vector<ProgressLine> ParseProgress(const std::string& log_text);

// ---- Process scans ----
// Pids of live (not zombie) processes, other than this one, whose command line
// contains `needle`.
std::vector<pid_t> FindProcesses(const std::string& needle);
// True if `pid` exists and is not a zombie.
bool IsProcessAlive(pid_t pid);
// "pid: cmdline" lines for messages.
std::string DescribeProcesses(const std::vector<pid_t>& pids);

// True if this machine seems to have an NVIDIA GPU (/dev/nvidia0).
bool HasGpu();

// ---- LocalCluster ----
struct LocalClusterOptions {
  // Parameter servers to start (>= 1).
  int num_servers = 1;
  // Passed to the coordinator's --num_workers (0: not passed).
  int num_workers = 0;
  // Extra coordinator flags, e.g. "--consistency=bsp".
  std::vector<std::string> coordinator_flags;
  // Extra flags for every server, e.g. "--store=rocksdb".
  std::vector<std::string> server_flags;
  // How long each process may take to publish its endpoint. Generous: the
  // machine may be loaded.
  Millis start_timeout{30000};
};

// A coordinator and servers started as real processes in `dir` (logs
// coordinator.log, server-<i>.log; endpoint files next to them). Everything is
// killed when the LocalCluster is destroyed.
class LocalCluster {
 public:
  static StatusOr<std::unique_ptr<LocalCluster>> Start(const std::string& dir,
                                                       LocalClusterOptions options);

  LocalCluster(const LocalCluster&) = delete;
  LocalCluster& operator=(const LocalCluster&) = delete;
  ~LocalCluster() = default;

  const std::string& dir() const { return dir_; }
  const std::string& coordinator_endpoint() const { return coordinator_endpoint_; }
  Subprocess* coordinator() { return coordinator_.get(); }
  Subprocess* server(int i) { return servers_.at(i).get(); }
  int num_servers() const { return static_cast<int>(servers_.size()); }

  // Starts `relaxps-worker --coordinator=<endpoint> <flags...>` with its output
  // in <dir>/<name>.log. The caller owns the process.
  StatusOr<std::unique_ptr<Subprocess>> StartWorker(const std::string& name,
                                                    const std::vector<std::string>& flags);

  // `relaxps-ctl status`, parsed.
  StatusOr<ClusterStatus> QueryStatus();

 private:
  LocalCluster() = default;

  std::string dir_;
  std::string coordinator_endpoint_;
  std::unique_ptr<Subprocess> coordinator_;
  std::vector<std::unique_ptr<Subprocess>> servers_;
};

// A frame's bytes as floats (the frame must be float-aligned).
inline std::vector<float> FrameFloats(const Frame& f) {
  return std::vector<float>(f.as<float>(), f.as<float>() + f.size() / sizeof(float));
}

// Adds servers 0..n-1 to `map`, alive, at tcp://127.0.0.1:1000+i (endpoints
// a map needs but no test dials).
inline void AddLiveServers(wire::ShardMap* map, int n) {
  for (int i = 0; i < n; ++i) {
    wire::ServerInfo* s = map->add_servers();
    s->set_id(i);
    s->set_endpoint("tcp://127.0.0.1:" + std::to_string(1000 + i));
    s->set_alive(true);
  }
}

}  // namespace test
}  // namespace relaxps

#endif  // RELAXPS_TESTS_TEST_UTIL_H_
