// A coordinator running on a thread of the test process for a test's scope.
//
// Thread-safety: construct and destroy on one thread; endpoint() from any.
#ifndef RELAXPS_TESTS_COORDINATOR_RUNNING_COORDINATOR_H_
#define RELAXPS_TESTS_COORDINATOR_RUNNING_COORDINATOR_H_

#include <memory>
#include <string>
#include <thread>
#include <utility>

#include <glog/logging.h>

#include "coordinator/coordinator.h"

namespace relaxps {
namespace test {

class RunningCoordinator {
 public:
  // CHECK-fails (aborts the test binary) if the coordinator cannot start.
  explicit RunningCoordinator(const CoordinatorOptions& options) {
    auto c = Coordinator::Start(options);
    CHECK(c.ok()) << c.status();
    coordinator_ = std::move(c).value();
    thread_ = std::thread([this] { coordinator_->Run(); });
  }
  ~RunningCoordinator() {
    coordinator_->Stop();
    thread_.join();
  }
  RunningCoordinator(const RunningCoordinator&) = delete;
  RunningCoordinator& operator=(const RunningCoordinator&) = delete;

  const std::string& endpoint() const { return coordinator_->endpoint(); }

 private:
  std::unique_ptr<Coordinator> coordinator_;
  std::thread thread_;
};

}  // namespace test
}  // namespace relaxps

#endif  // RELAXPS_TESTS_COORDINATOR_RUNNING_COORDINATOR_H_
