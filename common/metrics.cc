#include "common/metrics.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <glog/logging.h>

namespace relaxps {
namespace metrics {
namespace {

uint64_t ToBits(double v) {
  uint64_t b;
  std::memcpy(&b, &v, sizeof(b));
  return b;
}

double FromBits(uint64_t b) {
  double v;
  std::memcpy(&v, &b, sizeof(v));
  return v;
}

void AddDouble(std::atomic<uint64_t>* bits, double delta) {
  uint64_t old = bits->load(std::memory_order_relaxed);
  while (!bits->compare_exchange_weak(old, ToBits(FromBits(old) + delta),
                                      std::memory_order_relaxed)) {
  }
}

const char* TypeName(MetricType t) {
  switch (t) {
    case MetricType::kCounter: return "counter";
    case MetricType::kGauge: return "gauge";
    case MetricType::kHistogram: return "histogram";
  }
  return "untyped";
}

std::string LabelKey(const Labels& labels) {
  std::string key;
  for (const auto& [k, v] : labels) key += k + '\x1f' + v + '\x1e';
  return key;
}

// "{a="x",b="y"}" (empty for no labels), with `extra` appended (le=...).
std::string FormatLabels(const Labels& labels, const std::string& extra = "") {
  if (labels.empty() && extra.empty()) return "";
  std::string out = "{";
  for (const auto& [k, v] : labels) {
    if (out.size() > 1) out += ',';
    out += k + "=\"" + EscapeLabelValue(v) + '"';
  }
  if (!extra.empty()) {
    if (out.size() > 1) out += ',';
    out += extra;
  }
  return out + "}";
}

// One family as written: HELP, TYPE, then its sample lines.
struct Exposed {
  MetricType type = MetricType::kGauge;
  std::string help;
  std::vector<std::string> lines;
};

class CollectingSink final : public MetricSink {
 public:
  explicit CollectingSink(std::map<std::string, Exposed>* out) : out_(out) {}
  void Counter(const std::string& name, const std::string& help, const Labels& labels,
               double value) override {
    Add(MetricType::kCounter, name, help, labels, value);
  }
  void Gauge(const std::string& name, const std::string& help, const Labels& labels,
             double value) override {
    Add(MetricType::kGauge, name, help, labels, value);
  }

 private:
  void Add(MetricType type, const std::string& name, const std::string& help,
           const Labels& labels, double value) {
    CHECK(ValidName(name)) << "bad metric name '" << name << "'";
    for (const auto& [k, v] : labels) CHECK(ValidName(k, true)) << "bad label name '" << k << "'";
    auto [it, created] = out_->try_emplace(name);
    if (created) {
      it->second.type = type;
      it->second.help = help;
    }
    CHECK(it->second.type == type) << "metric " << name << " collected with two types";
    it->second.lines.push_back(name + FormatLabels(labels) + " " + FormatValue(value));
  }
  std::map<std::string, Exposed>* out_;
};

// Samples recorded on one thread, replayed into a sink on another.
class RecordingSink final : public MetricSink {
 public:
  void Counter(const std::string& name, const std::string& help, const Labels& labels,
               double value) override {
    samples_.push_back({true, name, help, labels, value});
  }
  void Gauge(const std::string& name, const std::string& help, const Labels& labels,
             double value) override {
    samples_.push_back({false, name, help, labels, value});
  }
  void ReplayInto(MetricSink* sink) const {
    for (const Sample& s : samples_) {
      if (s.counter) {
        sink->Counter(s.name, s.help, s.labels, s.value);
      } else {
        sink->Gauge(s.name, s.help, s.labels, s.value);
      }
    }
  }

 private:
  struct Sample {
    bool counter;
    std::string name;
    std::string help;
    Labels labels;
    double value;
  };
  std::vector<Sample> samples_;
};

}  // namespace

std::function<void(MetricSink*)> PostedCollector(
    std::function<void(std::function<void()>)> post, std::function<void(MetricSink*)> collect,
    int timeout_ms) {
  return [post = std::move(post), collect = std::move(collect), timeout_ms](MetricSink* sink) {
    // Shared with the posted task, which may run after this scrape gave up.
    struct State {
      std::mutex mu;
      std::condition_variable cv;
      bool done = false;
      RecordingSink samples;
    };
    auto state = std::make_shared<State>();
    post([state, collect] {
      RecordingSink samples;
      collect(&samples);
      std::lock_guard<std::mutex> l(state->mu);
      state->samples = std::move(samples);
      state->done = true;
      state->cv.notify_all();
    });
    std::unique_lock<std::mutex> l(state->mu);
    if (state->cv.wait_for(l, std::chrono::milliseconds(timeout_ms), [&] { return state->done; })) {
      state->samples.ReplayInto(sink);
    }
  };
}

void Gauge::Set(double v) { bits_.store(ToBits(v), std::memory_order_relaxed); }
void Gauge::Add(double delta) { AddDouble(&bits_, delta); }
double Gauge::value() const { return FromBits(bits_.load(std::memory_order_relaxed)); }

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), buckets_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  CHECK(std::is_sorted(bounds_.begin(), bounds_.end())) << "histogram bounds must ascend";
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double v) {
  // The first bound >= v: Prometheus buckets are "less than or equal".
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  AddDouble(&sum_bits_, v);
}

