// ConsistencyPolicy: when a shard applies pushes and when it answers pulls.
//
// Every worker has a clock, advanced once per iteration; a push carries the
// clock its gradient was computed at. A shard tracks, per live worker, how
// many clocks the worker has completed (VectorClock). From that:
//  - BSP: pushes for clock c are summed until every live worker has pushed
//    for c, then one optimizer step with their mean is applied; a pull by a
//    worker at clock c waits until all clocks < c are applied.
//  - SSP(s): pushes are applied on arrival; a pull by a worker at clock c
//    waits until the slowest live worker has completed c - s clocks.
//  - Async: pushes are applied on arrival and nothing waits.
//
// A policy is a stateless rule; the state lives in the shard's VectorClock.
// Thread-safety: policies are immutable and safe to share.
#ifndef RELAXPS_CONSISTENCY_POLICY_H_
#define RELAXPS_CONSISTENCY_POLICY_H_

#include <cstdint>
#include <memory>
#include <string>

#include "relaxps/status.h"

namespace relaxps {

// The consistency models of DESIGN.md.
enum class ConsistencyModel { kBsp, kSsp, kAsync };

// "bsp", "ssp" or "async" -> the model; InvalidArgument naming the bad value
// otherwise.
StatusOr<ConsistencyModel> ParseConsistencyModel(const std::string& name);
// The name ParseConsistencyModel accepts for `model`.
const char* ConsistencyModelName(ConsistencyModel model);

struct ConsistencyOptions {
  ConsistencyModel model = ConsistencyModel::kAsync;
  // SSP bound in clocks (ignored by bsp/async). 0 makes SSP behave like a
  // barrier without aggregation; larger trades freshness for less waiting.
  int staleness = 2;
};

class ConsistencyPolicy {
 public:
  ConsistencyPolicy() = default;
  ConsistencyPolicy(const ConsistencyPolicy&) = delete;
  ConsistencyPolicy& operator=(const ConsistencyPolicy&) = delete;
  virtual ~ConsistencyPolicy() = default;

  virtual ConsistencyModel model() const = 0;
  const char* Name() const { return ConsistencyModelName(model()); }
  // True if pushes of one clock are aggregated and applied as one step once
  // every live worker has pushed (BSP); false if applied on arrival.
  virtual bool AggregatesPushes() const = 0;
  // The number of completed clocks (minimum over live workers) that a pull by
  // a worker at `worker_clock` must observe before it is answered. A value
  // <= 0 never waits.
  virtual int64_t RequiredMinClock(int64_t worker_clock) const = 0;
  // The staleness bound a worker may assume of parameters it was answered
  // (for the client-side cache): 0 for BSP, s for SSP, -1 (unbounded) async.
  virtual int staleness_bound() const = 0;
  // True if a worker may answer a pull from its own copy of parameters it
  // was answered earlier while they are within staleness_bound() (SSP's
  // client-side cache); false if every pull goes to the servers.
  virtual bool ServesCachedReads() const = 0;
};

// The staleness bound a job with `options` enforces, for people (logs,
// relaxps-ctl status): "0" under bsp, options.staleness under ssp,
// "unbounded" under async (which ignores options.staleness).
std::string StalenessBoundText(const ConsistencyOptions& options);

// InvalidArgument for a negative staleness.
StatusOr<std::unique_ptr<ConsistencyPolicy>> NewConsistencyPolicy(
    const ConsistencyOptions& options);

}  // namespace relaxps

#endif  // RELAXPS_CONSISTENCY_POLICY_H_
