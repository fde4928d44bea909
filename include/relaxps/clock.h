// Clock: the time seam (as leveldb's Env::NowMicros), so that heartbeat
// timeouts, request deadlines and checkpoint schedules can be tested without
// sleeping.
//
// Components take a `const Clock*` in their Options struct (nullptr: the
// real clock) and read time only through it. Loops that wait for events
// (the ZeroMQ poll loops, the heartbeat threads) bound each real wait by
// RealWaitMs(): the real clock waits as long as asked, the fake one only a
// short slice, so a test that calls FakeClock::AdvanceMs() sees timers and
// deadlines fire within milliseconds instead of after their real duration.
//
// Thread-safety: all methods are safe from any thread.
#ifndef RELAXPS_CLOCK_H_
#define RELAXPS_CLOCK_H_

#include <atomic>
#include <cstdint>

namespace relaxps {

class Clock {
 public:
  Clock() = default;
  Clock(const Clock&) = delete;
  Clock& operator=(const Clock&) = delete;
  virtual ~Clock() = default;

  // Monotonic milliseconds (arbitrary origin): timeouts and schedules.
  virtual int64_t NowMs() const = 0;
  // Milliseconds since the Unix epoch: deadlines that travel on the wire.
  virtual int64_t NowUnixMs() const = 0;
  // How long (real ms) a loop may block waiting for events when its next
  // timer or deadline is `wait_ms` of this clock's time away (< 0: none).
  virtual int RealWaitMs(int64_t wait_ms) const = 0;
};

// The process's real clock (steady_clock / system_clock). Never deleted.
const Clock* RealClock();

// `clock` if not null, else RealClock(): for Options fields.
inline const Clock* ClockOrReal(const Clock* clock) { return clock ? clock : RealClock(); }

// A clock that moves only when told. Waiting loops poll it every
// kFakeSliceMs of real time.
class FakeClock final : public Clock {
 public:
  static constexpr int kFakeSliceMs = 2;

  explicit FakeClock(int64_t start_ms = 1000000) : now_ms_(start_ms) {}

  int64_t NowMs() const override { return now_ms_.load(); }
  int64_t NowUnixMs() const override { return kUnixOrigin + now_ms_.load(); }
  int RealWaitMs(int64_t /*wait_ms*/) const override { return kFakeSliceMs; }

  void AdvanceMs(int64_t ms) { now_ms_.fetch_add(ms); }

 private:
  static constexpr int64_t kUnixOrigin = 1700000000000;  // Nov 2023.
  std::atomic<int64_t> now_ms_;
};

}  // namespace relaxps

#endif  // RELAXPS_CLOCK_H_
