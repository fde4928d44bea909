#include "client/internal/delayed_tasks.h"

#include <algorithm>

namespace relaxps {
namespace client_internal {

DelayedTasks::~DelayedTasks() { Stop(); }

void DelayedTasks::RunAfter(int64_t delay_ms, std::function<void()> run,
                            std::function<void()> cancel) {
  {
    MutexLock l(&mu_);
    if (!stopped_) {
      const Due due{std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(std::max<int64_t>(0, delay_ms)),
                    next_seq_++};
      tasks_.emplace(due, Task{std::move(run), std::move(cancel)});
      if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
      cv_.notify_all();
      return;
    }
  }
  if (cancel) cancel();  // Stopped: never queued.
}

void DelayedTasks::Stop() {
  std::map<Due, Task> left;
  std::thread thread;
  {
    MutexLock l(&mu_);
    stopped_ = true;
    left.swap(tasks_);
    thread.swap(thread_);
  }
  cv_.notify_all();
  if (thread.joinable()) thread.join();
  for (auto& [due, task] : left) {
    if (task.cancel) task.cancel();
  }
}

size_t DelayedTasks::pending() const {
  MutexLock l(&mu_);
  return tasks_.size();
}

void DelayedTasks::Loop() {
  while (true) {
    std::function<void()> run;
    {
      MutexLock l(&mu_);
      if (stopped_) return;
      if (tasks_.empty()) {
        cv_.wait(mu_);
        continue;
      }
      auto first = tasks_.begin();
      if (first->first.first > std::chrono::steady_clock::now()) {
        cv_.wait_until(mu_, first->first.first);
        continue;
      }
      run = std::move(first->second.run);
      tasks_.erase(first);
    }
    if (run) run();
  }
}

}  // namespace client_internal
}  // namespace relaxps
