#include "tests/test_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

extern char** environ;

namespace relaxps {
namespace test {
namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr Millis kPollInterval{20};

std::string Basename(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Keeps [A-Za-z0-9._-]; everything else becomes '_' (parameterized test names
// contain '/').
std::string SafeName(const std::string& s) {
  std::string out = s;
  for (char& c : out) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_')) c = '_';
  }
  return out;
}

// The command line of /proc/<pid>, NULs replaced by spaces ("" if gone).
std::string ProcCmdline(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (char& c : s) {
    if (c == '\0') c = ' ';
  }
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

// State letter of /proc/<pid>/stat (R, S, Z, ...), or 0 if the process is gone.
char ProcState(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // "pid (comm) S ..."; comm may contain spaces and parentheses.
  const size_t close = s.rfind(')');
  if (close == std::string::npos || close + 2 >= s.size()) return 0;
  return s[close + 2];
}

bool ParseKeyValue(const std::string& line, const std::string& key, std::string* value) {
  const std::string needle = " " + key + "=";
  size_t pos = line.find(needle);
  if (pos == std::string::npos) return false;
  pos += needle.size();
  const size_t end = line.find(' ', pos);
  *value = line.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
  return true;
}

}  // namespace

std::string BinPath(const std::string& binary) { return std::string(RELAXPS_BIN_DIR) + "/" + binary; }

std::string SourcePath(const std::string& relative) {
  return std::string(RELAXPS_SOURCE_DIR) + "/" + relative;
}

int TimeScale() {
  static const int scale = [] {
    const char* v = std::getenv("RELAXPS_TEST_TIME_SCALE");
    const int parsed = v == nullptr ? 1 : std::atoi(v);
    return parsed >= 1 ? parsed : 1;
  }();
  return scale;
}

Millis Scaled(Millis t) { return t * TimeScale(); }

std::string MakeTempDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string base = (tmp != nullptr && *tmp != '\0') ? tmp : "/tmp";
  std::string name = "relaxps-test";
  if (const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info()) {
    name = "relaxps-" + SafeName(std::string(info->test_suite_name()) + "." + info->name());
  }
  std::string templ = base + "/" + name + "-XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  CHECK(mkdtemp(buf.data()) != nullptr) << "mkdtemp(" << templ << "): " << std::strerror(errno);
  return std::string(buf.data());
}

void RemoveTree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

bool Eventually(const std::function<bool()>& done, int max_ms) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(max_ms);
  while (std::chrono::steady_clock::now() < give_up) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return done();
}

StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Status WaitForFile(const std::string& path, Millis timeout) {
  timeout = Scaled(timeout);
  const auto deadline = SteadyClock::now() + timeout;
  while (true) {
    struct stat st;
    if (::stat(path.c_str(), &st) == 0 && st.st_size > 0) return Status::OK();
    if (SteadyClock::now() >= deadline) {
      return DeadlineExceededError(path + " did not appear within " +
                                   std::to_string(timeout.count()) + " ms");
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

std::vector<std::string> GrepLines(const std::string& text, const std::string& re) {
  const std::regex pattern(re);
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (std::regex_search(line, pattern)) out.push_back(line);
  }
  return out;
}

StatusOr<std::string> WaitForLine(const std::string& log, const std::string& re, Millis timeout,
                                  Subprocess* process) {
  timeout = Scaled(timeout);
  const auto deadline = SteadyClock::now() + timeout;
  while (true) {
    // Check liveness before reading, so a line written just before exiting
    // is still found.
    const bool running = process == nullptr || process->IsRunning();
    auto text = ReadFile(log);
    if (text.ok()) {
      std::vector<std::string> lines = GrepLines(*text, re);
      if (!lines.empty()) return lines.front();
    }
    if (!running) {
      return AbortedError(process->CommandLine() + " exited before printing a line matching /" +
                          re + "/; log " + log);
    }
    if (SteadyClock::now() >= deadline) {
      return DeadlineExceededError("no line matching /" + re + "/ in " + log + " within " +
                                   std::to_string(timeout.count()) + " ms");
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

// ---- Subprocess -------------------------------------------------------------------

StatusOr<std::unique_ptr<Subprocess>> Subprocess::Start(std::vector<std::string> argv,
                                                        const std::string& log_path) {
  SubprocessOptions options;
  options.log_path = log_path;
  return Start(std::move(argv), std::move(options));
}

StatusOr<std::unique_ptr<Subprocess>> Subprocess::Start(std::vector<std::string> argv,
                                                        SubprocessOptions options) {
  if (argv.empty()) return InvalidArgumentError("Subprocess::Start: empty argv");
  if (options.log_path.empty()) return InvalidArgumentError("Subprocess::Start: no log_path");
  if (::access(argv[0].c_str(), X_OK) != 0) {
    return NotFoundError(argv[0] + " is not an executable file (built?)");
  }
  // Everything the child needs is prepared before fork: after fork only
  // async-signal-safe calls are allowed (the test may have threads).
  const int log_fd = ::open(options.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return IOError("cannot open " + options.log_path + ": " + std::strerror(errno));
  int err_fd = -1;
  if (!options.stderr_path.empty()) {
    err_fd = ::open(options.stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    if (err_fd < 0) {
      ::close(log_fd);
      return IOError("cannot open " + options.stderr_path + ": " + std::strerror(errno));
    }
  }
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    bool overridden = false;
    for (const std::string& o : options.env) {
      if (o.substr(0, o.find('=')) == name) overridden = true;
    }
    if (!overridden) env_strings.push_back(entry);
  }
  for (const std::string& o : options.env) env_strings.push_back(o);
  std::vector<char*> c_argv;
  for (std::string& a : argv) c_argv.push_back(a.data());
  c_argv.push_back(nullptr);
  std::vector<char*> c_env;
  for (std::string& e : env_strings) c_env.push_back(e.data());
  c_env.push_back(nullptr);
  const long max_fd = std::min<long>(::sysconf(_SC_OPEN_MAX), 65536);
  const pid_t parent = ::getpid();
  const char* cwd = options.cwd.empty() ? nullptr : options.cwd.c_str();

  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(log_fd);
    if (err_fd >= 0) ::close(err_fd);
    return IOError(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    // Child. Die with the test process; own process group so that the
    // destructor can kill everything this child starts.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the parent died before prctl
    ::setpgid(0, 0);
    // Default signal dispositions and an empty mask (gtest or the caller may
    // have changed them; ignored signals survive exec).
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int sig : {SIGINT, SIGTERM, SIGPIPE, SIGCHLD, SIGHUP, SIGQUIT}) ::signal(sig, SIG_DFL);
    const int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0) ::dup2(null_fd, 0);
    ::dup2(log_fd, 1);
    ::dup2(err_fd >= 0 ? err_fd : log_fd, 2);
    for (long fd = 3; fd < max_fd; ++fd) ::close(static_cast<int>(fd));
    if (cwd != nullptr && ::chdir(cwd) != 0) ::_exit(127);
    ::execve(c_argv[0], c_argv.data(), c_env.data());
    const char msg[] = "Subprocess: execve failed\n";
    ssize_t ignored = ::write(2, msg, sizeof(msg) - 1);
    (void)ignored;
    ::_exit(127);
  }
  // Parent. Also set the group here, so that KillGroup works even before the
  // child has run (whichever runs first wins; both set the same group).
  ::setpgid(pid, pid);
  ::close(log_fd);
  if (err_fd >= 0) ::close(err_fd);
  return std::unique_ptr<Subprocess>(new Subprocess(std::move(argv), std::move(options), pid));
}

Subprocess::~Subprocess() {
  // The whole group first: the child's own children (e.g. a script's) too.
  ::kill(-pid_, SIGKILL);
  if (!exit_status_.has_value()) {
    ::kill(pid_, SIGKILL);
    Reap(/*block=*/true);
  }
}

std::string Subprocess::CommandLine() const {
  std::string out = Basename(argv_[0]);
  for (size_t i = 1; i < argv_.size(); ++i) out += " " + argv_[i];
  return out;
}

void Subprocess::Kill(int signal) {
  if (!exit_status_.has_value()) ::kill(pid_, signal);
}

void Subprocess::KillGroup(int signal) { ::kill(-pid_, signal); }

void Subprocess::Reap(bool block) {
  if (exit_status_.has_value()) return;
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &status, block ? 0 : WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == pid_) {
    exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status)
                   : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                         : -1;
  } else if (r < 0) {
    exit_status_ = -1;  // ECHILD: reaped elsewhere; nothing to wait for.
  }
}

bool Subprocess::IsRunning() {
  Reap(/*block=*/false);
  return !exit_status_.has_value();
}

StatusOr<int> Subprocess::Wait(Millis timeout) {
  const auto deadline = SteadyClock::now() + timeout;
  while (true) {
    Reap(/*block=*/false);
    if (exit_status_.has_value()) return *exit_status_;
    if (SteadyClock::now() >= deadline) {
      return DeadlineExceededError(CommandLine() + " still running after " +
                                   std::to_string(timeout.count()) + " ms");
    }
    std::this_thread::sleep_for(Millis(5));
  }
}

std::string Subprocess::Log() const {
  auto text = ReadFile(options_.log_path);
  return text.ok() ? *text : std::string();
}

StatusOr<CommandResult> RunCommand(std::vector<std::string> argv, const std::string& log_path,
                                   Millis timeout) {
  ASSIGN_OR_RETURN(std::unique_ptr<Subprocess> p, Subprocess::Start(std::move(argv), log_path));
  ASSIGN_OR_RETURN(int code, p->Wait(timeout));
  CommandResult result;
  result.exit_status = code;
  result.output = p->Log();
  return result;
}

// ---- Cluster status ------------------------------------------------------------------

const WorkerStatus* ClusterStatus::worker(int id) const {
  for (const WorkerStatus& w : workers) {
    if (w.id == id) return &w;
  }
  return nullptr;
}

const ServerStatus* ClusterStatus::server(int id) const {
  for (const ServerStatus& s : servers) {
    if (s.id == id) return &s;
  }
  return nullptr;
}

ClusterStatus ParseClusterStatus(const std::string& text) {
  // server <id> <endpoint> alive|DEAD pid=<pid> ...
  // worker <id> alive|dead clock=<c> ...
  static const std::regex kServer(R"(^server (\d+) (\S+) (alive|DEAD) pid=(-?\d+))");
  static const std::regex kWorker(R"(^worker (\d+) (alive|dead) clock=(-?\d+))");
  ClusterStatus out;
  std::istringstream in(text);
  std::string line;
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_search(line, m, kServer)) {
      ServerStatus s;
      s.id = std::stoi(m[1]);
      s.endpoint = m[2];
      s.alive = m[3] == "alive";
      s.pid = static_cast<pid_t>(std::stol(m[4]));
      out.servers.push_back(s);
    } else if (std::regex_search(line, m, kWorker)) {
      WorkerStatus w;
      w.id = std::stoi(m[1]);
      w.alive = m[2] == "alive";
      w.clock = std::stoll(m[3]);
      out.workers.push_back(w);
    } else if (line.rfind("job_error: ", 0) == 0) {
      out.job_error = line.substr(11);
    }
  }
  return out;
}

StatusOr<ClusterStatus> QueryClusterStatus(const std::string& coordinator_endpoint,
                                           const std::string& dir) {
  ASSIGN_OR_RETURN(CommandResult r,
                   RunCommand({BinPath("relaxps-ctl"), "--coordinator=" + coordinator_endpoint,
                               "--timeout_ms=3000", "status"},
                              dir + "/ctl-status.log", Millis(15000)));
  if (r.exit_status != 0) {
    return UnavailableError("relaxps-ctl status exited with " + std::to_string(r.exit_status) +
                            ": " + r.output);
  }
  return ParseClusterStatus(r.output);
}

std::vector<ProgressLine> ParseProgress(const std::string& log_text) {
  std::vector<ProgressLine> out;
  std::istringstream in(log_text);
  std::string line;
  while (std::getline(in, line)) {
    ProgressLine p;
    if (line.rfind("progress ", 0) == 0) {
      p.kind = "progress";
    } else if (line.rfind("final ", 0) == 0) {
      p.kind = "final";
    } else {
      continue;
    }
    std::string worker, time_s, clock;
    if (!ParseKeyValue(line, "worker", &worker) || !ParseKeyValue(line, "time_s", &time_s) ||
        !ParseKeyValue(line, "clock", &clock)) {
      continue;  // a line cut in the middle of being written
    }
    try {
      p.worker = std::stoi(worker);
      p.time_s = std::stod(time_s);
      p.clock = std::stoll(clock);
    } catch (const std::exception&) {
      continue;
    }
    out.push_back(p);
  }
  return out;
}

// ---- Process scans ---------------------------------------------------------------------

std::vector<pid_t> FindProcesses(const std::string& needle) {
  std::vector<pid_t> out;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return out;
  const pid_t self = ::getpid();
  while (struct dirent* e = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || pid == self) continue;
    const std::string cmdline = ProcCmdline(static_cast<pid_t>(pid));
    if (cmdline.find(needle) == std::string::npos) continue;
    if (!IsProcessAlive(static_cast<pid_t>(pid))) continue;
    out.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(proc);
  return out;
}

bool IsProcessAlive(pid_t pid) {
  const char state = ProcState(pid);
  return state != 0 && state != 'Z' && state != 'X';
}

std::string DescribeProcesses(const std::vector<pid_t>& pids) {
  std::string out;
  for (pid_t p : pids) out += std::to_string(p) + ": " + ProcCmdline(p) + "\n";
  return out;
}

bool HasGpu() { return ::access("/dev/nvidia0", F_OK) == 0 || ::access("/dev/nvidiactl", F_OK) == 0; }

// ---- LocalCluster ----------------------------------------------------------------------

StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::Start(const std::string& dir,
                                                            LocalClusterOptions options) {
  if (options.num_servers < 1) return InvalidArgumentError("LocalCluster needs a server");
  std::unique_ptr<LocalCluster> c(new LocalCluster());
  c->dir_ = dir;

  const std::string coord_ep_file = dir + "/coordinator.endpoint";
  std::vector<std::string> argv = {BinPath("relaxps-coordinator"), "--bind=tcp://127.0.0.1:*",
                                   "--endpoint_file=" + coord_ep_file,
                                   "--num_servers=" + std::to_string(options.num_servers),
                                   // The test stops the processes itself.
                                   "--exit_when_done=false"};
  if (options.num_workers > 0) argv.push_back("--num_workers=" + std::to_string(options.num_workers));
  for (const std::string& f : options.coordinator_flags) argv.push_back(f);
  ASSIGN_OR_RETURN(c->coordinator_, Subprocess::Start(argv, dir + "/coordinator.log"));
  RETURN_IF_ERROR(WaitForLine(dir + "/coordinator.log", "listening on", options.start_timeout,
                              c->coordinator_.get())
                      .status()
                      .WithPrefix("coordinator: " + c->coordinator_->Log()));
  RETURN_IF_ERROR(WaitForFile(coord_ep_file, options.start_timeout));
  ASSIGN_OR_RETURN(std::string ep, ReadFile(coord_ep_file));
  while (!ep.empty() && (ep.back() == '\n' || ep.back() == ' ')) ep.pop_back();
  c->coordinator_endpoint_ = ep;

  for (int i = 0; i < options.num_servers; ++i) {
    const std::string name = dir + "/server-" + std::to_string(i);
    std::vector<std::string> sargv = {BinPath("relaxps-server"), "--coordinator=" + ep,
                                      "--server_id=" + std::to_string(i),
                                      "--endpoint_file=" + name + ".endpoint"};
    for (const std::string& f : options.server_flags) sargv.push_back(f);
    ASSIGN_OR_RETURN(std::unique_ptr<Subprocess> s, Subprocess::Start(sargv, name + ".log"));
    c->servers_.push_back(std::move(s));
  }
  for (int i = 0; i < options.num_servers; ++i) {
    const std::string name = dir + "/server-" + std::to_string(i);
    RETURN_IF_ERROR(WaitForLine(name + ".log", "listening on", options.start_timeout,
                                c->servers_[i].get())
                        .status()
                        .WithPrefix("server " + std::to_string(i) + ": " + c->servers_[i]->Log()));
  }
  return c;
}

StatusOr<std::unique_ptr<Subprocess>> LocalCluster::StartWorker(
    const std::string& name, const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {BinPath("relaxps-worker"), "--coordinator=" + coordinator_endpoint_};
  for (const std::string& f : flags) argv.push_back(f);
  return Subprocess::Start(argv, dir_ + "/" + name + ".log");
}

StatusOr<ClusterStatus> LocalCluster::QueryStatus() {
  return QueryClusterStatus(coordinator_endpoint_, dir_);
}

}  // namespace test
}  // namespace relaxps
