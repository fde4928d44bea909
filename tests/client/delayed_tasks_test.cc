// DelayedTasks: tasks run in order of due time on the tasks' thread, not
// before their delay; Stop() cancels the ones still waiting (each gets
// exactly one of run / cancel) and a task added after Stop() is cancelled at
// once.
#include "client/internal/delayed_tasks.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace relaxps {
namespace client_internal {
namespace {

using Steady = std::chrono::steady_clock;

TEST(DelayedTasksTest, RunsInDueOrderOnItsThreadAfterTheDelay) {
  DelayedTasks tasks;
  std::mutex mu;
  std::vector<std::string> order;
  std::atomic<int> ran{0};
  const auto start = Steady::now();
  std::atomic<int64_t> first_ms{-1};
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<bool> on_caller{false};
  auto task = [&](const std::string& name) {
    return [&, name] {
      if (std::this_thread::get_id() == caller) on_caller = true;
      std::lock_guard<std::mutex> l(mu);
      if (order.empty()) {
        first_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Steady::now() - start)
                       .count();
      }
      order.push_back(name);
      ++ran;
    };
  };
  tasks.RunAfter(60, task("c"), [] { ADD_FAILURE() << "c cancelled"; });
  tasks.RunAfter(20, task("a"), [] { ADD_FAILURE() << "a cancelled"; });
  tasks.RunAfter(40, task("b"), [] { ADD_FAILURE() << "b cancelled"; });
  const auto give_up = Steady::now() + test::Scaled(test::Millis(5000));
  while (ran.load() < 3 && Steady::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(ran.load(), 3);
  EXPECT_EQ(order, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_GE(first_ms.load(), 20);
  EXPECT_FALSE(on_caller.load());
  EXPECT_EQ(tasks.pending(), 0u);
}

TEST(DelayedTasksTest, StopCancelsWaitingTasksAndLaterOnes) {
  DelayedTasks tasks;
  int ran = 0;
  int cancelled = 0;
  for (int i = 0; i < 5; ++i) {
    tasks.RunAfter(60000, [&] { ++ran; }, [&] { ++cancelled; });
  }
  EXPECT_EQ(tasks.pending(), 5u);
  tasks.Stop();
  EXPECT_EQ(ran, 0);
  EXPECT_EQ(cancelled, 5);
  EXPECT_EQ(tasks.pending(), 0u);
  // After Stop(): cancelled on the calling thread, at once.
  tasks.RunAfter(0, [&] { ++ran; }, [&] { ++cancelled; });
  EXPECT_EQ(cancelled, 6);
  EXPECT_EQ(ran, 0);
  tasks.Stop();  // Idempotent.
}

}  // namespace
}  // namespace client_internal
}  // namespace relaxps