Histogram::Snapshot Histogram::Take() const {
  Snapshot s;
  s.bounds = bounds_;
  uint64_t running = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    running += buckets_[i].load(std::memory_order_relaxed);
    s.cumulative.push_back(running);
  }
  s.count = running;
  s.sum = FromBits(sum_bits_.load(std::memory_order_relaxed));
  return s;
}

std::vector<double> LatencyBuckets() {
  return {50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3,
          50e-3, 100e-3, 250e-3, 500e-3, 1,    2.5,    5,    10};
}

std::vector<double> DurationBuckets() {
  return {1e-3, 5e-3, 10e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1, 2.5, 5, 10, 30, 60, 120, 300};
}

Registry::Family::Entry* Registry::Find(const std::string& name, const std::string& help,
                                        MetricType type, const Labels& labels,
                                        const std::vector<double>* bounds) {
  CHECK(ValidName(name)) << "bad metric name '" << name << "'";
  for (const auto& [k, v] : labels) {
    CHECK(ValidName(k, true) && k != "le") << "bad label name '" << k << "' of " << name;
  }
  MutexLock l(&mu_);
  auto [fit, created] = families_.try_emplace(name);
  Family& f = fit->second;
  if (created) {
    f.type = type;
    f.help = help;
    if (bounds != nullptr) f.bounds = *bounds;
  }
  CHECK(f.type == type) << "metric " << name << " registered as " << TypeName(f.type)
                        << " and " << TypeName(type);
  auto [eit, new_entry] = f.entries.try_emplace(LabelKey(labels));
  Family::Entry& e = eit->second;
  if (new_entry) {
    e.labels = labels;
    switch (type) {
      case MetricType::kCounter: e.counter = std::make_unique<Counter>(); break;
      case MetricType::kGauge: e.gauge = std::make_unique<Gauge>(); break;
      case MetricType::kHistogram: e.histogram = std::make_unique<Histogram>(f.bounds); break;
    }
  }
  return &e;
}

Counter* Registry::GetCounter(const std::string& name, const std::string& help,
                              const Labels& labels) {
  return Find(name, help, MetricType::kCounter, labels, nullptr)->counter.get();
}

Gauge* Registry::GetGauge(const std::string& name, const std::string& help, const Labels& labels) {
  return Find(name, help, MetricType::kGauge, labels, nullptr)->gauge.get();
}

Histogram* Registry::GetHistogram(const std::string& name, const std::string& help,
                                  const std::vector<double>& bounds, const Labels& labels) {
  return Find(name, help, MetricType::kHistogram, labels, &bounds)->histogram.get();
}

void Registry::AddCollector(std::function<void(MetricSink*)> collect) {
  MutexLock l(&mu_);
  collectors_.push_back(std::move(collect));
}

std::string Registry::Expose() const {
  std::map<std::string, Exposed> out;
  std::vector<std::function<void(MetricSink*)>> collectors;
  {
    MutexLock l(&mu_);
    collectors = collectors_;
    for (const auto& [name, f] : families_) {
      Exposed& e = out[name];
      e.type = f.type;
      e.help = f.help;
      for (const auto& [key, entry] : f.entries) {
        if (entry.counter) {
          e.lines.push_back(name + FormatLabels(entry.labels) + " " +
                            FormatValue(static_cast<double>(entry.counter->value())));
        } else if (entry.gauge) {
          e.lines.push_back(name + FormatLabels(entry.labels) + " " +
                            FormatValue(entry.gauge->value()));
        } else {
          const Histogram::Snapshot s = entry.histogram->Take();
          for (size_t i = 0; i <= s.bounds.size(); ++i) {
            const std::string le =
                "le=\"" + (i < s.bounds.size() ? FormatValue(s.bounds[i]) : "+Inf") + "\"";
            e.lines.push_back(name + "_bucket" + FormatLabels(entry.labels, le) + " " +
                              FormatValue(static_cast<double>(s.cumulative[i])));
          }
          e.lines.push_back(name + "_sum" + FormatLabels(entry.labels) + " " + FormatValue(s.sum));
          e.lines.push_back(name + "_count" + FormatLabels(entry.labels) + " " +
                            FormatValue(static_cast<double>(s.count)));
        }
      }
    }
  }
  CollectingSink sink(&out);
  for (const auto& c : collectors) c(&sink);
  std::string text;
  for (const auto& [name, e] : out) {
    text += "# HELP " + name + " " + EscapeHelp(e.help) + "\n";
    text += "# TYPE " + name + " " + TypeName(e.type) + "\n";
    for (const std::string& line : e.lines) text += line + "\n";
  }
  return text;
}

std::string EscapeLabelValue(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string EscapeHelp(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.0f", v);
    return buf;
  }
  // The shortest form that reads back as the same double (0.1, not
  // 0.10000000000000001), as Prometheus' own clients print.
  char buf[32];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

bool ValidName(const std::string& name, bool label) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                       (!label && c == ':');
    if (!alpha && (i == 0 || c < '0' || c > '9')) return false;
  }
  return true;
}

}  // namespace metrics
}  // namespace relaxps
