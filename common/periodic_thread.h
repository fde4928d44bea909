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

namespace relaxps {

class PeriodicThread {
 public:
  // Starts the thread; the first call happens one period after start.
  PeriodicThread(int period_ms, std::function<void()> fn)
      : period_(period_ms), fn_(std::move(fn)), thread_([this] { Loop(); }) {}
  PeriodicThread(const PeriodicThread&) = delete;
  PeriodicThread& operator=(const PeriodicThread&) = delete;
  ~PeriodicThread() { Stop(); }

  // Waits for a running call to finish; no call starts afterwards. Idempotent.
  void Stop() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> l(mu_);
    while (!cv_.wait_for(l, period_, [this] { return stop_; })) {
      l.unlock();
      fn_();
      l.lock();
    }
  }

  const std::chrono::milliseconds period_;
  const std::function<void()> fn_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // Guarded by mu_.
  std::thread thread_;  // Last: starts after the members it uses exist.
};

}  // namespace relaxps

#endif  // RELAXPS_COMMON_PERIODIC_THREAD_H_
