#include "common/clock.h"

#include <algorithm>
#include <limits>

#include "common/wire.h"

namespace relaxps {
namespace {

class RealClockImpl final : public Clock {
 public:
  int64_t NowMs() const override { return MonotonicMs(); }
  int64_t NowUnixMs() const override { return relaxps::NowUnixMs(); }
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
