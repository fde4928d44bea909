// The standard process_* metrics of a Prometheus client, read from
// /proc/self at scrape time (Linux): CPU time, resident memory, open file
// descriptors and the start time, under the names every Prometheus client
// library uses, so that stock dashboards and alerts work on relaxps
// processes.
//
// Thread-safety: the collector runs on the scraping thread; the parsing
// helpers are pure functions.
#ifndef RELAXPS_COMMON_PROCESS_METRICS_H_
#define RELAXPS_COMMON_PROCESS_METRICS_H_

#include <string>

#include "common/metrics.h"
#include "common/status.h"

namespace relaxps {
namespace metrics {

// Adds a collector of process_cpu_seconds_total, process_resident_memory_bytes,
// process_virtual_memory_bytes, process_open_fds, process_max_fds and
// process_start_time_seconds for this process. A value that cannot be read
// (no /proc) is left out of the scrape; nothing fails.
void AddProcessCollector(Registry* registry);

// What /proc/self/stat says, in the units of the metrics.
struct ProcStat {
  double cpu_seconds = 0;             // utime + stime
  double start_seconds_after_boot = 0;  // starttime
  double virtual_bytes = 0;           // vsize
  double resident_bytes = 0;          // rss * page size
};

// Parses the one line of /proc/<pid>/stat (`clock_ticks`: sysconf(_SC_CLK_TCK),
// `page_bytes`: the page size). The command name may hold blanks and
// parentheses. InvalidArgument for a line that is not one.
StatusOr<ProcStat> ParseProcStat(const std::string& line, long clock_ticks, long page_bytes);

// The boot time ("btime", seconds since the epoch) from /proc/stat's text.
// NotFound if it has no btime line.
StatusOr<double> ParseBootTime(const std::string& proc_stat);

// The soft "Max open files" limit from /proc/<pid>/limits' text; NotFound
// if absent, +Inf when unlimited.
StatusOr<double> ParseMaxOpenFiles(const std::string& limits);

}  // namespace metrics
}  // namespace relaxps

#endif  // RELAXPS_COMMON_PROCESS_METRICS_H_
