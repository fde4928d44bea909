#include "common/process_metrics.h"

#include <dirent.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <vector>

namespace relaxps {
namespace metrics {
namespace {

StatusOr<std::string> ReadAll(const char* path) {
  std::ifstream in(path);
  if (!in) return NotFoundError(std::string("cannot read ") + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Entries of /proc/self/fd, less the one opendir holds; -1 if unreadable.
double OpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int n = 0;
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n - 1;
}

void Collect(double start_time, MetricSink* sink) {
  const Labels none;
  if (auto stat = ReadAll("/proc/self/stat"); stat.ok()) {
    auto parsed = ParseProcStat(*stat, sysconf(_SC_CLK_TCK), sysconf(_SC_PAGESIZE));
    if (parsed.ok()) {
      sink->Counter("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
                    none, parsed->cpu_seconds);
      sink->Gauge("process_resident_memory_bytes", "Resident memory size in bytes.", none,
                  parsed->resident_bytes);
      sink->Gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.", none,
                  parsed->virtual_bytes);
    }
  }
  if (const double fds = OpenFds(); fds >= 0) {
    sink->Gauge("process_open_fds", "Number of open file descriptors.", none, fds);
  }
  if (auto limits = ReadAll("/proc/self/limits"); limits.ok()) {
    if (auto max = ParseMaxOpenFiles(*limits); max.ok()) {
      sink->Gauge("process_max_fds", "Maximum number of open file descriptors.", none, *max);
    }
  }
  if (start_time > 0) {
    sink->Gauge("process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.", none, start_time);
  }
}

}  // namespace

StatusOr<ProcStat> ParseProcStat(const std::string& line, long clock_ticks, long page_bytes) {
  // "pid (comm) state ppid ...": comm may hold anything, so fields are
  // counted from the last ')'.
  const size_t close = line.rfind(')');
  if (close == std::string::npos || clock_ticks <= 0 || page_bytes <= 0) {
    return InvalidArgumentError("not a /proc/<pid>/stat line");
  }
  std::istringstream in(line.substr(close + 1));
  std::vector<std::string> fields;  // fields[0] is field 3 (state).
  for (std::string f; in >> f;) fields.push_back(f);
  if (fields.size() < 22) return InvalidArgumentError("/proc/<pid>/stat line too short");
  const auto number = [&](int field) { return std::strtod(fields[field - 3].c_str(), nullptr); };
  ProcStat s;
  const double ticks = static_cast<double>(clock_ticks);
  s.cpu_seconds = (number(14) + number(15)) / ticks;
  s.start_seconds_after_boot = number(22) / ticks;
  s.virtual_bytes = number(23);
  s.resident_bytes = number(24) * static_cast<double>(page_bytes);
  return s;
}

StatusOr<double> ParseBootTime(const std::string& proc_stat) {
  std::istringstream in(proc_stat);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("btime ", 0) == 0) return std::strtod(line.c_str() + 6, nullptr);
  }
  return NotFoundError("no btime in /proc/stat");
}

StatusOr<double> ParseMaxOpenFiles(const std::string& limits) {
  std::istringstream in(limits);
  const std::string key = "Max open files";
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key, 0) != 0) continue;
    std::istringstream fields(line.substr(key.size()));
    std::string soft;
    fields >> soft;
    if (soft == "unlimited") return std::numeric_limits<double>::infinity();
    return std::strtod(soft.c_str(), nullptr);
  }
  return NotFoundError("no 'Max open files' in limits");
}

void AddProcessCollector(Registry* registry) {
  // The start time is constant: computed once (0 if /proc is unreadable).
  double start_time = 0;
  auto stat = ReadAll("/proc/self/stat");
  auto boot = ReadAll("/proc/stat");
  if (stat.ok() && boot.ok()) {
    auto parsed = ParseProcStat(*stat, sysconf(_SC_CLK_TCK), sysconf(_SC_PAGESIZE));
    auto btime = ParseBootTime(*boot);
    if (parsed.ok() && btime.ok()) start_time = *btime + parsed->start_seconds_after_boot;
  }
  registry->AddCollector([start_time](MetricSink* sink) { Collect(start_time, sink); });
}

}  // namespace metrics
}  // namespace relaxps
