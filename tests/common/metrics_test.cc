// Tests of common/metrics (registry, exposition format) and
// common/metrics_exporter (HTTP).
#include "common/metrics.h"

#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/metrics_exporter.h"

namespace relaxps {
namespace metrics {
namespace {

bool Contains(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

TEST(MetricsTest, CountersAndGaugesWithLabels) {
  Registry r;
  Counter* push = r.GetCounter("relaxps_requests_total", "Requests by type.", {{"type", "PUSH"}});
  Counter* pull = r.GetCounter("relaxps_requests_total", "ignored", {{"type", "PULL"}});
  EXPECT_EQ(push, r.GetCounter("relaxps_requests_total", "", {{"type", "PUSH"}}));
  push->Increment();
  push->Increment(4);
  pull->Increment();
  r.GetGauge("relaxps_live", "Live members.")->Set(3);
  r.GetGauge("relaxps_ratio", "A ratio.")->Set(0.25);
  const std::string text = r.Expose();
  EXPECT_TRUE(Contains(text, "# HELP relaxps_requests_total Requests by type.")) << text;
  EXPECT_TRUE(Contains(text, "# TYPE relaxps_requests_total counter")) << text;
  EXPECT_TRUE(Contains(text, "relaxps_requests_total{type=\"PUSH\"} 5")) << text;
  EXPECT_TRUE(Contains(text, "relaxps_requests_total{type=\"PULL\"} 1")) << text;
  EXPECT_TRUE(Contains(text, "# TYPE relaxps_live gauge")) << text;
  EXPECT_TRUE(Contains(text, "relaxps_live 3")) << text;
  EXPECT_TRUE(Contains(text, "relaxps_ratio 0.25")) << text;
  // Families sorted by name, HELP before TYPE before samples.
  EXPECT_LT(text.find("relaxps_live"), text.find("relaxps_ratio"));
  EXPECT_LT(text.find("# HELP relaxps_live"), text.find("# TYPE relaxps_live"));
}

TEST(MetricsTest, EscapesLabelValuesAndHelp) {
  EXPECT_EQ(EscapeLabelValue("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
  EXPECT_EQ(EscapeHelp("line1\nback\\slash \"quoted\""), "line1\\nback\\\\slash \"quoted\"");
  Registry r;
  r.GetCounter("x_total", "two\nlines", {{"path", "C:\\dir \"q\""}})->Increment();
  const std::string text = r.Expose();
  EXPECT_TRUE(Contains(text, "# HELP x_total two\\nlines")) << text;
  EXPECT_TRUE(Contains(text, "x_total{path=\"C:\\\\dir \\\"q\\\"\"} 1")) << text;
}

TEST(MetricsTest, FormatsSpecialValues) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(12345678901234.0), "12345678901234");
  EXPECT_EQ(FormatValue(0.5), "0.5");
  EXPECT_EQ(FormatValue(0.1), "0.1");
  EXPECT_EQ(FormatValue(5e-05), "5e-05");
  EXPECT_EQ(FormatValue(1.0 / 3), "0.3333333333333333");
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
  EXPECT_TRUE(ValidName("relaxps_a:b_1"));
  EXPECT_FALSE(ValidName("1abc"));
  EXPECT_FALSE(ValidName("a-b"));
  EXPECT_FALSE(ValidName("a:b", /*label=*/true));
}

TEST(MetricsTest, HistogramBucketsAreCumulative) {
  Registry r;
  Histogram* h = r.GetHistogram("lat_seconds", "Latency.", {0.1, 1, 10}, {{"type", "PULL"}});
  for (double v : {0.05, 0.1, 0.5, 2.0, 20.0, 30.0}) h->Observe(v);
  const Histogram::Snapshot s = h->Take();
  EXPECT_EQ(s.cumulative, (std::vector<uint64_t>{2, 3, 4, 6}));
  EXPECT_EQ(s.count, 6u);
  EXPECT_DOUBLE_EQ(s.sum, 52.65);
  const std::string text = r.Expose();
  EXPECT_TRUE(Contains(text, "# TYPE lat_seconds histogram")) << text;
  EXPECT_TRUE(Contains(text, "lat_seconds_bucket{type=\"PULL\",le=\"0.1\"} 2")) << text;
  EXPECT_TRUE(Contains(text, "lat_seconds_bucket{type=\"PULL\",le=\"1\"} 3")) << text;
  EXPECT_TRUE(Contains(text, "lat_seconds_bucket{type=\"PULL\",le=\"10\"} 4")) << text;
  EXPECT_TRUE(Contains(text, "lat_seconds_bucket{type=\"PULL\",le=\"+Inf\"} 6")) << text;
  EXPECT_TRUE(Contains(text, "lat_seconds_count{type=\"PULL\"} 6")) << text;
  EXPECT_NE(text.find("lat_seconds_sum{type=\"PULL\"} 52.6"), std::string::npos) << text;
}

TEST(MetricsTest, ConcurrentIncrementsAreNotLost) {
  Registry r;
  Counter* c = r.GetCounter("c_total", "c");
  Histogram* h = r.GetHistogram("h_seconds", "h", LatencyBuckets());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 100000; ++i) {
        c->Increment();
        h->Observe(0.001);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c->value(), 400000u);
  EXPECT_EQ(h->Take().count, 400000u);
  EXPECT_NEAR(h->Take().sum, 400.0, 1e-6);
}

TEST(MetricsTest, CollectorsMergeIntoFamilies) {
  Registry r;
  r.GetGauge("relaxps_clock", "Clock.", {{"worker", "0"}})->Set(7);
  r.AddCollector([](MetricSink* sink) {
    sink->Gauge("relaxps_clock", "Clock.", {{"worker", "1"}}, 9);
    sink->Counter("relaxps_collected_total", "From a collector.", {}, 42);
  });
  const std::string text = r.Expose();
  // One HELP/TYPE per family, both samples under it.
  EXPECT_EQ(text.find("# TYPE relaxps_clock gauge"), text.rfind("# TYPE relaxps_clock gauge"));
  EXPECT_TRUE(Contains(text, "relaxps_clock{worker=\"0\"} 7")) << text;
  EXPECT_TRUE(Contains(text, "relaxps_clock{worker=\"1\"} 9")) << text;
  EXPECT_TRUE(Contains(text, "relaxps_collected_total 42")) << text;
}

TEST(MetricsDeathTest, OneTypePerName) {
  Registry r;
  r.GetCounter("dup_total", "d");
  EXPECT_DEATH(r.GetGauge("dup_total", "d"), "registered as counter and gauge");
  EXPECT_DEATH(r.GetCounter("bad-name", "d"), "bad metric name");
}

// A minimal HTTP GET over a socket (the test needs no HTTP client library).
std::string HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "";
  }
  const std::string req = "GET " + path + " HTTP/1.0\r\nHost: localhost\r\n\r\n";
  (void)!write(fd, req.data(), req.size());
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

TEST(MetricsExporterTest, ServesMetricsAndRefusesABusyPort) {
  Registry r;
  r.GetCounter("relaxps_pushes_total", "Pushes.")->Increment(3);
  auto exporter = MetricsExporter::Start(ExporterOptions{"127.0.0.1", 0}, &r);
  ASSERT_TRUE(exporter.ok()) << exporter.status();
  const int port = (*exporter)->port();
  ASSERT_GT(port, 0);
  const std::string reply = HttpGet(port, "/metrics");
  EXPECT_NE(reply.find("200 OK"), std::string::npos) << reply;
  EXPECT_NE(reply.find("text/plain; version=0.0.4"), std::string::npos) << reply;
  EXPECT_NE(reply.find("relaxps_pushes_total 3\n"), std::string::npos) << reply;
  EXPECT_NE(HttpGet(port, "/other").find("404"), std::string::npos);

  auto second = MetricsExporter::Start(ExporterOptions{"127.0.0.1", port}, &r);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("cannot bind the metrics port 127.0.0.1:" +
                                           std::to_string(port)),
            std::string::npos)
      << second.status();
  EXPECT_FALSE(MetricsExporter::Start(ExporterOptions{"192.0.2.1", 0}, &r).ok());
  EXPECT_FALSE(MetricsExporter::Start(ExporterOptions{"127.0.0.1", 70000}, &r).ok());
}

TEST(MetricsExporterTest, BindAddressFollowsTheZmqEndpoint) {
  EXPECT_EQ(BindAddressOf("tcp://10.0.0.2:5555"), "10.0.0.2");
  EXPECT_EQ(BindAddressOf("tcp://*:*"), "0.0.0.0");
  EXPECT_EQ(BindAddressOf("tcp://[::1]:*"), "::1");
  EXPECT_EQ(BindAddressOf("tcp://127.0.0.1:*"), "127.0.0.1");
  EXPECT_EQ(BindAddressOf("ipc:///tmp/x"), "127.0.0.1");
}

}  // namespace
}  // namespace metrics
}  // namespace relaxps
