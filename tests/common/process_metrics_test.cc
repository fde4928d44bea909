// process_* metrics (common/process_metrics.h): /proc parsing, and a live
// scrape of this test process.
#include "common/process_metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <ctime>
#include <limits>
#include <string>

#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace relaxps {
namespace metrics {
namespace {

// A /proc/<pid>/stat line whose command name holds blanks and parentheses:
// utime 250, stime 150 ticks; starttime 12345 ticks; vsize 1000000;
// rss 300 pages.
const char kStat[] =
    "4242 (relaxps-(a) b) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 150 0 0 20 0 3 0 12345 "
    "1000000 300 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";

TEST(ProcessMetricsTest, ParsesProcStat) {
  ASSERT_OK_AND_ASSIGN(ProcStat s, ParseProcStat(kStat, 100, 4096));
  EXPECT_DOUBLE_EQ(s.cpu_seconds, 4.0);
  EXPECT_DOUBLE_EQ(s.start_seconds_after_boot, 123.45);
  EXPECT_DOUBLE_EQ(s.virtual_bytes, 1000000);
  EXPECT_DOUBLE_EQ(s.resident_bytes, 300.0 * 4096);
}

TEST(ProcessMetricsTest, RejectsWhatIsNotAStatLine) {
  EXPECT_EQ(ParseProcStat("", 100, 4096).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseProcStat("4242 (x) S 1 2 3", 100, 4096).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseProcStat(kStat, 0, 4096).status().code(), StatusCode::kInvalidArgument);
}

TEST(ProcessMetricsTest, ParsesBootTimeAndFdLimit) {
  ASSERT_OK_AND_ASSIGN(double btime,
                       ParseBootTime("cpu  1 2 3\nintr 5\nbtime 1700000000\nprocesses 9\n"));
  EXPECT_DOUBLE_EQ(btime, 1700000000);
  EXPECT_EQ(ParseBootTime("cpu 1 2 3\n").status().code(), StatusCode::kNotFound);
  const std::string limits =
      "Limit                     Soft Limit           Hard Limit           Units     \n"
      "Max processes             unlimited            unlimited            processes \n"
      "Max open files            1024                 1048576              files     \n";
  ASSERT_OK_AND_ASSIGN(double max, ParseMaxOpenFiles(limits));
  EXPECT_DOUBLE_EQ(max, 1024);
  ASSERT_OK_AND_ASSIGN(double unlimited,
                       ParseMaxOpenFiles("Max open files            unlimited   unlimited  files\n"));
  EXPECT_TRUE(std::isinf(unlimited));
  EXPECT_EQ(ParseMaxOpenFiles("").status().code(), StatusCode::kNotFound);
}

// The value of the unlabelled sample `name` in `text`; NaN if absent.
double Sample(const std::string& text, const std::string& name) {
  for (const std::string& line : test::GrepLines(text, "^" + name + " ")) {
    return std::strtod(line.c_str() + name.size() + 1, nullptr);
  }
  return std::numeric_limits<double>::quiet_NaN();
}

TEST(ProcessMetricsTest, ScrapeOfThisProcess) {
  Registry registry;
  AddProcessCollector(&registry);
  const std::string before = registry.Expose();
  for (const char* family : {"process_cpu_seconds_total counter", "process_resident_memory_bytes gauge",
                             "process_open_fds gauge", "process_start_time_seconds gauge",
                             "process_virtual_memory_bytes gauge", "process_max_fds gauge"}) {
    EXPECT_NE(before.find(std::string("# TYPE ") + family + "\n"), std::string::npos)
        << family << "\n" << before;
  }
  EXPECT_GE(Sample(before, "process_cpu_seconds_total"), 0);
  EXPECT_GT(Sample(before, "process_resident_memory_bytes"), 1 << 20);  // A process: > 1 MiB.
  EXPECT_GE(Sample(before, "process_virtual_memory_bytes"),
            Sample(before, "process_resident_memory_bytes"));
  const double now = static_cast<double>(std::time(nullptr));
  const double start = Sample(before, "process_start_time_seconds");
  EXPECT_LE(start, now + 1);
  EXPECT_GT(start, now - 24 * 3600) << "this test started more than a day ago?";

  // An extra descriptor shows in the next scrape.
  const double fds = Sample(before, "process_open_fds");
  EXPECT_GE(fds, 3);  // stdin, stdout, stderr at least.
  const int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(Sample(registry.Expose(), "process_open_fds"), fds + 1);
  close(fd);
  EXPECT_EQ(Sample(registry.Expose(), "process_open_fds"), fds);
}

}  // namespace
}  // namespace metrics
}  // namespace relaxps
