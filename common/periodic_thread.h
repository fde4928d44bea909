// PeriodicThread: runs a function every `period_ms` on a thread of its own
// (heartbeats, liveness checks) until stopped.
//
// Thread-safety: Stop() and the destructor may be called from any thread
// except the periodic thread itself; `fn` runs on the periodic thread only.
#ifndef RELAXPS_COMMON_PERIODIC_THREAD_H_
#define RELAXPS_COMMON_PERIODIC_THREAD_H_

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "common/clock.h"
#include "common/thread_annotations.h"

namespace relaxps {

class PeriodicThread {
 public:
  // Starts the thread; the first call happens one period (of `clock`'s time,
  // nullptr: real time) after start. `clock` must outlive the thread.
  PeriodicThread(int period_ms, std::function<void()> fn, const Clock* clock = nullptr)
      : period_ms_(period_ms),
        fn_(std::move(fn)),
        clock_(ClockOrReal(clock)),
        thread_([this] { Loop(); }) {}
  PeriodicThread(const PeriodicThread&) = delete;
  PeriodicThread& operator=(const PeriodicThread&) = delete;
  ~PeriodicThread() { Stop(); }

  // Waits for a running call to finish; no call starts afterwards. Idempotent.
  void Stop() {
    {
      MutexLock l(&mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Loop() {
    int64_t next = clock_->NowMs() + period_ms_;
    while (true) {
      {
        MutexLock l(&mu_);
        if (stop_) return;
        const int64_t wait = next - clock_->NowMs();
        if (wait > 0) {
          cv_.wait_for(mu_, std::chrono::milliseconds(clock_->RealWaitMs(wait)));
          continue;
        }
      }
      fn_();
      next = clock_->NowMs() + period_ms_;
    }
  }

  const int64_t period_ms_;
  const std::function<void()> fn_;
  const Clock* const clock_;
  Mutex mu_;
  std::condition_variable_any cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;  // Last: starts after the members it uses exist.
};

}  // namespace relaxps

#endif  // RELAXPS_COMMON_PERIODIC_THREAD_H_
