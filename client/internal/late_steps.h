// LateSteps: the steps a worker applied to its own copy of a server's state
// while that server was away (recovery::ClientFeatures::local_copies:
// stateless, hybrid), kept by clock until their change reaches a server: in
// a re-seed copy (SEED_COPY) or as the deltas of a rejoin. Each is then an
// update applied late, so many clocks behind the worker's clock at that
// moment (common/staleness_histogram.h); the histogram of a server's steps
// goes into its client_rejoined event (docs/events.md).
//
// A step is counted once per server whatever the number of its parts (ranges,
// tables) that server holds. Steps are kept as runs of consecutive clocks, so
// an outage of any length costs a few bytes.
//
// Thread-safety: all methods are safe from any thread.
#ifndef RELAXPS_CLIENT_INTERNAL_LATE_STEPS_H_
#define RELAXPS_CLIENT_INTERNAL_LATE_STEPS_H_

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "common/staleness_histogram.h"
#include "common/thread_annotations.h"

namespace relaxps {
namespace client_internal {

class LateSteps {
 public:
  LateSteps() = default;
  LateSteps(const LateSteps&) = delete;
  LateSteps& operator=(const LateSteps&) = delete;

  // A push at `clock` changed this worker's copy of `server`'s state.
  void Record(int server, int64_t clock);
  // The changes recorded for `server` reached a server while the worker was
  // at `clock`: their distances go to `server`'s histogram, and they are
  // forgotten.
  void HandBack(int server, int64_t clock);
  // Server `spare` took over the copies of `holder`: so do its steps.
  void Move(int holder, int spare);
  // Hands back what is left of `server` at `clock` and returns the histogram
  // of everything handed back for it since the last Take (then reset).
  StalenessHistogram Take(int server, int64_t clock);

 private:
  struct PerServer {
    // Clocks of steps not handed back, as [first, last] runs, in the order
    // they were recorded.
    std::vector<std::pair<int64_t, int64_t>> runs;
    StalenessHistogram handed;
  };
  void HandBackLocked(PerServer* s, int64_t clock) REQUIRES(mu_);

  Mutex mu_;
  std::map<int, PerServer> servers_ GUARDED_BY(mu_);
};

}  // namespace client_internal
}  // namespace relaxps

#endif  // RELAXPS_CLIENT_INTERNAL_LATE_STEPS_H_
