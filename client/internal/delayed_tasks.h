// DelayedTasks: runs functions a few milliseconds from now on a thread of its
// own, for the client's short waits that must not block the transport's I/O
// thread (a part a server refused with ResourceExhausted is sent again after
// a backoff: PartSender).
//
// Each task has a `run` and a `cancel`: exactly one of them runs, once. `run`
// runs on the tasks' thread (started on first use) once its delay has passed
// (real time, steady clock), in order of due time; after Stop() began, every
// task still waiting gets `cancel` instead, on the thread that calls Stop()
// (or RunAfter(), for a task added later), so that whoever waits on it is
// answered.
//
// Thread-safety: every method is safe from any thread; Stop() and the
// destructor not from a task's `run` itself.
#ifndef RELAXPS_CLIENT_INTERNAL_DELAYED_TASKS_H_
#define RELAXPS_CLIENT_INTERNAL_DELAYED_TASKS_H_

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <thread>
#include <utility>

#include "common/thread_annotations.h"

namespace relaxps {
namespace client_internal {

class DelayedTasks {
 public:
  DelayedTasks() = default;
  DelayedTasks(const DelayedTasks&) = delete;
  DelayedTasks& operator=(const DelayedTasks&) = delete;
  // Stop().
  ~DelayedTasks();

  // Runs `run` about `delay_ms` (>= 0) from now, or `cancel` if Stop() comes
  // first (at once if it came already).
  void RunAfter(int64_t delay_ms, std::function<void()> run, std::function<void()> cancel);
  // Cancels every task not yet started and waits for a running one; later
  // tasks are cancelled at once. Idempotent.
  void Stop();
  // Tasks waiting for their time.
  size_t pending() const;

 private:
  using Due = std::pair<std::chrono::steady_clock::time_point, uint64_t>;  // Time, then order.
  struct Task {
    std::function<void()> run;
    std::function<void()> cancel;
  };
  void Loop();

  mutable Mutex mu_;
  std::condition_variable_any cv_;
  std::map<Due, Task> tasks_ GUARDED_BY(mu_);
  uint64_t next_seq_ GUARDED_BY(mu_) = 0;
  bool stopped_ GUARDED_BY(mu_) = false;
  std::thread thread_ GUARDED_BY(mu_);  // Started by the first RunAfter().
};

}  // namespace client_internal
}  // namespace relaxps

#endif  // RELAXPS_CLIENT_INTERNAL_DELAYED_TASKS_H_
