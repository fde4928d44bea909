// Metrics: counters, gauges and histograms exported in the Prometheus text
// exposition format (version 0.0.4), served by MetricsExporter
// (common/metrics_exporter.h) on GET /metrics.
//
// A Registry owns its metrics. Get*() returns a stable pointer to the metric
// with that name and label set (created on first use); callers keep the
// pointer and update it on their hot paths: an update is one or two relaxed
// atomic operations, no lock and no allocation. Values computed only when
// scraped (a process's live-member count, a protobuf stats struct owned by
// an event loop) come from collectors (AddCollector), which run on the
// scraping thread and emit samples into a MetricSink.
//
// Names follow Prometheus conventions: snake_case with a "relaxps_" prefix,
// counters end in "_total", durations are in seconds ("_seconds"). A name
// registered with two types, or with a type different from a collector's,
// is a programmer error (CHECK).
//
// Thread-safety: every method of Registry, Counter, Gauge and Histogram is
// safe to call from multiple threads.
#ifndef RELAXPS_COMMON_METRICS_H_
#define RELAXPS_COMMON_METRICS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/thread_annotations.h"

namespace relaxps {
namespace metrics {

// Label pairs (name, value), e.g. {{"type", "PUSH"}}. Order is kept.
using Labels = std::vector<std::pair<std::string, std::string>>;

enum class MetricType { kCounter, kGauge, kHistogram };

// A monotonically increasing count.
class Counter {
 public:
  void Increment(uint64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

// A value that goes up and down.
class Gauge {
 public:
  void Set(double v);
  void Add(double delta);
  double value() const;

 private:
  std::atomic<uint64_t> bits_{0};  // The double's bit pattern (0.0).
};

// Observations counted in cumulative buckets with upper bounds `bounds`
// (ascending; +Inf is implicit), plus their sum and count.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);

  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;  // Per bound, then +Inf (== count).
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot Take() const;

 private:
  const std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // bounds_.size() + 1, not cumulative.
  std::atomic<uint64_t> sum_bits_{0};
};

// Bucket bounds for request and wait durations: 50 µs .. 10 s.
std::vector<double> LatencyBuckets();
// Bucket bounds for store flushes, checkpoints and recoveries: 1 ms .. 300 s.
std::vector<double> DurationBuckets();

// Where collectors put the samples they compute at scrape time.
class MetricSink {
 public:
  virtual ~MetricSink() = default;
  virtual void Counter(const std::string& name, const std::string& help, const Labels& labels,
                       double value) = 0;
  virtual void Gauge(const std::string& name, const std::string& help, const Labels& labels,
                     double value) = 0;
};

// A collector for state owned by an event loop: each scrape hands
// `collect` to `post` (e.g. RpcServer::Post, which runs it on the loop
// thread), waits at most `timeout_ms` for it, and replays what it emitted
// into the scrape's sink. A loop that does not run it in time (stuck or
// stopped) contributes nothing to that scrape.
std::function<void(MetricSink*)> PostedCollector(
    std::function<void(std::function<void()>)> post, std::function<void(MetricSink*)> collect,
    int timeout_ms);

class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // The metric `name` with `labels`, created on first use. `help` is taken
  // from the first call for a name. REQUIRES: a valid metric name and label
  // names ([a-zA-Z_:][a-zA-Z0-9_:]*); one type per name.
  Counter* GetCounter(const std::string& name, const std::string& help, const Labels& labels = {});
  Gauge* GetGauge(const std::string& name, const std::string& help, const Labels& labels = {});
  // `bounds` are taken from the first call for a name (its other label sets
  // share them).
  Histogram* GetHistogram(const std::string& name, const std::string& help,
                          const std::vector<double>& bounds, const Labels& labels = {});

  // `collect` runs on every scrape, on the scraping thread, after the
  // registered metrics were read. It must not call back into this registry.
  void AddCollector(std::function<void(MetricSink*)> collect);

  // Every metric in the text exposition format, families sorted by name.
  std::string Expose() const;

 private:
  struct Family {
    MetricType type;
    std::string help;
    std::vector<double> bounds;  // Histograms.
    // Label set (serialized) -> metric; one of the three is set.
    struct Entry {
      Labels labels;
      std::unique_ptr<Counter> counter;
      std::unique_ptr<Gauge> gauge;
      std::unique_ptr<Histogram> histogram;
    };
    std::map<std::string, Entry> entries;
  };
  Family::Entry* Find(const std::string& name, const std::string& help, MetricType type,
                      const Labels& labels, const std::vector<double>* bounds);

  mutable Mutex mu_;
  std::map<std::string, Family> families_ GUARDED_BY(mu_);
  std::vector<std::function<void(MetricSink*)>> collectors_ GUARDED_BY(mu_);
};

// Exposition-format helpers (exposed for tests).
// A label value with backslash, double quote and newline escaped.
std::string EscapeLabelValue(const std::string& v);
// A HELP text with backslash and newline escaped.
std::string EscapeHelp(const std::string& v);
// A sample value: integers without a fraction, "+Inf"/"-Inf"/"NaN".
std::string FormatValue(double v);
// True for a valid metric (or, with `label`, label) name.
bool ValidName(const std::string& name, bool label = false);

}  // namespace metrics
}  // namespace relaxps

#endif  // RELAXPS_COMMON_METRICS_H_
