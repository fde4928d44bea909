// An in-process coordinator of a one-server job, run on a thread of the test
// (server tests that start their own Server against it).
#ifndef RELAXPS_TESTS_SERVER_COORDINATOR_THREAD_H_
#define RELAXPS_TESTS_SERVER_COORDINATOR_THREAD_H_

#include <memory>
#include <thread>

#include <glog/logging.h>

#include "coordinator/coordinator.h"

namespace relaxps {
namespace test {

struct CoordinatorThread {
  std::unique_ptr<Coordinator> coordinator;
  std::thread coordinating;

  CoordinatorThread() {
    CoordinatorOptions co;
    co.num_servers = 1;
    auto c = Coordinator::Start(co);
    CHECK(c.ok()) << c.status();
    coordinator = std::move(*c);
    coordinating = std::thread([this] { coordinator->Run(); });
  }
  ~CoordinatorThread() {
    coordinator->Stop();
    coordinating.join();
  }
  CoordinatorThread(const CoordinatorThread&) = delete;
  CoordinatorThread& operator=(const CoordinatorThread&) = delete;
};

}  // namespace test
}  // namespace relaxps

#endif  // RELAXPS_TESTS_SERVER_COORDINATOR_THREAD_H_
