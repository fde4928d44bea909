#include "consistency/consistency_policy.h"

#include <limits>
#include <string>

namespace relaxps {
namespace {

class BspPolicy final : public ConsistencyPolicy {
 public:
  ConsistencyModel model() const override { return ConsistencyModel::kBsp; }
  bool AggregatesPushes() const override { return true; }
  int64_t RequiredMinClock(int64_t worker_clock) const override { return worker_clock; }
  int staleness_bound() const override { return 0; }
  bool ServesCachedReads() const override { return false; }
};

class SspPolicy final : public ConsistencyPolicy {
 public:
  explicit SspPolicy(int staleness) : staleness_(staleness) {}
  ConsistencyModel model() const override { return ConsistencyModel::kSsp; }
  bool AggregatesPushes() const override { return false; }
  int64_t RequiredMinClock(int64_t worker_clock) const override {
    return worker_clock - staleness_;
  }
  int staleness_bound() const override { return staleness_; }
  bool ServesCachedReads() const override { return true; }

 private:
  const int staleness_;
};

class AsyncPolicy final : public ConsistencyPolicy {
 public:
  ConsistencyModel model() const override { return ConsistencyModel::kAsync; }
  bool AggregatesPushes() const override { return false; }
  int64_t RequiredMinClock(int64_t) const override {
    return std::numeric_limits<int64_t>::min();
  }
  int staleness_bound() const override { return -1; }
  bool ServesCachedReads() const override { return false; }
};

}  // namespace

const char* ConsistencyModelName(ConsistencyModel model) {
  switch (model) {
    case ConsistencyModel::kBsp: return "bsp";
    case ConsistencyModel::kSsp: return "ssp";
    case ConsistencyModel::kAsync: return "async";
  }
  return "unknown";
}

StatusOr<ConsistencyModel> ParseConsistencyModel(const std::string& name) {
  for (ConsistencyModel m : {ConsistencyModel::kBsp, ConsistencyModel::kSsp,
                             ConsistencyModel::kAsync}) {
    if (name == ConsistencyModelName(m)) return m;
  }
  return InvalidArgumentError("unknown consistency model '" + name +
                              "' (expected bsp, ssp or async)");
}

std::string StalenessBoundText(const ConsistencyOptions& options) {
  switch (options.model) {
    case ConsistencyModel::kBsp: return "0";
    case ConsistencyModel::kSsp: return std::to_string(options.staleness);
    case ConsistencyModel::kAsync: return "unbounded";
  }
  return "unknown";
}

StatusOr<std::unique_ptr<ConsistencyPolicy>> NewConsistencyPolicy(
    const ConsistencyOptions& options) {
  if (options.staleness < 0) return InvalidArgumentError("staleness must be >= 0");
  switch (options.model) {
    case ConsistencyModel::kBsp: return std::unique_ptr<ConsistencyPolicy>(new BspPolicy());
    case ConsistencyModel::kSsp:
      return std::unique_ptr<ConsistencyPolicy>(new SspPolicy(options.staleness));
    case ConsistencyModel::kAsync: return std::unique_ptr<ConsistencyPolicy>(new AsyncPolicy());
  }
  return InvalidArgumentError("unknown consistency model");
}

}  // namespace relaxps
