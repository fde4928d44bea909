// Helpers shared by the end-to-end tests in tests/e2e: worker flags, a
// watcher that timestamps worker progress lines as they appear, and
// run_local.sh invocation. Header-only; single-threaded use.
#ifndef RELAXPS_TESTS_E2E_E2E_UTIL_H_
#define RELAXPS_TESTS_E2E_E2E_UTIL_H_

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_util.h"

namespace relaxps {
namespace test {

using SteadyTime = std::chrono::steady_clock::time_point;
inline SteadyTime Now() { return std::chrono::steady_clock::now(); }
inline double SecondsSince(SteadyTime t) {
  return std::chrono::duration<double>(Now() - t).count();
}

// Flags of a cheap MLP worker (no periodic evaluation, frequent progress lines).
inline std::vector<std::string> MlpWorkerFlags(const std::string& dir, const std::string& name,
                                               int num_workers, double duration_s,
                                               double log_every_s) {
  return {"--model=mlp",
          "--num_workers=" + std::to_string(num_workers),
          "--duration_s=" + std::to_string(duration_s),
          "--eval_every_s=0",
          "--eval_examples=1000",
          "--log_every_s=" + std::to_string(log_every_s),
          "--metrics_csv=" + dir + "/" + name + ".csv"};
}

// A progress line and when this process first saw it.
struct SeenProgress {
  ProgressLine line;
  SteadyTime seen;
};

// Polls workers' log files and records every new progress/final line with the
// time it was first seen (an upper bound on when it was written, within one
// poll interval).
class ProgressWatcher {
 public:
  void Add(const std::string& log) { logs_[log]; }

  // Reads every log once; returns how many new lines were seen.
  int Poll() {
    int added = 0;
    const SteadyTime now = Now();
    for (auto& [log, seen] : logs_) {
      auto text = ReadFile(log);
      if (!text.ok()) continue;
      // Only complete lines: a line still being written is read next time.
      std::string complete = text->substr(0, text->rfind('\n') + 1);
      std::vector<ProgressLine> lines = ParseProgress(complete);
      for (size_t i = seen.size(); i < lines.size(); ++i) {
        seen.push_back({lines[i], now});
        ++added;
      }
    }
    return added;
  }

  // Polls every `interval` until `until`.
  void PollUntil(SteadyTime until, std::chrono::milliseconds interval) {
    while (Now() < until) {
      Poll();
      std::this_thread::sleep_for(interval);
    }
    Poll();
  }

  const std::vector<SeenProgress>& Lines(const std::string& log) { return logs_[log]; }

  // The highest clock of the lines of `log` seen at or before `t` (-1: none).
  int64_t MaxClockSeenBy(const std::string& log, SteadyTime t) {
    int64_t c = -1;
    for (const SeenProgress& s : logs_[log]) {
      if (s.seen <= t && s.line.clock > c) c = s.line.clock;
    }
    return c;
  }

 private:
  std::map<std::string, std::vector<SeenProgress>> logs_;
};

// Waits for the first progress line of a worker and returns its worker id.
inline StatusOr<int> WaitForWorkerId(Subprocess* worker, std::chrono::milliseconds timeout) {
  ASSIGN_OR_RETURN(std::string line,
                   WaitForLine(worker->log_path(), "^progress worker=", timeout, worker));
  std::vector<ProgressLine> p = ParseProgress(line + "\n");
  if (p.empty()) return InternalError("cannot parse progress line: " + line);
  return p[0].worker;
}

// Starts scripts/run_local.sh with the build's binaries (RELAXPS_BIN) and no
// rebuild; its output goes to <dir>/run_local.log.
inline StatusOr<std::unique_ptr<Subprocess>> StartRunLocal(const std::string& dir,
                                                           std::vector<std::string> args) {
  std::vector<std::string> argv = {"/bin/bash", SourcePath("scripts/run_local.sh"), "--skip_build"};
  for (std::string& a : args) argv.push_back(std::move(a));
  SubprocessOptions options;
  options.log_path = dir + "/run_local.log";
  options.env = {std::string("RELAXPS_BIN=") + RELAXPS_BIN_DIR};
  return Subprocess::Start(std::move(argv), std::move(options));
}

// Starts run_local.sh with `servers` servers and two mlp workers (60 s,
// progress every 0.5 s) writing into `out`, and waits until both workers
// are training. On failure the error carries run_local.sh's log.
inline StatusOr<std::unique_ptr<Subprocess>> StartTrainingJob(const std::string& dir,
                                                              const std::string& out,
                                                              int servers, Millis timeout) {
  ASSIGN_OR_RETURN(std::unique_ptr<Subprocess> run,
                   StartRunLocal(dir, {"--servers=" + std::to_string(servers), "--workers=2",
                                       "--model=mlp", "--duration_s=60", "--out_dir=" + out,
                                       "--progress_s=1", "--eval_every_s=0",
                                       "--log_every_s=0.5"}));
  for (int i = 0; i < 2; ++i) {
    StatusOr<std::string> line = WaitForLine(out + "/worker-" + std::to_string(i) + ".log",
                                             "^progress ", timeout, run.get());
    if (!line.ok()) return line.status().WithPrefix(run->Log());
  }
  return run;
}

}  // namespace test
}  // namespace relaxps

#endif  // RELAXPS_TESTS_E2E_E2E_UTIL_H_
