// End-to-end tests of the relaxps-worker binary in --local mode: flag
// errors, an unavailable device, missing data, a short training run, and
// SIGTERM handling. They start the real binary from RELAXPS_BIN_DIR.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/device.h"
#include "tests/test_util.h"

namespace {

const char kDataDir[] = "/usr/share/datasets/fashion-mnist";

bool DataPresent() {
  struct stat st;
  return stat((std::string(kDataDir) + "/train-images-idx3-ubyte.gz").c_str(), &st) == 0;
}

std::string WorkerPath() { return std::string(RELAXPS_BIN_DIR) + "/relaxps-worker"; }

// A started worker with stdout and stderr in files.
class Worker {
 public:
  explicit Worker(const std::vector<std::string>& args) {
    char tmpl[] = "/tmp/relaxps_worker_test_XXXXXX";
    dir_ = mkdtemp(tmpl);
    pid_ = fork();
    if (pid_ == 0) {
      const int out = open((dir_ + "/stdout").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int err = open((dir_ + "/stderr").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(out, 1);
      dup2(err, 2);
      std::vector<std::string> all = {WorkerPath()};
      all.insert(all.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (std::string& a : all) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
  }
  ~Worker() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (std::system(("rm -rf '" + dir_ + "'").c_str()) != 0) std::perror("rm");
  }

  // Exit status, or -1 after timeout_s (the worker is then killed).
  int Wait(double timeout_s) {
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration<double>(timeout_s * relaxps::test::TimeScale());
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        reaped_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }

  void Signal(int sig) { kill(pid_, sig); }
  std::string Stdout() const { return Read(dir_ + "/stdout"); }
  std::string Stderr() const { return Read(dir_ + "/stderr"); }
  std::string file(const std::string& name) const { return dir_ + "/" + name; }

  static std::string Read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  std::string dir_;
  pid_t pid_ = -1;
  bool reaped_ = false;
};

TEST(WorkerTest, BadFlagsExitWithStatus2AndSayWhy) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--local", "--no_such_flag=1"}, "unknown flag --no_such_flag"},
      {{"--local", "--batch=abc"}, "bad value 'abc' for --batch"},
      {{"--local", "--batch=0"}, "--batch must be positive"},
      {{"--duration_s=1"}, "exactly one of --local and --coordinator"},
      {{"--local", "--coordinator=tcp://127.0.0.1:1"}, "exactly one of --local"},
      {{"--local", "--model=resnet"}, "unknown model 'resnet'"},
      {{"--local", "--optimizer=rmsprop"}, "--optimizer"},
      {{"--local", "--device=tpu"}, "--device"},
      {{"--local", "stray"}, "unexpected argument 'stray'"},
  };
  for (const Case& c : cases) {
    Worker w(c.args);
    EXPECT_EQ(w.Wait(30), 2) << c.message << "\n" << w.Stderr();
    EXPECT_NE(w.Stderr().find(c.message), std::string::npos) << w.Stderr();
  }
}

TEST(WorkerTest, CudaWithoutGpuExitsWithStatus2) {
  if (relaxps::kernels::CudaDeviceCount() > 0) GTEST_SKIP() << "a GPU is present";
  Worker w({"--local", "--device=cuda", "--duration_s=1"});
  EXPECT_EQ(w.Wait(30), 2) << w.Stderr();
  const std::string err = w.Stderr();
  EXPECT_NE(err.find("--device=cuda is not available"), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << "one line: " << err;
}

TEST(WorkerTest, MissingDataNamesTheFile) {
  Worker w({"--local", "--duration_s=1", "--data_dir=/nonexistent/fmnist"});
  EXPECT_EQ(w.Wait(30), 1) << w.Stderr();
  EXPECT_NE(w.Stderr().find("/nonexistent/fmnist/train-labels-idx1-ubyte.gz"), std::string::npos)
      << w.Stderr();
  EXPECT_NE(w.Stdout().find("error worker=0 code=NotFound"), std::string::npos) << w.Stdout();
}

TEST(WorkerTest, LocalMlpEpochReachesGoodAccuracy) {
  if (!DataPresent()) GTEST_SKIP() << "Fashion-MNIST not installed";
  Worker w({"--local", "--model=mlp", "--epochs=1", "--log_every_s=0.5"});
  ASSERT_EQ(w.Wait(120), 0) << w.Stderr();
  const std::string out = w.Stdout();
  const size_t final_at = out.find("final worker=0 ");
  ASSERT_NE(final_at, std::string::npos) << out;
  const size_t acc_at = out.find("test_acc=", final_at);
  ASSERT_NE(acc_at, std::string::npos);
  const double acc = std::stod(out.substr(acc_at + 9));
  EXPECT_GT(acc, 0.80) << out;
  EXPECT_NE(out.find(" epoch=1 "), std::string::npos) << out;
}

TEST(WorkerTest, SigtermFinishesTheStepWritesTheFinalRowAndExitsZero) {
  if (!DataPresent()) GTEST_SKIP() << "Fashion-MNIST not installed";
  char tmpl[] = "/tmp/relaxps_worker_csv_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string csv = dir + "/m.csv";
  Worker w({"--local", "--model=mlp", "--duration_s=120", "--log_every_s=0.2",
            "--metrics_csv=" + csv});
  // Wait for training to be under way: TimeScale() progress lines (0.2 s of
  // training each), so a slower sanitizer build trains as many steps.
  auto progress_lines = [&w] {
    const std::string out = w.Stdout();
    int n = 0;
    for (size_t at = out.find("progress worker=0"); at != std::string::npos;
         at = out.find("progress worker=0", at + 1)) {
      ++n;
    }
    return n;
  };
  for (int i = 0; i < 600 * relaxps::test::TimeScale() &&
                  progress_lines() < relaxps::test::TimeScale();
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_NE(w.Stdout().find("progress worker=0"), std::string::npos) << w.Stderr();
  w.Signal(SIGTERM);
  EXPECT_EQ(w.Wait(30), 0) << w.Stderr();
  const std::string out = w.Stdout();
  EXPECT_NE(out.find("final worker=0 "), std::string::npos) << out;
  EXPECT_NE(out.find("stopped=1"), std::string::npos) << out;
  const std::string rows = Worker::Read(csv);
  ASSERT_FALSE(rows.empty());
  // The last row carries the final evaluation (non-empty test_acc).
  std::string last = rows.substr(rows.rfind('\n', rows.size() - 2) + 1);
  std::vector<std::string> fields;
  std::stringstream ss(last);
  std::string field;
  while (std::getline(ss, field, ',')) fields.push_back(field);
  ASSERT_GE(fields.size(), 7u) << last;
  EXPECT_FALSE(fields[6].empty()) << last;
  EXPECT_GT(std::stod(fields[6]), 0.5) << last;
  if (std::system(("rm -rf '" + dir + "'").c_str()) != 0) std::perror("rm");
}

}  // namespace
