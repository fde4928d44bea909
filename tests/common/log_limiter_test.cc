// LogLimiter and LOG_LIMITED: one line per kind per period, with the count of
// the lines suppressed since the last one (common/log_limiter.h).
#include "common/log_limiter.h"

#include <string>
#include <vector>

#include <glog/logging.h>
#include <gtest/gtest.h>

namespace relaxps {
namespace {

// Collects the WARNING lines glog writes while it is installed.
class LineSink : public google::LogSink {
 public:
  LineSink() { google::AddLogSink(this); }
  ~LineSink() override { google::RemoveLogSink(this); }
  void send(google::LogSeverity severity, const char*, const char*, int, const struct ::tm*,
            const char* message, size_t message_len) override {
    if (severity == google::GLOG_WARNING) lines.emplace_back(message, message_len);
  }
  std::vector<std::string> lines;
};

TEST(LogLimiterTest, OneLinePerKindPerPeriodWithTheSuppressedCount) {
  FakeClock clock;
  LogLimiter limiter(&clock, 1000);
  LineSink sink;
  for (int i = 0; i < 500; ++i) {
    LOG_LIMITED(WARNING, &limiter, "register/too many") << "refused " << i;
    if (i % 2 == 0) LOG_LIMITED(WARNING, &limiter, "push/unknown table") << "push " << i;
  }
  ASSERT_EQ(sink.lines.size(), 2u);
  EXPECT_EQ(sink.lines[0], "refused 0");
  EXPECT_EQ(sink.lines[1], "push 0");
  clock.AdvanceMs(999);
  LOG_LIMITED(WARNING, &limiter, "register/too many") << "refused again";
  EXPECT_EQ(sink.lines.size(), 2u);  // Still inside the period.
  clock.AdvanceMs(1);
  LOG_LIMITED(WARNING, &limiter, "register/too many") << "refused later";
  LOG_LIMITED(WARNING, &limiter, "push/unknown table") << "push later";
  ASSERT_EQ(sink.lines.size(), 4u);
  // 499 of the loop plus the one inside the period; 249 pushes.
  EXPECT_EQ(sink.lines[2], "[500 more register/too many since the last such line] refused later");
  EXPECT_EQ(sink.lines[3], "[249 more push/unknown table since the last such line] push later");
}

TEST(LogLimiterTest, ASuppressedLineDoesNotEvaluateItsArguments) {
  FakeClock clock;
  LogLimiter limiter(&clock, 1000);
  int evaluated = 0;
  auto count = [&evaluated] { return ++evaluated; };
  for (int i = 0; i < 10; ++i) LOG_LIMITED(WARNING, &limiter, "k") << count();
  EXPECT_EQ(evaluated, 1);
}

}  // namespace
}  // namespace relaxps
