// CoordinatorMetrics (coordinator/coordinator_metrics.h): the series of
// every known label value exist at zero from the start; the staleness bound
// follows the consistency model (async has none, whatever --staleness says).
#include "coordinator/coordinator_metrics.h"

#include <cmath>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace relaxps {
namespace {

bool Has(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}

TEST(CoordinatorMetricsTest, KnownSeriesExistAtZeroFromTheStart) {
  metrics::Registry registry;
  CoordinatorMetrics m(&registry);
  const std::string text = registry.Expose();
  for (const char* line : {
           "relaxps_coordinator_declared_dead_total{member=\"server\"} 0",
           "relaxps_coordinator_declared_dead_total{member=\"worker\"} 0",
           "relaxps_coordinator_recovery_events_total{kind=\"failover\"} 0",
           "relaxps_coordinator_recovery_events_total{kind=\"fallback\"} 0",
           "relaxps_coordinator_recovery_events_total{kind=\"reseed\"} 0",
           "relaxps_coordinator_recovery_seconds_count{kind=\"reseed\"} 0",
           "relaxps_coordinator_checkpoints_total{result=\"ok\"} 0",
           "relaxps_coordinator_checkpoints_total{result=\"failed\"} 0",
           "relaxps_coordinator_checkpoint_seconds_count 0",
       }) {
    EXPECT_TRUE(Has(text, line)) << line << "\n" << text;
  }
  m.OnDeclaredDead("worker");
  m.OnRecoveryDone("reseed", 1.5);
  m.OnCheckpoint(false, 2);
  const std::string after = registry.Expose();
  EXPECT_TRUE(Has(after, "relaxps_coordinator_declared_dead_total{member=\"worker\"} 1"));
  EXPECT_TRUE(Has(after, "relaxps_coordinator_recovery_events_total{kind=\"reseed\"} 1"));
  EXPECT_TRUE(Has(after, "relaxps_coordinator_recovery_seconds_count{kind=\"reseed\"} 1"));
  EXPECT_TRUE(Has(after, "relaxps_coordinator_checkpoints_total{result=\"failed\"} 1"));
  EXPECT_TRUE(Has(after, "relaxps_coordinator_checkpoint_seconds_count 0"))
      << "failed checkpoints have no duration";
}

// Keeps the gauges a collector emits, by name and labels.
class MapSink final : public metrics::MetricSink {
 public:
  void Counter(const std::string& name, const std::string&, const metrics::Labels& labels,
               double value) override {
    values[Key(name, labels)] = value;
  }
  void Gauge(const std::string& name, const std::string&, const metrics::Labels& labels,
             double value) override {
    values[Key(name, labels)] = value;
  }
  static std::string Key(const std::string& name, const metrics::Labels& labels) {
    std::string k = name;
    for (const auto& [l, v] : labels) k += "," + l + "=" + v;
    return k;
  }
  std::map<std::string, double> values;
};

double Bound(const std::string& consistency, int staleness) {
  wire::StatusReply status;
  status.mutable_job()->set_consistency(consistency);
  status.mutable_job()->set_staleness(staleness);
  MapSink sink;
  CollectStatusMetrics(status, &sink);
  const std::string key = "relaxps_coordinator_staleness_bound,consistency=" + consistency;
  EXPECT_EQ(sink.values.count(key), 1u) << key;
  return sink.values[key];
}

TEST(CoordinatorMetricsTest, StalenessBoundFollowsTheConsistencyModel) {
  EXPECT_EQ(Bound("bsp", 2), 0);
  EXPECT_EQ(Bound("ssp", 3), 3);
  const double async = Bound("async", 2);  // --staleness's default, ignored by async.
  EXPECT_TRUE(std::isinf(async) && async > 0) << async;
  EXPECT_TRUE(std::isnan(Bound("nonsense", 2)));
}

}  // namespace
}  // namespace relaxps
