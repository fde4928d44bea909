#include "common/clock.h"

#include <algorithm>
#include <chrono>
#include <limits>

namespace relaxps {
namespace {

// The only place that reads the system's clocks: everything else asks a
// Clock (options) or RealClock().
class RealClockImpl final : public Clock {
 public:
  int64_t NowMs() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  int64_t NowUnixMs() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  int RealWaitMs(int64_t wait_ms) const override {
    if (wait_ms < 0) return -1;
    return static_cast<int>(std::min<int64_t>(wait_ms, std::numeric_limits<int>::max()));
  }
};

}  // namespace

const Clock* RealClock() {
  static const Clock* const clock = new RealClockImpl();
  return clock;
}

}  // namespace relaxps
