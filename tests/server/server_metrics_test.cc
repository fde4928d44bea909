// ServerMetrics (server/internal/server_metrics.h): every series with known
// label values exists at zero before any request, and the hooks count into
// the same series.
#include "server/internal/server_metrics.h"

#include <string>

#include <gtest/gtest.h>

#include "proto/relaxps.pb.h"
#include "tests/test_util.h"

namespace relaxps {
namespace server_internal {
namespace {

bool Has(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}

Request RequestOf(wire::MsgType type) {
  Request r;
  r.msg.header.set_type(type);
  return r;
}

TEST(ServerMetricsTest, KnownSeriesExistAtZeroBeforeAnyRequest) {
  metrics::Registry registry;
  ServerMetrics m(&registry);
  const std::string text = registry.Expose();
  for (const char* type : {"PUSH", "PULL", "PUSH_PULL", "PUSH_ROWS", "PULL_ROWS", "CLOCK",
                           "CHECKPOINT", "PING", "SEED"}) {
    EXPECT_TRUE(Has(text, std::string("relaxps_server_requests_total{type=\"") + type + "\"} 0"))
        << type << "\n" << text;
    EXPECT_TRUE(
        Has(text, std::string("relaxps_server_request_seconds_count{type=\"") + type + "\"} 0"))
        << type;
  }
  for (const char* reason : {"InvalidArgument", "NotFound", "Unavailable", "FailedPrecondition",
                             "WrongShard", "PermissionDenied"}) {
    EXPECT_TRUE(
        Has(text, std::string("relaxps_server_rejected_total{reason=\"") + reason + "\"} 0"))
        << reason;
  }
  EXPECT_FALSE(Has(text, "relaxps_server_rejected_total{reason=\"OK\"} 0")) << "OK is no rejection";
  for (const char* line :
       {"relaxps_server_pushes_total 0", "relaxps_server_pulls_total 0",
        "relaxps_server_gate_waits_total 0", "relaxps_server_gate_wait_seconds_count 0",
        "relaxps_server_restores_total 0", "relaxps_server_restore_seconds_count 0"}) {
    EXPECT_TRUE(Has(text, line)) << line;
  }
}

TEST(ServerMetricsTest, HooksCountIntoThePreRegisteredSeries) {
  metrics::Registry registry;
  ServerMetrics m(&registry);
  m.OnRequest(RequestOf(wire::PUSH_PULL));
  m.OnRequest(RequestOf(wire::PUSH));
  Request forwarded = RequestOf(wire::PUSH);
  forwarded.msg.header.set_forwarded(true);
  m.OnRequest(forwarded);
  m.OnReject(RequestOf(wire::PUSH), InvalidArgumentError("NaN"));
  m.OnRestore(0.5);
  const std::string text = registry.Expose();
  EXPECT_TRUE(Has(text, "relaxps_server_requests_total{type=\"PUSH\"} 2")) << text;
  EXPECT_TRUE(Has(text, "relaxps_server_requests_total{type=\"PUSH_PULL\"} 1"));
  EXPECT_TRUE(Has(text, "relaxps_server_pushes_total 2")) << "forwarded pushes are not counted";
  EXPECT_TRUE(Has(text, "relaxps_server_pulls_total 1"));
  EXPECT_TRUE(Has(text, "relaxps_server_rejected_total{reason=\"InvalidArgument\"} 1"));
  EXPECT_TRUE(Has(text, "relaxps_server_restores_total 1"));
  EXPECT_TRUE(Has(text, "relaxps_server_restore_seconds_count 1"));
  // An unexpected type gets its series on first use.
  m.OnRequest(RequestOf(wire::REGISTER));
  EXPECT_TRUE(Has(registry.Expose(), "relaxps_server_requests_total{type=\"REGISTER\"} 1"));
}

TEST(ServerMetricsTest, WithoutRegistryHooksDoNothing) {
  ServerMetrics m(nullptr);
  EXPECT_FALSE(m.enabled());
  m.OnRequest(RequestOf(wire::PUSH));
  m.OnReply(RequestOf(wire::PUSH));
  m.OnReject(RequestOf(wire::PUSH), InvalidArgumentError("x"));
  m.OnRestore(1);
}

}  // namespace
}  // namespace server_internal
}  // namespace relaxps
