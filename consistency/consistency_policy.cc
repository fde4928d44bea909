#include "consistency/consistency_policy.h"

#include <limits>

namespace relaxps {
namespace {

class BspPolicy final : public ConsistencyPolicy {
 public:
  const char* Name() const override { return "bsp"; }
  bool AggregatesPushes() const override { return true; }
  int64_t RequiredMinClock(int64_t worker_clock) const override { return worker_clock; }
  int staleness_bound() const override { return 0; }
};

class SspPolicy final : public ConsistencyPolicy {
 public:
  explicit SspPolicy(int staleness) : staleness_(staleness) {}
  const char* Name() const override { return "ssp"; }
  bool AggregatesPushes() const override { return false; }
  int64_t RequiredMinClock(int64_t worker_clock) const override {
    return worker_clock - staleness_;
  }
  int staleness_bound() const override { return staleness_; }

 private:
  const int staleness_;
};

class AsyncPolicy final : public ConsistencyPolicy {
 public:
  const char* Name() const override { return "async"; }
  bool AggregatesPushes() const override { return false; }
  int64_t RequiredMinClock(int64_t) const override {
    return std::numeric_limits<int64_t>::min();
  }
  int staleness_bound() const override { return -1; }
};

}  // namespace

StatusOr<std::unique_ptr<ConsistencyPolicy>> NewConsistencyPolicy(
    const ConsistencyOptions& options) {
  if (options.staleness < 0) return InvalidArgumentError("staleness must be >= 0");
  if (options.model == "bsp") return std::unique_ptr<ConsistencyPolicy>(new BspPolicy());
  if (options.model == "ssp") {
    return std::unique_ptr<ConsistencyPolicy>(new SspPolicy(options.staleness));
  }
  if (options.model == "async") return std::unique_ptr<ConsistencyPolicy>(new AsyncPolicy());
  return InvalidArgumentError("unknown consistency model '" + options.model +
                              "' (expected bsp, ssp or async)");
}

}  // namespace relaxps
